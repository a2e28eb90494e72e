"""The miss-rate tool's own judgement and arithmetic (tests/support/variant_misses.py): the seeds it reads, which
runs it counts as misses or defects, and the odds of a failing test it reports."""

from __future__ import annotations

import argparse

import pytest

from tests.support.variant_misses import VariantRun, failure_odds, parse_seeds


def _run(seed: int, *, passed: bool = False, missing: tuple[str, ...] = (), unbroken: bool = False) -> VariantRun:
    return VariantRun("a name", seed, passed=passed, figures_missing=missing, cpu_s=1.0, unbroken=unbroken)


def test_seeds_are_read_as_ranges_with_both_ends_and_lists() -> None:
    assert parse_seeds("7-10") == (7, 8, 9, 10)
    assert parse_seeds("7,9,12-13") == (7, 9, 12, 13)
    assert parse_seeds("7") == (7,)
    with pytest.raises(argparse.ArgumentTypeError, match="ends before it starts"):
        parse_seeds("9-7")


def test_a_broken_variants_run_misses_when_it_passes_or_fails_without_its_figures() -> None:
    assert not _run(7).missed
    assert _run(8, missing=("archive.gap_count",)).missed
    assert _run(9, passed=True).missed  # a run that passed shows no defect, whatever its figures
    assert not any(run.defect for run in (_run(7), _run(9, passed=True)))


def test_a_focused_run_misses_when_it_passes_without_its_draw_and_is_a_defect_when_it_fails() -> None:
    assert not _run(7, passed=True, unbroken=True).missed
    assert _run(8, passed=True, missing=("situation.x",), unbroken=True).missed
    failed = _run(9, passed=False, unbroken=True)
    assert failed.defect
    assert not failed.missed  # no retry excuses it: reported as a defect, not counted as a miss
    assert failed.describe().startswith("FAILED")


def test_the_test_fails_only_when_every_attempt_misses() -> None:
    # one run of four missed: a test of three attempts fails when all three miss, (1/4) ** 3
    runs = [_run(7), _run(8, missing=("x",)), _run(9), _run(10)]
    assert failure_odds(runs, 3) == pytest.approx(1 / 64)
    assert failure_odds([_run(7)], 4) == 0.0
    assert failure_odds([], 4) == 0.0
