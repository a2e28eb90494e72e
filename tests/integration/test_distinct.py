"""On DynamoDB Local: distinct counts, exact, under every way a member can come twice.

The sample events (``events/*-distinct.json``) through the SQS and Kinesis sources and the production
pipeline; windows and hot keys; the fault tests of the member step (a crash between the counters' commit and
the member write, a lost answer of a member transaction, a conflict cancellation, a member written by
another invocation between our read and our write, two invocations at once); and the Hypothesis property:
the stored count equals the exact set size under any duplication, order and batching. Each test also checks
the invariant the design rests on: the count equals the number of member items.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from hypothesis import given
from hypothesis import strategies as st

from tally.core.distinct import exact_distinct
from tally.core.items import ALL_TIME
from tally.core.model import RejectCode, SourceRecord
from tally.core.sharding import parse_hot_keys
from tally.core.windows import HOUR_MS, parse_window_spec
from tally.reader import CounterReader
from tally.store.distinct import DynamoDBDistinctStore
from tally.store.schema import MEMBER_PARTITION_SUFFIX, member_of_item
from tests.support.events import SAMPLES_SENT_MS, expected_samples, processed_twice
from tests.support.pipeline import FAST_RETRIES, make_pipeline, make_store
from tests.support.properties import on_emulator
from tests.support.threads import at_once

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tally.pipeline import BatchPipeline
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

SENT_MS = SAMPLES_SENT_MS
NOW_MS = SENT_MS + 1_000
EXPECTED = expected_samples("-distinct.json")


def reader(tables: DynamoDBTables, **kwargs: Any) -> CounterReader:
    return CounterReader(tables.counters_table, client=tables.client, **kwargs)


def distinct_of(tables: DynamoDBTables, key: str, **kwargs: Any) -> dict[str, str]:
    return {name: str(value) for name, value in reader(tables, **kwargs).get(key).distinct.items()}


def member_items(tables: DynamoDBTables, key: str) -> dict[tuple[str, str], set[str]]:
    """(window, set) -> the members whose items exist: what the counts must equal."""
    found: dict[tuple[str, str], set[str]] = {}
    pages = tables.client.get_paginator("query").paginate(
        TableName=tables.counters_table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": key + MEMBER_PARTITION_SUFFIX}},
        ConsistentRead=True,
    )
    for page in pages:
        for item in page["Items"]:
            window, name, member = member_of_item(item)
            found.setdefault((window, name), set()).add(member)
    return found


def assert_counts_match_member_items(tables: DynamoDBTables, key: str, **kwargs: Any) -> None:
    """The invariant: each all-time count equals the number of member items of its set."""
    items = member_items(tables, key)
    stored = distinct_of(tables, key, **kwargs)
    assert stored == {name: str(len(members)) for (window, name), members in items.items() if window == ALL_TIME}


def viewer_records(*views: tuple[str, str, str], ts: int | None = None) -> list[SourceRecord]:
    """(message id, key, member) -> one record each: a view of ``key`` by ``member``."""
    records = []
    for mid, key, member in views:
        body: dict[str, Any] = {"id": mid, "key": key, "delta": 1, "distinct": {"viewers": member}}
        if ts is not None:
            body["ts"] = ts
        records.append(SourceRecord(f"r-{mid}", json.dumps(body), NOW_MS))
    return records


def is_member_transaction(params: dict[str, Any]) -> bool:
    return any(
        action.get("Put", {}).get("Item", {}).get("pk", {}).get("S", "").endswith(MEMBER_PARTITION_SUFFIX)
        for action in params.get("TransactItems", [])
    )


class _Killed(BaseException):
    """The invocation dies (a timeout, an out-of-memory kill): nothing after it runs."""


@pytest.fixture
def member_hooks(ddb_tables: DynamoDBTables) -> Iterator[dict[str, Any]]:
    """``before``/``after``: callables run around each member transaction (not the counters' ones)."""
    hooks: dict[str, Any] = {"before": None, "after": None, "last": {}}

    def before(params: dict[str, Any], **_: Any) -> None:
        hooks["last"] = params
        if hooks["before"] is not None and is_member_transaction(params):
            hooks["before"](params)

    def after(**_: Any) -> None:
        if hooks["after"] is not None and is_member_transaction(hooks["last"]):
            hooks["after"]()

    events = ddb_tables.client.meta.events
    events.register("before-parameter-build.dynamodb.TransactWriteItems", before)
    events.register("after-call.dynamodb.TransactWriteItems", after)
    yield hooks
    events.unregister("before-parameter-build.dynamodb.TransactWriteItems", before)
    events.unregister("after-call.dynamodb.TransactWriteItems", after)


# ---------------------------------------------------------------------------------------- samples
@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_each_distinct_sample_counts_as_documented(ddb_tables: DynamoDBTables, event_file: str) -> None:
    # GIVEN a sample event with members, read by its source
    spec = EXPECTED[event_file]
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    # WHEN it is processed twice (a redelivery of the whole batch)
    first, second = processed_twice(pipeline, event_file, spec, NOW_MS)
    # THEN the counts are the documented set sizes; the redelivery read every member and wrote none
    assert first.failed_record_ids == second.failed_record_ids == ()
    assert {key: distinct_of(ddb_tables, key) for key in spec["distinct"]} == spec["distinct"]
    counters = {key: {n: str(v) for n, v in reader(ddb_tables).get(key).values.items()} for key in spec["counters"]}
    assert counters == spec["counters"]
    assert sorted(str(letter.rejection.code) for letter in dlq.letters) == sorted(spec["dead_letters"] * 2)
    assert first.figures["MembersAdded"] == 5  # viewers u1 u2 u3, countries fr, buyers u3
    assert second.figures["MembersAdded"] == 0
    assert second.figures["MemberTransactions"] == 0
    assert second.figures["MemberReads"] == first.figures["MemberReads"] == 5
    for key in spec["distinct"]:
        assert_counts_match_member_items(ddb_tables, key)


def test_a_pipeline_without_a_distinct_store_dead_letters_members(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, with_distinct=False)
    result = pipeline.process(viewer_records(("a", "v:1", "u1")), NOW_MS, lambda: 60_000)
    assert result.failed_record_ids == ()
    assert [letter.rejection.code for letter in dlq.letters] == [RejectCode.INVALID_DISTINCT]
    assert reader(ddb_tables).get("v:1").values == {}


# ------------------------------------------------------------------------------ windows, hot keys
def test_windows_count_members_of_their_ts_and_hot_keys_sum_their_shards(ddb_tables: DynamoDBTables) -> None:
    # GIVEN hourly and daily windows, a hot key, and views in two hours of one day (and one without ts)
    windows = parse_window_spec("hour,day", "hour=90,day=0")
    hot = parse_hot_keys("v:hot=4")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=windows, hot_keys=hot)
    first_hour = NOW_MS - HOUR_MS - 1_000
    batches = [
        viewer_records(("a", "v:hot", "u1"), ("b", "v:hot", "u2"), ts=first_hour),
        viewer_records(("c", "v:hot", "u2"), ("d", "v:hot", "u3"), ts=NOW_MS),
        viewer_records(("e", "v:hot", "u9")),  # no ts: all-time only
        viewer_records(("f", "v:hot", "u1"), ts=NOW_MS),
    ]
    # WHEN each batch is processed (each picks its own shard for the count)
    for records in batches:
        assert pipeline.process(records, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # THEN all-time counts every member once; each hour and the day count the members of their ts
    assert distinct_of(ddb_tables, "v:hot", hot_keys=hot) == {"viewers": "4"}
    hours = reader(ddb_tables, hot_keys=hot, windows=windows).series("v:hot", "hour", first_hour, NOW_MS)
    assert [{n: str(v) for n, v in w.distinct.items()} for w in hours.windows] == [
        {"viewers": "2"},
        {"viewers": "3"},
    ]
    days = reader(ddb_tables, hot_keys=hot, windows=windows).series("v:hot", "day", NOW_MS, NOW_MS)
    assert [{n: str(v) for n, v in w.distinct.items()} for w in days.windows] == [{"viewers": "3"}]
    assert_counts_match_member_items(ddb_tables, "v:hot", hot_keys=hot)


# ------------------------------------------------------------------------------------------ faults
def test_a_crash_between_the_commit_and_the_member_write_is_repaired_by_the_redelivery(
    ddb_tables: DynamoDBTables, member_hooks: dict[str, Any]
) -> None:
    # GIVEN views with members, and an invocation that dies right after the counters' commit
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    records = viewer_records(("a", "v:1", "u1"), ("b", "v:1", "u2"), ("c", "v:1", "u1"))

    def die(_: dict[str, Any]) -> None:
        raise _Killed

    member_hooks["before"] = die
    with pytest.raises(_Killed):
        pipeline.process(records, NOW_MS, lambda: 60_000)
    member_hooks["before"] = None
    assert {n: str(v) for n, v in reader(ddb_tables).get("v:1").values.items()} == {"count": "3"}  # committed
    assert distinct_of(ddb_tables, "v:1") == {}  # never written
    # WHEN the source redelivers the batch (twice: the second finds everything done)
    again = make_pipeline(store)[0].process(records, NOW_MS, lambda: 60_000)
    third = make_pipeline(store)[0].process(records, NOW_MS, lambda: 60_000)
    # THEN the markers drop the counters, and the members are counted once all the same
    assert again.failed_record_ids == third.failed_record_ids == ()
    assert again.figures["DuplicatesAlreadyApplied"] == 3
    assert again.figures["MembersAdded"] == 2
    assert third.figures["MembersAdded"] == 0
    assert {n: str(v) for n, v in reader(ddb_tables).get("v:1").values.items()} == {"count": "3"}
    assert distinct_of(ddb_tables, "v:1") == {"viewers": "2"}
    assert_counts_match_member_items(ddb_tables, "v:1")


def test_a_lost_member_answer_is_sent_again_and_counts_once(
    ddb_tables: DynamoDBTables, member_hooks: dict[str, Any]
) -> None:
    # GIVEN a member transaction that commits but whose answer is lost (botocore retried it too, and gave up)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    lost = [1]

    def lose() -> None:
        if lost[0]:
            lost[0] -= 1
            raise ReadTimeoutError(endpoint_url="dynamodb-local")

    member_hooks["after"] = lose
    # WHEN the batch is processed
    result = pipeline.process(viewer_records(("a", "v:1", "u1"), ("b", "v:1", "u2")), NOW_MS, lambda: 60_000)
    # THEN the transaction is sent again: its members exist now, so it is cancelled and counts nothing more
    assert lost == [0]
    assert result.failed_record_ids == ()
    assert result.figures["MemberTransactions"] == 2
    assert distinct_of(ddb_tables, "v:1") == {"viewers": "2"}
    assert_counts_match_member_items(ddb_tables, "v:1")


def test_a_conflict_cancellation_is_sent_again(ddb_tables: DynamoDBTables, member_hooks: dict[str, Any]) -> None:
    # GIVEN one member transaction cancelled by a conflict (DynamoDB Local never raises one: injected)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    conflicts = [1]

    def conflict(params: dict[str, Any]) -> None:
        if conflicts[0]:
            conflicts[0] -= 1
            reasons = [{"Code": "None"}] * (len(params["TransactItems"]) - 1) + [{"Code": "TransactionConflict"}]
            error = {"Code": "TransactionCanceledException", "Message": "conflict"}
            raise ClientError({"Error": error, "CancellationReasons": reasons}, "TransactWriteItems")  # type: ignore[typeddict-unknown-key]

    member_hooks["before"] = conflict
    result = pipeline.process(viewer_records(("a", "v:1", "u1")), NOW_MS, lambda: 60_000)
    assert result.failed_record_ids == ()
    assert distinct_of(ddb_tables, "v:1") == {"viewers": "1"}


def test_conflicts_that_never_end_report_the_records_for_redelivery(
    ddb_tables: DynamoDBTables, member_hooks: dict[str, Any]
) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)

    def conflict(params: dict[str, Any]) -> None:
        reasons = [{"Code": "TransactionConflict"}] * len(params["TransactItems"])
        error = {"Code": "TransactionCanceledException", "Message": "conflict"}
        raise ClientError({"Error": error, "CancellationReasons": reasons}, "TransactWriteItems")  # type: ignore[typeddict-unknown-key]

    member_hooks["before"] = conflict
    records = [*viewer_records(("a", "v:1", "u1")), SourceRecord("r-plain", '{"id":"p","key":"v:2","delta":1}', 0)]
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    assert result.failed_record_ids == ("r-a",)  # the plain record is done
    member_hooks["before"] = None
    again = pipeline.process(records[:1], NOW_MS, lambda: 60_000)
    assert again.failed_record_ids == ()
    assert again.figures["DuplicatesAlreadyApplied"] == 1
    assert distinct_of(ddb_tables, "v:1") == {"viewers": "1"}


