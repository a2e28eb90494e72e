"""Unit tests for ``tally.core.numbers``: what a DynamoDB Number can hold, and exact addition."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tally.core.numbers import Number, add, storage_problem, to_wire
from tests.support.properties import independently_storable

THIRTY_EIGHT_NINES = 10**38 - 1


# --- storage_problem: boundaries -----------------------------------------------------------------------

STORABLE: list[object] = [
    pytest.param(0, id="int-zero"),
    pytest.param(1, id="int-one"),
    pytest.param(-1, id="int-minus-one"),
    pytest.param(THIRTY_EIGHT_NINES, id="int-38-nines"),
    pytest.param(-THIRTY_EIGHT_NINES, id="int-minus-38-nines"),
    pytest.param(10**38, id="int-10**38-one-significant-digit"),
    pytest.param(-(10**38), id="int-minus-10**38"),
    pytest.param(12345 * 10**100, id="int-trailing-zeros-do-not-count"),
    pytest.param(10**125, id="int-1E+125"),
    pytest.param(THIRTY_EIGHT_NINES * 10**88, id="int-largest-storable"),
    pytest.param(-THIRTY_EIGHT_NINES * 10**88, id="int-most-negative-storable"),
    pytest.param(Decimal("0"), id="dec-zero"),
    pytest.param(Decimal("-0"), id="dec-minus-zero"),
    pytest.param(Decimal("0E-500"), id="dec-zero-tiny-exponent"),
    pytest.param(Decimal("0E+500"), id="dec-zero-huge-exponent"),
    pytest.param(Decimal("0.1"), id="dec-0.1"),
    pytest.param(Decimal("1E+100"), id="dec-1E+100"),
    pytest.param(Decimal("1E-130"), id="dec-smallest-positive"),
    pytest.param(Decimal("-1E-130"), id="dec-smallest-negative"),
    pytest.param(Decimal("9.9999999999999999999999999999999999999E+125"), id="dec-largest"),
    pytest.param(Decimal("-9.9999999999999999999999999999999999999E+125"), id="dec-most-negative"),
    pytest.param(Decimal("1.234567890123456789012345678901234567"), id="dec-37-digits"),
    pytest.param(Decimal("12345678901234567890.123456789012345678"), id="dec-38-digits"),
    pytest.param(Decimal("1.2300000000000000000000000000000000000000000000"), id="dec-trailing-zeros"),
    pytest.param(Decimal("0.0000000000000000000000000000000000000000000123"), id="dec-leading-zeros"),
    pytest.param(Decimal("1" + "0" * 60 + "E-30"), id="dec-coefficient-with-many-trailing-zeros"),
]

UNSTORABLE: list[object] = [
    pytest.param(10**38 + 1, "39 significant digits", id="int-39-digits"),
    pytest.param(-(10**38) - 1, "39 significant digits", id="int-minus-39-digits"),
    pytest.param(10**126, "magnitude above", id="int-1E+126"),
    pytest.param(-(10**126), "magnitude above", id="int-minus-1E+126"),
    pytest.param(2**420 - 1, "127 significant digits", id="int-420-bits-all-digits"),
    pytest.param(2**420, "magnitude above", id="int-421-bits"),
    pytest.param(10**5000, "magnitude above", id="int-huge"),
    pytest.param(Decimal("1E+126"), "magnitude above", id="dec-1E+126"),
    pytest.param(Decimal("-1E+126"), "magnitude above", id="dec-minus-1E+126"),
    pytest.param(Decimal("9.9E-131"), "below 1E-130", id="dec-below-smallest"),
    pytest.param(Decimal("-9.9E-131"), "below 1E-130", id="dec-minus-below-smallest"),
    pytest.param(Decimal("1.00000000000000000000000000000000000001"), "39 significant", id="dec-39-digits"),
    pytest.param(Decimal("NaN"), "not a finite number", id="dec-nan"),
    pytest.param(Decimal("sNaN"), "not a finite number", id="dec-snan"),
    pytest.param(Decimal("Infinity"), "not a finite number", id="dec-infinity"),
    pytest.param(Decimal("-Infinity"), "not a finite number", id="dec-minus-infinity"),
]


@pytest.mark.parametrize("value", STORABLE)
def test_storage_problem_accepts_storable_numbers(value: Number) -> None:
    # GIVEN a number inside DynamoDB's Number range
    # WHEN it is checked
    problem = storage_problem(value)
    # THEN there is no problem
    assert problem is None


@pytest.mark.parametrize(("value", "reason"), UNSTORABLE)
def test_storage_problem_explains_unstorable_numbers(value: Number, reason: str) -> None:
    # GIVEN a number outside DynamoDB's Number range
    # WHEN it is checked
    problem = storage_problem(value)
    # THEN the problem says why
    assert problem is not None
    assert reason in problem


def _decimal_from_parts(sign: int, digits: list[int], exponent: int) -> Decimal:
    return Decimal((sign, tuple(digits), exponent))


# Coefficients of up to 45 digits (leading and trailing zeros included) with exponents that put the
# adjusted exponent on both sides of -130 and +125: every boundary of the storable range is in reach.
STORABLE_CANDIDATES = st.builds(
    _decimal_from_parts,
    st.integers(0, 1),
    st.lists(st.integers(0, 9), min_size=1, max_size=45),
    st.integers(-200, 120),
)


@given(value=STORABLE_CANDIDATES)
@example(value=Decimal("9.9999999999999999999999999999999999999E+125"))
@example(value=Decimal("1E-130"))
@example(value=Decimal("-0.000"))
def test_decimal_storage_problem_agrees_with_reference(value: Decimal) -> None:
    # GIVEN any finite Decimal
    # WHEN it is checked
    problem = storage_problem(value)
    # THEN it is accepted exactly when the reference definition says it is storable
    assert (problem is None) == independently_storable(Fraction(value))


@given(
    value=st.one_of(
        st.integers(),
        st.builds(lambda m, e: m * 10**e, st.integers(-(10**40), 10**40), st.integers(0, 130)),
    )
)
@example(value=10**38)
@example(value=10**38 + 1)
@example(value=-(10**38) - 1)
@example(value=THIRTY_EIGHT_NINES * 10**88)
@example(value=THIRTY_EIGHT_NINES * 10**88 + 10**88)
def test_int_storage_problem_agrees_with_reference(value: int) -> None:
    # GIVEN any Python int (the fast path for ints must agree with the Decimal path)
    # WHEN it is checked
    problem = storage_problem(value)
    # THEN it is accepted exactly when the reference definition says it is storable
    assert (problem is None) == independently_storable(Fraction(value))


# --- property (c): storable Decimals survive the wire round trip ----------------------------------------


@given(value=STORABLE_CANDIDATES.filter(lambda d: storage_problem(d) is None))
@example(value=Decimal("-0"))
@example(value=Decimal("1E+3"))
@example(value=Decimal("-9.9999999999999999999999999999999999999E+125"))
def test_storable_decimal_survives_str_round_trip(value: Decimal) -> None:
    # GIVEN a Decimal that storage_problem accepts
    # WHEN it is written as text and read back
    back = Decimal(str(value))
    wire_back = Decimal(to_wire(value))
    # THEN nothing changed: not the value, not the sign, digits or exponent
    assert back == value
    assert back.as_tuple() == value.as_tuple()
    assert wire_back.as_tuple() == value.as_tuple()


# --- add: exact, and ints stay ints ---------------------------------------------------------------------

ADDITIONS: list[object] = [
    pytest.param(1, 2, 3, int, id="int-int"),
    pytest.param(5, -7, -2, int, id="int-negative"),
    pytest.param(THIRTY_EIGHT_NINES, 1, 10**38, int, id="int-carry-past-38-digits"),
    pytest.param(10**200, 10**200, 2 * 10**200, int, id="int-huge-stays-int"),
    pytest.param(1, Decimal("0.5"), Decimal("1.5"), Decimal, id="int-decimal"),
    pytest.param(Decimal("0.5"), 1, Decimal("1.5"), Decimal, id="decimal-int"),
    pytest.param(Decimal("0.1"), Decimal("0.2"), Decimal("0.3"), Decimal, id="0.1+0.2-is-0.3"),
    pytest.param(
        Decimal("1E+125"),
        Decimal("1E-130"),
        Decimal((0, (1, *([0] * 254), 1), -130)),
        Decimal,
        id="widest-storable-span-256-digits",
    ),
    pytest.param(
        Decimal("9.9999999999999999999999999999999999999E+125"),
        Decimal("9.9999999999999999999999999999999999999E+125"),
        Decimal("1.99999999999999999999999999999999999998E+126"),
        Decimal,
        id="sum-beyond-storable-is-still-exact",
    ),
    pytest.param(Decimal("-0.0"), 0, Decimal("0.0"), Decimal, id="negative-zero"),
]


@pytest.mark.parametrize(("left", "right", "expected", "kind"), ADDITIONS)
def test_add_is_exact(left: Number, right: Number, expected: Number, kind: type) -> None:
    # GIVEN two numbers
    # WHEN they are added
    total = add(left, right)
    # THEN the sum is exact, and its type is int only when both operands were ints
    assert Fraction(total) == Fraction(left) + Fraction(right)
    assert total == expected
    assert type(total) is kind


def test_add_tenths_sum_to_exactly_one() -> None:
    # GIVEN 0.1 parsed from its literal text
    tenth = Decimal("0.1")
    total: Number = 0
    # WHEN it is added ten times
    for _ in range(10):
        total = add(total, tenth)
    # THEN the sum is exactly one, not 0.9999999999999999
    assert total == 1
    assert Fraction(total) == Fraction(1)


@given(
    values=st.lists(
        st.one_of(
            st.integers(-(10**38), 10**38),
            STORABLE_CANDIDATES.filter(lambda d: storage_problem(d) is None),
        ),
        max_size=20,
    )
)
def test_add_of_storable_numbers_never_rounds(values: list[Number]) -> None:
    # GIVEN any list of storable numbers with exponents in -200..120
    total: Number = 0
    # WHEN they are summed with add
    for value in values:
        total = add(total, value)
    # THEN the sum equals the exact rational sum, and stays an int when every operand is an int
    assert Fraction(total) == sum((Fraction(v) for v in values), Fraction(0))
    if all(type(v) is int for v in values):
        assert type(total) is int


# Zeros may carry any exponent and still be storable; so may a coefficient with many trailing zeros. The
# EXACT context is only 1000 digits wide and traps Rounded and Clamped, so adding such storable numbers
# raises instead of returning the exact sum.
EXTREME_BUT_STORABLE_ADDITIONS: list[object] = [
    pytest.param(Decimal("1." + "0" * 1500), 1, id="trailing-zeros-plus-int"),
    pytest.param(Decimal("0E-2000"), 1, id="zero-tiny-exponent-plus-int"),
    pytest.param(Decimal("0E+999999999"), Decimal("0E+999999999"), id="zeros-huge-exponent"),
    pytest.param(Decimal("0E-999999999"), Decimal("0E-999999999"), id="zeros-tiny-exponent"),
]


@pytest.mark.parametrize(("left", "right"), EXTREME_BUT_STORABLE_ADDITIONS)
def test_add_of_extreme_exponent_storable_numbers_is_exact(left: Decimal, right: Number) -> None:
    # GIVEN two numbers storage_problem accepts
    assert storage_problem(left) is None
    assert storage_problem(right) is None
    # WHEN they are added
    total = add(left, right)
    # THEN the sum is exact (and not an exception)
    assert Fraction(total) == Fraction(left) + Fraction(right)


TO_WIRE: list[object] = [
    pytest.param(42, "42", id="int"),
    pytest.param(-(10**38), "-" + "1" + "0" * 38, id="int-big"),
    pytest.param(Decimal("49.99"), "49.99", id="decimal"),
    pytest.param(Decimal("1e3"), "1E+3", id="exponent-kept"),
    pytest.param(Decimal("1E-130"), "1E-130", id="tiny"),
]


@pytest.mark.parametrize(("value", "text"), TO_WIRE)
def test_to_wire_writes_the_exact_number(value: Number, text: str) -> None:
    # GIVEN a storable number
    # WHEN it is written as a DynamoDB N string
    wire = to_wire(value)
    # THEN the text is exactly the number
    assert wire == text
    assert Decimal(wire) == value
