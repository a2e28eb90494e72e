"""Thresholds (tally.core.thresholds), table-driven and with Hypothesis: the declaration, what a crossing is, the
crossing-free condition a write carries, the crossings a write planned from a known value records, their ids,
and the condition's size within DynamoDB's expression limits."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.config import Settings
from tally.core.aggregate import MessageTotals
from tally.core.bounds import MAX_BOUNDED_COUNTERS, bound_checks, parse_counter_bounds
from tally.core.defaults import parse_counter_defaults
from tally.core.items import CounterItem
from tally.core.sharding import parse_hot_keys
from tally.core.thresholds import (
    MAX_THRESHOLD_LEVELS,
    Direction,
    Levels,
    crossed,
    crossing_free,
    crossings,
    exact_checks,
    notification_id,
    parse_counter_thresholds,
    reset_counters,
)
from tally.errors import ConfigurationError
from tally.store.actions import add_update
from tally.store.expressions import condition_fits
from tests.support.reference import expected_crossings

if TYPE_CHECKING:
    from tally.core.numbers import Number

USAGE = parse_counter_thresholds("usage:*#calls>=800,1000;stock:*#stock<=10;stock:1#stock<=0")


# ------------------------------------------------------------------------------------------ the declaration
def test_a_declaration_reads_levels_per_pattern_counter_and_direction() -> None:
    assert USAGE.thresholds("usage:t") == {"calls": Levels(rising=(800, 1000))}
    # the first matching rule per (counter, direction) wins
    assert USAGE.thresholds("stock:1") == {"stock": Levels(falling=(10,))}
    assert USAGE.thresholds("other") == {}
    assert USAGE.is_thresholded("usage:t")
    assert not USAGE.is_thresholded(CounterItem("usage:t", "h#2026-11-26T10:00Z"))  # windows and shards: none


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("usage:*#calls", "expected PATTERN#COUNTER>=L1"),
        ("usage:*>=5", "expected PATTERN#COUNTER>=L1"),
        ("usage:*#calls>=five", "not a number"),
        ("usage:*#calls>=5,5", "a level is given twice"),
        ("hot#calls>=5", "hot key"),
        (";".join(f"k#c{n}>=1" for n in range(MAX_THRESHOLD_LEVELS + 1)), f"at most {MAX_THRESHOLD_LEVELS} levels"),
    ],
)
def test_a_malformed_or_unsupported_declaration_is_refused_naming_it(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_counter_thresholds(text, parse_hot_keys("hot=4"))


def test_settings_need_a_notifications_table_beside_thresholds() -> None:
    env = {"TALLY_COUNTERS_TABLE": "c", "TALLY_MARKERS_TABLE": "m", "TALLY_COUNTER_THRESHOLDS": "k#n>=5"}
    with pytest.raises(ConfigurationError, match="TALLY_NOTIFICATIONS_TABLE"):
        Settings.from_env(env, require_dlq=False)
    settings = Settings.from_env({**env, "TALLY_NOTIFICATIONS_TABLE": "n"}, require_dlq=False)
    assert settings.declarations.thresholds.thresholds("k") == {"n": Levels(rising=(5,))}
    assert settings.notifications_table == "n"


# --------------------------------------------------------------------------------------------- a crossing
@pytest.mark.parametrize(
    ("level", "direction", "before", "after", "expected"),
    [
        (800, Direction.RISING, 799, 800, True),  # at the level counts as passed
        (800, Direction.RISING, 800, 900, False),  # already there
        (800, Direction.RISING, 900, 700, False),  # downwards: not announced
        (10, Direction.FALLING, 11, 10, True),  # "drops to 10 or below"
        (10, Direction.FALLING, 10, 5, False),
        (10, Direction.FALLING, 5, 20, False),
        (Decimal("0.5"), Direction.RISING, Decimal("0.49"), Decimal("0.50"), True),
    ],
)
def test_what_a_step_crosses(
    level: Number, direction: Direction, before: Number, after: Number, expected: bool
) -> None:
    assert crossed(level, direction, before, after) is expected


def totals(*amounts: int, key: str = "usage:t", counter: str = "calls") -> list[MessageTotals]:
    return [MessageTotals(f"m{n}", {key: {counter: amount}}, 1) for n, amount in enumerate(amounts)]


def test_crossings_from_a_known_value_name_each_message_and_level() -> None:
    # GIVEN usage at 700 and steps +50, +300 (jumps 800 and 1000), -400, +200 (800 again)
    found = crossings(totals(50, 300, -400, 200), USAGE, {"usage:t": {"calls": Decimal(700)}}, at_ms=5)
    # THEN each crossing with its message, the value after its step and after the write
    assert [(c.level, c.message_id, c.step_value, c.value) for c in found] == [
        (800, "m1", 1050, 850),
        (1000, "m1", 1050, 850),
        (800, "m3", 850, 850),
    ]
    assert len({c.notification_id for c in found}) == 3
    assert {c.at_ms for c in found} == {5}


def test_a_missing_counter_holds_its_start_value() -> None:
    defaults = parse_counter_defaults("stock:*#stock=start:12")
    messages = totals(-3, key="stock:2", counter="stock")
    assert [c.step_value for c in crossings(messages, USAGE, {"stock:2": {}}, defaults, at_ms=0)] == [9]
    # the exact condition accepts a missing counter only when the value it was planned from is the start
    assert [
        check.if_missing
        for check in exact_checks([m.totals for m in messages], USAGE, {"stock:2": {}}, defaults)["stock:2"]
    ] == [True]
    known = {"stock:2": {"stock": Decimal(11)}}
    assert [c.if_missing for c in exact_checks([m.totals for m in messages], USAGE, known, defaults)["stock:2"]] == [
        False
    ]


def reset_to(message_id: str, value: int, key: str = "usage:t", counter: str = "calls") -> MessageTotals:
    return MessageTotals(message_id, {}, 1, sets={key: {counter: value}})


def test_a_reset_steps_from_the_value_before_it_to_its_own_value() -> None:
    # GIVEN usage at 700: +150 (crosses 800), a reset to 0 (downwards: not announced), +850 (800 again), a reset to
    # 1200 (crosses 1000 only: 800 was crossed by the step before), a reset to 1200 again (no move), -100
    messages = [totals(150)[0], reset_to("r1", 0), totals(0, 850)[1], reset_to("r2", 1200), reset_to("r3", 1200)]
    messages.append(totals(0, 0, -100)[2])
    found = crossings(messages, USAGE, {"usage:t": {"calls": Decimal(700)}}, at_ms=0)
    # THEN each crossing is named by the message that made it, the reset's by the reset, with the values after
    assert [(c.level, c.message_id, c.step_value, c.value) for c in found] == [
        (800, "m0", 850, 1100),
        (800, "m1", 850, 1100),
        (1000, "r2", 1200, 1100),
    ]
    # AND they are the one-by-one model's, a reset setting the value
    steps = [("m0", 150), ("r1", 0), ("m1", 850), ("r2", 1200), ("r3", 1200), ("m2", -100)]
    levels = USAGE.thresholds("usage:t")["calls"]
    assert [(c.level, c.direction, c.message_id) for c in found] == expected_crossings(
        700, steps, levels, {"r1", "r2", "r3"}
    )


def test_a_reset_of_a_thresholded_counter_is_always_planned_from_the_value_read() -> None:
    # a reset's crossing depends on the value before it, which no running-sum condition bounds: its write is
    # conditioned on exactly the value read, as a refused write's is; a counter without a level is left alone
    defaults = parse_counter_defaults("stock:*#stock=start:12")
    messages = [MessageTotals("r", {}, 1, sets={"stock:2": {"stock": 4, "other": 1}, "usage:t": {"x": 1}})]
    resets = reset_counters(messages, USAGE)
    assert resets == {"stock:2": ("stock",)}
    (check,) = exact_checks([], USAGE, {"stock:2": {}}, defaults, resets=resets)["stock:2"]
    assert (check.counter, check.value, check.if_missing) == ("stock", 12, True)
    assert [c.step_value for c in crossings(messages, USAGE, {"stock:2": {}}, defaults, at_ms=0)] == [4]


def test_notification_ids_are_deterministic_and_distinct() -> None:
    one = notification_id("usage:t", "calls", 800, Direction.RISING, "m1")
    assert one == notification_id("usage:t", "calls", Decimal("8E+2"), Direction.RISING, "m1")
    assert one == notification_id("usage:t", "calls", Decimal("800.0"), Direction.RISING, "m1")
    others = {
        notification_id("usage:t", "calls", 800, Direction.RISING, "m2"),
        notification_id("usage:t", "calls", 1000, Direction.RISING, "m1"),
        notification_id("usage:t", "calls", 800, Direction.FALLING, "m1"),
        notification_id("usage:tc", "alls", 800, Direction.RISING, "m1"),
    }
    assert one not in others
    assert len(others) == 4
    assert re.fullmatch("[0-9a-f]{32}", one)


# ------------------------------------------------------------------------------ the crossing-free condition
def holds(check_low: Number, check_high: Number, direction: Direction, value: Number) -> bool:
    if direction is Direction.RISING:
        return value < check_low or value >= check_high
    return value <= check_low or value > check_high


@given(
    start=st.integers(-12, 12),
    amounts=st.lists(st.integers(-6, 6).filter(bool), min_size=1, max_size=6),
)
def test_the_condition_holds_exactly_when_no_running_sum_changes_side(start: int, amounts: list[int]) -> None:
    # GIVEN rising levels 0 and 5, falling levels -3 and 2 on one counter, and a write of these steps
    thresholds = parse_counter_thresholds("k#n>=0,5;k#n<=-3,2")
    messages = totals(*amounts, key="k", counter="n")
    checks = crossing_free([m.totals for m in messages], thresholds)["k"]
    # WHEN the stored value is ``start``: the condition holds iff every running sum stays on its side of each level
    sums = [start]
    for amount in amounts:
        sums.append(sums[-1] + amount)
    for check in checks:
        level = check.low + max(0, *(s - start for s in sums))
        side = [(s >= level) if check.direction is Direction.RISING else (s <= level) for s in sums]
        assert holds(check.low, check.high, check.direction, start) == (len(set(side)) == 1)
    # THEN when it holds, the write records nothing: no step crosses any level announced
    if all(holds(c.low, c.high, c.direction, start) for c in checks):
        assert crossings(messages, thresholds, {"k": {"n": Decimal(start)}}, at_ms=0) == []
    # and the crossings from ``start`` are those of the one-by-one model
    expected = expected_crossings(
        start, [(m.message_id, a) for m, a in zip(messages, amounts, strict=True)], thresholds.thresholds("k")["n"]
    )
    found = crossings(messages, thresholds, {"k": {"n": Decimal(start)}}, at_ms=0)
    assert [(c.level, c.direction, c.message_id) for c in found] == expected


def test_a_missing_counter_passes_the_condition_when_its_start_value_does() -> None:
    thresholds = parse_counter_thresholds("k#n>=5")
    (near,) = crossing_free([{"k": {"n": 5}}], thresholds)["k"]  # 0 -> 5 crosses: a missing counter fails
    (far,) = crossing_free([{"k": {"n": 1}}], thresholds)["k"]
    assert (near.if_missing, far.if_missing) == (False, True)


def test_the_longest_condition_fits_one_expression() -> None:
    # GIVEN the most bounded counters and the most levels a deployment may declare, all on one key's counters
    names = [f"c{n}" for n in range(MAX_BOUNDED_COUNTERS)]
    bounds = parse_counter_bounds(";".join(f"k#{name}>=0;k#{name}<=9" for name in names))
    levels = ",".join(str(n) for n in range(100, 100 + MAX_THRESHOLD_LEVELS))  # far: a missing counter passes
    thresholds = parse_counter_thresholds(f"k#c0>={levels}")
    steps = [{"k": dict.fromkeys(names, 1)}, {"k": dict.fromkeys(names, -1)}]
    # WHEN one write moves each both ways, its counters missing (the longest condition)
    action, _ = add_update(
        "t",
        "k",
        dict.fromkeys(names, 0),
        None,
        bound_checks(steps, bounds)["k"],
        free=crossing_free(steps, thresholds)["k"],
    )
    condition = action["Update"]["ConditionExpression"]
    # THEN it stays within DynamoDB's 4 KB and 300 operators per expression
    assert len(condition.encode("utf-8")) <= 4096
    words = (" AND ", " OR ", ">=", "<=", " < ", " > ", " = ", "attribute_not_exists")
    assert sum(condition.count(word) for word in words) <= 300
    assert condition_fits(condition)  # the store's own check (a write over it is refused before it is sent)
