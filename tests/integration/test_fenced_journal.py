"""On DynamoDB Local, through the production adapters: fenced journal batches (``Applier(fenced=True)``) where they
can break.

- killed after the n-th fenced write, for every n (and before DONE): the redelivery, in a new container, finishes
  the batch with the owner's epoch and sequence; every counter exact, every item carrying the owner's mark only;
  so too a small batch of single events, which the planner sends through the fenced journal for its cost;
- the answer of the n-th plain ``UpdateItem`` lost, for every n (the commit, each fenced write, DONE): exact;
- a batch left unfinished ends the epoch: the container's next batch on the same keys is another epoch's, and the
  batch left behind is finished later with its own;
- two helpers at once finish a dead owner's batch: exact;
- many containers on one hot key: one mark per epoch, exact.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tally.commit.applier import Applier, RetryPolicy, WriterEpochs
from tally.config import Settings
from tally.core.archive import decode_records
from tally.core.epochs import FencedBatch
from tally.core.fence import mark_value
from tally.core.limits import WIRE_LIMITS
from tally.core.model import SourceRecord
from tally.cost.capacity import item_size
from tally.errors import RetryableStoreError, StoreError
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.post_commit import ArchiveStep
from tally.runtime import wire_pipeline
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally.store.schema import counters_from_item, fence_from_item, item_counters, item_key
from tally_local.chaos.ttl import sweep_expired
from tally_local.kit.faults import DynamoDBFaults
from tests.support.pipeline import RecordingDeadLetterQueue
from tests.support.tables import scan_all

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.core.archive import ArchiveRecord
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

TTL_S = 35 * 86_400
NOW_MS = 4_102_444_800_000
KEYS = [f"k{i}" for i in range(5)]
POLICY = RetryPolicy(base_delay_s=0.0, max_delay_s=0.0, max_attempts=3, reserve_ms=0)


class Crash(BaseException):
    """The process dies: nothing after this point of the invocation happens."""


def _records(prefix: str = "m") -> list[SourceRecord]:
    bodies = [
        {"id": f"{prefix}-{n}", "events": [{"key": key, "deltas": {"count": n + 1}} for key in KEYS]} for n in range(2)
    ]
    return [SourceRecord(f"rec-{uuid.uuid4().hex[:8]}", json.dumps(body), NOW_MS) for body in bodies]


def _pipeline(
    tables: DynamoDBTables,
    journal: Any = None,
    epochs: WriterEpochs | None = None,
    *,
    max_actions: int = 4,  # five keys: the unit takes the journal whatever it costs
    **options: Any,
) -> BatchPipeline:
    store = DynamoDBCounterStore(tables.client, tables.counters_table, tables.markers_table, TTL_S)
    applier = Applier(
        store,
        journal or DynamoDBJournal(tables.client, tables.counters_table, tables.markers_table, TTL_S),
        policy=POLICY,
        sleep=lambda _: None,
        max_actions=max_actions,
        fenced=True,
        **options,
    )
    if epochs is not None:
        applier.epochs = epochs
    return BatchPipeline(
        applier, RecordingDeadLetterQueue(), PipelineSettings(WIRE_LIMITS, dedup_horizon_ms=TTL_S * 1000)
    )


def _process(pipeline: BatchPipeline, records: list[SourceRecord], now_ms: int = NOW_MS) -> tuple[str, ...]:
    return pipeline.process(records, now_ms, lambda: 60_000).failed_record_ids


def _items(tables: DynamoDBTables) -> dict[str, dict[str, Any]]:
    return {key: tables.client.get_item(TableName=tables.counters_table, Key=item_key(key))["Item"] for key in KEYS}


def _headers(tables: DynamoDBTables) -> dict[str, str]:
    return {
        item["id"]["S"][2:]: item["state"]["S"]
        for item in scan_all(tables.client, tables.markers_table)
        if item["id"]["S"].startswith("b#") and "#" not in item["id"]["S"][2:]
    }


def _exact(tables: DynamoDBTables, times: int = 1) -> None:
    for item in _items(tables).values():
        assert item_counters(item) == {"count": 3 * times}  # 1 + 2 per key, once


class _Dying:
    """The journal, dying just before its n-th ``calls`` call."""

    def __init__(self, journal: DynamoDBJournal, calls: tuple[str, ...], nth: int) -> None:
        self._journal, self._calls, self._nth, self.seen = journal, calls, nth, 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._journal, name)
        if name not in self._calls:
            return attribute

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.seen += 1
            if self.seen == self._nth:
                raise Crash
            return attribute(*args, **kwargs)

        return counted


@pytest.mark.parametrize("nth", range(1, len(KEYS) + 2), ids=lambda n: f"killed-at-call-{n}")
def test_killed_after_any_fenced_write_the_redelivery_finishes_with_the_owner_s_marks(
    ddb_tables: DynamoDBTables, nth: int
) -> None:
    # GIVEN an owner killed just before its nth fenced call (the 6th: DONE)
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    dying = _Dying(journal, ("apply_fenced", "mark_done"), nth)
    owner_epochs = WriterEpochs()
    records = _records()
    with pytest.raises(Crash):
        _process(_pipeline(ddb_tables, dying, owner_epochs), records)
    ((batch_id, state),) = _headers(ddb_tables).items()
    assert state == "FENCED"
    owner = FencedBatch.parse(batch_id)
    assert owner is not None
    assert owner_epochs.current is None  # the epoch ended with its batch unfinished
    # WHEN the records come back to a new container
    assert _process(_pipeline(ddb_tables), records, NOW_MS + 7 * 60_000) == ()
    # THEN the batch is DONE, counted once, every item carrying the owner's mark and no other
    assert _headers(ddb_tables) == {batch_id: "DONE"}
    _exact(ddb_tables)
    for item in _items(ddb_tables).values():
        assert fence_from_item(item) == {owner.epoch: mark_value(owner.seq, 0)}


SINGLE_KEYS = [f"s{i}" for i in range(8)]


@pytest.mark.parametrize("nth", range(1, len(SINGLE_KEYS) + 2), ids=lambda n: f"killed-at-call-{n}")
def test_a_small_batch_of_single_events_goes_fenced_and_the_redelivery_finishes_it_exactly(
    ddb_tables: DynamoDBTables, nth: int
) -> None:
    # GIVEN 8 messages of one event each on 8 keys, a transaction's worth: cheaper as one fenced journal batch (each
    # item 1 write unit instead of 2), so the planner sends it there; its owner killed just before its nth fenced call
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    bodies = [{"id": f"one-{key}", "events": [{"key": key, "deltas": {"count": 1}}]} for key in SINGLE_KEYS]
    records = [SourceRecord(f"rec-{uuid.uuid4().hex[:8]}", json.dumps(body), NOW_MS) for body in bodies]
    with pytest.raises(Crash):
        _process(_pipeline(ddb_tables, _Dying(journal, ("apply_fenced", "mark_done"), nth), max_actions=100), records)
    ((batch_id, state),) = _headers(ddb_tables).items()
    assert state == "FENCED"
    # WHEN the records come back to a new container
    assert _process(_pipeline(ddb_tables, max_actions=100), records, NOW_MS + 7 * 60_000) == ()
    # THEN the batch is DONE and every key counts its event once
    assert _headers(ddb_tables) == {batch_id: "DONE"}
    for key in SINGLE_KEYS:
        item = ddb_tables.client.get_item(TableName=ddb_tables.counters_table, Key=item_key(key))["Item"]
        assert item_counters(item) == {"count": 1}


class _Counting:
    """The journal, counting its ``apply_fenced`` calls (one plain ``UpdateItem`` each); ``marks`` replaces what
    ``read_marks`` answers (a read that misses), ``None`` leaves it alone."""

    def __init__(self, journal: DynamoDBJournal, marks: Callable[[dict[Any, int]], dict[Any, int]] | None = None):
        self._journal, self._marks, self.fenced = journal, marks, 0

    def apply_fenced(self, *args: Any) -> Any:
        self.fenced += 1
        return self._journal.apply_fenced(*args)

    def read_marks(self, *args: Any) -> Any:
        read = self._journal.read_marks(*args)
        return read if self._marks is None else self._marks(read)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)


def _update_items(tables: DynamoDBTables) -> Callable[[], int]:
    """A count of the ``UpdateItem`` calls the tables' client makes from now on."""
    calls: list[str] = []
    tables.client.meta.events.register("before-call.dynamodb.UpdateItem", lambda **_: calls.append("UpdateItem"))
    return lambda: len(calls)


