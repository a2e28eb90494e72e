"""Hypothesis settings and drawn-data shapes shared by the property tests (the profiles are in tests/conftest.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from fractions import Fraction

T = TypeVar("T")

EMULATOR_SHARE = 15
"""A property whose every example writes to DynamoDB Local draws this fraction (1/N) of the profile's examples:
an example there costs tens of milliseconds to seconds, against microseconds for a pure one."""


def on_emulator(**overrides: Any) -> settings:
    """Settings for a property test whose examples run against an emulator through function-scoped fixtures.

    The profile loaded by tests/conftest.py decides the count (at least 5); the fixtures (fresh tables per test,
    not per example) are shared by the examples on purpose, hence the health check left out.
    """
    chosen: dict[str, Any] = {
        "max_examples": max(5, settings.default.max_examples // EMULATOR_SHARE),
        "deadline": None,
        "suppress_health_check": [HealthCheck.function_scoped_fixture],
    }
    return settings(**(chosen | overrides))


def sent_in_batches(sent: list[T], repeats: list[int], cuts: list[int]) -> list[list[T]]:
    """``sent`` then the items at ``repeats`` sent again later, cut into batches of the drawn sizes in turn."""
    order = sent + [sent[n] for n in repeats if n < len(sent)]
    batches: list[list[T]] = []
    start = 0
    for cut in cuts * len(order):
        if start >= len(order):
            break
        batches.append(order[start : start + cut])
        start += cut
    return batches


MAX_DIGITS = 38
MAX_ADJUSTED = 125
MIN_ADJUSTED = -130


def independently_storable(value: Fraction) -> bool:
    """Reference check written from the DynamoDB docs, sharing no code with ``storage_problem``.

    At most 38 significant digits (leading and trailing zeros do not count), magnitude from 1E-130 up to
    9.99...E+125, and zero.
    """
    if value == 0:
        return True
    numerator, denominator = abs(value.numerator), value.denominator
    scale = 0
    while (numerator * 10**scale) % denominator:
        scale += 1
        if scale >= 5_000:
            raise ValueError(f"{value} is not a terminating decimal")
    coefficient = numerator * 10**scale // denominator
    while coefficient % 10 == 0:
        coefficient //= 10
        scale -= 1
    digits = len(str(coefficient))
    adjusted = digits - 1 - scale
    return digits <= MAX_DIGITS and MIN_ADJUSTED <= adjusted <= MAX_ADJUSTED
