"""Conditions never need more digits than the values they compare (Hypothesis, over 38-digit extremes).

A bounded or thresholded write compares the stored value ``v`` with a bound or a level minus a running sum of its
steps. Each of those is storable, their difference need not be (``0.125 - 123...456``: 39 significant digits), and
DynamoDB refuses a condition value it could not store. So every condition value is rounded outward to a storable
one (``storable_at_least``, ``storable_at_most``): no storable ``v`` compares with it otherwise than with the exact
one. These properties check both halves: every value a condition carries is storable, and the condition with those
values holds for exactly the stored values the exact one holds for, including the values right at its ends.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from hypothesis import example, given
from hypothesis import strategies as st

from tally.core.aggregate import MessageTotals
from tally.core.bounds import BoundRule, CounterBounds, bound_checks
from tally.core.numbers import (
    LARGEST_STORABLE,
    SMALLEST_MAGNITUDE,
    add,
    storable_at_least,
    storable_at_most,
    storage_problem,
)
from tally.core.patterns import KeyPattern
from tally.core.thresholds import CounterThresholds, CrossingFree, Direction, ThresholdRule, crossing_free
from tally.store.actions import add_update

if TYPE_CHECKING:
    from collections.abc import Iterable

    from tally.core.numbers import Number


def _decimal(sign: int, digits: list[int], exponent: int) -> Decimal:
    return Decimal((sign, tuple(digits), exponent))


STORABLE = st.one_of(
    # 36 to 38 significant digits, at magnitudes from a tenth to 10^38: where a fraction of a level and a
    # 36-digit delta need more digits together than either alone
    st.builds(_decimal, st.integers(0, 1), st.lists(st.integers(0, 9), min_size=36, max_size=38), st.integers(-3, 2)),
    # short fractions (levels and bounds such as 0.125)
    st.builds(_decimal, st.integers(0, 1), st.lists(st.integers(0, 9), min_size=1, max_size=4), st.integers(-6, 0)),
    # anywhere in the range, the ends included
    st.builds(_decimal, st.integers(0, 1), st.lists(st.integers(0, 9), min_size=1, max_size=38), st.integers(-167, 88)),
    st.sampled_from([LARGEST_STORABLE, LARGEST_STORABLE.copy_negate(), SMALLEST_MAGNITUDE, Decimal(0)]),
).filter(lambda value: storage_problem(value) is None)


def _negate(value: Number) -> Number:
    return -value if isinstance(value, int) else value.copy_negate()


def _neighbours(value: Number | None) -> list[Number]:
    """``value`` and the storable numbers right above and below it (what a stored value at an end can be)."""
    if value is None:
        return []
    exact = Decimal(value)
    step = Decimal((0, (1,), (exact.adjusted() if exact else -130) - 38))
    found = [value]
    for near in (storable_at_least(add(exact, step)), storable_at_most(add(exact, _negate(step)))):
        if near is not None:
            found.append(near)
    return found


def _stored_values(drawn: Iterable[Number], *ends: Number | None) -> list[Number]:
    return [value for value in [*drawn, *(near for end in ends for near in _neighbours(end))] if value is not None]


# ------------------------------------------------------------------------------------------------ the numbers
@given(left=STORABLE, right=STORABLE, stored=st.lists(STORABLE, max_size=3))
@example(left=Decimal("0.125"), right=123456789012345678901234567890123456, stored=[])
@example(left=LARGEST_STORABLE, right=LARGEST_STORABLE.copy_negate(), stored=[])
@example(left=Decimal("1E-130"), right=Decimal("1.0000000000000000000000000000000000001E-130"), stored=[])
def test_an_end_rounded_outward_compares_with_every_stored_value_as_the_exact_one(
    left: Number, right: Number, stored: list[Number]
) -> None:
    # GIVEN an end derived from two storable numbers (a level minus a running sum), which may not be storable
    end = add(left, _negate(right))
    at_least, at_most = storable_at_least(end), storable_at_most(end)
    # THEN what a condition carries instead is storable
    assert at_least is None or storage_problem(at_least) is None
    assert at_most is None or storage_problem(at_most) is None
    # and every stored value, those right at the ends too, compares with it as with the exact end
    exact = Fraction(end)
    for value in _stored_values(stored, at_least, at_most, left, right):
        held = Fraction(value)
        assert (held < exact) == (at_least is None or held < Fraction(at_least))  # `<` and `>=`
        assert (held <= exact) == (at_most is not None and held <= Fraction(at_most))  # `<=` and `>`


# ------------------------------------------------------------------------------------------------- bounds
@given(
    floor=STORABLE,
    ceiling=STORABLE,
    amounts=st.lists(STORABLE.filter(bool), min_size=1, max_size=4),
    stored=st.lists(STORABLE, max_size=3),
)
@example(floor=Decimal("-0.125"), ceiling=Decimal("0.125"), amounts=[-123456789012345678901234567890123456], stored=[])
def test_a_bound_condition_holds_for_exactly_the_stored_values_every_step_keeps(
    floor: Number, ceiling: Number, amounts: list[Number], stored: list[Number]
) -> None:
    # GIVEN a floor and a ceiling (either order) and steps whose every running sum is storable (the planner's cut)
    rules = CounterBounds(
        (BoundRule(KeyPattern("k"), "n", floor=floor), BoundRule(KeyPattern("k"), "n", ceiling=ceiling))
    )
    sums = _running_sums(amounts)
    if sums is None:
        return
    checks = bound_checks([{"k": {"n": amount}} for amount in amounts], rules).get("k", ())
    # THEN every value the condition carries is storable
    for check in checks:
        assert all(storage_problem(value) is None for value in (check.at_least, check.at_most) if value is not None)
    ends = [value for check in checks for value in (check.at_least, check.at_most)]
    # and it holds for a stored value exactly when no step, in order, crosses the bound it moves toward
    for value in _stored_values(stored, *ends, floor, ceiling):
        held = Fraction(value)
        keeps = all(
            (amount > 0 or held + Fraction(total) >= Fraction(floor))
            and (amount < 0 or held + Fraction(total) <= Fraction(ceiling))
            for amount, total in zip(amounts, sums, strict=True)
        )
        condition = all(
            (check.at_least is None or held >= Fraction(check.at_least))
            and (check.at_most is None or held <= Fraction(check.at_most))
            for check in checks
        )
        assert condition == keeps


# --------------------------------------------------------------------------------------------- thresholds
@given(
    level=STORABLE,
    amounts=st.lists(STORABLE.filter(bool), min_size=1, max_size=4),
    stored=st.lists(STORABLE, max_size=3),
)
@example(level=Decimal("0.125"), amounts=[123456789012345678901234567890123456], stored=[])
@example(level=Decimal("-0.125"), amounts=[-123456789012345678901234567890123456], stored=[])
@example(level=LARGEST_STORABLE.copy_negate(), amounts=[LARGEST_STORABLE], stored=[LARGEST_STORABLE])
def test_a_crossing_condition_holds_for_exactly_the_stored_values_no_step_crosses_from(
    level: Number, amounts: list[Number], stored: list[Number]
) -> None:
    # GIVEN a rising and a falling level and steps whose every running sum is storable
    thresholds = CounterThresholds(
        (
            ThresholdRule(KeyPattern("k"), "n", Direction.RISING, (level,)),
            ThresholdRule(KeyPattern("k"), "n", Direction.FALLING, (level,)),
        )
    )
    sums = _running_sums(amounts)
    if sums is None:
        return
    messages = [MessageTotals(f"m{n}", {"k": {"n": amount}}, 1) for n, amount in enumerate(amounts)]
    checks = crossing_free([m.totals for m in messages], thresholds).get("k", ())
    # THEN every value the condition carries is storable
    for check in checks:
        assert all(storage_problem(value) is None for value in (check.low, check.high) if value is not None)
    ends = [value for check in checks for value in (check.low, check.high)]
    # and, per direction, it holds for a stored value exactly when every running sum (0 included) stays on one
    # side of the level (a direction with no check holds for every stored value)
    for value in _stored_values(stored, *ends, level):
        held = Fraction(value)
        totals = [held, *(held + Fraction(total) for total in sums)]
        for direction in Direction:
            check = next((c for c in checks if c.direction is direction), None)
            sides = {
                (t >= Fraction(level)) if direction is Direction.RISING else (t <= Fraction(level)) for t in totals
            }
            assert _holds(check, held) == (len(sides) == 1)


def _running_sums(amounts: list[Number]) -> list[Number] | None:
    """The running sums of ``amounts``, or None when one is not storable (the planner never writes those)."""
    sums: list[Number] = []
    total: Number = 0
    for amount in amounts:
        total = add(total, amount)
        if storage_problem(total) is not None:
            return None
        sums.append(total)
    return sums


def _holds(check: CrossingFree | None, held: Fraction) -> bool:
    if check is None:
        return True
    low = None if check.low is None else Fraction(check.low)
    high = None if check.high is None else Fraction(check.high)
    if check.direction is Direction.RISING:
        return (low is not None and held < low) or (high is not None and held >= high)
    return (low is not None and held <= low) or (high is not None and held > high)


def test_an_end_beyond_every_number_leaves_its_side_out_of_the_expression() -> None:
    # GIVEN a rising level at the largest Number and a step down by as much: the upper end, the level minus the
    # lowest running sum, lies beyond every Number (``v >= high`` never holds)
    lowest = LARGEST_STORABLE.copy_negate()
    thresholds = CounterThresholds((ThresholdRule(KeyPattern("k"), "n", Direction.RISING, (LARGEST_STORABLE,)),))
    (check,) = crossing_free([{"k": {"n": lowest}}], thresholds)["k"]
    assert (check.low, check.high) == (LARGEST_STORABLE, None)
    # WHEN the write is built, THEN the side is left out, and so is its value
    update: Any = add_update("T", "k", {"n": lowest}, free=(check,))[0]["Update"]
    assert update["ConditionExpression"] == "(attribute_not_exists(#t0) OR #t0 < :tl0)"
    assert set(update["ExpressionAttributeValues"]) == {":v0", ":tl0"}