def _killed_after(tables: DynamoDBTables, applied: int) -> tuple[list[SourceRecord], FencedBatch]:
    """An owner killed after its ``applied``-th fenced write (before DONE, at ``len(KEYS)``): its batch FENCED."""
    journal = DynamoDBJournal(tables.client, tables.counters_table, tables.markers_table, TTL_S)
    records = _records()
    with pytest.raises(Crash):
        _process(_pipeline(tables, _Dying(journal, ("apply_fenced", "mark_done"), applied + 1)), records)
    ((batch_id, state),) = _headers(tables).items()
    assert state == "FENCED"
    batch = FencedBatch.parse(batch_id)
    assert batch is not None
    return records, batch


@pytest.mark.parametrize("applied", range(len(KEYS) + 1), ids=lambda n: f"killed-after-{n}")
def test_the_redelivery_sends_only_the_fenced_writes_the_owner_did_not(
    ddb_tables: DynamoDBTables, applied: int
) -> None:
    # GIVEN an owner killed after its n-th fenced write
    records, batch = _killed_after(ddb_tables, applied)
    journal = _Counting(DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S))
    update_items = _update_items(ddb_tables)
    # WHEN the records come back to a new container
    assert _process(_pipeline(ddb_tables, journal), records, NOW_MS + 7 * 60_000) == ()
    # THEN it sends the N - n fenced writes missing (and DONE), and every counter is exact
    assert journal.fenced == len(KEYS) - applied
    assert update_items() == len(KEYS) - applied + 1
    assert _headers(ddb_tables) == {batch.batch_id: "DONE"}
    _exact(ddb_tables)
    for item in _items(ddb_tables).values():
        assert fence_from_item(item) == {batch.epoch: mark_value(batch.seq, 0)}


