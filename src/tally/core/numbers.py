"""Exact decimal numbers, within what a DynamoDB Number can hold.

Deltas are kept as Python ``int`` when the producer sent an integer literal (fast, exact) and as
``Decimal`` otherwise (parsed from the literal's text, never through a binary float). Sums are taken in
``EXACT``, a context wide enough that no sum of storable numbers is ever rounded, and that traps
rounding anyway; whether a result still fits a DynamoDB Number is a separate, explicit check.
"""

from __future__ import annotations

from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    ROUND_CEILING,
    ROUND_FLOOR,
    Clamped,
    Context,
    Decimal,
    DivisionByZero,
    Inexact,
    InvalidOperation,
    Overflow,
    Rounded,
)
from typing import Final, TypeAlias

Number: TypeAlias = int | Decimal

MAX_SIGNIFICANT_DIGITS = 38
"""DynamoDB Numbers keep at most 38 significant digits (leading and trailing zeros do not count)."""
MAX_ADJUSTED_EXPONENT = 125
"""The largest storable magnitude is 9.99...E+125."""
MIN_ADJUSTED_EXPONENT = -130
"""The smallest non-zero storable magnitude is 1E-130."""

# Unbounded precision: a sum is never rounded, whatever its operands. Inexact and Rounded are trapped
# regardless, so a rounding would raise instead of silently miscounting. Decoded deltas are canonical
# (``canonical``), so in practice sums stay within a few hundred digits.
EXACT = Context(
    prec=MAX_PREC,
    Emax=MAX_EMAX,
    Emin=MIN_EMIN,
    traps=[InvalidOperation, DivisionByZero, Overflow, Inexact, Rounded, Clamped],
)

_ZERO = Decimal(0)
INT_STORABLE_BELOW: Final = 10**MAX_SIGNIFICANT_DIGITS
"""An int of smaller magnitude has at most 38 digits, so it is storable: one comparison judges it, where
``storage_problem`` is a call (the planner's loops over every counter of a batch take this shortcut)."""
# An int of more than 420 bits has more than 126 digits: beyond 9.99E+125 whatever its digits.
_INT_MAX_BITS = 420


def storage_problem(value: Number) -> str | None:
    """Say why ``value`` cannot be stored as a DynamoDB Number, or return ``None`` when it can."""
    if type(value) is int:
        if -INT_STORABLE_BELOW < value < INT_STORABLE_BELOW:
            return None
        if value.bit_length() > _INT_MAX_BITS:
            return "magnitude above 9.99E+125"
        value = Decimal(value)
    assert isinstance(value, Decimal)
    if not value.is_finite():
        return "not a finite number"
    if not value:
        return None
    _, digits, _ = value.as_tuple()
    significant = len(digits)
    for digit in reversed(digits):
        if digit:
            break
        significant -= 1
    if significant > MAX_SIGNIFICANT_DIGITS:
        return f"{significant} significant digits (DynamoDB keeps {MAX_SIGNIFICANT_DIGITS})"
    adjusted = value.adjusted()
    if adjusted > MAX_ADJUSTED_EXPONENT:
        return "magnitude above 9.99E+125"
    if adjusted < MIN_ADJUSTED_EXPONENT:
        return "non-zero magnitude below 1E-130"
    return None


LARGEST_STORABLE: Final = Decimal("9.9999999999999999999999999999999999999E+125")
"""The largest DynamoDB Number: 38 nines at the largest magnitude."""
_LOWEST_STORABLE: Final = LARGEST_STORABLE.copy_negate()  # exact: unary minus would round to 28 digits
SMALLEST_MAGNITUDE: Final = Decimal("1E-130")
"""The smallest non-zero magnitude a DynamoDB Number holds."""
_NEGATIVE_SMALLEST: Final = SMALLEST_MAGNITUDE.copy_negate()
_TOWARD_CEILING = Context(prec=MAX_SIGNIFICANT_DIGITS, rounding=ROUND_CEILING, Emax=MAX_EMAX, Emin=MIN_EMIN)
_TOWARD_FLOOR = Context(prec=MAX_SIGNIFICANT_DIGITS, rounding=ROUND_FLOOR, Emax=MAX_EMAX, Emin=MIN_EMIN)


