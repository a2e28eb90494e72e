"""On DynamoDB Local: threshold crossings recorded exactly once, in the transaction that commits them.

A write far from every declared level commits with no extra request; one whose steps cross a level is refused
by its crossing condition and sent again from the value it met (``ALL_OLD``), carrying one notification item per
crossing, named by (key, counter, level, direction, message id). So retries, redeliveries, duplicates, a
concurrent writer and a kill between any two steps never record a crossing twice or miss one; the Hypothesis
property checks it against the messages applied one by one in order under any batching and duplication.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import boto3
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.commit.marker_reads import MarkerReadGate
from tally.core.bounds import NO_BOUNDS, CounterBounds, parse_counter_bounds
from tally.core.defaults import CounterDefaults, parse_counter_defaults
from tally.core.items import ALL_TIME
from tally.core.model import RejectCode, SourceRecord
from tally.core.numbers import add
from tally.core.thresholds import (
    CounterThresholds,
    Direction,
    Levels,
    parse_counter_thresholds,
    window_unit,
)
from tally.core.windows import parse_window_spec
from tally.reader import CounterReader
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.notifications import scan_notifications
from tally_local.kit.faults import DynamoDBFaults
from tally_local.kit.limits import RequestLimits
from tests.support.pipeline import TTL_DAYS, make_pipeline
from tests.support.properties import on_emulator, sent_in_batches
from tests.support.reference import expected_crossings
from tests.support.tables import create_table, template_tables

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tally.core.numbers import Number
    from tally.core.thresholds import Crossing
    from tally.core.write import DirectWrite
    from tally.pipeline import BatchPipeline
    from tests.support.pipeline import RecordingDeadLetterQueue
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = 4_102_444_800_000
"""2100-01-01: the markers' and notifications' TTL (35 days from the batch's clock) lies ahead of the machine's
clock, or DynamoDB Local's TTL could delete them in the middle of a test."""
THRESHOLDS = parse_counter_thresholds("usage:*#calls>=800,1000;stock:*#stock<=10")
STARTS = parse_counter_defaults("stock:*#stock=start:100")


class NotifyTables:
    def __init__(self, tables: DynamoDBTables, notifications_table: str) -> None:
        self.tables = tables
        self.client = tables.client
        self.notifications_table = notifications_table

    def notifications(self) -> list[Crossing]:
        return sorted(scan_notifications(self.client, self.notifications_table), key=lambda c: (c.at_ms, c.message_id))

    def value(self, key: str, counter: str) -> Decimal | None:
        return CounterReader(self.tables.counters_table, client=self.client).get(key).values.get(counter)


@pytest.fixture
def notify(ddb_tables: DynamoDBTables) -> Iterator[NotifyTables]:
    """The test's counters and markers tables, and a notifications table (schema and stream from template.yaml)."""
    name = f"tally-test-notifications-{uuid.uuid4().hex[:12]}"
    create_table(ddb_tables.client, template_tables()["NotificationsTable"], name)
    try:
        yield NotifyTables(ddb_tables, name)
    finally:
        with contextlib.suppress(ddb_tables.client.exceptions.ResourceNotFoundException):
            ddb_tables.client.delete_table(TableName=name)


def make_store(notify: NotifyTables) -> DynamoDBCounterStore:
    """The counter store on the test's tables, with the notifications table where crossings are recorded."""
    tables = notify.tables
    return DynamoDBCounterStore(
        tables.client,
        tables.counters_table,
        tables.markers_table,
        TTL_DAYS * 86_400,
        notifications_table=notify.notifications_table,
    )


def pipeline_of(
    notify: NotifyTables,
    thresholds: CounterThresholds = THRESHOLDS,
    defaults: CounterDefaults = STARTS,
    bounds: CounterBounds = NO_BOUNDS,
    **options: Any,
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    return make_pipeline(
        make_store(notify), counter_defaults=defaults, counter_bounds=bounds, counter_thresholds=thresholds, **options
    )


def from_values_met(write: DirectWrite) -> bool:
    """Whether a write was planned from the values a refused condition met (its thresholded counters conditioned
    on exactly those)."""
    return any(item.exact for item in write.items)


def record(message_id: str, key: str, **deltas: int) -> SourceRecord:
    return SourceRecord(f"r-{message_id}", json.dumps({"id": message_id, "key": key, "deltas": deltas}), NOW_MS)


def process(pipeline: BatchPipeline, records: list[SourceRecord], now_ms: int = NOW_MS) -> Any:
    result = pipeline.process(records, now_ms, lambda: 60_000)
    assert result.failed_record_ids == ()
    return result


def named(found: list[Crossing]) -> list[tuple[str, str, Decimal, str, str, Decimal]]:
    return [(c.key, c.counter, Decimal(c.level), str(c.direction), c.message_id, Decimal(c.value)) for c in found]


def test_a_write_far_from_every_level_costs_one_transaction_and_records_nothing(notify: NotifyTables) -> None:
    # GIVEN usage with levels at 800 and 1000
    pipeline, _ = pipeline_of(notify)
    # WHEN a batch takes it from 0 to 300
    result = process(pipeline, [record("a", "usage:t", calls=100), record("b", "usage:t", calls=200)])
    # THEN one transaction, as without thresholds, and no notification
    assert result.figures["Transactions"] == 1
    assert result.figures["ThresholdRewrites"] == 0
    assert notify.notifications() == []
    assert notify.value("usage:t", "calls") == 300


def test_a_rising_crossing_is_recorded_once_with_the_message_that_made_it(notify: NotifyTables) -> None:
    # GIVEN usage at 0 and a batch of +500, +400 (the second step crosses 800), then +200 (crosses 1000)
    pipeline, _ = pipeline_of(notify)
    first = process(pipeline, [record("a", "usage:t", calls=500), record("b", "usage:t", calls=400)])
    second = process(pipeline, [record("c", "usage:t", calls=200)], NOW_MS + 1)
    # THEN each crossing once, named by its message, with the value after the batch; two transactions each (the
    # refused crossing condition, then the write from the value it met), no read
    assert named(notify.notifications()) == [
        ("usage:t", "calls", 800, "rising", "b", 900),
        ("usage:t", "calls", 1000, "rising", "c", 1100),
    ]
    assert (first.figures["Transactions"], second.figures["Transactions"]) == (2, 2)
    assert (first.figures["ThresholdRewrites"], second.figures["ThresholdRewrites"]) == (1, 1)
    assert notify.value("usage:t", "calls") == 1100


def test_one_message_jumping_several_levels_announces_each(notify: NotifyTables) -> None:
    pipeline, _ = pipeline_of(notify)
    process(pipeline, [record("big", "usage:t", calls=1500)])
    found = notify.notifications()
    assert named(found) == [
        ("usage:t", "calls", 800, "rising", "big", 1500),
        ("usage:t", "calls", 1000, "rising", "big", 1500),
    ]
    assert len({c.notification_id for c in found}) == 2


def test_a_falling_level_from_a_start_value_and_a_re_crossing_get_new_ids(notify: NotifyTables) -> None:
    # GIVEN stock starting at 100 with a falling level at 10
    pipeline, _ = pipeline_of(notify)
    # WHEN it drops to 50 (nothing), to 5 (crossed), is restocked to 25 (crossed upwards: not announced), and drops
    # to 5 again (crossed again)
    process(pipeline, [record("s1", "stock:1", stock=-50)])
    process(pipeline, [record("s2", "stock:1", stock=-45)], NOW_MS + 1)
    process(pipeline, [record("r1", "stock:1", stock=20)], NOW_MS + 2)
    process(pipeline, [record("s3", "stock:1", stock=-20)], NOW_MS + 3)
    # THEN two notifications, two ids
    found = notify.notifications()
    assert named(found) == [
        ("stock:1", "stock", 10, "falling", "s2", 5),
        ("stock:1", "stock", 10, "falling", "s3", 5),
    ]
    assert found[0].notification_id != found[1].notification_id


def test_steps_crossing_back_and_forth_in_one_batch_each_count(notify: NotifyTables) -> None:
    # GIVEN one batch: +900 (crosses 800), -200 (back below), +200 (crosses 800 again), +10
    pipeline, _ = pipeline_of(notify)
    records = [record("a", "usage:t", calls=900), record("b", "usage:t", calls=-200)]
    records += [record("c", "usage:t", calls=200), record("d", "usage:t", calls=10)]
    process(pipeline, records)
    # THEN two crossings of 800, by a and by c, each with the value after the batch and after its own step
    found = notify.notifications()
    assert [(c.message_id, c.level, c.step_value, c.value) for c in found] == [
        ("a", 800, 900, 910),
        ("c", 800, 900, 910),
    ]


def test_a_redelivered_or_duplicated_batch_records_nothing_again(notify: NotifyTables) -> None:
    # GIVEN a warm container that does not pre-read markers (so the copies meet them in cancelled transactions)
    pipeline, _ = pipeline_of(notify, marker_read_gate=MarkerReadGate(quiet_batches=0))
    batch = [record("a", "usage:t", calls=500), record("b", "usage:t", calls=400), record("b", "usage:t", calls=400)]
    process(pipeline, batch)
    # WHEN the whole batch is redelivered, and re-sent in another order with a new message
    again = process(pipeline, batch)
    process(pipeline, [batch[1], record("c", "usage:t", calls=1), batch[0]])
    # THEN the crossing is recorded once; the copies are duplicates
    assert again.figures["DuplicatesAlreadyApplied"] == 2
    assert [(c.level, c.message_id) for c in notify.notifications()] == [(800, "b")]
    assert notify.value("usage:t", "calls") == 901


@pytest.mark.parametrize("lost", [1, 2], ids=["refused-write", "exact-write"])
def test_a_lost_response_records_the_crossing_once(notify: NotifyTables, lost: int) -> None:
    # GIVEN the answer to the n-th transaction lost (1: the refused crossing condition; 2: the exact write that
    # committed the crossing, whose retry then meets the markers)
    pipeline, _ = pipeline_of(notify)
    faults = DynamoDBFaults(notify.client)
    faults.pass_through(lost - 1)
    faults.lose_responses(1)
    # WHEN a batch crossing 800 is processed
    process(pipeline, [record("a", "usage:t", calls=500), record("b", "usage:t", calls=400)])
    # THEN one notification, counts once
    assert faults.injected == ["lose_response"]
    assert [(c.level, c.message_id) for c in notify.notifications()] == [(800, "b")]
    assert notify.value("usage:t", "calls") == 900


def test_a_concurrent_writer_between_the_refusal_and_the_exact_write_moves_the_crossing(
    notify: NotifyTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN usage at 700, and a batch whose message "a" (+150) would cross 800
    pipeline, _ = pipeline_of(notify)
    other, _ = pipeline_of(notify)
    process(pipeline, [record("start", "usage:t", calls=700)])
    real_write = DynamoDBCounterStore.write
    interleaved: list[bool] = []

    def with_a_writer_in_between(self: DynamoDBCounterStore, write: DirectWrite) -> None:
        if from_values_met(write) and not interleaved:
            # Another invocation commits +200 between the refusal and this exact write (700 -> 900: it crosses 800)
            interleaved.append(True)
            monkeypatch.setattr(DynamoDBCounterStore, "write", real_write)
            process(other, [record("x", "usage:t", calls=200)], NOW_MS + 1)
            monkeypatch.setattr(DynamoDBCounterStore, "write", with_a_writer_in_between)
        real_write(self, write)

    monkeypatch.setattr(DynamoDBCounterStore, "write", with_a_writer_in_between)
    # WHEN the batch is processed
    result = process(pipeline, [record("a", "usage:t", calls=150)], NOW_MS + 2)
    # THEN the exact write (planned from 700) is refused, planned again from 900: "x" crossed 800, "a" crosses 1000
    assert interleaved == [True]
    assert result.figures["Transactions"] == 3
    assert result.figures["ThresholdRewrites"] == 2
    assert [(c.level, c.message_id, c.value) for c in notify.notifications()] == [(800, "x", 900), (1000, "a", 1050)]


def test_two_invocations_at_once_on_one_key_record_every_crossing_once(notify: NotifyTables) -> None:
    # GIVEN two invocations adding 100 at a time to the same usage, eight messages each (0 -> 1600)
    pipelines = [pipeline_of(notify)[0] for _ in range(2)]
    failed: list[tuple[str, ...]] = []

    def run(index: int) -> None:
        for n in range(8):
            result = pipelines[index].process([record(f"p{index}-{n}", "usage:t", calls=100)], NOW_MS, lambda: 60_000)
            failed.append(result.failed_record_ids)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # THEN (whatever was handed back is redelivered) 800 and 1000 were each crossed once, by the message whose
    # step took the value there
    for index, ids in enumerate(failed):
        for record_id in ids:
            message_id = record_id.removeprefix("r-")
            process(pipelines[index % 2], [record(message_id, "usage:t", calls=100)])
    assert notify.value("usage:t", "calls") == 1600
    found = notify.notifications()
    assert sorted((c.level, c.step_value) for c in found) == [(800, 800), (1000, 1000)]


@pytest.mark.parametrize("crash_after", [1, 2])
def test_a_kill_after_any_transaction_loses_no_crossing_and_doubles_none(
    notify: NotifyTables, crash_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an invocation killed after its n-th transaction (2: just after the one that committed the crossing,
    # before anything could announce it)
    pipeline, _ = pipeline_of(notify)
    records = [record("a", "usage:t", calls=500), record("b", "usage:t", calls=400)]
    real_write = DynamoDBCounterStore.write
    calls: list[int] = []

    def dying(self: DynamoDBCounterStore, write: DirectWrite) -> None:
        calls.append(1)
        with contextlib.ExitStack() as after:
            if len(calls) == crash_after:
                after.callback(lambda: (_ for _ in ()).throw(RuntimeError("the invocation died")))
            real_write(self, write)

    monkeypatch.setattr(DynamoDBCounterStore, "write", dying)
    with pytest.raises(RuntimeError):
        pipeline.process(records, NOW_MS, lambda: 60_000)
    monkeypatch.setattr(DynamoDBCounterStore, "write", real_write)
    # WHEN the whole batch is redelivered
    process(pipeline, records)
    # THEN the crossing is recorded once, and its table's stream holds exactly one INSERT for it: what the pipe
    # delivers, whatever happened to the invocation
    assert [(c.level, c.message_id) for c in notify.notifications()] == [(800, "b")]
    assert notify.value("usage:t", "calls") == 900
    inserts = stream_inserts(notify)
    assert [image["message_id"]["S"] for image in inserts] == ["b"]


def stream_inserts(notify: NotifyTables) -> list[dict[str, Any]]:
    """Every INSERT record on the notifications table's stream (DynamoDB Local's), from the trim horizon."""
    client = boto3.client(
        "dynamodbstreams",
        endpoint_url=notify.tables.endpoint_url,
        region_name=notify.client.meta.region_name,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    arn = notify.client.describe_table(TableName=notify.notifications_table)["Table"]["LatestStreamArn"]
    images: list[dict[str, Any]] = []
    for shard in client.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = client.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
        position = iterator.get("ShardIterator")
        while position:
            page = client.get_records(ShardIterator=position)
            images += [r["dynamodb"]["NewImage"] for r in page["Records"] if r["eventName"] == "INSERT"]
            if not page["Records"]:
                break
            position = page.get("NextShardIterator")
    return images


def test_a_bound_and_a_threshold_on_one_counter(notify: NotifyTables) -> None:
    # GIVEN stock (start 100) with a floor of 0 and a falling level at 10
    pipeline, dlq = pipeline_of(notify, bounds=parse_counter_bounds("stock:*#stock>=0", None, STARTS))
    # WHEN -95 (crosses 10), -10 (below the floor: refused), -5 (to 0) come in one batch
    records = [record("a", "stock:1", stock=-95), record("b", "stock:1", stock=-10), record("c", "stock:1", stock=-5)]
    process(pipeline, records)
    # THEN the refused message is dead-lettered, the crossing recorded once by "a"
    assert [letter.record.record_id for letter in dlq.letters] == ["r-b"]
    assert notify.value("stock:1", "stock") == 0
    assert [(c.level, c.message_id, c.step_value) for c in notify.notifications()] == [(10, "a", 5)]


def test_a_thresholded_unit_too_large_for_one_transaction_never_takes_the_journal(notify: NotifyTables) -> None:
    # GIVEN transactions of at most 4 actions and a batch of 12 messages on one thresholded key (a journal-sized
    # unit without the threshold)
    pipeline, _ = pipeline_of(notify, max_actions=4)
    process(pipeline, [record(f"m{n}", "usage:t", calls=100) for n in range(12)])
    # THEN every crossing is recorded, by its message
    assert [(c.level, c.message_id) for c in notify.notifications()] == [(800, "m7"), (1000, "m9")]
    assert notify.value("usage:t", "calls") == 1200


# ------------------------------------------------------------------------------------ at DynamoDB's edges
def packed(message_id: str, events: list[dict[str, Any]]) -> SourceRecord:
    return SourceRecord(f"r-{message_id}", json.dumps({"id": message_id, "events": events}), NOW_MS)


@pytest.mark.parametrize(
    ("keys", "calls", "levels"),
    [(50, 900, [800]), (99, 1000, [800, 1000])],
    ids=["50-keys-one-level-each", "99-keys-two-levels-each"],
)
def test_one_message_crossing_more_levels_than_fit_one_transaction_counts_and_records_each_once(
    notify: NotifyTables, keys: int, calls: int, levels: list[int]
) -> None:
    # GIVEN one packed message whose keys each cross levels: its marker, one ADD per key and one notification per
    # crossing are more than the 100 actions of one transaction (50 keys: 1 + 50 + 50; 99 keys: 1 + 99 + 198)
    pipeline, dlq = pipeline_of(notify)
    message = packed("wide", [{"key": f"usage:{i}", "deltas": {"calls": calls}} for i in range(keys)])
    # WHEN it is processed, and delivered again
    process(pipeline, [message])
    again = process(pipeline, [message])
    # THEN it counts, once, and each crossing is recorded once, by the message
    assert dlq.letters == []
    assert again.figures["DuplicatesAlreadyApplied"] == 1
    assert all(notify.value(f"usage:{i}", "calls") == calls for i in range(keys))
    found = notify.notifications()
    assert sorted((c.key, c.level) for c in found) == sorted(
        (f"usage:{i}", level) for i in range(keys) for level in levels
    )
    assert {c.message_id for c in found} == {"wide"}
    assert len(stream_inserts(notify)) == keys * len(levels)


def test_a_kill_after_the_commit_of_a_message_whose_crossings_spill_records_each_once(
    notify: NotifyTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an invocation that dies right after the transaction committing a message of 60 crossings (the
    # crossings that did not fit it not written yet)
    pipeline, _ = pipeline_of(notify)
    message = packed("wide", [{"key": f"usage:{i}", "deltas": {"calls": 900}} for i in range(60)])
    real_write = DynamoDBCounterStore.write

    def dying(self: DynamoDBCounterStore, write: DirectWrite) -> None:
        real_write(self, write)
        if from_values_met(write):
            raise RuntimeError("the invocation died")

    monkeypatch.setattr(DynamoDBCounterStore, "write", dying)
    with pytest.raises(RuntimeError):
        pipeline.process([message], NOW_MS, lambda: 60_000)
    monkeypatch.setattr(DynamoDBCounterStore, "write", real_write)
    # WHEN the message is redelivered
    process(pipeline, [message], NOW_MS + 1)
    # THEN it counted once, and every crossing is recorded once
    assert all(notify.value(f"usage:{i}", "calls") == 900 for i in range(60))
    assert sorted(c.key for c in notify.notifications()) == sorted(f"usage:{i}" for i in range(60))
    assert len(stream_inserts(notify)) == 60


THIRTY_SIX_DIGITS = 123456789012345678901234567890123456


def test_a_36_digit_step_across_a_fractional_level_is_counted_and_announced(notify: NotifyTables) -> None:
    # GIVEN a rising level 0.125 and a falling level -0.125: a write's crossing condition compares the stored value
    # with the level minus the step (``0.125 - 123...456``: 39 significant digits, more than a Number holds)
    thresholds = parse_counter_thresholds("big:*#n>=0.125;big:*#n<=-0.125")
    pipeline, dlq = pipeline_of(notify, thresholds)
    # WHEN storable 36-digit steps come: up across 0.125, then down across -0.125
    process(pipeline, [record("up", "big:1", n=THIRTY_SIX_DIGITS)])
    process(pipeline, [record("down", "big:1", n=-2 * THIRTY_SIX_DIGITS)], NOW_MS + 1)
    # THEN both count exactly and each crossing is announced by its step
    assert dlq.letters == []
    assert notify.value("big:1", "n") == -THIRTY_SIX_DIGITS
    assert [(c.level, c.message_id) for c in notify.notifications()] == [
        (Decimal("0.125"), "up"),
        (Decimal("-0.125"), "down"),
    ]


def test_a_key_that_spells_another_items_label_is_another_item(notify: NotifyTables) -> None:
    # GIVEN a per-minute level 5 on key "a" and an all-time level 5 on the key literally named
    # "a@m#2100-01-01T00:00Z", which a log would print as a's minute item; a's minute at 4
    minute = "m#2100-01-01T00:00Z"
    spelled = f"a@{minute}"
    windows = parse_window_spec("minute")
    thresholds = parse_counter_thresholds(f"a#n@minute>=5;{spelled}#n>=5", windows=windows)
    pipeline, dlq = make_pipeline(
        make_store(notify), counter_defaults=STARTS, counter_thresholds=thresholds, windows=windows
    )
    minute_event = {"id": "", "key": "a", "deltas": {"n": 0}, "ts": NOW_MS}

    def of_a(message_id: str, n: int) -> SourceRecord:
        return SourceRecord(
            f"r-{message_id}", json.dumps({**minute_event, "id": message_id, "deltas": {"n": n}}), NOW_MS
        )

    process(pipeline, [of_a("first", 4)])
    # WHEN one batch takes a's minute from 4 to 7 (across 5) and the spelled key from 0 to 1 (across nothing)
    process(pipeline, [of_a("a-step", 3), record("spelled-step", spelled, n=1)], NOW_MS + 1)
    # THEN both count, and only a's minute crossing is announced
    assert dlq.letters == []
    assert notify.value(spelled, "n") == 1
    assert [(c.key, c.window, c.message_id) for c in notify.notifications()] == [("a", minute, "a-step")]


# ------------------------------------------------------------------------------ an operator's reset or correction
def reset(message_id: str, key: str, **values: int) -> SourceRecord:
    return SourceRecord(f"r-{message_id}", json.dumps({"id": message_id, "key": key, "reset": values}), NOW_MS)


def correction(message_id: str, key: str, **deltas: int) -> SourceRecord:
    body = {"id": message_id, "key": key, "deltas": deltas, "correction": True}
    return SourceRecord(f"r-{message_id}", json.dumps(body), NOW_MS)


def test_a_reset_across_a_level_is_announced_once_under_its_own_id(notify: NotifyTables) -> None:
    # GIVEN stock (start 100, falling level 10) sold down to 50
    pipeline, _ = pipeline_of(notify)
    process(pipeline, [record("s1", "stock:1", stock=-50)])
    # WHEN a stock count finds only 5 and an operator resets it to 5 (the batch delivered twice), then to 5 again
    # under another id (no move: no crossing), a restock to 25 (upwards: never announced), and a sale of 20
    process(pipeline, [reset("count-1", "stock:1", stock=5)], NOW_MS + 1)
    process(pipeline, [reset("count-1", "stock:1", stock=5)], NOW_MS + 1)
    process(pipeline, [reset("count-2", "stock:1", stock=5)], NOW_MS + 2)
    process(pipeline, [record("r1", "stock:1", stock=20), record("s2", "stock:1", stock=-20)], NOW_MS + 3)
    # THEN the reset's own crossing once, named by the reset's id, and the sale's crossing again under its own
    found = notify.notifications()
    assert named(found) == [
        ("stock:1", "stock", 10, "falling", "count-1", 5),
        ("stock:1", "stock", 10, "falling", "s2", 5),
    ]
    assert len({c.notification_id for c in found}) == 2
    assert notify.value("stock:1", "stock") == 5


def test_a_correction_across_a_level_is_announced_as_its_step(notify: NotifyTables) -> None:
    # GIVEN usage at 790 (levels 800 and 1000)
    pipeline, _ = pipeline_of(notify)
    process(pipeline, [record("a", "usage:t", calls=790)])
    # WHEN an operator corrects it by +250 (a missed import), the batch delivered twice
    process(pipeline, [correction("fix-1", "usage:t", calls=250)], NOW_MS + 1)
    process(pipeline, [correction("fix-1", "usage:t", calls=250)], NOW_MS + 1)
    # THEN both levels the correction's step crosses, once each, under its id
    assert named(notify.notifications()) == [
        ("usage:t", "calls", 800, "rising", "fix-1", 1040),
        ("usage:t", "calls", 1000, "rising", "fix-1", 1040),
    ]


def test_a_reset_neither_suppresses_nor_duplicates_a_later_crossing(notify: NotifyTables) -> None:
    # GIVEN usage with levels 800 and 1000, and one batch: +900 (crosses 800), a reset to 0 (back below 800: a
    # rising level is not announced downwards), +850 (crosses 800 again)
    pipeline, _ = pipeline_of(notify)
    process(
        pipeline,
        [record("a", "usage:t", calls=900), reset("r1", "usage:t", calls=0), record("b", "usage:t", calls=850)],
    )
    # WHEN a reset takes it to 900 (crosses 800 upwards, by the reset), and +200 follows (crosses 1000 only)
    process(pipeline, [reset("r2", "usage:t", calls=0), reset("r3", "usage:t", calls=900)], NOW_MS + 1)
    process(pipeline, [record("c", "usage:t", calls=200)], NOW_MS + 2)
    # THEN every crossing of the applied order once, each under the message that made it
    assert [(c.message_id, c.level, c.step_value) for c in notify.notifications()] == [
        ("a", 800, 900),
        ("b", 800, 850),
        ("r3", 800, 900),
        ("c", 1000, 1100),
    ]
    assert notify.value("usage:t", "calls") == 1100


def test_a_reset_of_a_bounded_and_thresholded_counter_is_applied_as_given_and_announced(notify: NotifyTables) -> None:
    # GIVEN stock (start 100) with a floor of 0 and a falling level at 10
    pipeline, dlq = pipeline_of(notify, bounds=parse_counter_bounds("stock:*#stock>=0", None, STARTS))
    # WHEN an operator corrects it by -95 (a correction is applied as given, as bounds do), then by -10 (below the
    # floor: applied all the same), and resets it to 50 (upwards: not announced) then to 3
    process(pipeline, [correction("c1", "stock:1", stock=-95)])
    process(pipeline, [correction("c2", "stock:1", stock=-10)], NOW_MS + 1)
    process(pipeline, [reset("r1", "stock:1", stock=50), reset("r2", "stock:1", stock=3)], NOW_MS + 2)
    # THEN nothing is dead-lettered, and each crossing of 10 is announced by the operator's message that made it
    assert dlq.letters == []
    assert [(c.level, c.message_id, c.step_value) for c in notify.notifications()] == [(10, "c1", 5), (10, "r2", 3)]
    assert notify.value("stock:1", "stock") == 3


# ------------------------------------------------------------------------------------ Hypothesis property
EXAMPLES = itertools.count()


@on_emulator()
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(min_value=-4, max_value=4).filter(bool)),
            st.tuples(st.just("reset"), st.integers(min_value=-1, max_value=7)),
        ),
        min_size=1,
        max_size=14,
    ),
    cuts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=14),
    repeats=st.lists(st.integers(min_value=0, max_value=13), max_size=4),
)
def test_the_recorded_crossings_are_those_of_the_applied_order(
    notify: NotifyTables, steps: list[tuple[str, int]], cuts: list[int], repeats: list[int]
) -> None:
    assert_crossings_of_the_applied_order(notify, steps, cuts, repeats)


def test_a_planner_that_records_no_resets_crossing_fails_the_property(
    notify: NotifyTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the write planner with the reset's crossing undone: a reset written as given, planned from no value read
    monkeypatch.setattr("tally.core.write_planner.reset_counters", lambda *_: {})
    # WHEN the property's check meets a reset from 3 to 0 (across the falling 2 and 0), THEN it fails
    with pytest.raises(AssertionError):
        assert_crossings_of_the_applied_order(notify, [("reset", 0)], [1], [])


def assert_crossings_of_the_applied_order(
    notify: NotifyTables, steps: list[tuple[str, int]], cuts: list[int], repeats: list[int]
) -> None:
    # GIVEN a counter starting at 3 with rising levels 4, 6 and falling levels 2, 0; messages (increments, and an
    # operator's resets to a value) cut into batches, some sent again later
    key = f"level:{next(EXAMPLES)}"
    thresholds = parse_counter_thresholds("level:*#v>=4,6;level:*#v<=2,0")
    defaults = parse_counter_defaults("level:*#v=start:3")
    pipeline, _ = pipeline_of(notify, thresholds, defaults, max_actions=4)
    sent = [(f"{key}-{n}", kind, amount) for n, (kind, amount) in enumerate(steps)]
    batches = sent_in_batches(sent, repeats, cuts)
    # WHEN every batch is processed in order
    for batch in batches:
        records = [
            reset(mid, key, v=amount) if kind == "reset" else record(mid, key, v=amount) for mid, kind, amount in batch
        ]
        process(pipeline, records)
    # THEN the notifications are exactly the crossings of the distinct messages applied one by one in order, a
    # reset's step going from the value before it to the reset's value
    applied: dict[str, int] = {}
    for batch in batches:
        for mid, _, amount in batch:
            applied.setdefault(mid, amount)
    resets = {mid for mid, kind, _ in sent if kind == "reset"}
    expected = expected_crossings(3, applied.items(), thresholds.thresholds(key)["v"], resets)
    found = [c for c in scan_notifications(notify.client, notify.notifications_table) if c.key == key]
    assert sorted((Decimal(c.level), str(c.direction), c.message_id) for c in found) == sorted(
        (Decimal(level), str(direction), mid) for level, direction, mid in expected
    )
    assert len({c.notification_id for c in found}) == len(found)
    assert all(isinstance(c.direction, Direction) for c in found)


# ----------------------------------------------------------------- no request DynamoDB refuses, at the edges
EDGE_THRESHOLDS = "edge:*#n>=0.125,800;edge:*#n<=-0.125;edge:*#n@minute>=800"
EDGE_MINUTE = "m#2100-01-01T00:00Z"
EDGE_KEYS = [str(n) for n in range(60)] + [f"0@{EDGE_MINUTE}", "0#shard1"]
"""Sixty keys (a packed message of them crosses more levels than one transaction holds), and keys that spell the
label of another item (key ``0``'s minute item; shard 1 of ``0``), each behind a prefix of its example's."""
EDGE_AMOUNTS = st.one_of(
    st.integers(-1000, 1000),
    st.sampled_from([THIRTY_SIX_DIGITS, -THIRTY_SIX_DIGITS, 10**37, -(10**37), 900]),
    st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False),
)
EDGE_MESSAGES = st.one_of(
    st.tuples(st.lists(st.sampled_from(EDGE_KEYS), min_size=1, max_size=1), EDGE_AMOUNTS),
    # a packed message whose 25 to 30 keys each cross three levels (0.125 and 800, all-time and per minute): more
    # notifications than fit its transaction beside its marker and ADDs
    st.tuples(st.lists(st.sampled_from(EDGE_KEYS[:60]), min_size=25, max_size=30, unique=True), st.just(900)),
)
_EXACT_JSON = msgspec.json.Encoder(decimal_format="number")


@on_emulator()
@given(batches=st.lists(st.lists(EDGE_MESSAGES, min_size=1, max_size=3), min_size=1, max_size=2))
def test_no_request_at_the_edges_is_one_dynamodb_refuses_and_every_message_is_settled(
    notify: NotifyTables, batches: list[list[tuple[list[str], Number]]]
) -> None:
    # GIVEN the production wiring with fractional and per-minute levels, its every request watched against
    # DynamoDB's published limits
    run = next(EXAMPLES)
    windows = parse_window_spec("minute")
    thresholds = parse_counter_thresholds(EDGE_THRESHOLDS, windows=windows)
    store = make_store(notify)
    limits = RequestLimits(store.client, [store.counters_table, store.markers_table, store.notifications_table])
    pipeline, dlq = make_pipeline(store, counter_defaults=STARTS, counter_thresholds=thresholds, windows=windows)
    sent: list[tuple[str, dict[str, Number]]] = []
    # WHEN batches of messages at the edges are processed: 36-digit steps across fractional levels, packed messages
    # crossing more levels than a transaction holds, keys spelling other items' labels
    for index, batch in enumerate(batches):
        records = []
        for position, (keys, amount) in enumerate(batch):
            message_id = f"edge-{run}-{index}-{position}"
            deltas = {f"edge:{run}:{key}": amount for key in keys}
            sent.append((message_id, deltas))
            events = [{"key": key, "deltas": {"n": amount}, "ts": NOW_MS} for key in deltas]
            body = _EXACT_JSON.encode({"id": message_id, "events": events}).decode()
            records.append(SourceRecord(f"r-{message_id}", body, NOW_MS))
        result = pipeline.process(records, NOW_MS + index, lambda: 60_000)
        # THEN every record is settled: counted or dead-lettered with a reason, none handed back
        assert result.failed_record_ids == ()
    # and no request broke one of DynamoDB's limits
    assert limits.violations == []
    refused = {letter.record.record_id.removeprefix("r-"): letter.rejection for letter in dlq.letters}
    assert {r.code for r in refused.values()} <= {RejectCode.NUMBER_OUT_OF_RANGE, RejectCode.COUNTER_OUT_OF_RANGE}
    # and each key counts exactly what its applied messages add, every crossing of theirs recorded once
    applied = [(mid, deltas) for mid, deltas in sent if mid not in refused]
    notifications = notify.notifications()
    for key in {key for _, deltas in sent for key in deltas}:
        steps = [(mid, deltas[key]) for mid, deltas in applied if key in deltas]
        total: Number = 0
        for _, amount in steps:
            total = add(total, amount)
        assert (notify.value(key, "n") or 0) == total
        expected = sorted(
            (window, Decimal(level), str(direction), mid)
            for window in (ALL_TIME, EDGE_MINUTE)
            for level, direction, mid in expected_crossings(
                0, steps, thresholds.thresholds(key, window_unit(window) or ALL_TIME).get("n", Levels())
            )
        )
        found = [c for c in notifications if c.key == key]
        assert sorted((c.window, Decimal(c.level), str(c.direction), c.message_id) for c in found) == expected
        assert len({c.notification_id for c in found}) == len(found)