def _throttled(_: dict[Any, int]) -> dict[Any, int]:
    raise RetryableStoreError("ThrottlingException: injected")


MISSED_READS: dict[str, Callable[[dict[Any, int]], dict[Any, int]]] = {
    "failed": _throttled,  # the read keeps failing: every part is sent
    "absent": lambda _: {},
    "stale": lambda read: {item: mark - 1 for item, mark in read.items()},  # an earlier batch's, as a lagging replica
    "partly": lambda read: dict(list(read.items())[:1]),
}


@pytest.mark.parametrize("missed", MISSED_READS)
def test_a_finisher_whose_read_misses_marks_sends_those_parts_again_and_counts_exactly(
    ddb_tables: DynamoDBTables, missed: str
) -> None:
    records, batch = _killed_after(ddb_tables, 3)
    journal = _Counting(
        DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S),
        MISSED_READS[missed],
    )
    assert _process(_pipeline(ddb_tables, journal), records, NOW_MS + 7 * 60_000) == ()
    # The parts the read missed are sent again and refused by their condition: exact.
    assert journal.fenced == {"failed": 5, "absent": 5, "stale": 5, "partly": 4}[missed]
    assert _headers(ddb_tables) == {batch.batch_id: "DONE"}
    _exact(ddb_tables)


def test_the_finisher_s_read_is_one_eventually_consistent_projected_batch_get_and_an_empty_answer_stays_exact(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN an owner killed after 4 of its 5 fenced writes
    records, batch = _killed_after(ddb_tables, 4)
    asked: list[dict[str, Any]] = []

    def ask(params: dict[str, Any], **_: Any) -> None:
        if ddb_tables.counters_table in params["RequestItems"]:
            asked.append(params["RequestItems"][ddb_tables.counters_table])

    def answer(parsed: dict[str, Any], **_: Any) -> None:
        parsed.get("Responses", {}).pop(ddb_tables.counters_table, None)  # a replica that has none of the marks yet

    ddb_tables.client.meta.events.register("before-parameter-build.dynamodb.BatchGetItem", ask)
    ddb_tables.client.meta.events.register("after-call.dynamodb.BatchGetItem", answer)
    journal = _Counting(DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S))
    try:
        # WHEN the redelivery finishes the batch, its read of the marks answered empty on the wire
        assert _process(_pipeline(ddb_tables, journal), records, NOW_MS + 7 * 60_000) == ()
    finally:
        ddb_tables.client.meta.events.unregister("before-parameter-build.dynamodb.BatchGetItem", ask)
        ddb_tables.client.meta.events.unregister("after-call.dynamodb.BatchGetItem", answer)
    # THEN it read the five items once, eventually consistent, the keys and the owner's mark alone
    (request,) = asked
    assert len(request["Keys"]) == len(KEYS)
    assert request["ConsistentRead"] is False
    assert sorted(request["ExpressionAttributeNames"].values()) == sorted(["pk", "sk", f"f#{batch.epoch}"])
    # AND sent every part (four refused by their condition), counting exactly
    assert journal.fenced == len(KEYS)
    assert _headers(ddb_tables) == {batch.batch_id: "DONE"}
    _exact(ddb_tables)


