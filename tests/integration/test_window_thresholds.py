"""On DynamoDB Local: per-window thresholds (``COUNTER@day``), each window's crossing announced once.

An open day window's counter is an attribute of the key's item, so its write carries the crossing condition
there. Once the day has ended, the production pipeline's post-commit step moves it onto the day's own item, and
a late event for it lands on the key's item again: the window's value is then the sum of both. These tests
drive that situation through the real pipeline (its moves included), and a move committing between the write's
read of the moved part and the write itself (injected with a botocore event hook).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from tally.core.items import window_counter
from tally.core.model import SourceRecord
from tally.core.thresholds import NO_THRESHOLDS, crossing_free, parse_counter_thresholds
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_spec
from tally.reader import CounterReader
from tally.store.actions import add_update
from tally.store.expressions import condition_fits
from tally.store.windows import DynamoDBWindowMover
from tests.integration.test_thresholds import NOW_MS, NotifyTables, make_store, notify, process  # noqa: F401 (fixture)
from tests.support.pipeline import make_pipeline

if TYPE_CHECKING:
    from tally.core.thresholds import CounterThresholds
    from tally.pipeline import BatchPipeline
    from tests.conftest import DynamoDBLocal

pytestmark = pytest.mark.integration

WINDOWS = parse_window_spec("hour,day")
DAILY = parse_counter_thresholds("usage:*#calls@day>=10", windows=WINDOWS)
DAY0 = NOW_MS  # 2100-01-01, 00:00 UTC
DAY1 = NOW_MS + DAY_MS
MONTHS = parse_window_spec("hour,day,month", "month=400")
FEB = NOW_MS + 31 * DAY_MS  # 2100-02-01 (2100 is a common year: February has 28 days)
MAR = FEB + 28 * DAY_MS


def pipeline_of(on: NotifyTables, thresholds: CounterThresholds = DAILY, **options: Any) -> BatchPipeline:
    pipeline, _ = make_pipeline(make_store(on), windows=WINDOWS, counter_thresholds=thresholds, **options)
    return pipeline


def event(message_id: str, key: str, calls: int, ts_ms: int, *, correction: bool = False) -> SourceRecord:
    body = {"id": message_id, "key": key, "deltas": {"calls": calls}, "ts": ts_ms} | (
        {"correction": True} if correction else {}
    )
    return SourceRecord(f"r-{message_id}", json.dumps(body), ts_ms)


def announced(on: NotifyTables) -> list[tuple[str, str, Decimal, str, Decimal, Decimal]]:
    return [
        (c.key, c.window, Decimal(c.level), c.message_id, Decimal(c.step_value), Decimal(c.value))
        for c in on.notifications()
    ]


def stored(on: NotifyTables, key: str, sort_key: str) -> dict[str, Any]:
    item = on.client.get_item(
        TableName=on.tables.counters_table, Key={"pk": {"S": key}, "sk": {"S": sort_key}}, ConsistentRead=True
    ).get("Item", {})
    return {name: value.get("N") for name, value in item.items() if name.startswith(("c#", "w#d#", "w#mo#"))}


def stored_raw(on: NotifyTables, key: str) -> dict[str, Any]:
    return on.client.get_item(
        TableName=on.tables.counters_table, Key={"pk": {"S": key}, "sk": {"S": "all"}}, ConsistentRead=True
    ).get("Item", {})


def test_a_window_crossing_is_announced_once_and_again_the_next_window_under_a_new_id(notify: NotifyTables) -> None:  # noqa: F811
    pipeline = pipeline_of(notify)
    # GIVEN a daily level of 10: +6, +6 on day 0 (in one batch, delivered twice)
    day0 = [event("a", "usage:t", 6, DAY0 + HOUR_MS), event("b", "usage:t", 6, DAY0 + HOUR_MS)]
    process(pipeline, day0, DAY0 + 2 * HOUR_MS)
    process(pipeline, day0, DAY0 + 2 * HOUR_MS)
    # WHEN day 1 starts from zero and +12 takes it past 10 again
    process(pipeline, [event("c", "usage:t", 12, DAY1 + HOUR_MS)], DAY1 + 2 * HOUR_MS)
    # THEN each day's crossing once, named by its window: two ids (the all-time value, 24, has no level)
    found = notify.notifications()
    assert announced(notify) == [
        ("usage:t", "d#2100-01-01", 10, "b", 12, 12),
        ("usage:t", "d#2100-01-02", 10, "c", 12, 12),
    ]
    assert len({c.notification_id for c in found}) == 2


@pytest.mark.parametrize(("unit", "correction"), [("day", False), ("month", False), ("day", True)])
def test_a_late_event_for_a_moved_window_is_announced_from_the_sum_of_both_parts(
    notify: NotifyTables,  # noqa: F811
    unit: str,
    correction: bool,
) -> None:
    windows = MONTHS if unit == "month" else WINDOWS
    first, second = (NOW_MS, FEB) if unit == "month" else (DAY0, DAY1)  # a window, and the one after it
    window = windows.unit(unit).window_id(first)
    pipeline, _ = make_pipeline(
        make_store(notify),
        windows=windows,
        counter_thresholds=parse_counter_thresholds(f"usage:*#calls@{unit}>=10", windows=windows),
    )
    # GIVEN the first window at 8 on one key (below 10) and at 12 on another (10 crossed and announced)
    process(
        pipeline,
        [event("a1", "usage:a", 8, first + HOUR_MS), event("b1", "usage:b", 12, first + HOUR_MS)],
        first + 2 * HOUR_MS,
    )
    # and a batch in the next window, after which the pipeline's own post-commit step moves the first one onto
    # its window item
    process(
        pipeline,
        [event("a2", "usage:a", 1, second + HOUR_MS), event("b2", "usage:b", 1, second + HOUR_MS)],
        second + 2 * HOUR_MS,
    )
    assert stored(notify, "usage:a", window) == {"c#calls": "8"}
    assert f"w#{window}\x1fcalls" not in stored(notify, "usage:a", "all")
    # WHEN late events for the first window come: +3 on the first key (8 -> 11: crosses 10, though 0 -> 3 on the
    # key's item would not; or an operator's correction by +3, dated in that window), +11 on the second (12 -> 23:
    # crosses nothing, though 0 -> 11 on the key's item alone would); the batch delivered twice
    late = [
        event("a3", "usage:a", 3, first + 5 * HOUR_MS, correction=correction),
        event("b3", "usage:b", 11, first + 5 * HOUR_MS),
    ]
    process(pipeline, late, second + 3 * HOUR_MS)
    process(pipeline, late, second + 3 * HOUR_MS)
    # THEN exactly the sum's crossing is announced, once, with the window's whole value
    assert announced(notify) == [
        ("usage:b", window, 10, "b1", 12, 12),
        ("usage:a", window, 10, "a3", 11, 11),
    ]


@pytest.mark.parametrize("keeps_pointers", [True, False])
def test_a_move_committing_between_the_read_and_the_write_makes_the_write_plan_again(
    notify: NotifyTables,  # noqa: F811
    dynamodb_local: DynamoDBLocal,
    keeps_pointers: bool,
) -> None:
    # GIVEN day 0 at 8, still on the key's item (this pipeline moves nothing itself), and another container's
    # mover, which keeps the key item's pointers (this deployment's) or not (one without the thresholds)
    pipeline = pipeline_of(notify, move_windows=False)
    process(pipeline, [event("a1", "usage:a", 8, DAY0 + HOUR_MS)], DAY0 + 2 * HOUR_MS)
    now = DAY1 + 3 * HOUR_MS
    mover = DynamoDBWindowMover(
        dynamodb_local.client(),
        notify.tables.counters_table,
        WINDOWS,
        move_at_bytes=0,
        thresholds=DAILY if keeps_pointers else NO_THRESHOLDS,
    )
    writes: list[int] = []

    def move_first(**_: Any) -> None:
        writes.append(1)
        if len(writes) == 1:  # after the write read the moved part (none yet), before it is sent
            assert mover.after_batch(["usage:a"], now).windows >= 1

    notify.client.meta.events.register("before-call.dynamodb.TransactWriteItems", move_first)
    try:
        # WHEN a late +3 for day 0 is written while another container moves day 0 onto its day item
        result = process(pipeline, [event("a2", "usage:a", 3, DAY0 + 5 * HOUR_MS)], now)
    finally:
        notify.client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", move_first)
    # THEN the write's condition on the key item's count of moves fails, it is planned again from the new parts,
    # and the crossing of 8 -> 11 is announced once (the key item's part alone, 0 -> 3, would have missed it)
    assert announced(notify) == [("usage:a", "d#2100-01-01", 10, "a2", 11, 11)]
    assert result.figures["ThresholdRewrites"] >= 1
    # (the write is planned again from the refusal's ALL_OLD, the key item as the move left it: a kept pointer says
    # the new moved part, and without one the day item is read again, after that ALL_OLD: the second write commits)
    assert len(writes) == 2
    assert stored(notify, "usage:a", "d#2100-01-01") == {"c#calls": "8"}
    assert stored(notify, "usage:a", "all")["w#d#2100-01-01\x1fcalls"] == "3"


class CounterReads:
    """The counters-table items a client's ``BatchGetItem`` calls asked for, as (pk, sk)."""

    def __init__(self, on: NotifyTables) -> None:
        self.asked: list[tuple[str, str]] = []
        self._on = on

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        for key in params["RequestItems"].get(self._on.tables.counters_table, {}).get("Keys", []):
            self.asked.append((key["pk"]["S"], key["sk"]["S"]))

    def __enter__(self) -> CounterReads:
        self._on.client.meta.events.register("before-parameter-build.dynamodb.BatchGetItem", self)
        return self

    def __exit__(self, *_: object) -> None:
        self._on.client.meta.events.unregister("before-parameter-build.dynamodb.BatchGetItem", self)


