"""On DynamoDB Local: views, counted in the same commit as their key, exactly once, read without a scan.

What it proves: a batch of events with dimensions writes one item per view value (pre-aggregated), read back by
``CounterReader.group`` per window and all-time and equal to the exact sums; a redelivered batch counts nothing
twice; a packed message whose view items overflow a transaction goes through the journal, still exactly once, and
a batch killed after its commit is finished from its pages (view items grouped there) by the next delivery;
ended windows move off view items (by a later batch and by ``tally windows close``) and reads stay exact across
the move; every pattern applies to views by the same declarations: a bound on a view refuses the message whole,
a hot view spreads over shards and reads sum them, a start value starts a view's counter, a reset sets one view
item, a per-day threshold on a view is announced once from both parts of a moved window; and a bad ``dims`` is
dead-lettered with its code.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.bounds import parse_counter_bounds
from tally.core.defaults import parse_counter_defaults
from tally.core.items import ItemKey, item_parts, view_item_key, view_parts
from tally.core.model import SourceRecord
from tally.core.sharding import parse_hot_keys
from tally.core.thresholds import parse_counter_thresholds
from tally.core.views import parse_counter_views
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_spec
from tally.reader import CounterReader
from tally.store.pages import decode_page
from tally.store.requests import scan_all_time_items
from tally.store.schema import counter_item_of
from tally.store.windows import DynamoDBWindowMover
from tests.integration.test_thresholds import NotifyTables, notify  # noqa: F401 (a fixture)
from tests.integration.test_thresholds import make_store as threshold_store
from tests.support.pipeline import make_pipeline, make_store, plenty

if TYPE_CHECKING:
    from tally.pipeline import BatchPipeline, BatchResult
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

VIEWS = parse_counter_views("api*=customer,route,customer+route")
DAY0 = 4_102_444_800_000  # 2100-01-01T00:00Z
WINDOWS = parse_window_spec("hour,day")


def records(events: list[dict[str, Any]], prefix: str = "m", received_ms: int = DAY0) -> list[SourceRecord]:
    return [
        SourceRecord(f"{prefix}-{n}", json.dumps({"id": f"{prefix}-{n}", **event}), received_ms)
        for n, event in enumerate(events)
    ]


def calls(customer: str, route: str, n: int = 1, ts: int = DAY0 + 60_000) -> dict[str, Any]:
    return {"key": "api", "deltas": {"calls": n}, "ts": ts, "dims": {"customer": customer, "route": route}}


def run(pipeline: BatchPipeline, batch: list[SourceRecord], now_ms: int = DAY0 + 120_000) -> BatchResult:
    result = pipeline.process(batch, now_ms, plenty)
    assert result.failed_record_ids == ()
    return result


def grouped(
    reader: CounterReader, by: str, window: str | None = None, at_ms: int = DAY0 + 60_000
) -> dict[str, Decimal]:
    group = reader.group("api", by, window, at_ms)
    return {",".join(row.dims.values()): row.value("calls") for row in group.rows}


def test_a_batch_counts_each_view_value_once_and_reads_back_without_a_scan(ddb_tables: DynamoDBTables) -> None:
    # GIVEN 200 events over 5 customers and 3 routes, sent in one batch, and the same batch redelivered
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, windows=WINDOWS, views=VIEWS)
    rng = random.Random(7)
    events = [calls(f"c{rng.randrange(5)}", f"/r{rng.randrange(3)}", rng.randrange(1, 4)) for _ in range(200)]
    batch = records(events)
    scans: list[str] = []
    ddb_tables.client.meta.events.register("before-call.dynamodb.Scan", lambda **_: scans.append("scan"))
    run(pipeline, batch)
    run(pipeline, batch)  # a redelivery: every marker is there, nothing counts twice
    assert dlq.letters == []
    # THEN every view value holds the exact sum, all-time, in its hour and in its day; nothing scanned
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS, windows=WINDOWS)
    expected: dict[str, dict[str, Decimal]] = {"customer": {}, "route": {}, "customer+route": {}}
    for event in events:
        dims = event["dims"]
        for view, label in (
            ("customer", dims["customer"]),
            ("route", dims["route"]),
            ("customer+route", f"{dims['customer']},{dims['route']}"),
        ):
            expected[view][label] = expected[view].get(label, Decimal(0)) + event["deltas"]["calls"]
    for view, sums in expected.items():
        assert grouped(reader, view) == sums
        assert grouped(reader, view, "hour") == sums
        assert grouped(reader, view, "day") == sums
    assert reader.get("api").value("calls") == sum(e["deltas"]["calls"] for e in events)
    assert reader.values("api", "customer", "day", DAY0) == sorted({e["dims"]["customer"] for e in events})
    top = reader.group("api", "customer", "day", DAY0).top(2, "calls")
    assert [row.value("calls") for row in top] == sorted(expected["customer"].values(), reverse=True)[:2]
    assert scans == []


def test_a_packed_message_too_large_for_a_transaction_goes_through_the_journal(ddb_tables: DynamoDBTables) -> None:
    # GIVEN one packed message of 40 events, each of another customer and route: 1 + 40 + 40 + 40 items
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, views=VIEWS)
    events = [calls(f"c{n}", f"/r{n}") for n in range(40)]
    batch = [SourceRecord("p", json.dumps({"id": "p", "events": events}), DAY0)]
    # WHEN it is processed, and again
    first = run(pipeline, batch)
    run(pipeline, batch)
    # THEN it went through the journal, and every item counts it once
    assert first.figures.get("JournalBatches") == 1
    assert dlq.letters == []
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS)
    assert grouped(reader, "customer") == {f"c{n}": 1 for n in range(40)}
    assert grouped(reader, "customer+route") == {f"c{n},/r{n}": 1 for n in range(40)}
    assert reader.get("api").value("calls") == 40


class Killed(BaseException):
    """The container dies: nothing after this point of the invocation happens."""


def test_a_view_batch_killed_after_its_commit_is_finished_from_its_pages(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a packed message of 60 events of 60 customers over 7 routes, hour and day windows: 1 + 60 + 7 + 60
    # items, a journal batch of two chunks whose second is applied from its page by whoever finishes the batch
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, views=VIEWS, windows=WINDOWS)
    events = [calls(f"c{n}", f"/r{n % 7}", n + 1) for n in range(60)]
    batch = [SourceRecord("p", json.dumps({"id": "p", "events": events}), DAY0)]
    pages: list[dict[ItemKey, dict[str, Decimal]]] = []

    def kill_before_the_second_chunk(params: dict[str, Any], **_: Any) -> None:
        for action in params.get("TransactItems", []):
            if action.get("Put", {}).get("Item", {}).get("id", {}).get("S", "").endswith("#a1"):
                raise Killed

    def keep_pages(params: dict[str, Any], **_: Any) -> None:
        for requests in params["RequestItems"].values():
            pages.extend(decode_page(request["PutRequest"]["Item"]["data"]["B"]) for request in requests)

    events_ = ddb_tables.client.meta.events
    events_.register(
        "before-parameter-build.dynamodb.TransactWriteItems", kill_before_the_second_chunk, unique_id="kill"
    )
    events_.register("before-parameter-build.dynamodb.BatchWriteItem", keep_pages, unique_id="pages")
    # WHEN the container dies after the commit, before the second chunk
    with pytest.raises(Killed):
        pipeline.process(batch, DAY0 + 120_000, plenty)
    events_.unregister("before-parameter-build.dynamodb.TransactWriteItems", unique_id="kill")
    events_.unregister("before-parameter-build.dynamodb.BatchWriteItem", unique_id="pages")
    # its pages held view items (each decoded back to its item), and a new container gets the message again
    assert any(view_parts(item_parts(item).key) is not None for page in pages for item in page)
    again, dlq = make_pipeline(store, views=VIEWS, windows=WINDOWS)
    run(again, batch)
    # THEN the batch is finished from its pages: every view value exact, all-time and in its hour, counted once
    assert dlq.letters == []
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS, windows=WINDOWS)
    by_route: dict[str, Decimal] = {}
    for n in range(60):
        by_route[f"/r{n % 7}"] = by_route.get(f"/r{n % 7}", Decimal(0)) + n + 1
    for window in (None, "hour"):
        assert grouped(reader, "customer", window) == {f"c{n}": n + 1 for n in range(60)}
        assert grouped(reader, "route", window) == by_route
        assert grouped(reader, "customer+route", window) == {f"c{n},/r{n % 7}": n + 1 for n in range(60)}
    assert reader.get("api").value("calls") == sum(range(1, 61))


def test_ended_windows_move_off_view_items_and_reads_stay_exact(ddb_tables: DynamoDBTables) -> None:
    # GIVEN events in hour 0 of day 0, then a batch a day later that moves ended windows off the items it writes
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=WINDOWS, views=VIEWS)
    run(pipeline, records([calls("a", "/x", 2), calls("b", "/x", 3)]))
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS, windows=WINDOWS)
    later = DAY0 + DAY_MS + HOUR_MS
    run(pipeline, records([calls("a", "/x", 5, ts=later)], "late", later), now_ms=later)
    # THEN a's day-0 windows moved to window items (its all-time item was written again), b's still ride on
    # its item; both read exactly, per hour and per day, and day 1 holds only the later event
    assert grouped(reader, "customer", "day") == {"a": 2, "b": 3}
    assert grouped(reader, "customer", "hour") == {"a": 2, "b": 3}
    assert grouped(reader, "customer", "day", later) == {"a": 5}
    assert grouped(reader, "customer") == {"a": 7, "b": 3}
    moved_a = ddb_tables.client.get_item(
        TableName=ddb_tables.counters_table,
        Key={"pk": {"S": "api\x1fv\x1fcustomer"}, "sk": {"S": "d#2100-01-01\x1fa"}},
        ConsistentRead=True,
    )
    assert moved_a["Item"]["c#calls"] == {"N": "2"}
    # AND tally windows close moves the rest (b's), a second run finds nothing left
    mover = DynamoDBWindowMover(ddb_tables.client, ddb_tables.counters_table, WINDOWS)
    moved = mover.close_all(later, lambda call: call())
    assert moved.moved_items >= 2  # b's customer, route and customer+route items
    assert mover.close_all(later, lambda call: call()).moved_items == 0
    assert grouped(reader, "customer", "day") == {"a": 2, "b": 3}
    assert grouped(reader, "route", "hour") == {"/x": 5}


def test_a_bound_on_a_view_refuses_the_message_whole(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a quota of 5 calls per customer across its routes
    bounds = parse_counter_bounds("api[customer]#calls<=5", views=VIEWS)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, counter_bounds=bounds, views=VIEWS)
    # WHEN acme spends 4 on /x, then 2 on /y (over its quota), and globex 2
    run(pipeline, records([calls("acme", "/x", 4)], "a"))
    run(pipeline, records([calls("acme", "/y", 2), calls("globex", "/y", 2)], "b"))
    # THEN the over-quota message is dead-lettered whole: neither its key, nor any of its views, moved
    assert dlq.codes() == {"b-0": "above_ceiling"}
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS)
    assert grouped(reader, "customer") == {"acme": 4, "globex": 2}
    assert grouped(reader, "route") == {"/x": 4, "/y": 2}
    assert reader.get("api").value("calls") == 6


def test_a_hot_view_spreads_over_shards_and_reads_sum_them(ddb_tables: DynamoDBTables) -> None:
    hot = parse_hot_keys("api[customer]=4", VIEWS)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, hot_keys=hot, views=VIEWS, rng=random.Random(3))
    for n in range(8):
        run(pipeline, records([calls("acme", "/x")], f"b{n}"))
    partitions = {
        item["pk"]["S"]
        for item in ddb_tables.client.scan(TableName=ddb_tables.counters_table, ConsistentRead=True)["Items"]
        if item["pk"]["S"].startswith("api\x1fv\x1fcustomer")
    }
    assert len(partitions) > 1  # more than one shard of the view written
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS, hot_keys=hot)
    assert grouped(reader, "customer") == {"acme": 8}
    assert grouped(reader, "route") == {"/x": 8}


def test_a_start_value_and_a_reset_apply_to_one_view_item(ddb_tables: DynamoDBTables) -> None:
    defaults = parse_counter_defaults("api[customer]#credits=start:100", views=VIEWS)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, counter_defaults=defaults, views=VIEWS)
    spend = {"key": "api", "deltas": {"credits": -3}, "dims": {"customer": "acme", "route": "/x"}}
    run(pipeline, records([spend], "s"))
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS)
    assert reader.group("api", "customer").rows[0].value("credits") == 97  # started at 100
    assert reader.group("api", "route").rows[0].value("credits") == -3  # no start declared for routes
    reset = {"key": "api", "reset": {"credits": 50}, "dims": {"customer": "acme"}}
    run(pipeline, records([reset], "r"))
    assert dlq.letters == []
    assert reader.group("api", "customer").rows[0].value("credits") == 50
    assert reader.get("api").value("credits") == -3  # the key's own item untouched by the view's reset
    stored = ddb_tables.client.get_item(
        TableName=ddb_tables.counters_table,
        Key={"pk": {"S": "api\x1fv\x1fcustomer"}, "sk": {"S": "all\x1facme"}},
        ConsistentRead=True,
    )["Item"]
    assert stored["reset_id#credits"] == {"S": "r-0"}
    assert view_item_key("customer", "api", ("acme",)).startswith("\x1f")


def test_bad_dims_are_dead_lettered_with_their_code(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, views=VIEWS)
    run(
        pipeline,
        records(
            [
                {"key": "api", "delta": 1},
                {"key": "api", "delta": 1, "dims": {"customer": "a"}},
                {"key": "api", "delta": 1, "dims": {"customer": "a", "route": "/", "plan": "pro"}},
                {"key": "page", "delta": 1, "dims": {"customer": "a"}},
                calls("a", "/"),
            ]
        ),
    )
    assert dlq.codes() == {
        "m-0": "missing_dimension",
        "m-1": "missing_dimension",
        "m-2": "unknown_dimension",
        "m-3": "unknown_dimension",
    }
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS)
    assert grouped(reader, "customer") == {"a": 1}


def test_a_view_threshold_per_day_is_announced_once_from_both_parts_of_a_moved_window(
    notify: NotifyTables,  # noqa: F811
) -> None:
    # GIVEN 80% of a customer's daily quota of 10 announced (api[customer]#calls@day>=8)
    thresholds = parse_counter_thresholds("api[customer]#calls@day>=8", windows=WINDOWS, views=VIEWS)
    store = threshold_store(notify)
    pipeline, _ = make_pipeline(store, windows=WINDOWS, counter_thresholds=thresholds, views=VIEWS)
    # WHEN acme makes 5 calls on day 0, a batch on day 1 moves day 0 off acme's item, then a late event of day 0
    run(pipeline, records([calls("acme", "/x", 5)], "a"))
    later = DAY0 + DAY_MS + HOUR_MS
    run(pipeline, records([calls("acme", "/y", 1, ts=later)], "b", later), now_ms=later)
    run(pipeline, records([calls("acme", "/x", 4)], "c", later), now_ms=later)  # day 0: 5 + 4 = 9 >= 8
    run(pipeline, records([calls("acme", "/x", 4)], "d", later), now_ms=later)  # 13: no second crossing
    # THEN one crossing, of day 0, by the late message, named as people write the view's item
    assert [(c.key, c.window, c.message_id, c.step_value) for c in notify.notifications()] == [
        ("api[customer=acme]", "d#2100-01-01", "c-0", Decimal(9))
    ]


VIEW_VALUES = (("customer", ("acme",)), ("route", ("/x",)), ("customer+route", ("acme", "/x")))


def test_closing_windows_scans_view_items_and_passes_distinct_members_by(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a view item and a key's all-time distinct member (its sort key begins "all\x1f" too), both yesterday's
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=WINDOWS, views=VIEWS)
    member = {"key": "page", "delta": 1, "ts": DAY0 + 60_000, "distinct": {"viewers": "u1"}}
    run(pipeline, records([calls("acme", "/x", 2), member]))
    # WHEN every ended window is closed a day later (a Scan of the all-time items, the views' included)
    later = DAY0 + DAY_MS + HOUR_MS
    moved = DynamoDBWindowMover(ddb_tables.client, ddb_tables.counters_table, WINDOWS).close_all(later)
    # THEN the key's and its three views' items are moved, the member item left alone, and reads unchanged
    assert moved.moved_items == 1 + 3 + 1  # api, its views' acme items, page
    scanned = scan_all_time_items(ddb_tables.client, ddb_tables.counters_table, views=True)
    assert sorted(counter_item_of(item).key for item in scanned) == sorted(
        ["api", "page", *(view_item_key(v, "api", values) for v, values in VIEW_VALUES)]
    )
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, views=VIEWS, windows=WINDOWS)
    assert grouped(reader, "customer", "day") == {"acme": 2}
    assert reader.get("page").distinct == {"viewers": 1}


def test_the_longest_key_view_and_values_fit_dynamodbs_key_limits(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a view of three 64-character dimensions, hot (a shard number in its partition key), of the longest key
    # its name leaves room for, and values of 256 bytes of UTF-8 each, counted per minute too (the longest window id)
    names = [letter * 64 for letter in "abc"]
    view = "+".join(names)
    key = "k" * (2048 - len(view) - 8)
    views = parse_counter_views(f"kkkk*={view}")
    hot = parse_hot_keys(f"kkkk*[{view}]=16", views)
    windows = parse_window_spec("minute,hour,day,month")
    values = {name: "é" * 128 for name in names}
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, windows=windows, hot_keys=hot, views=views, rng=random.Random(0))
    # WHEN it is counted (on shard 12 of 16: the longest partition key)
    run(pipeline, records([{"key": key, "delta": 1, "ts": DAY0 + 60_000, "dims": values}]))
    # THEN DynamoDB Local takes every item (partition key within 2,048 bytes, sort key within 1,024) and it reads back
    assert dlq.letters == []
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, hot_keys=hot, views=views)
    for window in (None, "minute", "month"):
        (row,) = reader.group(key, view, window, DAY0 + 60_000).rows
        assert (dict(row.dims), row.value()) == (values, 1)
    written = [
        counter_item_of(item) for item in scan_all_time_items(ddb_tables.client, ddb_tables.counters_table, views=True)
    ]
    assert {item.shard for item in written if item.key != key} == {12}
    # AND one byte more of key is refused before anything is written, as key_too_long
    run(pipeline, records([{"key": key + "k", "delta": 1, "dims": values}], prefix="longer"))
    assert dlq.codes() == {"longer-0": "key_too_long"}