def test_a_batch_of_hundreds_of_items_cut_short_twice_is_finished_by_what_each_finisher_left(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN a batch of 250 keys (its marks read in three BatchGetItems), the owner killed after 120 fenced writes
    keys = [f"w{i:03}" for i in range(250)]
    body = {"id": "wide", "events": [{"key": key, "deltas": {"count": 1}} for key in keys]}
    records = [SourceRecord("rec-wide", json.dumps(body), NOW_MS)]
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    with pytest.raises(Crash):
        _process(_pipeline(ddb_tables, _Dying(journal, ("apply_fenced",), 121)), records)
    # WHEN a first finisher is cut short after 100 more, and a second one finishes
    with pytest.raises(Crash):
        _process(_pipeline(ddb_tables, _Dying(journal, ("apply_fenced",), 101)), records, NOW_MS + 7 * 60_000)
    last = _Counting(journal)
    assert _process(_pipeline(ddb_tables, last), records, NOW_MS + 14 * 60_000) == ()
    # THEN the last one sent only the 30 writes left, and every key counts once
    assert last.fenced == 30
    assert set(_headers(ddb_tables).values()) == {"DONE"}
    counted = {
        item["pk"]["S"]: item_counters(item)
        for item in scan_all(ddb_tables.client, ddb_tables.counters_table)
        if item["pk"]["S"] in keys
    }
    assert counted == {key: {"count": 1} for key in keys}


@pytest.mark.parametrize("applied", [1, 2, 4, 14], ids=lambda n: f"killed-after-{n}")
def test_items_in_several_parts_are_finished_from_the_first_part_their_mark_does_not_reach(
    ddb_tables: DynamoDBTables, applied: int
) -> None:
    # GIVEN five keys of five counters, each item in three parts (two counters a write): 15 fenced writes, the
    # owner killed after the n-th, mid-item or between items
    body = {"id": "parts", "events": [{"key": k, "deltas": {f"c{i}": i + 1 for i in range(5)}} for k in KEYS]}
    records = [SourceRecord("rec-parts", json.dumps(body), NOW_MS)]
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    small = {"counter_limit": lambda _: 2}
    with pytest.raises(Crash):
        _process(_pipeline(ddb_tables, _Dying(journal, ("apply_fenced",), applied + 1), **small), records)
    # WHEN the redelivery finishes it
    last = _Counting(journal)
    assert _process(_pipeline(ddb_tables, last, **small), records, NOW_MS + 7 * 60_000) == ()
    # THEN it sent the 15 - n parts missing, each after its predecessor, and every counter counts once
    assert last.fenced == 15 - applied
    ((batch_id, state),) = _headers(ddb_tables).items()
    batch = FencedBatch.parse(batch_id)
    assert state == "DONE"
    assert batch is not None
    for item in _items(ddb_tables).values():
        assert item_counters(item) == {f"c{i}": i + 1 for i in range(5)}
        assert fence_from_item(item) == {batch.epoch: mark_value(batch.seq, 2)}


class _FailingFirstItem:
    """The journal, its fenced write of the first key failing for good (a denied permission) once four writes are on
    their way (the pool's width), and every other item's taking a while: what was sent and what came back, counted."""

    def __init__(self, journal: DynamoDBJournal) -> None:
        self._journal = journal
        self._sending = threading.Condition()
        self.sent = self.answered = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)

    def apply_fenced(self, write: Any) -> Any:
        with self._sending:
            self.sent += 1
            self._sending.notify_all()
        if item_key(write.item) == item_key(KEYS[0]):
            with self._sending:
                self._sending.wait_for(lambda: self.sent >= 4, timeout=10)
            raise StoreError("AccessDeniedException: not authorized to perform dynamodb:UpdateItem")
        time.sleep(0.3)
        answer = self._journal.apply_fenced(write)
        with self._sending:
            self.answered += 1
        return answer


def test_an_item_write_failing_for_good_leaves_no_other_item_s_write_in_flight(ddb_tables: DynamoDBTables) -> None:
    # GIVEN items written four at a time, the first key's write denied for good, the others slow
    journal = _FailingFirstItem(
        DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    )
    pipeline = _pipeline(ddb_tables, journal, write_concurrency=4)
    # WHEN the batch fails for it
    with pytest.raises(StoreError, match="AccessDenied"):
        _process(pipeline, _records())
    # THEN no write of the batch is still on its way when the error leaves: Lambda freezes the environment after
    # the answer, and a write thawed with the next invocation would land long after its own invocation's
    # deadline, where the fenced apply's prune horizon says no write of a batch read FENCED can come. Three were
    # in flight with the failing one; the fifth key's is sent or not, as the pool's threads run (a worker freed by
    # the failure may start it before the error cancels what has not started): either way it is answered.
    assert journal.sent >= 4
    assert journal.answered == journal.sent - 1


