"""The CPU budgets of the fast tier (tests/support/budget.py): what is measured, and that a test over its budget
fails with its name, its figure and the budget."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.budget import FAST, TIERS, _Snapshot, calibrate, tier_of
from tests.support.tiers import BUILD, DYNAMODB_LOCAL, MOTO, SLOW

BURN = "import time\nstarted = time.process_time()\nwhile time.process_time() - started < 0.2:\n    pass\n"


def test_the_cpu_of_a_child_that_ended_during_the_test_counts() -> None:
    # GIVEN a snapshot, WHEN a child process spends 0.2 s of CPU and ends
    before = _Snapshot.now()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    # THEN its CPU is in the figure, beside the little the test process spent itself
    own, _ = _Snapshot.now().cpu_since(before)
    assert own >= 0.2


def _burning_child() -> subprocess.Popen[str]:
    """A child that spends 0.2 s of CPU, then waits to be told to end (its stdin closed)."""
    return subprocess.Popen(
        [sys.executable, "-c", BURN + "import sys\nsys.stdin.read()\n"], stdin=subprocess.PIPE, text=True
    )


def _end(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    child.wait()


def test_the_cpu_of_a_child_still_running_counts_and_is_not_counted_twice_once_it_ends() -> None:
    # GIVEN a snapshot, and then a child that spends 0.2 s of CPU and waits
    before = _Snapshot.now()
    child = _burning_child()
    try:
        # WHEN it has spent it while running (it counts from /proc), and then ends (it counts from os.times)
        while _Snapshot.now().cpu_since(before)[0] < 0.2:
            time.sleep(0.01)
        running, _ = _Snapshot.now().cpu_since(before)
    finally:
        _end(child)
    ended, _ = _Snapshot.now().cpu_since(before)
    # THEN the figure holds what it spent, and ending it added only what it spent since (its exit)
    assert 0.2 <= running <= ended < running + 0.2


def test_a_child_running_before_and_after_is_background_not_the_tests() -> None:
    # GIVEN a child started before the snapshot (a wider fixture's process, as DynamoDB Local's JVM)
    child = _burning_child()
    try:
        before = _Snapshot.now()
        # WHEN it spends its CPU while the test runs
        while _Snapshot.now().cpu_since(before)[1] < 0.1:
            time.sleep(0.01)  # not spinning: the test process's own CPU must stay small
        own, background = _Snapshot.now().cpu_since(before)
    finally:
        _end(child)
    # THEN it is background, and the test's own figure holds only what the test process spent
    assert background >= 0.1
    assert own < 0.1


def test_the_calibration_is_cpu_time_of_the_same_work() -> None:
    runs = [calibrate(repeats=1) for _ in range(3)]
    assert all(0 < run < 1 for run in runs)


class Marked:
    def __init__(self, *markers: str) -> None:
        self.markers = set(markers)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None


@pytest.mark.parametrize(
    ("markers", "tier"),
    [((), FAST), ((SLOW,), SLOW), ((MOTO,), MOTO), ((MOTO, DYNAMODB_LOCAL), DYNAMODB_LOCAL), ((SLOW, BUILD), BUILD)],
)
def test_a_tests_tier_is_the_heaviest_thing_it_needs(markers: tuple[str, ...], tier: str) -> None:
    assert tier in TIERS
    assert tier_of(Marked(*markers)) == tier  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("slower", [1, 2], ids=["this machine", "a machine twice as slow"])
def test_a_test_over_its_tiers_budget_fails_with_its_name_its_figure_and_the_budget(slower: int) -> None:
    # GIVEN a module whose fast and DynamoDB Local budgets are tiny (tests/support/budget_probe.py): a test of each
    # tier spends four times its tier's budget, a third next to none; on this machine, and with figures scaled as on a
    # machine twice as slow (a fixed spend of CPU seconds fell under the budget on the check machine)
    probe = Path(__file__).resolve().parents[1] / "support" / "budget_probe.py"
    # WHEN pytest runs it with the budgets enforced, as make test and make test-fast do
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--cpu-budget", str(probe)],
        cwd=probe.parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "TALLY_BUDGET_PROBE_SLOWER": str(slower)},
    )
    output = done.stdout + done.stderr
    # THEN each spending test fails at its teardown, named, with its figure and its tier's budget; the other passes;
    # each tier's total is over its own budget, and the run fails naming both
    assert done.returncode == 1, output
    assert "3 passed, 2 errors" in output, output  # the spending tests' calls passed; their teardowns carry the verdict
    assert "ERROR tests/support/budget_probe.py::test_spends_past_its_budget" in output, output
    assert "ERROR tests/support/budget_probe.py::test_spends_past_its_dynamodb_local_budget" in output, output
    assert "test_spends_past_its_budget took " in output, output
    assert "reference CPU seconds, over the fast tier's budget of 0.05 per test" in output, output
    assert "reference CPU seconds, over the dynamodb_local tier's budget of 0.05 per test" in output, output
    assert re.search(r"fast [0-9.]+ of 0\.1 \(over\)", output), output
    assert re.search(r"dynamodb_local [0-9.]+ of 0\.1 \(over\)", output), output
    assert "FAILED: the fast tier took " in output, output
    assert "; the dynamodb_local tier took " in output, output
    # AND the module's three tests are summed in the costliest modules' list
    assert re.search(r"^ +3 +[0-9.]+ \+ +[0-9.]+ +[0-9.]+  tests/support/budget_probe\.py$", output, re.M), output
