"""On DynamoDB Local: start values, default deltas and gauges, exactly once.

The sample events (``events/*-patterns.json``) go through the SQS and Kinesis sources and the production
pipeline; start values through direct transactions and the commit journal; gauges under redelivery, a
crash between the counters' commit and the gauge write, a lost gauge response, and a Hypothesis property
(the stored max/min/latest equals the one over the distinct messages under any duplication, order and
batching).
"""

from __future__ import annotations

import json
import random
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from hypothesis import given
from hypothesis import strategies as st

from tally.core.defaults import parse_counter_defaults
from tally.core.gauges import latest_order
from tally.core.model import SourceRecord
from tally.core.windows import HOUR_MS, parse_window_spec
from tally.reader import CounterReader
from tally.reader.store_view import read_series
from tally.store.expressions import gauge_expressions, gauge_placeholders, gauges_per_update
from tests.support.events import SAMPLES_SENT_MS, expected_samples, processed_twice
from tests.support.pipeline import make_pipeline, make_store
from tests.support.properties import on_emulator

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

SENT_MS = SAMPLES_SENT_MS
NOW_MS = SENT_MS + 1_000
EXPECTED = expected_samples("-patterns.json")
STOCK = parse_counter_defaults("stock:*#stock=start:100,delta:-1;views:*#count=delta:1")


def gauges_of(tables: DynamoDBTables, key: str) -> dict[str, dict[str, str]]:
    stored = CounterReader(tables.counters_table, client=tables.client).get(key).gauges
    return {kind: {name: str(value) for name, value in gauges.items()} for kind, gauges in stored.items()}


def counters_of(tables: DynamoDBTables, key: str) -> dict[str, str]:
    return {n: str(v) for n, v in CounterReader(tables.counters_table, client=tables.client).get(key).values.items()}


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_each_pattern_sample_counts_as_documented(ddb_tables: DynamoDBTables, event_file: str) -> None:
    # GIVEN a sample event of the patterns, read by its source, and the deployment's CounterDefaults
    spec = EXPECTED[event_file]
    defaults = parse_counter_defaults(spec["counter_defaults"])
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, counter_defaults=defaults)
    # WHEN it is processed twice (a redelivery of the whole batch)
    first, second = processed_twice(pipeline, event_file, spec, NOW_MS)
    # THEN nothing fails; counters start from their start values, gauges and dead letters are as documented
    assert first.failed_record_ids == second.failed_record_ids == ()
    assert {key: counters_of(ddb_tables, key) for key in spec["counters"]} == spec["counters"]
    assert {key: gauges_of(ddb_tables, key) for key in spec["gauges"]} == spec["gauges"]
    assert sorted(str(letter.rejection.code) for letter in dlq.letters) == sorted(spec["dead_letters"] * 2)


def stock_records(count: int, first: int = 0, *, packed_keys: int = 0) -> list[SourceRecord]:
    """``count`` single stock sales without a delta, and one packed message over ``packed_keys`` keys."""
    bodies = [
        json.dumps({"id": f"sale-{n}", "key": "stock:sku-1", "ts": NOW_MS - 5_000}) for n in range(first, first + count)
    ]
    if packed_keys:
        events = [{"key": f"stock:sku-p{n}", "ts": NOW_MS - 5_000} for n in range(packed_keys)]
        events += [{"key": "stock:sku-p0", "deltas": {"stock": -4}}]
        bodies.append(json.dumps({"id": "pack-1", "events": events}))
    return [SourceRecord(f"r-{n}", body, NOW_MS) for n, body in enumerate(bodies)]


def test_start_values_count_once_through_direct_transactions_and_the_journal(ddb_tables: DynamoDBTables) -> None:
    # GIVEN stock declared to start at 100 and fall by 1 per event, an hourly window, and a transaction size
    # that sends the packed message (30 keys) through the commit journal, in several chunks
    windows = parse_window_spec("hour", "hour=90")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, windows=windows, max_actions=12, counter_defaults=STOCK)
    records = stock_records(7, packed_keys=30)
    # WHEN the batch is processed, then redelivered in another order
    first = pipeline.process(records, NOW_MS, lambda: 60_000)
    second = pipeline.process(list(reversed(records)), NOW_MS, lambda: 60_000)
    # THEN each counter started once from 100, whatever path wrote it; the windows count from zero
    assert first.failed_record_ids == second.failed_record_ids == ()
    assert first.figures["JournalBatches"] >= 1
    assert second.figures["DuplicatesAlreadyApplied"] == len(records)
    assert not dlq.letters
    assert counters_of(ddb_tables, "stock:sku-1") == {"stock": "93"}
    assert counters_of(ddb_tables, "stock:sku-p0") == {"stock": "95"}
    assert {counters_of(ddb_tables, f"stock:sku-p{n}")["stock"] for n in range(1, 30)} == {"99"}
    hour = read_series(store, "stock:sku-1", windows.units[0], NOW_MS - HOUR_MS, NOW_MS)
    assert [dict(values) for _, values in hour if values] == [{"stock": Decimal(-7)}]


