"""Windowed and sharded counters on DynamoDB Local: exactly once, series reads, shard sums."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.model import SourceRecord
from tally.core.sharding import parse_hot_keys
from tally.core.windows import HOUR_MS, parse_window_spec
from tally.reader.dynamodb import CounterReader
from tally.reader.store_view import read_counters, read_series
from tally_local.kit.faults import DynamoDBFaults
from tests.support.pipeline import make_pipeline, make_store

if TYPE_CHECKING:
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

DAY0 = 4_102_444_800_000  # 2100-01-01T00:00Z
NOW_MS = DAY0 + 30 * HOUR_MS
WINDOWS = parse_window_spec("hour,day", "hour=90,day=0")


def plenty() -> int:
    return 60_000


def hourly_workload(seed: int, messages: int, packed: bool) -> tuple[list[SourceRecord], dict[int, Decimal]]:
    """Events spread over 24 hours (some hours left empty), with re-sends; expected count per hour."""
    rng = random.Random(seed)
    hours = [h for h in range(24) if h % 5 != 3]  # gaps: hours 3, 8, 13, 18, 23 get nothing
    expected: dict[int, Decimal] = defaultdict(Decimal)
    bodies = []
    for number in range(messages):
        events = []
        for _ in range(rng.randint(2, 30) if packed else 1):
            hour = rng.choice(hours)
            ts = DAY0 + hour * HOUR_MS + rng.randrange(HOUR_MS)
            delta = rng.randint(1, 9)
            events.append(f'{{"key":"site","delta":{delta},"ts":{ts}}}')
            expected[hour] += delta
        if packed:
            bodies.append(f'{{"id":"w-{seed}-{number}","events":[{",".join(events)}]}}')
        else:
            bodies.append(events[0].replace("{", f'{{"id":"w-{seed}-{number}",', 1))
    bodies += [rng.choice(bodies) for _ in range(messages // 10)]  # producer re-sends
    records = [SourceRecord(f"r{seed}-{i}", body, NOW_MS) for i, body in enumerate(bodies)]
    return records, expected


@pytest.mark.parametrize("packed", [False, True], ids=["single", "packed-journal"])
def test_hourly_series_is_exact_under_faults_and_reads_gaps_as_zero(ddb_tables: DynamoDBTables, packed: bool) -> None:
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=WINDOWS)
    records, expected = hourly_workload(seed=21, messages=300, packed=packed)
    faults.lose_responses(2)
    faults.cancel("TransactionConflict", count=2)
    for start in range(0, len(records), 100):
        batch = records[start : start + 100]
        result = pipeline.process(batch, NOW_MS, plenty)
        pipeline.process([r for r in batch if r.record_id in set(result.failed_record_ids)], NOW_MS, plenty)
        pipeline.process(batch, NOW_MS, plenty)  # a whole-batch redelivery
    series = read_series(store, "site", WINDOWS.unit("hour"), DAY0, DAY0 + 23 * HOUR_MS)
    assert [start for start, _ in series] == [DAY0 + h * HOUR_MS for h in range(24)]
    assert [counters.get("count", Decimal(0)) for _, counters in series] == [expected[h] for h in range(24)]
    day = read_series(store, "site", WINDOWS.unit("day"), DAY0, DAY0)
    assert day == [(DAY0, {"count": sum(expected.values())})]
    assert read_counters(store, "site") == {"count": sum(expected.values())}


def test_open_hour_and_day_windows_are_attributes_of_the_keys_item(ddb_tables: DynamoDBTables) -> None:
    # GIVEN one event with hour and day windows on; WHEN it is counted (and its windows are not moved yet)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=WINDOWS, move_windows=False)
    pipeline.process([SourceRecord("r", f'{{"id":"x","key":"k","delta":1,"ts":{DAY0 + 5}}}', NOW_MS)], NOW_MS, plenty)
    # THEN the batch wrote one item, the key's, holding the all-time value and both open windows
    items = {item["sk"]["S"]: item for item in ddb_tables.client.scan(TableName=ddb_tables.counters_table)["Items"]}
    assert set(items) == {"all"}
    assert items["all"]["w#h#2100-01-01T00:00Z\x1fcount"] == {"N": "1"}
    assert items["all"]["w#d#2100-01-01\x1fcount"] == {"N": "1"}
    assert "expires_at" not in items["all"]
    # AND reads see the all-time value and each window
    assert read_counters(store, "k") == {"count": Decimal(1)}
    assert read_series(store, "k", WINDOWS.unit("hour"), DAY0, DAY0 + HOUR_MS) == [
        (DAY0, {"count": 1}),
        (DAY0 + HOUR_MS, {}),
    ]


def test_late_and_future_events(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    spec = parse_window_spec("hour", "hour=1")  # retention in days
    pipeline, dlq = make_pipeline(store, windows=spec)
    late_ts = NOW_MS - 2 * 86_400_000  # hour windows are kept one day: this one has expired
    future_ts = NOW_MS + 2 * HOUR_MS
    result = pipeline.process(
        [
            SourceRecord("late", f'{{"id":"late","key":"k","delta":1,"ts":{late_ts}}}', NOW_MS),
            SourceRecord("future", f'{{"id":"future","key":"k","delta":1,"ts":{future_ts}}}', NOW_MS),
        ],
        NOW_MS,
        plenty,
    )
    assert result.figures["LateEvents"] == 1
    assert dlq.codes() == {"future": "ts_in_future"}
    assert read_counters(store, "k") == {"count": Decimal(1)}
    assert read_series(store, "k", spec.unit("hour"), late_ts, late_ts) == [(late_ts - late_ts % HOUR_MS, {})]


def test_a_hot_key_spreads_over_shards_and_reads_sum_them_even_as_n_changes(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a hot key written with 8 shards, then 2, then 16 (its shard count changed twice), under
    # lost responses and transaction conflicts
    faults = DynamoDBFaults(ddb_tables.client)
    counts = Decimal(0)
    partitions: set[str] = set()
    for phase, shards in enumerate((8, 2, 16)):
        hot = parse_hot_keys(f"hot:*={shards}")
        store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
        pipeline, _ = make_pipeline(store, windows=WINDOWS, hot_keys=hot)
        faults.lose_responses(2)
        faults.cancel("TransactionConflict", count=2)
        for batch in range(12):
            bodies = [f'{{"id":"h{phase}-{batch}-{i}","key":"hot:page","delta":1,"ts":{DAY0}}}' for i in range(50)]
            records = [SourceRecord(f"r{phase}-{batch}-{i}", body, NOW_MS) for i, body in enumerate(bodies)]
            assert pipeline.process(records, NOW_MS, plenty).failed_record_ids == ()
            assert pipeline.process(records, NOW_MS, plenty).figures["MessagesApplied"] == 0  # redelivered: no-op
            counts += 50
        # THEN every read, whatever the current N, sums every shard ever written
        assert read_counters(store, "hot:page", hot) == {"count": counts}
        assert read_series(store, "hot:page", WINDOWS.unit("hour"), DAY0, DAY0, hot_keys=hot) == [
            (DAY0, {"count": counts})
        ]
        items = ddb_tables.client.scan(TableName=ddb_tables.counters_table)["Items"]
        partitions |= {item["pk"]["S"] for item in items if item["sk"]["S"] == "all"}
    assert len(partitions) > 4  # the writes really were spread over distinct partition keys


def test_one_add_per_shard_item_per_batch(ddb_tables: DynamoDBTables) -> None:
    adds: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        for action in json.loads(params["body"]).get("TransactItems", []):
            if "Update" in action and action["Update"]["TableName"] == ddb_tables.counters_table:
                key = action["Update"]["Key"]
                adds.append(key["pk"]["S"] + "|" + key["sk"]["S"])

    ddb_tables.client.meta.events.register("before-call.dynamodb.TransactWriteItems", count)
    hot = parse_hot_keys("hot=4")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, hot_keys=hot)
    events = ",".join('{"key":"hot","delta":1}' for _ in range(20))
    records = [SourceRecord(f"r{i}", f'{{"id":"p{i}","events":[{events}]}}', NOW_MS) for i in range(90)]
    assert pipeline.process(records, NOW_MS, plenty).failed_record_ids == ()
    assert len(adds) == len(set(adds)) == 1
    assert read_counters(store, "hot", hot) == {"count": Decimal(1800)}


def test_a_window_past_its_retention_reads_empty_even_while_it_waits_on_the_keys_item(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN an hour counted on the key's item, hours kept one day, and never moved off it
    spec = parse_window_spec("hour", "hour=1")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=spec)
    pipeline.process([SourceRecord("r", f'{{"id":"x","key":"k","delta":4,"ts":{DAY0}}}', DAY0)], DAY0, plenty)
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, windows=spec)
    # THEN it reads while kept, and as empty once its retention has passed (TTL would have deleted its item)
    assert reader.series("k", "hour", DAY0, DAY0, now_ms=DAY0 + HOUR_MS).windows[0].values == {"count": 4}
    expired = DAY0 + HOUR_MS + 86_400_000
    assert reader.series("k", "hour", DAY0, DAY0, now_ms=expired).windows[0].values == {}
    assert reader.get("k").values == {"count": 4}
