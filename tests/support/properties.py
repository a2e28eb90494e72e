"""Hypothesis settings shared by the property tests (the profiles themselves are in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

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
