"""Per-window thresholds (tally.core.thresholds): the declaration's window suffix, which value a window level is
about (an open window's counter on the key's item, a minute window's own item), the part of an ended window a
move already took off the key's item (``parts``), and which windows a write must read that part of."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.config import Settings
from tally.core.aggregate import MessageTotals
from tally.core.declarations import Declarations
from tally.core.items import ALL_TIME, CounterItem, window_counter
from tally.core.moved import moved_home
from tally.core.sharding import parse_hot_keys
from tally.core.thresholds import (
    MOVE_CLOCK_MARGIN_MS,
    Direction,
    Levels,
    crossing_free,
    crossings,
    exact_checks,
    notification_id,
    parse_counter_thresholds,
    window_reads,
)
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_spec
from tally.errors import ConfigurationError
from tally.store.actions import add_update
from tally.store.expressions import condition_fits
from tally.store.windows import plan_move
from tests.support.reference import expected_crossings

WINDOWS = parse_window_spec("minute,hour,day")
DAILY = parse_counter_thresholds("usage:*#calls@day>=800,1000;usage:*#calls>=5000;k#n@minute>=3", windows=WINDOWS)
NOW = 1_795_000_000_000 - 1_795_000_000_000 % DAY_MS + 10 * HOUR_MS + 30 * 60_000  # 10:30 UTC on some day


MONTHLY_WINDOWS = parse_window_spec("hour,day,month")
MONTHLY = parse_counter_thresholds("usage:*#calls@month>=800,1000;usage:*#calls@day>=50", windows=MONTHLY_WINDOWS)


def month_id(ms: int) -> str:
    return MONTHLY_WINDOWS.unit("month").window_id(MONTHLY_WINDOWS.unit("month").start_ms(ms))


def day_id(ms: int) -> str:
    return WINDOWS.unit("day").window_id(WINDOWS.unit("day").start_ms(ms))


def hour_id(ms: int) -> str:
    return WINDOWS.unit("hour").window_id(WINDOWS.unit("hour").start_ms(ms))


# ------------------------------------------------------------------------------------------ the declaration
def test_a_window_suffix_declares_levels_of_that_window() -> None:
    key_item = "usage:t"
    today = window_counter(day_id(NOW), "calls")
    assert DAILY.counter_levels(key_item, today) == Levels(rising=(800, 1000))
    assert DAILY.counter_levels(key_item, "calls") == Levels(rising=(5000,))  # all-time keeps its own rule
    assert DAILY.counter_levels(key_item, window_counter(hour_id(NOW), "calls")) is None  # no hourly rule
    minute = CounterItem("k", "m#2026-11-18T10:30Z", 0, None)
    assert DAILY.counter_levels(minute, "n") == Levels(rising=(3,))
    assert DAILY.counter_levels(CounterItem("k", ALL_TIME, 3), "n") is None  # a shard: never
    assert DAILY.is_thresholded(key_item)
    assert DAILY.is_thresholded(minute)


def test_a_counter_name_holding_at_is_read_whole_unless_it_ends_in_a_window_unit() -> None:
    rules = parse_counter_thresholds("k#a@b>=1;k#x@day@all>=2;k#y@all>=3", windows=WINDOWS)
    assert [(r.counter, r.window) for r in rules.rules] == [("a@b", ALL_TIME), ("x@day", ALL_TIME), ("y", ALL_TIME)]


@pytest.mark.parametrize(
    ("text", "windows", "error"),
    [
        ("usage:*#calls@day>=800", "hour", "needs the day window counted (TALLY_WINDOWS)"),
        ("usage:*#calls@hour>=800", "", "needs the hour window counted (TALLY_WINDOWS)"),
        ("hot#calls@day>=5", "day", "hot key"),
        ("k#n@day>=5,5", "day", "a level is given twice"),
    ],
)
def test_a_window_rule_is_refused_without_its_window_or_on_a_hot_key(text: str, windows: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_counter_thresholds(text, parse_hot_keys("hot=4"), windows=parse_window_spec(windows))


def test_each_window_rule_counts_its_levels_toward_the_limit() -> None:
    text = ";".join(f"k#n@{unit}>=1,2,3" for unit in ("minute", "hour", "day")) + ";k#n>=1,2"
    with pytest.raises(ValueError, match="at most 10 levels"):
        parse_counter_thresholds(text, windows=WINDOWS)


def test_settings_refuse_a_window_rule_whose_window_is_not_counted() -> None:
    env = {
        "TALLY_COUNTERS_TABLE": "c",
        "TALLY_MARKERS_TABLE": "m",
        "TALLY_NOTIFICATIONS_TABLE": "n",
        "TALLY_COUNTER_THRESHOLDS": "usage:*#calls@day>=800",
        "TALLY_WINDOWS": "hour",
    }
    with pytest.raises(ConfigurationError, match="day window"):
        Settings.from_env(env, require_dlq=False)
    settings = Settings.from_env({**env, "TALLY_WINDOWS": "hour,day"}, require_dlq=False)
    assert settings.declarations.thresholds.rules[0].window == "day"


def test_a_month_rule_declares_levels_of_each_calendar_month() -> None:
    # GIVEN usage:*#calls@month>=800,1000 (and a daily 50) on a deployment counting months
    this_month = window_counter(month_id(NOW), "calls")
    assert MONTHLY.counter_levels("usage:t", this_month) == Levels(rising=(800, 1000))
    assert MONTHLY.counter_levels("usage:t", window_counter(day_id(NOW), "calls")) == Levels(rising=(50,))
    assert MONTHLY.counter_levels("usage:t", "calls") is None  # no all-time rule
    assert MONTHLY.is_thresholded("usage:t")  # the open month rides on the key's item
    # THEN a crossing of 800 this month and the same level next month are two crossings, two ids
    start = MONTHLY_WINDOWS.unit("month").start_ms(NOW)
    next_month = month_id(MONTHLY_WINDOWS.unit("month").end_ms(start))
    before = {"usage:t": {this_month: Decimal(790)}}
    found = crossings(
        [
            MessageTotals("m1", {"usage:t": {this_month: 20}}, 1),
            MessageTotals("m2", {"usage:t": {window_counter(next_month, "calls"): 800}}, 1),
        ],
        MONTHLY,
        before,
        at_ms=NOW,
    )
    assert [(c.window, c.level, c.message_id) for c in found] == [
        (month_id(NOW), 800, "m1"),
        (next_month, 800, "m2"),
    ]
    assert found[0].notification_id != found[1].notification_id
    # AND refused where months are not counted
    with pytest.raises(ValueError, match=re.escape("needs the month window counted")):
        parse_counter_thresholds("usage:*#calls@month>=800", windows=WINDOWS)


def test_a_write_reads_the_moved_part_of_an_ended_month_from_its_last_minute() -> None:
    month = MONTHLY_WINDOWS.unit("month")
    start = month.start_ms(NOW)
    last_month, this_month = month_id(month.shifted(start, -1)), month_id(NOW)
    steps = [{"usage:t": {window_counter(last_month, "calls"): 1, window_counter(this_month, "calls"): 1}}]
    # last month has ended (a move may have taken part of it); this one is open: the key's item alone holds it
    assert window_reads(steps, MONTHLY, NOW) == {"usage:t": (window_counter(last_month, "calls"),)}
    # within the clock margin of the month's end (whatever its length), this month is read too
    assert window_reads(steps, MONTHLY, month.end_ms(start) - MOVE_CLOCK_MARGIN_MS) == {
        "usage:t": (window_counter(last_month, "calls"), window_counter(this_month, "calls"))
    }
    assert window_reads(steps, MONTHLY, month.end_ms(start) - MOVE_CLOCK_MARGIN_MS - 1) == {
        "usage:t": (window_counter(last_month, "calls"),)
    }


# --------------------------------------------------------------------------------------------- a crossing
def step(message_id: str, amount: int, window: str) -> MessageTotals:
    return MessageTotals(message_id, {"usage:t": {"calls": amount, window_counter(window, "calls"): amount}}, 1)


def test_a_window_crossing_is_named_by_its_window_and_starts_from_zero() -> None:
    today, tomorrow = day_id(NOW), day_id(NOW + DAY_MS)
    # GIVEN all-time usage at 4,990, today's at 790, tomorrow's not started: +20 today, +900 tomorrow
    before = {"usage:t": {"calls": Decimal(4990), window_counter(today, "calls"): Decimal(790)}}
    found = crossings([step("m1", 20, today), step("m2", 900, tomorrow)], DAILY, before, at_ms=NOW)
    # THEN the all-time 5,000, today's 800 and tomorrow's 800 again (from zero): each its own id
    assert [(c.window, c.counter, c.level, c.message_id, c.step_value) for c in found] == [
        (ALL_TIME, "calls", 5000, "m1", 5010),
        (today, "calls", 800, "m1", 810),
        (tomorrow, "calls", 800, "m2", 900),
    ]
    assert found[1].notification_id == notification_id("usage:t", "calls", 800, Direction.RISING, "m1", window=today)
    assert found[1].notification_id != notification_id("usage:t", "calls", 800, Direction.RISING, "m1")
    assert len({c.notification_id for c in found}) == 3
    assert found[1].value == 810  # the window's value after the write, not the all-time value


def test_a_minute_window_item_crosses_on_its_own_item() -> None:
    minute = CounterItem("k", "m#2026-11-18T10:30Z", 0, 99)
    found = crossings([MessageTotals("m1", {minute: {"n": 4}}, 1)], DAILY, {minute: {}}, at_ms=0)
    assert [(c.key, c.window, c.counter, c.level) for c in found] == [("k", "m#2026-11-18T10:30Z", "n", 3)]


# ---------------------------------------------------------- an ended window: part on the key's item, part moved
def test_which_windows_a_write_must_read_the_moved_part_of() -> None:
    yesterday, today = day_id(NOW - DAY_MS), day_id(NOW)
    steps = [{"usage:t": {window_counter(yesterday, "calls"): 1, window_counter(today, "calls"): 1, "calls": 2}}]
    # yesterday has ended: a move may have taken part of it; today is open: the key's item alone holds it
    assert window_reads(steps, DAILY, NOW) == {"usage:t": (window_counter(yesterday, "calls"),)}
    # within the clock margin of its end, a window is read too (a mover whose clock runs ahead may take it)
    end_of_today = NOW - NOW % DAY_MS + DAY_MS
    assert window_reads(steps, DAILY, end_of_today - MOVE_CLOCK_MARGIN_MS) == {
        "usage:t": (window_counter(yesterday, "calls"), window_counter(today, "calls"))
    }
    # a window no rule thresholds is never read
    assert window_reads([{"usage:t": {window_counter(hour_id(NOW - DAY_MS), "calls"): 1}}], DAILY, NOW) == {}


def test_the_conditions_count_the_moved_part() -> None:
    yesterday = window_counter(day_id(NOW - DAY_MS), "calls")
    steps = [{"usage:t": {yesterday: 20}}]
    parts = {"usage:t": {yesterday: Decimal(790)}}
    # the key's item holds k, the window item 790: k + 790 + 20 crosses 800 unless k < -10 or k >= 10
    checks = {(c.direction, c.low, c.high, c.if_missing) for c in crossing_free(steps, DAILY, parts=parts)["usage:t"]}
    assert (Direction.RISING, -10, 10, False) in checks  # a missing attribute (k = 0) crosses: it fails
    assert (Direction.RISING, 190, 210, True) in checks  # 1000: far
    # planned from the window's value 800 (the sum), the key item must hold exactly 800 - 790
    (held,) = exact_checks(steps, DAILY, {"usage:t": {yesterday: Decimal(800)}}, parts=parts)["usage:t"]
    assert (held.counter, held.value, held.if_missing) == (yesterday, 10, False)


@pytest.mark.parametrize("unit", ["day", "month"])
@given(
    key_part=st.integers(-12, 12),
    moved=st.integers(-12, 12),
    amounts=st.lists(st.integers(-6, 6).filter(bool), min_size=1, max_size=6),
)
def test_the_condition_on_the_key_items_part_holds_exactly_when_the_windows_value_changes_no_side(
    unit: str, key_part: int, moved: int, amounts: list[int]
) -> None:
    # GIVEN an ended day (month) window whose value is split: ``key_part`` on the key's item, ``moved`` on its
    # window item
    thresholds = parse_counter_thresholds(f"k#n@{unit}>=0,5;k#n@{unit}<=-3,2", windows=MONTHLY_WINDOWS)
    ended = MONTHLY_WINDOWS.unit(unit)
    name = window_counter(ended.window_id(ended.shifted(ended.start_ms(NOW), -1)), "n")
    messages = [MessageTotals(f"m{i}", {"k": {name: amount}}, 1) for i, amount in enumerate(amounts)]
    parts = {"k": {name: Decimal(moved)}}
    checks = crossing_free([m.totals for m in messages], thresholds, parts=parts)["k"]

    def holds(low: int, high: int, direction: Direction, value: int) -> bool:
        return (value < low or value >= high) if direction is Direction.RISING else (value <= low or value > high)

    # WHEN the conditions, on the key item's part alone, hold: no step of the window's value crosses
    passes = all(holds(int(c.low), int(c.high), c.direction, key_part) for c in checks)
    value = key_part + moved
    expected = expected_crossings(
        value, [(m.message_id, a) for m, a in zip(messages, amounts, strict=True)], Levels((0, 5), (-3, 2))
    )
    found = crossings(messages, thresholds, {"k": {name: Decimal(value)}}, at_ms=0)
    assert [(c.level, c.direction, c.message_id) for c in found] == expected
    if passes:
        assert expected == []
    # THEN a missing attribute passes exactly when a key part of 0 does
    assert all(c.if_missing == holds(int(c.low), int(c.high), c.direction, 0) for c in checks)
    # and the exact condition asks the key's item for the sum minus the moved part
    (held,) = exact_checks([m.totals for m in messages], thresholds, {"k": {name: Decimal(value)}}, parts=parts)["k"]
    assert held.value == key_part


@pytest.mark.parametrize(
    ("spec", "kept"),
    [("hour,day", ""), ("hour", ""), ("day", ""), ("hour,day", "hour=7,day=1"), ("hour,day,month", "month=30")],
)
@pytest.mark.parametrize("unit", ["hour", "day", "month"])
def test_a_write_reads_a_moved_window_where_the_move_puts_it(spec: str, kept: str, unit: str) -> None:
    # hours go to their day's item as attributes, or (days not counted, or kept shorter) to items of their own;
    # days and months to items of their own
    windows = parse_window_spec(spec, kept)
    if unit not in {u.name for u in windows.units}:
        return
    ended = windows.unit(unit)
    window = ended.window_id(ended.shifted(ended.start_ms(NOW), -1))
    raw = {"pk": {"S": "usage:t"}, "sk": {"S": "all"}, "w#" + window + "\x1fcalls": {"N": "7"}}
    move = plan_move(raw, windows, NOW, move_at_bytes=0)
    assert move is not None
    (target, counters), *_ = move.adds
    home, name = moved_home("usage:t", window, "calls", windows)
    assert (home.key, home.window) == (target.key, target.window)
    assert next(iter(counters)) == name


def test_a_write_moving_a_thresholded_counter_in_too_many_windows_does_not_fit_one_condition() -> None:
    hourly = parse_counter_thresholds("k#n@hour>=100,200,300,400,500", windows=WINDOWS)
    hours = [window_counter(hour_id(NOW - n * HOUR_MS), "n") for n in range(1, 40)]

    def condition(count: int) -> str:
        steps = [{"k": dict.fromkeys(hours[:count], 1)}]
        action, _ = add_update("t", "k", steps[0]["k"], free=crossing_free(steps, hourly)["k"])
        return str(action["Update"]["ConditionExpression"])

    # five levels of one window are about 30 operators: nine windows fit one expression, eleven do not
    assert condition_fits(condition(9))
    assert not condition_fits(condition(11))


def test_a_key_item_with_only_a_window_level_is_kept_off_the_journal() -> None:
    # the planner pins every item ``conditioned`` names to direct transactions (tests/unit/test_plan_paths.py)
    hourly = parse_counter_thresholds("usage:*#calls@hour>=5", windows=WINDOWS)
    pinned = Declarations(WINDOWS, thresholds=hourly).conditioned()
    assert pinned is not None
    assert pinned("usage:t")  # its hours are open on the key's item
    assert not pinned("other")
    assert not pinned(CounterItem("usage:t", day_id(NOW)))  # a day item: only a move writes it
    assert hourly.touches({"usage:t": {window_counter(hour_id(NOW), "calls"): 1}})
    assert not hourly.touches({"usage:t": {"calls": 1, window_counter(day_id(NOW), "calls"): 1}})