@pytest.mark.parametrize("nth", range(len(KEYS) + 3), ids=lambda n: f"lost-answer-{n}")
def test_a_lost_answer_on_any_single_write_counts_once(ddb_tables: DynamoDBTables, nth: int) -> None:
    # The plain UpdateItems of a fenced batch: its commit, one per key, DONE.
    faults = DynamoDBFaults(ddb_tables.client, operation="UpdateItem")
    faults.pass_through(nth)
    faults.lose_responses(1)
    assert _process(_pipeline(ddb_tables), _records()) == ()
    assert faults.injected == (["lose_response"] if nth < len(KEYS) + 2 else [])
    assert set(_headers(ddb_tables).values()) == {"DONE"}
    _exact(ddb_tables)


def test_a_batch_left_unfinished_ends_the_epoch_and_later_batches_on_its_keys_take_another(
    ddb_tables: DynamoDBTables,
) -> None:
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    epochs = WriterEpochs()

    class Throttled:
        """DynamoDB keeps throttling the third fenced write: the batch stays FENCED."""

        calls = 0

        def __getattr__(self, name: str) -> Any:
            attribute = getattr(journal, name)
            if name != "apply_fenced":
                return attribute

            def throttled(*args: Any, **kwargs: Any) -> Any:
                Throttled.calls += 1
                if Throttled.calls >= 3:
                    raise RetryableStoreError("ThrottlingException: injected")
                return attribute(*args, **kwargs)

            return throttled

    first = _records("a")
    assert set(_process(_pipeline(ddb_tables, Throttled(), epochs), first)) == {r.record_id for r in first}
    ((left, state),) = _headers(ddb_tables).items()
    assert state == "FENCED"
    # The same container's next batch, on the same keys: another epoch.
    second = _records("b")
    assert _process(_pipeline(ddb_tables, journal, epochs), second) == ()
    later = next(batch for batch in _headers(ddb_tables) if batch != left)
    left_batch, later_batch = FencedBatch.parse(left), FencedBatch.parse(later)
    assert left_batch is not None
    assert later_batch is not None
    assert later_batch.epoch != left_batch.epoch
    assert later_batch.seq == 1
    # The first batch's records come back: its batch is finished with its own epoch.
    assert _process(_pipeline(ddb_tables, journal, epochs), first, NOW_MS + 7 * 60_000) == ()
    assert set(_headers(ddb_tables).values()) == {"DONE"}
    _exact(ddb_tables, times=2)
    for item in _items(ddb_tables).values():
        assert fence_from_item(item) == {left_batch.epoch: mark_value(1, 0), later_batch.epoch: mark_value(1, 0)}


def test_two_helpers_at_once_finish_a_dead_owner_s_batch_once(ddb_tables: DynamoDBTables) -> None:
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    records = _records()
    with pytest.raises(Crash):
        _process(_pipeline(ddb_tables, _Dying(journal, ("apply_fenced",), 3)), records)
    start = threading.Barrier(2)
    failed: list[tuple[str, ...]] = []

    def helper() -> None:
        pipeline = _pipeline(ddb_tables)
        start.wait(10)
        failed.append(_process(pipeline, records, NOW_MS + 7 * 60_000))

    helpers = [threading.Thread(target=helper) for _ in range(2)]
    for thread in helpers:
        thread.start()
    for thread in helpers:
        thread.join(60)
    assert len(failed) == 2
    assert set(_headers(ddb_tables).values()) == {"DONE"}
    _exact(ddb_tables)


def test_many_containers_on_one_hot_key_leave_one_mark_each_and_count_exactly(ddb_tables: DynamoDBTables) -> None:
    # The template's default MaximumConcurrency (5) containers, each with its epoch, take turns on the same keys.
    containers = [WriterEpochs() for _ in range(5)]
    rounds = 3
    for turn in range(rounds):
        for index, epochs in enumerate(containers):
            assert _process(_pipeline(ddb_tables, epochs=epochs), _records(f"c{index}-t{turn}")) == ()
    _exact(ddb_tables, times=5 * rounds)
    for item in _items(ddb_tables).values():
        # One mark per live epoch, at its latest batch: marks grow with epochs, not with batches.
        assert fence_from_item(item) == {epochs.current: mark_value(rounds, 0) for epochs in containers}
        # Five marks and a counter: well inside the first KB. Without prunes (not sent yet), an ended epoch's mark
        # stays: growth with container churn is bounded only once they are.
        assert item_size(item) < 200


