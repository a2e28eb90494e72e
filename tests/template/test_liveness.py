"""The template keeps a stalled record alive: it comes back after the journal lease that held it ends.

A record whose marker names another invocation's PREPARING batch with a live lease is handed back to the
source (docs/journal.md, "Liveness"). That lease ends at most the holder's function timeout plus the
applier's ``lease_margin_ms`` after the holder started, and the holder started before the stalled
invocation. So the stalled record is settled on its next delivery if the source's delay outlasts that:

- SQS: the record comes back one visibility timeout after its receive, and the invocation starts at most
  one batching window after the receive: visibility > window + timeout + margin, for every allowed timeout;
- Kinesis: Lambda retries the record from the checkpoint until ``MaximumRetryAttempts`` or
  ``MaximumRecordAgeInSeconds``; the record age must outlast the lease for every allowed timeout and
  batching window, and the retries of a stalled record are spent until the lease ends. AWS does not
  document the retry backoff, so no retry count can be sized against a lease (at a retry a poll, a 120 s
  lease spends 120 of them): with the defaults, only the record's age bounds a give-up, and crashes in a row
  must not spend it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tally.commit.applier import RetryPolicy
from tally_local.chaos.config import FULL
from tally_local.esm import BatchOutcome, KinesisRetryPolicy, ShardBatch, function_error
from tally_local.template import load_template
from tests.template.test_template import TEMPLATE_PATH

MARGIN_S = RetryPolicy().lease_margin_ms // 1000


@pytest.fixture(scope="module")
def parameters() -> dict[str, Any]:
    params: dict[str, Any] = load_template(TEMPLATE_PATH)["Parameters"]
    return params


def test_the_queue_visibility_timeout_outlasts_the_lease_for_every_allowed_function_timeout() -> None:
    template = load_template(TEMPLATE_PATH)
    parameters = template["Parameters"]
    rows = template["Mappings"]["QueueVisibility"]
    max_window = parameters["BatchingWindowSeconds"]["MaxValue"]
    for seconds in parameters["FunctionTimeoutSeconds"]["AllowedValues"]:
        lease_s = int(seconds) + MARGIN_S
        assert rows[str(seconds)]["VisibilityTimeout"] > max_window + lease_s, seconds


def test_a_kinesis_record_outlives_the_lease_for_every_allowed_timeout_and_window(parameters: dict[str, Any]) -> None:
    longest_lease_s = max(int(s) for s in parameters["FunctionTimeoutSeconds"]["AllowedValues"]) + MARGIN_S
    longest_window_s = parameters["StreamBatchingWindowSeconds"]["MaxValue"]
    assert parameters["StreamMaximumRecordAgeSeconds"]["MinValue"] > longest_window_s + longest_lease_s


CRASHES_IN_A_ROW = 20
"""Invocations killed after their journal claim, one after another on one record, that the template's defaults
must outlast without giving the record up, at every allowed function timeout and the longest batching window
(docs/explanation/sources.md, "A crash never gives a record up")."""
POLL_S = 1
"""Lambda polls a shard at a base rate of once a second (AWS, "Using Lambda with Kinesis"); it documents no
backoff between the retries of a failing batch, so the fastest cadence it allows is a retry at every poll."""


def given_up_after_crashes(policy: KinesisRetryPolicy, *, timeout_s: int, window_s: int, crashes: int) -> bool:
    """Whether Lambda gives a record up when ``crashes`` invocations in a row are killed just after their journal
    claim, each retry in between (one a poll: the fastest cadence) meeting the killed invocation's live lease
    (``timeout_s`` + the lease margin from its start), the record first delivered ``window_s`` after it arrived."""
    arrived = datetime(2030, 1, 1, tzinfo=UTC)
    delivery = ShardBatch([{"SequenceNumber": "1", "ApproximateArrivalTimestamp": arrived}], policy)
    now_s = window_s
    for _ in range(crashes):
        lease_ends_s = now_s + timeout_s + MARGIN_S
        outcome = function_error(["1"], "killed after its journal claim")
        while True:
            now_s += POLL_S
            if delivery.settle(outcome, arrived + timedelta(seconds=now_s)).give_up is not None:
                return True
            if now_s >= lease_ends_s:
                break  # the next delivery claims the record again: the next crash
            outcome = BatchOutcome(frozenset({"1"}), whole_batch=False)  # held by the lease: reported failed
    return False


def test_with_the_defaults_crashes_in_a_row_never_give_a_kinesis_record_up_whatever_the_retry_backoff(
    parameters: dict[str, Any],
) -> None:
    # GIVEN the template's defaults for the stream's event source
    policy = KinesisRetryPolicy(
        maximum_retry_attempts=int(parameters["StreamMaximumRetryAttempts"]["Default"]),
        maximum_record_age_s=int(parameters["StreamMaximumRecordAgeSeconds"]["Default"]),
        bisect_on_function_error=True,
    )
    longest_window_s = int(parameters["StreamBatchingWindowSeconds"]["MaxValue"])
    for timeout in parameters["FunctionTimeoutSeconds"]["AllowedValues"]:
        # WHEN that many invocations in a row are killed after their claim, Lambda retrying at every poll meanwhile
        # THEN the record is never given up: each crash spends wall time of the record's age, no retry count
        assert not given_up_after_crashes(
            policy, timeout_s=int(timeout), window_s=longest_window_s, crashes=CRASHES_IN_A_ROW
        ), timeout


def test_the_chaos_run_consumes_the_stream_with_the_templates_defaults(parameters: dict[str, Any]) -> None:
    # The chaos run's checks of Kinesis (no valid record ever given up) hold for the template as it ships.
    assert FULL.kinesis_max_retries == int(parameters["StreamMaximumRetryAttempts"]["Default"])
    assert FULL.kinesis_max_record_age_s == int(parameters["StreamMaximumRecordAgeSeconds"]["Default"])
    assert FULL.function_timeout_s == int(parameters["FunctionTimeoutSeconds"]["Default"])