def test_a_stored_counter_is_never_reset_to_its_start(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a counter counted before its start value was declared (ADD from zero)
    plain = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    make_pipeline(plain)[0].process(stock_records(2), NOW_MS, lambda: 60_000)  # missing_delta: no default yet
    body = json.dumps({"id": "early", "key": "stock:sku-1", "deltas": {"stock": 5}})
    make_pipeline(plain)[0].process([SourceRecord("r", body, NOW_MS)], NOW_MS, lambda: 60_000)
    # WHEN the start value is declared and more sales come
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    make_pipeline(store, counter_defaults=STOCK)[0].process(stock_records(3, 10), NOW_MS, lambda: 60_000)
    # THEN the start applies only to a counter that does not exist yet (if_not_exists)
    assert counters_of(ddb_tables, "stock:sku-1") == {"stock": "2"}


class _Killed(BaseException):
    """The invocation dies (a timeout, an out-of-memory kill): nothing after it runs."""


@pytest.fixture
def killed_gauge_write(ddb_tables: DynamoDBTables) -> Iterator[list[int]]:
    """While the list holds a positive number, that many ``UpdateItem`` calls die before being sent."""
    remaining = [0]

    def before_update(**_: Any) -> None:
        if remaining[0] > 0:
            remaining[0] -= 1
            raise _Killed

    events = ddb_tables.client.meta.events
    events.register("before-call.dynamodb.UpdateItem", before_update)
    yield remaining
    events.unregister("before-call.dynamodb.UpdateItem", before_update)


def gauge_records(*readings: tuple[str, int, str, int]) -> list[SourceRecord]:
    """(message id, sales, gauge json, ts offset) -> one record each, on key ``shop:1``."""
    records = []
    for mid, sales, gauges, offset in readings:
        body = {
            "id": mid,
            "key": "shop:1",
            "deltas": {"sales": sales},
            "ts": NOW_MS - offset,
            "gauges": json.loads(gauges),
        }
        records.append(SourceRecord(f"r-{mid}", json.dumps(body), NOW_MS))
    return records


def test_a_crash_between_the_commit_and_the_gauge_write_is_repaired_by_the_redelivery(
    ddb_tables: DynamoDBTables, killed_gauge_write: list[int]
) -> None:
    # GIVEN messages with counters and gauges, and an invocation that dies right after the counters' commit
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    records = gauge_records(
        ("p1", 1, '{"peak": {"max": 7}, "last": {"latest": "a"}}', 3_000),
        ("p2", 2, '{"peak": {"max": 9}, "last": {"latest": "b"}}', 2_000),
    )
    killed_gauge_write[0] = 1
    with pytest.raises(_Killed):
        pipeline.process(records, NOW_MS, lambda: 60_000)
    assert counters_of(ddb_tables, "shop:1") == {"sales": "3"}  # committed
    assert gauges_of(ddb_tables, "shop:1") == {}  # never written
    # WHEN the source redelivers the batch (the whole batch failed)
    again = make_pipeline(store)[0].process(records, NOW_MS, lambda: 60_000)
    # THEN the markers drop the counters, and the gauges are written all the same
    assert again.failed_record_ids == ()
    assert again.figures["DuplicatesAlreadyApplied"] == 2
    assert counters_of(ddb_tables, "shop:1") == {"sales": "3"}
    assert gauges_of(ddb_tables, "shop:1") == {"max": {"peak": "9"}, "latest": {"last": "b"}}


@pytest.mark.parametrize(("losses", "failed"), [(1, ()), (1_000, ("r-q1",))])
def test_a_lost_gauge_response_is_retried_then_left_to_redelivery(
    ddb_tables: DynamoDBTables, losses: int, failed: tuple[str, ...]
) -> None:
    # GIVEN gauge writes whose answers are lost (each committed; the caller cannot know), once or every time
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    lost = [losses]

    def after_update(**_: Any) -> None:
        if lost[0]:
            lost[0] -= 1
            raise ReadTimeoutError(endpoint_url="dynamodb-local")

    ddb_tables.client.meta.events.register("after-call.dynamodb.UpdateItem", after_update)
    try:
        records = gauge_records(("q1", 1, '{"peak": {"max": 4}}', 1_000))
        records += [SourceRecord("r-plain", json.dumps({"id": "q2", "key": "other", "delta": 1}), NOW_MS)]
        first = pipeline.process(records, NOW_MS, lambda: 60_000)
    finally:
        ddb_tables.client.meta.events.unregister("after-call.dynamodb.UpdateItem", after_update)
    # THEN a loss the retries within the invocation outlast fails nothing; one they do not outlast fails only
    # the record with the gauge, and its redelivery settles it, counted once
    assert first.failed_record_ids == failed
    second = pipeline.process(records[:1], NOW_MS, lambda: 60_000)
    assert second.failed_record_ids == ()
    assert counters_of(ddb_tables, "shop:1") == {"sales": "1"}
    assert gauges_of(ddb_tables, "shop:1") == {"max": {"peak": "4"}}


def test_a_reading_below_the_stored_one_never_cancels_the_counters(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a stored peak of 10 and a stored latest reading from a later event
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    pipeline.process(
        gauge_records(("s1", 1, '{"peak": {"max": 10}, "last": {"latest": "new"}}', 0)), NOW_MS, lambda: 60_000
    )
    # WHEN a message with lower and older readings arrives (with its counters, and a new low)
    batch = gauge_records(("s2", 5, '{"peak": {"max": 3}, "last": {"latest": "old"}, "low": {"min": 2}}', 9_000))
    result = pipeline.process(batch, NOW_MS, lambda: 60_000)
    # THEN its counters count; each stored reading keeps the better one; the new gauge is written
    assert result.failed_record_ids == ()
    assert result.figures["GaugeWrites"] == 1 + 3  # the combined write failed its condition; then each gauge alone
    assert counters_of(ddb_tables, "shop:1") == {"sales": "6"}
    assert gauges_of(ddb_tables, "shop:1") == {"max": {"peak": "10"}, "latest": {"last": "new"}, "min": {"low": "2"}}


# ----------------------------------------------------------------------------- the stored property
reading_lists = st.lists(
    st.tuples(
        st.integers(0, 7),  # message number
        st.sampled_from(["g:a", "g:b"]),
        st.sampled_from(["max", "min", "latest"]),
        st.one_of(st.integers(-50, 50), st.decimals(-5, 5, places=2)),
        st.integers(0, 3),  # ts offset: ties are frequent
    ),
    min_size=1,
    max_size=14,
)


@on_emulator()
@given(reading_lists, st.integers(0, 2**32), st.integers(1, 3))
def test_stored_gauges_equal_the_distinct_messages_readings(
    ddb_tables: DynamoDBTables, spec: list[tuple[int, str, str, Any, int]], seed: int, batches: int
) -> None:
    # GIVEN messages of readings (and a counter each), each delivered 1 to 3 times, shuffled, in batches
    rng = random.Random(seed)
    run = uuid.uuid4().hex  # examples share the tables: each gets its own keys and ids (replays too)
    events: dict[int, list[dict[str, Any]]] = {}
    for number, key, kind, value, ts in spec:
        reading = value if isinstance(value, int) else float(value)  # JSON literal; the decoder reads it exactly
        events.setdefault(number, []).append(
            {"key": f"{key}:{run}", "ts": NOW_MS - 10_000 + ts, "delta": 1, "gauges": {kind: {kind: reading}}}
        )
    bodies = {number: json.dumps({"id": f"m{number}-{run}", "events": evs}) for number, evs in events.items()}
    deliveries = [body for body in bodies.values() for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    # WHEN every batch is processed
    for start in range(batches):
        records = [SourceRecord(f"r{start}-{i}", body, NOW_MS) for i, body in enumerate(deliveries[start::batches])]
        assert pipeline.process(records, NOW_MS, lambda: 60_000).failed_record_ids == ()
    assert not dlq.letters
    # THEN the stored readings are those of the distinct messages, and each counter counted each event once
    for key in ("g:a", "g:b"):
        want: dict[str, dict[str, str]] = {}
        for kind in ("max", "min", "latest"):
            values = [
                (NOW_MS - 10_000 + ts, f"m{number}-{run}", Decimal(str(value)))
                for number, k, kd, value, ts in spec
                if k == key and kd == kind
            ]
            if not values:
                continue
            if kind == "max":
                best = max(v for *_, v in values)
            elif kind == "min":
                best = min(v for *_, v in values)
            else:
                best = max(values, key=lambda t: latest_order(t[0], t[1], _canonical(t[2])))[2]
            want[kind] = {kind: str(_canonical(best))}
        assert {
            k: {n: str(_canonical(Decimal(v))) for n, v in g.items()}
            for k, g in gauges_of(ddb_tables, f"{key}:{run}").items()
        } == want
        events_on_key = sum(1 for _, k, *_ in spec if k == key)
        if events_on_key:
            assert counters_of(ddb_tables, f"{key}:{run}") == {"count": str(events_on_key)}


def _canonical(value: Decimal) -> int | Decimal:
    """A reading as the decoder gives it: an int for an integral literal, else the Decimal without trailing zeros."""
    if value == value.to_integral_value():
        return int(value)
    return value.normalize()


def test_a_later_chunk_whose_start_plus_delta_leaves_the_number_range_is_refused_before_the_commit(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN a counter declared to start near DynamoDB's largest Number, and a packed message whose journal
    # batch spans several chunks, the key that would overflow in a later chunk (docs/journal.md)
    defaults = parse_counter_defaults("big:*#n=start:9E+125")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, max_actions=12, counter_defaults=defaults)
    events = [{"key": f"big:k{n}", "deltas": {"m": 1}} for n in range(25)]  # m has no start value
    events.append({"key": "big:last", "deltas": {"n": 2e125}})
    culprit = SourceRecord("r-big", json.dumps({"id": "big-1", "events": events}), NOW_MS)
    innocent = SourceRecord("r-ok", json.dumps({"id": "ok-1", "key": "other", "delta": 1}), NOW_MS)
    # WHEN the batch is processed
    result = pipeline.process([culprit, innocent], NOW_MS, lambda: 60_000)
    # THEN no committed chunk is refused (nothing counted in part): the culprit is dead-lettered whole
    assert result.figures["RefusedChunks"] == 0
    assert result.failed_record_ids == ()
    assert [str(letter.rejection.code) for letter in dlq.letters] == ["counter_out_of_range"]
    assert counters_of(ddb_tables, "big:k0") == {}
    assert counters_of(ddb_tables, "other") == {"count": "1"}


def test_more_gauges_on_a_key_than_one_write_holds_are_all_written(ddb_tables: DynamoDBTables) -> None:
    # GIVEN one event with 100 latest gauges (the most an event may carry): more than one conditional
    # write holds (300 operators per expression: gauges_per_update), so the key's write is split
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    readings = {f"g{n:03d}": {"latest": f"v{n}"} for n in range(100)}
    body = json.dumps({"id": "many", "key": "wide", "ts": NOW_MS - 1_000, "gauges": readings})
    # WHEN it is processed, then again
    first = pipeline.process([SourceRecord("r", body, NOW_MS)], NOW_MS, lambda: 60_000)
    second = pipeline.process([SourceRecord("r", body, NOW_MS)], NOW_MS, lambda: 60_000)
    # THEN every gauge is stored, in two writes the first time
    assert first.failed_record_ids == second.failed_record_ids == ()
    assert first.figures["GaugeWrites"] == 2
    assert gauges_of(ddb_tables, "wide") == {"latest": {name: reading["latest"] for name, reading in readings.items()}}


def test_gauges_per_update_is_the_most_one_conditional_write_may_hold(ddb_tables: DynamoDBTables) -> None:
    # GIVEN conditional writes of n latest gauges, built as the store builds them
    def write(count: int) -> None:
        update, condition = gauge_expressions(["latest"] * count)
        names, values = {}, {}
        for index in range(count):
            name, value, order_name, order_value = gauge_placeholders(index)
            names[name], names[order_name] = f"latest#{index}", f"latest_order#{index}"
            values[value], values[order_value] = {"S": "x"}, {"B": b"\x01"}
        ddb_tables.client.update_item(
            TableName=ddb_tables.counters_table,
            Key={"pk": {"S": f"probe-{count}"}, "sk": {"S": "all"}},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    # THEN gauges_per_update() of them are accepted, and one more is refused (300 operators per expression)
    write(gauges_per_update())
    with pytest.raises(ClientError, match="too many operators"):
        write(gauges_per_update() + 1)