def test_without_time_left_the_members_are_left_to_the_redelivery(ddb_tables: DynamoDBTables) -> None:
    # GIVEN an invocation with less time left than the reserve kept for reporting
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    records = viewer_records(("a", "v:1", "u1"))
    member_step = [False]  # the counters' commit has time; from the member read on, less than the reserve

    def on_read(params: dict[str, Any], **_: Any) -> None:
        keys = next(iter(params["RequestItems"].values()))["Keys"]
        member_step[0] = member_step[0] or keys[0].get("pk", {}).get("S", "").endswith(MEMBER_PARTITION_SUFFIX)

    ddb_tables.client.meta.events.register("before-parameter-build.dynamodb.BatchGetItem", on_read)
    try:
        result = pipeline.process(records, NOW_MS, lambda: FAST_RETRIES.reserve_ms - 1 if member_step[0] else 60_000)
    finally:
        ddb_tables.client.meta.events.unregister("before-parameter-build.dynamodb.BatchGetItem", on_read)
    # THEN the counters commit, no member transaction is sent, and the record comes back
    assert result.failed_record_ids == ("r-a",)
    assert result.figures["MemberTransactions"] == 0
    assert distinct_of(ddb_tables, "v:1") == {}
    again = pipeline.process(records, NOW_MS, lambda: 60_000)
    assert again.failed_record_ids == ()
    assert again.figures["DuplicatesAlreadyApplied"] == 1
    assert distinct_of(ddb_tables, "v:1") == {"viewers": "1"}


