"""The threshold chaos run (``tally_local.chaos.thresholds``) at its small size, and the broken variants it must catch.

Under lost responses, throttling, conflicts (DynamoDB's own between transactions in flight on one item too),
connection failures, invocations killed right after a crossing committed, whole batches redelivered, producer
re-sends, and a pipe whose puts fail, lose their answers and which is killed and restarted from the trim
horizon: every crossing announced, none twice, none spurious; per-day levels too, while the pipelines' own
post-commit steps move ended days off the key items between late events for them. A write planner that
announces before the commit, a pipe that announces without the deterministic id, and a write planner that judges
a day's level on the key item's part alone, or that trusts the key item's pointer of moved parts for a day older
than its own, fail the run (the broken planners are variants of ``plan_write`` passed in).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from tally.core.items import CounterItem, item_label
from tally_local.chaos.thresholds import (
    MAX_DELIVERIES,
    ThresholdChaosConfig,
    broken_announce_before_commit,
    broken_crossings_never_spilled,
    broken_older_window_trusts_the_pointer,
    broken_window_on_key_item_alone,
    production_pipeline,
    run_threshold_chaos,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from tally.core.model import SourceRecord
    from tally.pipeline import BatchPipeline, BatchResult
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

SMALL = ThresholdChaosConfig()
BROKEN_SIZE = replace(
    SMALL, messages_per_key=20, window_messages_per_key=0, wide_messages=0, big_keys=0, spelled_keys=0
)
"""A broken variant fails long before the end: half the load shows it (per-day keys not needed)."""
WINDOWS_ONLY = replace(SMALL, messages_per_key=5, wide_messages=0, big_keys=0, spelled_keys=0)
"""The per-day variant needs only the ``win`` keys' load (the others' kept tiny)."""
_EDGES_ONLY = replace(SMALL, keys_per_kind=0, window_messages_per_key=0, wide_messages=0, big_keys=0, spelled_keys=0)
WIDE_ONLY = replace(_EDGES_ONLY, wide_messages=3)
"""Three packed messages over the 40 ``wide`` keys (steps of 4 to 8: one of them crosses 10 on every key)."""
BIG_ONLY = replace(_EDGES_ONLY, big_keys=1, big_messages_per_key=1)
"""One 36-digit step: its first write's condition already compares with 10 minus it (39 digits)."""
SPELLED_ONLY = replace(_EDGES_ONLY, spelled_keys=1, spelled_messages_per_key=10)
"""One ``sp`` key and the key spelling its minute item's label, ten steps of 1 to 3 (at least 10: each crosses)."""


def test_every_crossing_is_announced_once_under_every_fault(dynamodb_local: DynamoDBLocal) -> None:
    result = run_threshold_chaos(dynamodb_local.endpoint_url, SMALL)
    assert result.ok, (result.problems, result.first_failure)
    faults = result.faults
    # the run drew what it is about: kills after a crossing committed, lost answers, restarts, conflicts
    for kind in (
        "kill.after_crossing_committed",
        "ddb.lost_response",
        "ddb.conflict",
        "pipe.lost_answer",
        "pipe.put_failure",
        "pipe.killed_and_restarted",
        "situation.window_move_transactions",
        "situation.moved_part_of_pointers_window",  # a late day's moved part said by the key item's pointer
        "situation.moved_part_of_window_item",  # an older day's: its day item read
        "situation.crossing_pages_written",  # a wide message's crossings that did not fit its transaction
        "situation.big_message_delivered",  # a 36-digit step across the levels
        "situation.sp_message_delivered",  # an item beside the key that spells its label, in one transaction
    ):
        assert faults.get(kind, 0) > 0, kind
    assert result.figures["announced"] == result.figures["recorded"] > 20
    assert result.figures["events_put"] > result.figures["announced"]  # repeats happened, each dropped by its id
    assert result.figures["mix_crossings"] > 0  # back and forth
    assert result.figures["window_crossings"] > 0  # per day
    assert result.figures["spelled_crossings"] > 0  # on a key and on the key spelling its minute item's label


def test_announcing_before_the_commit_fails_the_run(dynamodb_local: DynamoDBLocal) -> None:
    # The bus asks the table at each put whether the crossing is recorded yet: an early announcement shows at once,
    # whether or not its commit later fails and the value moves (which a run would draw only by chance).
    result = run_threshold_chaos(
        dynamodb_local.endpoint_url, BROKEN_SIZE, pipeline_factory=broken_announce_before_commit
    )
    assert not result.ok
    assert any("announced before its crossing was recorded" in problem for problem in result.problems), result.problems


def test_announcing_without_the_deterministic_id_fails_the_run(dynamodb_local: DynamoDBLocal) -> None:
    result = run_threshold_chaos(dynamodb_local.endpoint_url, BROKEN_SIZE, random_ids=True)
    assert not result.ok
    assert any("under different ids" in problem for problem in result.problems), result.problems