def test_a_late_write_of_the_pointers_window_reads_the_key_item_alone_once_per_batch(
    notify: NotifyTables,  # noqa: F811
) -> None:
    # GIVEN day 0 at 8 on one key and at 12 on another, moved off their key items by the pipeline's own step,
    # which keeps each key item's pointer at day 0 with its moved total
    store = make_store(notify)
    moving, _ = make_pipeline(store, windows=WINDOWS, counter_thresholds=DAILY)
    process(moving, [event("a1", "usage:a", 8, DAY0 + HOUR_MS), event("b1", "usage:b", 12, DAY0 + HOUR_MS)], DAY0)
    process(moving, [event("a2", "usage:a", 1, DAY1), event("b2", "usage:b", 1, DAY1)], DAY1 + HOUR_MS)
    pointer = {name: value for name, value in stored_raw(notify, "usage:a").items() if name.startswith("mp")}
    assert pointer == {"mp#day": {"S": "d#2100-01-01"}, "mp#day\x1fcalls": {"N": "8"}, "mpk#day": {"N": "1"}}
    # WHEN late events for day 0 come in one batch: +3 on the first key (8 -> 11: crosses 10; its crossing-free
    # write is refused and sent again exactly), +11 on the second (12 -> 23: crosses nothing)
    late, _ = make_pipeline(store, windows=WINDOWS, counter_thresholds=DAILY, move_windows=False)
    with CounterReads(notify) as reads:
        result = process(
            late,
            [event("a3", "usage:a", 3, DAY0 + 5 * HOUR_MS), event("b3", "usage:b", 11, DAY0 + 5 * HOUR_MS)],
            DAY1 + 2 * HOUR_MS,
        )
    # THEN each key item was read once, no window item at all (not even for the attempt after the refusal), and
    # the sum's crossing is announced once
    assert sorted(reads.asked) == [("usage:a", "all"), ("usage:b", "all")]
    assert result.figures["ThresholdRewrites"] >= 1
    assert announced(notify) == [
        ("usage:b", "d#2100-01-01", 10, "b1", 12, 12),
        ("usage:a", "d#2100-01-01", 10, "a3", 11, 11),
    ]