def test_a_member_written_by_another_invocation_between_read_and_write_counts_once(
    ddb_tables: DynamoDBTables, member_hooks: dict[str, Any]
) -> None:
    # GIVEN two invocations with overlapping members; the second commits its members while the first is
    # between its member read and its member write
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    first_pipeline, _ = make_pipeline(store)
    other_pipeline, _ = make_pipeline(store)
    mine = viewer_records(("a", "v:1", "u1"), ("b", "v:1", "u2"), ("c", "v:1", "u3"))
    theirs = viewer_records(("x", "v:1", "u2"), ("y", "v:1", "u3"), ("z", "v:1", "u4"))
    raced = [False]

    def race(_: dict[str, Any]) -> None:
        if not raced[0]:
            raced[0] = True
            assert other_pipeline.process(theirs, NOW_MS, lambda: 60_000).figures["MembersAdded"] == 3
        # the other invocation's own member transaction comes through here too, after raced is set

    member_hooks["before"] = race
    # WHEN the first invocation sends its transaction
    result = first_pipeline.process(mine, NOW_MS, lambda: 60_000)
    # THEN its Puts of u2 and u3 fail their condition; it sends u1 alone; the count is the set size
    assert result.failed_record_ids == ()
    assert result.figures["MembersAdded"] == 1
    assert result.figures["MemberTransactions"] == 2
    assert distinct_of(ddb_tables, "v:1") == {"viewers": "4"}
    assert_counts_match_member_items(ddb_tables, "v:1")