def test_a_batch_reads_the_headers_of_the_epochs_it_meets_in_one_request(ddb_tables: DynamoDBTables) -> None:
    # GIVEN five containers that took turns on the same keys: the last one's answers showed it the other four's marks
    containers = [WriterEpochs() for _ in range(5)]
    for index, epochs in enumerate(containers):
        assert _process(_pipeline(ddb_tables, epochs=epochs), _records(f"c{index}")) == ()
    sent: list[tuple[str, dict[str, Any]]] = []

    def keep(model: Any, params: dict[str, Any], **_: Any) -> None:
        sent.append((model.name, params))

    # WHEN the last one writes the keys again
    ddb_tables.client.meta.events.register("before-parameter-build.dynamodb", keep)
    try:
        assert _process(_pipeline(ddb_tables, epochs=containers[-1]), _records("again")) == ()
    finally:
        ddb_tables.client.meta.events.unregister("before-parameter-build.dynamodb", keep)
    # THEN it asked for the four other epochs' batch headers (whether their marks may go) in one strongly
    # consistent request, not one request each
    asked = [_keys_asked(operation, params, ddb_tables.markers_table) for operation, params in sent]
    header_reads = [(ids, consistent) for ids, consistent in asked if ids and all(_is_header(i) for i in ids)]
    expected = {f"b#{FencedBatch(epochs.current, 1).batch_id}" for epochs in containers[:-1]}
    assert [(set(ids), consistent) for ids, consistent in header_reads] == [(expected, True)]
    _exact(ddb_tables, times=6)


def _keys_asked(operation: str, params: dict[str, Any], table: str) -> tuple[list[str], bool]:
    """The ids a read asks ``table`` for, and whether it is strongly consistent."""
    if operation == "GetItem" and params["TableName"] == table:
        return [params["Key"]["id"]["S"]], params.get("ConsistentRead") is True
    if operation == "BatchGetItem" and table in params["RequestItems"]:
        asked = params["RequestItems"][table]
        return [key["id"]["S"] for key in asked["Keys"]], asked.get("ConsistentRead") is True
    return [], False


def _is_header(ledger_id: str) -> bool:
    return ledger_id.startswith("b#") and "#" not in ledger_id[2:]


HOUR_MS = 3_600_000


def test_a_later_write_prunes_a_mark_whose_batch_is_done_past_the_horizon(ddb_tables: DynamoDBTables) -> None:
    first, second = WriterEpochs(), WriterEpochs()
    assert _process(_pipeline(ddb_tables, epochs=first), _records("a1")) == ()
    # Container two writes the keys an hour later: its answers show container one's marks.
    assert _process(_pipeline(ddb_tables, epochs=second), _records("b1"), NOW_MS + HOUR_MS) == ()
    for item in _items(ddb_tables).values():
        assert set(fence_from_item(item)) == {first.current, second.current}
    # Its next batch, past the horizon after the first's DONE: the first's marks go with its writes.
    assert _process(_pipeline(ddb_tables, epochs=second), _records("b2"), NOW_MS + 2 * HOUR_MS) == ()
    for item in _items(ddb_tables).values():
        assert fence_from_item(item) == {second.current: mark_value(2, 0)}
    # Container one writes again: its mark comes back at its next batch, and its retries would still be refused.
    assert _process(_pipeline(ddb_tables, epochs=first), _records("a2"), NOW_MS + 3 * HOUR_MS) == ()
    for item in _items(ddb_tables).values():
        assert fence_from_item(item) == {second.current: mark_value(2, 0), first.current: mark_value(2, 0)}
    _exact(ddb_tables, times=4)


def test_a_prune_whose_mark_moved_on_is_sent_again_without_it(ddb_tables: DynamoDBTables) -> None:
    first, second = WriterEpochs(), WriterEpochs()
    assert _process(_pipeline(ddb_tables, epochs=first), _records("a1")) == ()
    assert _process(_pipeline(ddb_tables, epochs=second), _records("b1"), NOW_MS + HOUR_MS) == ()
    # Container one writes again: its marks move on, which container two has not seen.
    assert _process(_pipeline(ddb_tables, epochs=first), _records("a2"), NOW_MS + 2 * HOUR_MS) == ()
    # Container two's prune of the marks it saw is refused; the write goes again without it.
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    sent: list[tuple[dict[str, int], bool]] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            attribute = getattr(journal, name)
            if name != "apply_fenced":
                return attribute

            def recorded(write: Any) -> Any:
                answer = attribute(write)
                sent.append((dict(write.prune), answer.committed))
                return answer

            return recorded

    later = NOW_MS + 2 * HOUR_MS + 60_000
    assert _process(_pipeline(ddb_tables, Recording(), epochs=second), _records("b2"), later) == ()
    assert ({first.current: mark_value(1, 0)}, False) in sent  # the prune of the mark seen, refused
    assert all(committed for prune, committed in sent if not prune)
    for item in _items(ddb_tables).values():
        assert fence_from_item(item) == {first.current: mark_value(2, 0), second.current: mark_value(2, 0)}
    _exact(ddb_tables, times=4)


