"""``tally.store.requests.batch_get`` under throttling: DynamoDB answers a partly throttled ``BatchGetItem``
with HTTP 200 and ``UnprocessedKeys`` (botocore retries only a call that failed as a whole), and AWS asks
callers to retry those keys with exponential backoff. Asked again at once and without end, a throttled table
made the loop spin for the rest of the invocation (the read endpoint, ``tally get``, the journal's range check).
"""

from __future__ import annotations

from typing import Any

import pytest

from tally.errors import RetryableStoreError
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally.store.requests import BATCH_GET_MAX_ROUNDS, batch_get

KEYS = [{"pk": {"S": f"k{i}"}, "sk": {"S": "all"}} for i in range(3)]


@pytest.fixture
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stores read through ``batch_get`` with its real sleep (the pauses' bounds are tested above it):
    here the pauses are zero, so a test of how many rounds are made does not wait seconds for them."""
    monkeypatch.setattr("tally.store.requests._BATCH_GET_PAUSE_S", 0.0)


class ThrottlingClient:
    """Leaves every key unprocessed ``throttled_rounds`` times, then answers; refuses to be asked 50 times."""

    def __init__(self, throttled_rounds: int) -> None:
        self.throttled_rounds = throttled_rounds
        self.calls = 0

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.calls >= 50:
            raise AssertionError("asked 50 times: the loop never gives up")
        ((table, spec),) = RequestItems.items()
        if self.calls <= self.throttled_rounds:
            return {"Responses": {table: []}, "UnprocessedKeys": {table: spec}}
        return {"Responses": {table: [dict(key, **{"c#count": {"N": "1"}}) for key in spec["Keys"]]}}


def test_unprocessed_keys_are_asked_again_after_a_growing_pause() -> None:
    # GIVEN a table that throttles the first three rounds
    client, pauses = ThrottlingClient(throttled_rounds=3), []
    # WHEN the keys are read
    items = batch_get(client, "c", KEYS, sleep=pauses.append)  # type: ignore[arg-type]
    # THEN every item arrives, after a pause before each retry, each drawn from a doubling ceiling (full jitter)
    assert len(items) == 3
    assert len(pauses) == 3
    assert all(0 <= pause <= 0.05 * 2**round_ for round_, pause in enumerate(pauses, 1))


def test_a_table_that_keeps_throttling_is_a_retryable_error_not_a_spin() -> None:
    client, pauses = ThrottlingClient(throttled_rounds=10**9), []
    with pytest.raises(RetryableStoreError, match="unprocessed"):
        batch_get(client, "c", KEYS, sleep=pauses.append)  # type: ignore[arg-type]
    assert client.calls == BATCH_GET_MAX_ROUNDS
    assert sum(pauses) <= 5.0


@pytest.mark.usefixtures("no_pauses")
def test_the_marker_pre_read_gives_up_on_a_table_that_keeps_throttling() -> None:
    # GIVEN a markers table that leaves every key unprocessed, round after round
    client = ThrottlingClient(throttled_rounds=10**9)
    store = DynamoDBCounterStore(client, "c", "m", 86_400)  # type: ignore[arg-type]
    # WHEN the applier reads markers before writing (advice only: it catches RetryableStoreError)
    # THEN the read fails as retryable after a bounded number of calls, instead of spinning the invocation away
    with pytest.raises(RetryableStoreError, match="unprocessed"):
        store.read_markers(["a", "b"])
    assert client.calls == BATCH_GET_MAX_ROUNDS


@pytest.mark.usefixtures("no_pauses")
def test_the_journal_progress_read_gives_up_on_a_table_that_keeps_throttling() -> None:
    # GIVEN the same table, met while finishing another invocation's committed batch
    client = ThrottlingClient(throttled_rounds=10**9)
    journal = DynamoDBJournal(client, "c", "m", 86_400)  # type: ignore[arg-type]
    # THEN reading its pages and applied-records fails as retryable (the runner retries it under the deadline)
    with pytest.raises(RetryableStoreError, match="unprocessed"):
        journal.read_progress("batch-1", 3)
    assert client.calls == BATCH_GET_MAX_ROUNDS