def test_two_invocations_at_once_never_drift(ddb_tables: DynamoDBTables) -> None:
    # GIVEN two pipelines on their own clients, each counting many small batches of overlapping members
    rng = random.Random(7)
    bodies = [
        json.dumps({"id": f"m{n}", "key": "v:race", "delta": 1, "distinct": {"viewers": f"u{rng.randrange(40)}"}})
        for n in range(240)
    ]
    seen = {json.loads(body)["distinct"]["viewers"] for body in bodies}
    errors: list[BaseException] = []

    def run(offset: int) -> None:
        try:
            client = ddb_tables.client if offset == 0 else _second_client(ddb_tables)
            store = make_store(client, ddb_tables.counters_table, ddb_tables.markers_table)
            pipeline, _ = make_pipeline(store)
            order = bodies[offset:] + bodies[:offset]  # both deliver every message: redeliveries meet markers
            for start in range(0, len(order), 6):
                records = [
                    SourceRecord(f"r{offset}-{start + i}", b, NOW_MS) for i, b in enumerate(order[start : start + 6])
                ]
                assert pipeline.process(records, NOW_MS, lambda: 60_000).failed_record_ids == ()
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    at_once(run, [0, 120])
    assert not errors, errors
    assert distinct_of(ddb_tables, "v:race") == {"viewers": str(len(seen))}
    assert {n: str(v) for n, v in reader(ddb_tables).get("v:race").values.items()} == {"count": "240"}
    assert_counts_match_member_items(ddb_tables, "v:race")


