"""CPU budgets for every tier, and the time each tier took.

Why: ``make test-fast`` is the loop developers run while editing, and CI's time is mostly CPU (the workers keep both
cores busy). A slow test is cheapest to fix where it is written, so every run of ``make test-fast`` and
``make test`` (``--cpu-budget``) fails a test that takes more than its tier's ``TEST_BUDGETS_S`` (the fast tier: no
emulator, no build, not marked ``slow``; ``slow``; ``moto``; ``dynamodb_local``; ``build``), and the run when a tier
together takes more than its ``TIER_BUDGETS_S``: the emulator tiers are most of CI's time, and a feature's tests
that would take CI past its target fail where they are added, not at the end of a round.

What is measured: the CPU a test's processes spend in its setup and call: the test process's own (every thread) and
that of the children started or ended meanwhile (those still running read from ``/proc``, those that
ended from ``os.times``). Not wall time, which on a shared machine measures the neighbours: a process waiting for a
core accrues none. Children that ran throughout (a session's DynamoDB Local, a module's local stack) are reported as
the tier's background, shown beside the tier and in no budget: their CPU moves with the machine's load far more
than the calibration below follows (the same suite's DynamoDB Local JVMs: 107 reference CPU-s on a quiet machine,
148 beside other engineers' runs), so a budget on it would fail CI for its neighbours. The teardown is left out: the last test of a module runs the
module's finalizers there (the docs pages' local stack stopping cost the last page 3.7 s), and a test's own
teardown deletes what its setup made.

Normalised, so that no verdict depends on the machine's speed: the CPU time of the same code moves by half from one
minute to the next on the shared VM (its neighbours share the cores' caches and siblings), so a fixed piece of pure
Python (``calibrate``) is timed the same way in the same process, between tests every ``CALIBRATE_EVERY_S``, and
each test's figure is scaled by ``REFERENCE_CALIBRATION_S`` / the median of the last few calibrations. A figure is
thus in *reference seconds*: the CPU the test would take on the project's 2-vCPU VM at a quiet hour, where the
calibration took ``REFERENCE_CALIBRATION_S``. Before a test is failed, the calibration is taken again and the
slower of the two counts, so a machine that slowed during the test does not fail it; a faster one does not hide
one. Under a Hypothesis profile that draws more examples than ``dev`` (``ci``: 300 against 50), a property test's
figure is divided by that ratio first, so one budget holds for both targets.

The verdict on a test is in its teardown report (``ERROR at teardown of ...``, with its figure and the budget); the
tier totals and the slowest test of each tier are printed after the run (``CPU and wall time per tier``), with or
without ``--cpu-budget``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

import pytest
from hypothesis import settings

from tests.support.tiers import BUILD, DYNAMODB_LOCAL, MOTO, SLOW

if TYPE_CHECKING:
    from collections.abc import Iterator

FAST = "fast"
TIERS: Final = (FAST, SLOW, MOTO, DYNAMODB_LOCAL, BUILD)
"""A test's tier is the heaviest thing it needs, in this order (a test using a moto server and DynamoDB Local is
in ``dynamodb_local``)."""

TEST_BUDGETS_S: Final = {
    FAST: 2.0,
    SLOW: 20.0,
    MOTO: 2.0,
    DYNAMODB_LOCAL: 90.0,
    BUILD: 25.0,
}
"""Reference CPU seconds one test of each tier may take (setup and call). fast: the slowest took 1.1 at the ``dev``
profile when this was set; a test that needs more belongs to ``slow`` (marked by hand, with why), where it gets
seconds of CPU, not minutes. moto: 0.66 at most. dynamodb_local: the smoke chaos run, every fault and section
together, 25 to 42 in CI (the session's JVM its background; run alone, its JVM starts in its setup and counts),
49 beside other engineers' runs, and more since its fenced writes are slow as often as any request; the
next, a docs page whose stack starts, about 20. build: the first test of tests/artifact/test_built_package.py, whose
setup builds the package, 10 to 15."""
TIER_BUDGETS_S: Final = {
    FAST: 60.0,
    SLOW: 90.0,
    MOTO: 6.0,
    DYNAMODB_LOCAL: 460.0,
    BUILD: 30.0,
}
"""Reference CPU seconds each tier's tests may take together (their own processes, as the per-test budgets count
them: the background and the collection, pytest-xdist's own work and the checks beside the tests come on top).

A tripwire for a change that adds about a third to a tier, not the 480-s target (which only a clean-clone run on a
quiet machine measures), with room for a loaded machine: the calibration follows the load only so far (runs beside
other engineers' took each tier 5-17% over the quiet figures). The figures they were set from (2,508 tests, the
clean-clone runs of two days on a quiet machine): fast 39 to 44 (1,782 tests), slow 60 to 66, moto 1.9 to 3.2,
dynamodb_local 295 to 368 (with 109 to 143 of background), build 13 to 18; the highest of any run since the fenced
apply's tests came in, loaded ones included: fast 52.5, slow 78, moto 3.6, dynamodb_local 415, build 20.5.
A tier over its budget fails the run: make its tests cheaper (docs/testing.md), or raise the budget in the same
change, saying why and what CI then takes."""

REFERENCE_CALIBRATION_S: Final = 0.013
"""CPU seconds ``calibrate`` takes on the project's 2-vCPU VM (AMD EPYC) at a quiet hour: 12.8 to 13.3 ms over 40
runs one minute, 13 to 21 ms over the hours other engineers ran their tests beside it."""
CALIBRATE_EVERY_S: Final = 5.0
"""Wall seconds between two calibrations of a process (two runs, about 30 ms: under 1% of the time)."""
_RECENT: Final = 5
"""Calibrations a test's figure is scaled by (their median): the last half minute or so."""
COSTLIEST: Final = 25
"""Tests listed by their CPU after the tiers: what CI's time is made of (the wall-time list beside it measures the
workers' contention as much as the tests)."""
COSTLIEST_MODULES: Final = 15
"""Test modules listed by their tests' CPU and the background meanwhile: many cheap tests of one module (a chaos
section each, a docs page each) cost as much as one expensive test, and only their sum shows it."""
DEV_EXAMPLES: Final = 50
"""Examples a property test draws at the ``dev`` profile (tests/conftest.py)."""

OPTION: Final = "--cpu-budget"
_FIGURE: Final = "cpu_reference_s"
WORKER_KEY: Final = "tally_cpu_budget"


def calibrate(repeats: int = 5) -> float:
    """CPU seconds of a fixed piece of pure Python (dicts, strings, integers, decimals, JSON, sorting), the least
    of ``repeats`` runs: what a test's own work is made of, without I/O."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        counts: dict[str, int] = {}
        total = Decimal(0)
        for number in range(24_000):
            name = f"key:{number % 97}"
            counts[name] = counts.get(name, 0) + number * 7 % 13
            total += Decimal(number) / 7
        text = json.dumps(sorted(counts.items()))
        json.loads(text)
        best = min(best, time.process_time() - started)
    return best


def _children_cpu() -> dict[int, float]:
    """CPU seconds (with their own reaped children) of this process's running children, by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no /proc: children still count once they end (os.times)
        return found
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as listing:
                pids = [int(pid) for pid in listing.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            found[pid] = sum(int(value) for value in fields[11:15]) / tick
    return found


@dataclass
class _Snapshot:
    own: float
    reaped: float
    running: dict[int, float]

    @classmethod
    def now(cls) -> _Snapshot:
        times = os.times()
        return cls(time.process_time(), times.children_user + times.children_system, _children_cpu())

    def cpu_since(self, before: _Snapshot) -> tuple[float, float]:
        """CPU seconds between ``before`` and this snapshot: (the process's own and its children's that started or
        ended in between, its children's that ran throughout). The second is a wider fixture's background process
        (the session's DynamoDB Local, a module's local stack): not the test's to answer for, though its load may
        be. A child that ended in between moved its whole CPU into ``reaped``: what it had spent before is taken
        off again."""
        started = sum(cpu for pid, cpu in self.running.items() if pid not in before.running)
        throughout = sum(cpu - before.running[pid] for pid, cpu in self.running.items() if pid in before.running)
        ended = sum(cpu for pid, cpu in before.running.items() if pid not in self.running)
        return (self.own - before.own) + (self.reaped - before.reaped) + started - ended, throughout


def tier_of(item: pytest.Item) -> str:
    """The heaviest thing the test needs (``TIERS``), from the markers tests/support/tiers.py keeps true."""
    for tier in reversed(TIERS[1:]):
        if item.get_closest_marker(tier) is not None:
            return tier
    return FAST


def _examples_ratio(item: pytest.Item) -> float:
    """How many times ``dev``'s examples the loaded profile draws, for a property test (else 1)."""
    if not getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return 1.0
    return max(1.0, settings.default.max_examples / DEV_EXAMPLES)


@dataclass
class _Totals:
    tests: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    background_s: float = 0.0
    slowest: tuple[float, str] = (0.0, "")
    costliest: list[tuple[float, float, str]] = field(default_factory=list)
    """(CPU, wall, node id) of the tier's ``COSTLIEST`` tests by CPU."""

    def add(self, nodeid: str, wall_s: float, cpu_s: float, background_s: float) -> None:
        self.tests += 1
        self.wall_s += wall_s
        self.cpu_s += cpu_s
        self.background_s += background_s
        self.slowest = max(self.slowest, (cpu_s, nodeid))
        self.costliest = sorted([*self.costliest, (cpu_s, wall_s, nodeid)], reverse=True)[:COSTLIEST]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


@dataclass(eq=False)  # a pytest plugin: registered and looked up by identity
class CpuBudget:
    """The pytest plugin: measures every test, judges the fast and slow tiers when ``enforce``, prints the tiers."""

    enforce: bool
    calibrations: list[float] = field(default_factory=lambda: [calibrate()])
    tiers: dict[str, _Totals] = field(default_factory=lambda: {tier: _Totals() for tier in TIERS})
    modules: dict[str, _Totals] = field(default_factory=dict)
    _calibrated_at: float = field(default_factory=time.monotonic)
    _started: dict[str, tuple[_Snapshot, str, float]] = field(default_factory=dict)
    _durations: dict[str, float] = field(default_factory=dict)
    _called: dict[str, _Snapshot] = field(default_factory=dict)
    """Snapshots at the end of each test's call: the teardown is not measured (below)."""
    _teardowns: int = 0

    def calibration_s(self) -> float:
        """The median of this process's last calibrations."""
        return _median(self.calibrations[-_RECENT:])

    def _calibrate_when_due(self) -> None:
        if time.monotonic() - self._calibrated_at >= CALIBRATE_EVERY_S:
            self.calibrations.append(calibrate(repeats=2))
            self._calibrated_at = time.monotonic()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        self._calibrate_when_due()
        self._started[item.nodeid] = (_Snapshot.now(), tier_of(item), _examples_ratio(item))
        self._durations[item.nodeid] = 0.0
        yield
        self._started.pop(item.nodeid, None)
        self._durations.pop(item.nodeid, None)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        self._durations[item.nodeid] = self._durations.get(item.nodeid, 0.0) + report.duration
        if report.when == "call":
            self._called[item.nodeid] = _Snapshot.now()
        if report.when != "teardown" or item.nodeid not in self._started:
            return
        before, tier, ratio = self._started[item.nodeid]
        own_s, background_s = (self._called.pop(item.nodeid, None) or _Snapshot.now()).cpu_since(before)
        cpu_s = own_s / ratio
        budget = TEST_BUDGETS_S[tier]
        calibration_s = self.calibration_s()
        figure = cpu_s * REFERENCE_CALIBRATION_S / calibration_s
        if self.enforce and figure > budget and report.passed:
            again = calibrate()  # the machine may have slowed during the test: the slower calibration counts
            self.calibrations.append(again)
            calibration_s = max(calibration_s, again)
            figure = cpu_s * REFERENCE_CALIBRATION_S / calibration_s
            if figure > budget:
                report.outcome = "failed"
                report.longrepr = (
                    f"{item.nodeid} took {figure:.2f} reference CPU seconds, over the {tier} tier's budget of "
                    f"{budget:g} per test ({cpu_s * ratio:.2f} s measured here"
                    + (f", divided by {ratio:g} for the profile's examples" if ratio != 1 else "")
                    + f"; calibration {calibration_s * 1000:.1f} ms against {REFERENCE_CALIBRATION_S * 1000:.1f}"
                    f" ms on the reference machine). Make it cheaper, or mark it slow with why "
                    f"(tests/support/budget.py, docs/testing.md)"
                )
        scale = REFERENCE_CALIBRATION_S / calibration_s
        report.__dict__[_FIGURE] = [
            tier,
            round(figure, 4),
            round(self._durations[item.nodeid], 4),
            background_s * scale,
        ]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Every process sees the reports (xdist's controller gets the workers'): the totals come from them."""
        if report.when != "teardown":
            return
        self._teardowns += 1
        measured = report.__dict__.get(_FIGURE)
        if measured is not None:
            tier, figure, wall_s, background_s = measured
            self.tiers[tier].add(report.nodeid, wall_s, figure, background_s)
            module = report.nodeid.split("::", 1)[0]
            self.modules.setdefault(module, _Totals()).add(report.nodeid, wall_s, figure, background_s)

    def failure(self) -> str | None:
        """Why the run fails on its budgets (``enforce`` only): a tier over its own, or no figure at all reached
        this process (a report that stopped carrying them would otherwise pass every run)."""
        if not self.enforce:
            return None
        if self._teardowns and not any(totals.tests for totals in self.tiers.values()):
            return f"no test's CPU figure reached this process ({self._teardowns} tests ran): tests/support/budget.py"
        over = [
            f"the {tier} tier took {self.tiers[tier].cpu_s:.1f} reference CPU s, over its budget of "
            f"{TIER_BUDGETS_S[tier]:g}"
            for tier in TIERS
            if self.tiers[tier].cpu_s > TIER_BUDGETS_S[tier]
        ]
        if over:
            return "; ".join(over) + (
                ": make the slowest tests above cheaper, or mark fast tests that need seconds of CPU slow "
                "(docs/testing.md)"
            )
        return None

    def lines(self) -> list[str]:
        lines = [
            f"{'tier':16}{'tests':>7}{'wall s':>10}{'CPU s':>10}{'+ background':>14}{'budget':>8}   slowest by CPU"
        ]
        for tier in TIERS:
            totals = self.tiers[tier]
            if totals.tests:
                cpu, nodeid = totals.slowest
                lines.append(
                    f"{tier:16}{totals.tests:7,}{totals.wall_s:10,.1f}{totals.cpu_s:10,.1f}"
                    f"{totals.background_s:14,.1f}{TIER_BUDGETS_S[tier]:8,.0f}   {cpu:.2f} {nodeid}"
                )
        low, middle, high = min(self.calibrations), _median(self.calibrations), max(self.calibrations)
        lines.append(
            f"CPU in reference seconds: each test's processes, scaled by the calibrations of its process "
            f"({len(self.calibrations)} taken: {low * 1000:.1f} to {high * 1000:.1f} ms, median {middle * 1000:.1f}) "
            f"against {REFERENCE_CALIBRATION_S * 1000:.1f} ms on the reference machine (tests/support/budget.py); "
            f"wall: the sum of the tests' durations; background: the CPU meanwhile of processes a wider fixture "
            f"started (DynamoDB Local's JVM, a module's local stack), in no budget"
        )
        states = ", ".join(
            f"{tier} {self.tiers[tier].cpu_s:.1f} of {TIER_BUDGETS_S[tier]:g}"
            + (" (over)" if self.tiers[tier].cpu_s > TIER_BUDGETS_S[tier] else "")
            for tier in TIERS
            if self.tiers[tier].tests
        )
        lines.append(
            f"budgets{'' if self.enforce else ' (not enforced: ' + OPTION + ')'}, reference CPU s: "
            f"{states or 'no test ran'}; one test at most "
            + ", ".join(f"{tier} {TEST_BUDGETS_S[tier]:g}" for tier in TIERS)
        )
        costliest = sorted((entry for totals in self.tiers.values() for entry in totals.costliest), reverse=True)
        if costliest:
            lines.append(f"the {COSTLIEST} costliest tests by reference CPU s (and their wall s):")
            lines.extend(f"{cpu:8.2f} {wall:8.1f}  {nodeid}" for cpu, wall, nodeid in costliest[:COSTLIEST])
        modules = sorted(self.modules.items(), key=lambda item: -(item[1].cpu_s + item[1].background_s))
        if modules:
            lines.append(
                f"the {COSTLIEST_MODULES} costliest test modules by reference CPU s (tests, CPU + background, wall s):"
            )
            lines.extend(
                f"{totals.tests:6,} {totals.cpu_s:8.1f} + {totals.background_s:6.1f} {totals.wall_s:8.1f}  {module}"
                for module, totals in modules[:COSTLIEST_MODULES]
            )
        failure = self.failure()
        if failure is not None:
            lines.append(f"FAILED: {failure}")
        return lines


def to_json(plugin: CpuBudget) -> str:
    return json.dumps({"calibrations": plugin.calibrations})


def merge_worker(plugin: CpuBudget, data: Any) -> None:
    """A worker's calibrations, for the controller's report (the controller itself runs no test)."""
    plugin.calibrations.extend(json.loads(data)["calibrations"])