def test_a_mark_whose_header_ttl_deleted_goes_only_a_horizon_after_it_was_seen_gone(ddb_tables: DynamoDBTables) -> None:
    # GIVEN container one's batch DONE, then TTL sweeping everything of it on the markers table (its markers, pages
    # and header: the header last, a day after the markers' TTL) while its marks stay on the items
    first, second = WriterEpochs(), WriterEpochs()
    assert _process(_pipeline(ddb_tables, epochs=first), _records("a1")) == ()
    swept_at_ms = NOW_MS + (TTL_S + 2 * 86_400) * 1000
    assert sweep_expired(ddb_tables.client, ddb_tables.markers_table, swept_at_ms // 1000) > 0
    assert scan_all(ddb_tables.client, ddb_tables.markers_table) == []
    assert all(first.current in fence_from_item(item) for item in _items(ddb_tables).values())
    # WHEN container two writes the keys (it sees the marks), then again (it reads their header: gone), then again
    assert _process(_pipeline(ddb_tables, epochs=second), _records("b1"), swept_at_ms) == ()
    assert _process(_pipeline(ddb_tables, epochs=second), _records("b2"), swept_at_ms + HOUR_MS) == ()
    # THEN a header found gone is not taken for a batch long DONE: the marks stay a horizon after the read
    for item in _items(ddb_tables).values():
        assert set(fence_from_item(item)) == {first.current, second.current}
    # AND they go with the writes after it, every count exact throughout
    assert _process(_pipeline(ddb_tables, epochs=second), _records("b3"), swept_at_ms + 2 * HOUR_MS) == ()
    for item in _items(ddb_tables).values():
        assert fence_from_item(item) == {second.current: mark_value(3, 0)}
    _exact(ddb_tables, times=4)


WIDE = [f"w{i:03}" for i in range(120)]
"""More keys than a transaction holds: a message on all of them takes the journal (the template's 100 actions)."""


def _wired(tables: DynamoDBTables) -> BatchPipeline:
    """A container as the handlers wire it (fenced by default), hour and day windows on the key's item."""
    env = {
        "TALLY_COUNTERS_TABLE": tables.counters_table,
        "TALLY_MARKERS_TABLE": tables.markers_table,
        "TALLY_DLQ_URL": "http://dlq",
        "TALLY_WINDOWS": "hour,day",
    }
    return wire_pipeline(tables.client, RecordingDeadLetterQueue(), Settings.from_env(env))


def _message(message_id: str, keys: list[str], delta: int, at_ms: int) -> list[SourceRecord]:
    body = {"id": message_id, "events": [{"key": key, "deltas": {"count": delta}} for key in keys]}
    return [SourceRecord(f"rec-{message_id}", json.dumps(body), at_ms)]


def _wide_item(tables: DynamoDBTables, key: str) -> dict[str, Any]:
    return tables.client.get_item(TableName=tables.counters_table, Key=item_key(key), ConsistentRead=True)["Item"]


def test_a_window_move_takes_the_marks_the_container_knows_may_go(ddb_tables: DynamoDBTables) -> None:
    # GIVEN container one's fenced batch on 120 keys at 03:00, then container two's two batches on them: the first
    # shows it one's marks, the second reads one's header (DONE, 20 minutes ago: within the horizon, nothing pruned)
    first, second = _wired(ddb_tables), _wired(ddb_tables)
    start = NOW_MS + 3 * HOUR_MS
    for pipeline, message, delta, at_ms in (
        (first, "a", 1, start),
        (second, "b1", 2, start + 10 * 60_000),
        (second, "b2", 3, start + 20 * 60_000),
    ):
        assert _process(pipeline, _message(message, WIDE, delta, at_ms), at_ms) == ()
    two = second._applier.epochs.current  # type: ignore[attr-defined]  # the wiring's applier: its epoch
    marks = [fence_from_item(_wide_item(ddb_tables, key)) for key in WIDE]
    assert all(len(fence) == 2 and two in fence for fence in marks)
    (one,) = set(marks[0]) - {two}
    # WHEN container two counts a single event on the first key the next day, in a direct transaction, and the
    # window step moves that key's ended hour and day off its item
    next_day = start + 24 * HOUR_MS
    result = second.process(_message("c", WIDE[:1], 5, next_day), next_day, lambda: 60_000)
    assert (result.failed_record_ids, result.figures["WindowsMoved"] > 0) == ((), True)
    # THEN the move took container one's mark with it (its batch DONE past the horizon), and only there
    assert one not in fence_from_item(_wide_item(ddb_tables, WIDE[0]))
    assert all(one in fence_from_item(_wide_item(ddb_tables, key)) for key in WIDE[1:])
    # AND every count stays exact
    assert counters_from_item(_wide_item(ddb_tables, WIDE[0])) == {"count": 1 + 2 + 3 + 5}
    assert {key: counters_from_item(_wide_item(ddb_tables, key)) for key in WIDE[1:]} == {
        key: {"count": 6} for key in WIDE[1:]
    }


class _Archive:
    """An archive writer keeping what it is given; ``began`` is set when a write begins."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.bodies: list[bytes] = []

    def put(self, key: str, body: bytes) -> None:
        self.began.set()
        self.bodies.append(body)

    def records(self) -> list[ArchiveRecord]:
        return [record for body in self.bodies for record in decode_records(body)]


class _LandingWaitsForTheArchive:
    """The journal, each fenced write waiting (at most ``WAIT_S``) for the archive's write to begin, and noting
    whether it had: the archive written beside the landing never makes it wait; written after it, always."""

    WAIT_S = 2.0

    def __init__(self, journal: DynamoDBJournal, archive: _Archive) -> None:
        self._journal, self._archive, self.waited_in_vain = journal, archive, 0

    def apply_fenced(self, *args: Any) -> Any:
        if not self._archive.began.wait(self.WAIT_S):
            self.waited_in_vain += 1
        return self._journal.apply_fenced(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)


def _archiving(tables: DynamoDBTables, journal: Any, archive: _Archive) -> BatchPipeline:
    store = DynamoDBCounterStore(tables.client, tables.counters_table, tables.markers_table, TTL_S)
    applier = Applier(store, journal, policy=POLICY, sleep=lambda _: None, max_actions=4, fenced=True)
    settings = PipelineSettings(WIRE_LIMITS, dedup_horizon_ms=TTL_S * 1000)
    return BatchPipeline(applier, RecordingDeadLetterQueue(), settings, steps=[ArchiveStep(archive)])


def test_the_archive_is_written_while_the_last_fenced_batch_lands_and_its_records_say_so(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN a batch committed as one fenced journal batch, whose item writes wait for the archive's write to begin
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    archive = _Archive()
    waiting = _LandingWaitsForTheArchive(journal, archive)
    # WHEN it is processed
    assert _process(_archiving(ddb_tables, waiting, archive), _records()) == ()
    # THEN the archive's write began before the first item write was sent (no write waited for it), every record
    # says it was written before its deltas landed, under the fenced batch, and every key counts once
    assert waiting.waited_in_vain == 0
    ((batch_id, state),) = _headers(ddb_tables).items()
    assert state == "DONE"
    records = archive.records()
    assert len(records) == 2
    assert {(record.commit, record.before_landing, record.v) for record in records} == {(batch_id, True, 2)}
    _exact(ddb_tables)


@pytest.mark.parametrize("nth", [1, len(KEYS) + 1], ids=["killed-at-its-first-item-write", "killed-before-done"])
def test_a_landing_killed_beside_its_archive_write_is_finished_and_archived_again_by_the_redelivery(
    ddb_tables: DynamoDBTables, nth: int
) -> None:
    # GIVEN an owner whose archive write (records saying "before the landing") lands while the invocation is killed
    # at its landing: at its first item write, or after every item write and before DONE
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)
    archive = _Archive()
    records = _records()
    dying = _Dying(_LandingWaitsForTheArchive(journal, archive), ("apply_fenced", "mark_done"), nth)  # type: ignore[arg-type]
    with pytest.raises(Crash):
        _process(_archiving(ddb_tables, dying, archive), records)
    ((batch_id, state),) = _headers(ddb_tables).items()
    assert state == "FENCED"
    assert [record.before_landing for record in archive.records()] == [True, True]
    # WHEN the records come back to a new container
    assert _process(_archiving(ddb_tables, journal, archive), records, NOW_MS + 7 * 60_000) == ()
    # THEN it finishes the batch, counts each message once, and archives them again after the landing, under the
    # same commit: one counting each, which the audit places by the copy written after the landing
    assert _headers(ddb_tables) == {batch_id: "DONE"}
    _exact(ddb_tables)
    again = archive.records()[2:]
    assert {(record.commit, record.before_landing, record.counted_here) for record in again} == {
        (batch_id, False, False)
    }