def _second_client(tables: DynamoDBTables) -> Any:
    import boto3  # noqa: PLC0415

    return boto3.client(
        "dynamodb",
        endpoint_url=tables.endpoint_url,
        region_name=tables.client.meta.region_name,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_more_new_members_than_one_transaction_holds_are_all_counted(ddb_tables: DynamoDBTables) -> None:
    # GIVEN 250 new members of one key in one batch, with hourly windows (two counter items per member)
    windows = parse_window_spec("hour", "hour=90")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=windows)
    records = viewer_records(*((f"m{n}", "v:big", f"u{n}") for n in range(250)), ts=NOW_MS)
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN 500 member items in transactions of at most 100 actions (98 members and their two ADDs)
    assert result.failed_record_ids == ()
    assert result.figures["MembersAdded"] == 500
    assert result.figures["MemberTransactions"] == 6
    assert distinct_of(ddb_tables, "v:big") == {"viewers": "250"}
    hour = reader(ddb_tables, windows=windows).series("v:big", "hour", NOW_MS, NOW_MS)
    assert {n: str(v) for n, v in hour.windows[0].distinct.items()} == {"viewers": "250"}


def test_the_longest_key_set_and_member_fit_dynamodbs_key_limits(ddb_tables: DynamoDBTables) -> None:
    # GIVEN the longest key (2,000 bytes), set name (255) and member (512, in 2-byte characters), in a window
    windows = parse_window_spec("hour", "hour=90")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, windows=windows)
    key, name, member = "k" * 2000, "s" * 255, "é" * 256
    body = {"id": "long", "key": key, "ts": NOW_MS, "distinct": {name: member}}
    # WHEN it is counted on DynamoDB Local THEN the member items are accepted (no key over its limit)
    result = pipeline.process([SourceRecord("r", json.dumps(body), NOW_MS)], NOW_MS, lambda: 60_000)
    assert result.failed_record_ids == ()
    assert not dlq.letters
    assert result.figures["MembersAdded"] == 2
    assert distinct_of(ddb_tables, key) == {name: "1"}


