"""Run by tests/unit/test_budget.py with ``--cpu-budget`` (not collected otherwise): the budgets of the fast and the
DynamoDB Local tiers made tiny, a test of each that spends CPU past them and one that spends next to none.

``TALLY_BUDGET_PROBE_SLOWER`` (a number, 1 unless set) makes the reference machine that many times faster than it is:
the run then scales every figure as a machine that much slower than this one would."""

from __future__ import annotations

import os
import time

import pytest

from tests.support import budget
from tests.support.tiers import DYNAMODB_LOCAL

budget.TEST_BUDGETS_S.update({budget.FAST: 0.05, DYNAMODB_LOCAL: 0.05})
budget.TIER_BUDGETS_S.update({budget.FAST: 0.1, DYNAMODB_LOCAL: 0.1})
# the plugin reads the module's constant each time it scales a figure
_SLOWER = float(os.environ.get("TALLY_BUDGET_PROBE_SLOWER", "1"))
budget.REFERENCE_CALIBRATION_S = budget.REFERENCE_CALIBRATION_S / _SLOWER  # type: ignore[misc]

SPEND_REFERENCE_S = 0.4
"""What each spending test spends, in reference seconds: four times its tier's budget, so the figure stays over it
even when the plugin scales by a calibration twice as slow as the one taken here (it takes the slower of its median
and a fresh one before it fails a test, and a busy machine's calibrations vary twofold within a run)."""


def _spend(reference_s: float) -> None:
    # CPU seconds here, from a calibration taken now: a fixed number of CPU seconds is a different figure on every
    # machine, and on a slow one it fell under the tier's budget
    seconds = reference_s * budget.calibrate() / budget.REFERENCE_CALIBRATION_S
    started = time.process_time()
    while time.process_time() - started < seconds:
        sum(range(1_000))


def test_spends_past_its_budget() -> None:
    _spend(SPEND_REFERENCE_S)


@pytest.mark.dynamodb_local  # the marker alone: the tier and its budgets, without starting the JVM
def test_spends_past_its_dynamodb_local_budget() -> None:
    _spend(SPEND_REFERENCE_S)


def test_spends_next_to_nothing() -> None:
    assert budget.TEST_BUDGETS_S[budget.FAST] == 0.05