def storable_at_least(value: Number) -> Number | None:
    """The smallest storable number at or above ``value``; None when none is (``value`` above the largest).

    A condition compares a stored value ``v`` with a value derived from others (a level or a bound minus a
    running sum), which may need more digits than a Number holds. Every ``v`` is storable, so
    ``v < c`` and ``v >= c`` hold exactly when ``v < storable_at_least(c)`` and ``v >= storable_at_least(c)``:
    no storable number lies between ``c`` and the result.
    """
    if storage_problem(value) is None:
        return value
    exact = Decimal(value)
    if exact > LARGEST_STORABLE:
        return None
    if exact < _LOWEST_STORABLE:
        return _LOWEST_STORABLE
    if _NEGATIVE_SMALLEST < exact < SMALLEST_MAGNITUDE:  # non-zero, finer than any Number
        return SMALLEST_MAGNITUDE if exact > 0 else Decimal(0)
    return canonical(_TOWARD_CEILING.plus(exact))


def storable_at_most(value: Number) -> Number | None:
    """The largest storable number at or below ``value``; None when none is (``value`` below the smallest).

    So ``v <= c`` and ``v > c`` hold, for every storable ``v``, exactly when ``v <= storable_at_most(c)`` and
    ``v > storable_at_most(c)`` (``storable_at_least``'s mirror)."""
    if storage_problem(value) is None:
        return value
    exact = Decimal(value)
    if exact < _LOWEST_STORABLE:
        return None
    if exact > LARGEST_STORABLE:
        return LARGEST_STORABLE
    if _NEGATIVE_SMALLEST < exact < SMALLEST_MAGNITUDE:
        return Decimal(0) if exact > 0 else _NEGATIVE_SMALLEST
    return canonical(_TOWARD_FLOOR.plus(exact))


def checked_canonical(value: Decimal) -> tuple[str | None, Decimal]:
    """``storage_problem`` and ``canonical`` of a Decimal in one pass, fast for plain literals.

    A literal without an exponent (``49.99``, the common case) is judged from its text, which CPython's
    decimal formats in C: no digit tuple is built. Anything else takes the general path.
    """
    text = str(value)
    if "E" in text or "N" in text or "n" in text or "I" in text:
        return storage_problem(value), value if not value.is_finite() else _canonical_decimal(value)
    digits = text.lstrip("-").replace(".", "").lstrip("0")
    if not digits:
        return None, _ZERO
    fraction_zeros = len(text) - len(text.rstrip("0")) if "." in text else 0
    significant = len(digits.rstrip("0"))
    if significant > MAX_SIGNIFICANT_DIGITS:
        return f"{significant} significant digits (DynamoDB keeps {MAX_SIGNIFICANT_DIGITS})", value
    adjusted = value.adjusted()
    if adjusted > MAX_ADJUSTED_EXPONENT:
        return "magnitude above 9.99E+125", value
    if adjusted < MIN_ADJUSTED_EXPONENT:
        return "non-zero magnitude below 1E-130", value
    if fraction_zeros:
        return None, Decimal(text.rstrip("0").rstrip("."))
    return None, value


def _canonical_decimal(value: Decimal) -> Decimal:
    result = canonical(value)
    assert isinstance(result, Decimal)
    return result


def canonical(value: Number) -> Number:
    """The same value without trailing zeros or a zero's exponent (``0E-999999`` becomes ``Decimal(0)``).

    Applied to every accepted delta, so that an exponent far from the value's digits can never make an
    exact sum enormous. Works on the digit tuple: no context, no rounding.
    """
    if type(value) is int:
        return value
    assert isinstance(value, Decimal)
    if not value:
        return _ZERO
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    trailing = len(digits) - len(bytes(digits).rstrip(b"\x00"))
    if trailing == 0:
        return value
    return Decimal((sign, digits[:-trailing], exponent + trailing))


def add(left: Number, right: Number) -> Number:
    """Add exactly: ints stay ints, anything with a Decimal is summed in ``EXACT``."""
    if type(left) is int and type(right) is int:
        return left + right
    return EXACT.add(left, right)


def to_wire(value: Number) -> str:
    """The DynamoDB ``N`` string of a storable number (``Decimal`` keeps its own exponent form)."""
    return str(value)