def test_a_late_write_of_a_window_older_than_the_pointers_reads_its_window_item(
    notify: NotifyTables,  # noqa: F811
) -> None:
    # GIVEN day 0 at 8 and day 1 at 2, both moved (the pointer is at day 1: it cannot say day 0's moved part)
    store = make_store(notify)
    moving, _ = make_pipeline(store, windows=WINDOWS, counter_thresholds=DAILY)
    process(moving, [event("a1", "usage:a", 8, DAY0 + HOUR_MS)], DAY0 + 2 * HOUR_MS)
    process(moving, [event("a2", "usage:a", 2, DAY1 + HOUR_MS)], DAY1 + 2 * HOUR_MS)
    process(moving, [event("a3", "usage:a", 1, DAY1 + DAY_MS)], DAY1 + DAY_MS + HOUR_MS)
    assert stored_raw(notify, "usage:a")["mp#day"] == {"S": "d#2100-01-02"}
    # WHEN a late +3 for day 0 comes (8 -> 11)
    late, _ = make_pipeline(store, windows=WINDOWS, counter_thresholds=DAILY, move_windows=False)
    with CounterReads(notify) as reads:
        process(late, [event("a4", "usage:a", 3, DAY0 + 5 * HOUR_MS)], DAY1 + DAY_MS + 2 * HOUR_MS)
    # THEN its write read the key item, then day 0's item for the moved part, and announced from the sum, once
    assert reads.asked[:2] == [("usage:a", "all"), ("usage:a", "d#2100-01-01")]
    assert announced(notify) == [("usage:a", "d#2100-01-01", 10, "a4", 11, 11)]