def test_judging_a_days_level_on_the_key_items_part_alone_fails_the_run(dynamodb_local: DynamoDBLocal) -> None:
    # The clock moves an hour per invocation, so ended days are moved off the key items between nearly any two
    # batches: a late event's write then meets a day split in two, and the part left on the key's item alone
    # misses the crossings of the sum (caught on each of 16 seeds, with 4 to 8 wrong days each).
    result = run_threshold_chaos(
        dynamodb_local.endpoint_url, WINDOWS_ONLY, pipeline_factory=broken_window_on_key_item_alone
    )
    assert not result.ok
    assert any("@d#" in problem for problem in result.problems), result.problems


def test_trusting_the_pointer_for_a_day_older_than_its_own_fails_the_run(dynamodb_local: DynamoDBLocal) -> None:
    # A key item's pointer says the moved part of its own day and of newer ones; an older day's must be read from
    # its day item. The run's late events fall in three ended days, moved in turn: taken as never moved, an older
    # day's moved part is missed, and the crossings of its sum with it.
    result = run_threshold_chaos(
        dynamodb_local.endpoint_url, WINDOWS_ONLY, pipeline_factory=broken_older_window_trusts_the_pointer
    )
    assert not result.ok
    assert any("@d#" in problem for problem in result.problems), result.problems


def _failing_every_batch_with(key: str) -> Callable[..., BatchPipeline]:
    """BROKEN: every batch holding a message of ``key`` fails whole, on every delivery."""

    def factory(client: Any, tables: Any, bus: Any, log: Any) -> BatchPipeline:
        pipeline = production_pipeline(client, tables, bus, log)
        process = pipeline.process

        def failing(records: Sequence[SourceRecord], now_ms: int, remaining_ms: Callable[[], int]) -> BatchResult:
            if any(f'"key": "{key}"' in record.body for record in records):
                raise RuntimeError(f"BROKEN: a batch with {key} fails")
            return process(records, now_ms, remaining_ms)

        pipeline.process = failing  # type: ignore[method-assign]
        return pipeline

    return factory


def test_a_message_failing_on_every_delivery_is_set_aside_and_fails_the_run(dynamodb_local: DynamoDBLocal) -> None:
    # The run ends, as a queue's redrive policy would end those deliveries, instead of delivering it forever
    result = run_threshold_chaos(
        dynamodb_local.endpoint_url, BROKEN_SIZE, pipeline_factory=_failing_every_batch_with("t:up:0")
    )
    assert not result.ok
    given_up = [problem for problem in result.problems if f"failed on each of its {MAX_DELIVERIES}" in problem]
    assert given_up, result.problems
    # (a message that kept sharing its batches with one of them may be set aside too: whole batches fail here)
    assert any(problem.startswith("t:up:0-") for problem in given_up), given_up


# ------------------------------------------------------------------------------------------- at DynamoDB's edges
def test_recording_every_crossing_in_the_message_transaction_fails_the_run(dynamodb_local: DynamoDBLocal) -> None:
    # A packed message crossing a level on 40 keys: 121 actions or more in one transaction, which DynamoDB refuses
    # (the store refuses it first, as DynamoDB would): the valid message is dead-lettered, never counted
    result = run_threshold_chaos(
        dynamodb_local.endpoint_url, WIDE_ONLY, pipeline_factory=broken_crossings_never_spilled
    )
    assert not result.ok
    assert any(problem.startswith("t:wide-") and "write_refused" in problem for problem in result.problems), (
        result.problems
    )


def test_sending_a_conditions_exact_ends_fails_the_run(
    dynamodb_local: DynamoDBLocal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BROKEN: a condition carries 10 minus a 36-digit step as it is (39 significant digits): DynamoDB refuses it
    monkeypatch.setattr("tally.core.thresholds.storable_at_least", lambda value: value)
    monkeypatch.setattr("tally.core.thresholds.storable_at_most", lambda value: value)
    result = run_threshold_chaos(dynamodb_local.endpoint_url, BIG_ONLY)
    assert not result.ok
    assert any("significant digits" in problem for problem in result.problems), result.problems


def test_telling_items_apart_by_their_labels_fails_the_run(
    dynamodb_local: DynamoDBLocal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BROKEN: an item is the same as any item or key of the same label (key t:sp:0's minute item and the key named
    # t:sp:0@m#2100-01-04T00:00Z), as when the label was the identity
    def same_label(self: CounterItem, other: object) -> bool:
        return isinstance(other, str | CounterItem) and item_label(self) == item_label(other)

    def label_hash(self: CounterItem) -> int:
        return hash(item_label(self))

    monkeypatch.setattr(CounterItem, "__eq__", same_label)
    monkeypatch.setattr(CounterItem, "__hash__", label_hash)
    result = run_threshold_chaos(dynamodb_local.endpoint_url, SPELLED_ONLY)
    assert not result.ok
    assert any(problem.startswith("t:sp:0") for problem in result.problems), result.problems
