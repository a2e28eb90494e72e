"""Run by tests/unit/test_budget.py with ``--cpu-budget`` (not collected otherwise): the fast tier's budgets made
tiny, one test that spends CPU past them and one that spends next to none."""

from __future__ import annotations

import time

from tests.support import budget

budget.FAST_TEST_BUDGET_S = 0.05
budget.FAST_TIER_BUDGET_S = 0.1


def test_spends_past_its_budget() -> None:
    started = time.process_time()
    while time.process_time() - started < 0.3:  # 0.3 CPU s: past 0.05 reference s on a machine 5x slower
        sum(range(1_000))


def test_spends_next_to_nothing() -> None:
    assert budget.FAST_TEST_BUDGET_S == 0.05