def test_one_message_moving_a_thresholded_counter_in_too_many_windows_is_refused_alone(
    notify: NotifyTables,  # noqa: F811
) -> None:
    # GIVEN five hourly levels (a write's condition holds about 30 operators per hour it moves)
    hourly = parse_counter_thresholds("usage:*#calls@hour>=100,200,300,400,500", windows=WINDOWS)
    pipeline, dlq = make_pipeline(make_store(notify), windows=WINDOWS, counter_thresholds=hourly)
    # WHEN one message carries events in twelve hours (its condition would pass DynamoDB's 300 operators) and
    # another message one event, in one batch
    wide = {
        "id": "wide",
        "events": [{"key": "usage:w", "deltas": {"calls": 1}, "ts": DAY0 + h * HOUR_MS} for h in range(12)],
    }
    records = [SourceRecord("r-wide", json.dumps(wide), DAY0), event("narrow", "usage:w", 1, DAY0 + 13 * HOUR_MS)]
    process(pipeline, records, DAY0 + 14 * HOUR_MS)
    # THEN only the wide one is dead-lettered (a write DynamoDB would refuse), the other counted
    assert [(letter.record.record_id, letter.rejection.code.value) for letter in dlq.letters] == [
        ("r-wide", "write_refused")
    ]
    assert notify.value("usage:w", "calls") == 1


@pytest.mark.parametrize("hours", [8, 9, 11])
def test_the_stores_condition_check_agrees_with_dynamodb_at_the_limit(notify: NotifyTables, hours: int) -> None:  # noqa: F811
    # GIVEN five hourly and five daily levels, and one write moving the counter in ``hours`` hours and two days
    levels = parse_counter_thresholds("k#n@hour>=100,200,300,400,500;k#n@day<=-1,-2,-3,-4,-5", windows=WINDOWS)
    counters = {window_counter(WINDOWS.unit("hour").window_id(DAY0 + h * HOUR_MS), "n"): 1 for h in range(hours)}
    counters |= {window_counter(WINDOWS.unit("day").window_id(DAY0 + d * DAY_MS), "n"): -1 for d in range(2)}
    action, _ = add_update(
        notify.tables.counters_table, "k", counters, free=crossing_free([{"k": counters}], levels)["k"]
    )
    update = dict(action["Update"])
    update.pop("ReturnValuesOnConditionCheckFailure")
    # WHEN it is sent to DynamoDB Local alone
    code = ""
    try:
        notify.client.update_item(**update)  # type: ignore[arg-type]
        accepted = True
    except notify.client.exceptions.ConditionalCheckFailedException:
        accepted = True  # the expression was taken; only its condition failed
    except ClientError as error:
        code = error.response["Error"]["Code"]
        accepted = False
    # THEN the store's own check refuses exactly what DynamoDB refuses (301 operators at nine hours; over 4 KB at 11)
    assert accepted or code == "ValidationException"
    assert condition_fits(str(update["ConditionExpression"])) is accepted
    assert accepted is (hours <= 8)


