"""Run by tests/unit/test_budget.py with ``--cpu-budget`` (not collected otherwise): the budgets of the fast and the
DynamoDB Local tiers made tiny, a test of each that spends CPU past them and one that spends next to none."""

from __future__ import annotations

import time

import pytest

from tests.support import budget
from tests.support.tiers import DYNAMODB_LOCAL

budget.TEST_BUDGETS_S.update({budget.FAST: 0.05, DYNAMODB_LOCAL: 0.05})
budget.TIER_BUDGETS_S.update({budget.FAST: 0.1, DYNAMODB_LOCAL: 0.1})


def _spend(seconds: float) -> None:
    started = time.process_time()
    while time.process_time() - started < seconds:  # 0.3 CPU s: past 0.05 reference s on a machine 5x slower
        sum(range(1_000))


def test_spends_past_its_budget() -> None:
    _spend(0.3)


@pytest.mark.dynamodb_local  # the marker alone: the tier and its budgets, without starting the JVM
def test_spends_past_its_dynamodb_local_budget() -> None:
    _spend(0.3)


def test_spends_next_to_nothing() -> None:
    assert budget.TEST_BUDGETS_S[budget.FAST] == 0.05