def test_the_store_alone_counts_what_is_new(ddb_tables: DynamoDBTables) -> None:
    from tally.core.distinct import MemberSet  # noqa: PLC0415

    store = DynamoDBDistinctStore(ddb_tables.client, ddb_tables.counters_table, max_actions=3)
    sets = {MemberSet("k", ALL_TIME, "s"): frozenset({"a", "b", "c", "d", "e"})}
    other = {MemberSet("k2", ALL_TIME, "s"): frozenset({"a"})}
    first = store.write_members({"k": sets, "k2": other})
    second = store.write_members({"k": sets})
    # 2 members and their ADD per call: k's a b, k's c d, k's e and k2's a (4 actions would be over 3: alone)
    assert (first.read, first.transactions, first.added) == (6, 4, 6)
    assert (second.read, second.transactions, second.added) == (5, 0, 0)
    assert distinct_of(ddb_tables, "k") == {"s": "5"}
    assert distinct_of(ddb_tables, "k2") == {"s": "1"}


# ----------------------------------------------------------------------------- the stored property
member_lists = st.lists(
    st.tuples(
        st.integers(0, 9),  # message number
        st.sampled_from(["d:a", "d:b"]),
        st.sampled_from(["viewers", "countries"]),
        st.sampled_from(["u1", "u2", "u3", "u4", "é"]),
        st.booleans(),  # with ts (an hour window too) or without
    ),
    min_size=1,
    max_size=16,
)


@on_emulator()
@given(member_lists, st.integers(0, 2**32), st.integers(1, 3))
def test_stored_distinct_counts_equal_the_exact_set_sizes(
    ddb_tables: DynamoDBTables, spec: list[tuple[int, str, str, str, bool]], seed: int, batches: int
) -> None:
    # GIVEN messages naming members (packed when a message has several events), each delivered 1 to 3 times,
    # shuffled, in 1 to 3 batches
    rng = random.Random(seed)
    run = uuid.uuid4().hex  # examples share the tables: each gets its own keys and ids (replays too)
    windows = parse_window_spec("hour", "hour=90")
    events: dict[int, list[dict[str, Any]]] = {}
    for number, key, name, member, with_ts in spec:
        event: dict[str, Any] = {"key": f"{key}:{run}", "distinct": {name: member}}
        if with_ts:
            event["ts"] = NOW_MS
        events.setdefault(number, []).append(event)
    bodies = [json.dumps({"id": f"m{n}-{run}", "events": evs}) for n, evs in events.items()]
    deliveries = [body for body in bodies for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipelines: list[BatchPipeline] = [make_pipeline(store, windows=windows)[0] for _ in range(batches)]
    # WHEN each batch is processed (by its own pipeline: invocations do not share state)
    for start in range(batches):
        records = [SourceRecord(f"r{start}-{i}", body, NOW_MS) for i, body in enumerate(deliveries[start::batches])]
        assert pipelines[start].process(records, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # THEN every stored count, all-time and per hour, is the size of the exact set
    hour = windows.units[0].window_id(windows.units[0].start_ms(NOW_MS))
    tuples = [(key, ALL_TIME, name, member) for _, key, name, member, _ in spec]
    tuples += [(key, hour, name, member) for _, key, name, member, with_ts in spec if with_ts]
    want = exact_distinct(tuples)
    for key in ("d:a", "d:b"):
        stored = distinct_of(ddb_tables, f"{key}:{run}")
        assert stored == {n: str(c) for (k, w, n), c in want.items() if k == key and w == ALL_TIME}
        series = reader(ddb_tables, windows=windows).series(f"{key}:{run}", "hour", NOW_MS, NOW_MS)
        in_hour = {n: str(v) for n, v in series.windows[0].distinct.items()}
        assert in_hour == {n: str(c) for (k, w, n), c in want.items() if k == key and w == hour}
        assert_counts_match_member_items(ddb_tables, f"{key}:{run}")