def test_a_minute_level_crosses_on_the_minutes_own_item(notify: NotifyTables) -> None:  # noqa: F811
    # GIVEN a level of 3 per minute (minute windows are items of their own: nothing is ever moved onto them)
    windows = parse_window_spec("minute,hour,day")
    pipeline, _ = make_pipeline(
        make_store(notify),
        windows=windows,
        counter_thresholds=parse_counter_thresholds("usage:*#calls@minute>=3", windows=windows),
    )
    # WHEN +2, +2 land in one minute (in two batches), +3 in the next, and a late +1 in the first
    process(pipeline, [event("a", "usage:m", 2, DAY0 + 10_000)], DAY0 + 20_000)
    process(pipeline, [event("b", "usage:m", 2, DAY0 + 30_000)], DAY0 + 40_000)
    process(pipeline, [event("c", "usage:m", 3, DAY0 + 70_000)], DAY0 + 80_000)
    process(pipeline, [event("d", "usage:m", 1, DAY0 + 50_000)], DAY0 + 90_000)
    # THEN each minute's crossing once, under its minute
    assert announced(notify) == [
        ("usage:m", "m#2100-01-01T00:00Z", 3, "b", 4, 4),
        ("usage:m", "m#2100-01-01T00:01Z", 3, "c", 3, 3),
    ]


def test_a_months_level_is_announced_once_per_month_and_an_ended_month_is_moved_and_read_exactly(
    notify: NotifyTables,  # noqa: F811
    dynamodb_local: DynamoDBLocal,
) -> None:
    monthly = parse_counter_thresholds("usage:*#calls@month>=10", windows=MONTHS)
    pipeline, _ = make_pipeline(make_store(notify), windows=MONTHS, counter_thresholds=monthly)
    reader = CounterReader(notify.tables.counters_table, client=dynamodb_local.client(), windows=MONTHS)

    def months(key: str, now_ms: int) -> list[dict[str, Decimal]]:
        return [dict(w.values) for w in reader.series(key, "month", NOW_MS, MAR, now_ms=now_ms).windows]

    # GIVEN January at 8 on one key (+4 on the 15th, +4 on its last millisecond) and at 12 on another (10 crossed),
    # the batch delivered twice
    january = [
        event("a1", "usage:a", 4, NOW_MS + 14 * DAY_MS),
        event("a2", "usage:a", 4, FEB - 1),
        event("b1", "usage:b", 12, FEB - 1),
    ]
    process(pipeline, january, FEB - 1)
    process(pipeline, january, FEB - 1)
    assert months("usage:a", FEB - 1) == [{"calls": 8}, {}, {}]
    # WHEN February starts: +1 on the first key, +12 on the second (February's 10 crossed, from zero), after which
    # the pipeline's own post-commit step moves January (ended) off the key items onto its month items
    process(pipeline, [event("a3", "usage:a", 1, FEB), event("b2", "usage:b", 12, FEB + 1)], FEB + HOUR_MS)
    for key, total in (("usage:a", "8"), ("usage:b", "12")):
        month_item = notify.client.get_item(
            TableName=notify.tables.counters_table,
            Key={"pk": {"S": key}, "sk": {"S": "mo#2100-01"}},
            ConsistentRead=True,
        )["Item"]
        assert month_item["c#calls"]["N"] == total
        assert month_item["expires_at"]["N"] == str((FEB + 400 * DAY_MS) // 1000)  # retention after its end
        assert not any(name.startswith("w#mo#2100-01") for name in stored(notify, key, "all"))
    # THEN each month's crossing is announced once, under its month: January's (its last millisecond counted in
    # it) and February's, from zero, under another id
    assert announced(notify) == [
        ("usage:b", "mo#2100-01", 10, "b1", 12, 12),
        ("usage:b", "mo#2100-02", 10, "b2", 12, 12),
    ]
    assert len({c.notification_id for c in notify.notifications()}) == 2
    # AND a late event for January lands on the key's item beside the moved part
    process(pipeline, [event("a4", "usage:a", 3, NOW_MS + 20 * DAY_MS)], FEB + 2 * HOUR_MS)
    # AND a series of months reads each exactly: the moved part plus the late part still on the key's item
    assert months("usage:a", FEB + 2 * HOUR_MS) == [{"calls": 11}, {"calls": 1}, {}]
    assert months("usage:b", FEB + 2 * HOUR_MS) == [{"calls": 12}, {"calls": 12}, {}]
