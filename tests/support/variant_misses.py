"""How often a broken variant of tests/integration/test_chaos.py fails its chaos run without its defect's own
figures, over many seeds: what a focused configuration's size must be judged by (docs/testing.md).

The test gives a variant ``VARIANT_RUNS`` runs, each with the next seed, and fails when none shows the figures;
the threads' interleaving, not only the seed, decides which invocation a fault meets, so a variant that misses
one run in three passes most CI runs and fails some (one did, on a machine twice as fast as the day before).
This runs each named variant once per seed, on a DynamoDB Local of its own, and says how often it missed and how
often the test would then fail::

    .venv/bin/python -m tests.support.variant_misses "counted copies behind a refused content reported done" \\
        --seeds 7-22

With ``--unbroken`` the names are focused configurations instead (the ``FOCUSED`` tables of test_chaos.py and
test_chaos_patterns.py), run through the production wiring: a run that misses is one that did not draw what its
test needs (``UNBROKEN_RUNS`` runs a test), and a run that does not pass is a defect, which the tool reports and
exits 1 on. Without a name it lists the variants (or the configurations). Beside three busy loops (``python3 -c
'while True: pass' &``) it measures the loaded machine CI is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tally_local.chaos.config import ChaosConfig
    from tally_local.chaos.harness import PipelineFactory


@dataclass(frozen=True)
class VariantRun:
    """One run at one seed: of a broken variant (it must fail, showing its defect's figures), or of a focused
    configuration through the production wiring (``unbroken``: it must pass, having drawn what its test needs)."""

    name: str
    seed: int
    passed: bool
    figures_missing: tuple[str, ...]
    cpu_s: float
    unbroken: bool = False

    @property
    def missed(self) -> bool:
        """The test would try the next seed: a broken variant's run passed or did not show its figures, a focused
        run did not draw them."""
        if self.unbroken:
            return self.passed and bool(self.figures_missing)
        return self.passed or bool(self.figures_missing)

    @property
    def defect(self) -> bool:
        """A focused run through the production wiring that did not pass: no retry excuses it."""
        return self.unbroken and not self.passed

    def describe(self) -> str:
        if self.defect:
            return "FAILED unbroken: a defect"
        missing = f" (missing: {', '.join(self.figures_missing)})" if self.figures_missing else ""
        if self.unbroken:
            return f"missed the draw{missing}" if self.missed else "drew what its test needs"
        passed = " (the run passed)" if self.passed else ""
        return f"missed{missing}{passed}" if self.missed else "showed its figures"


def parse_seeds(spelled: str) -> tuple[int, ...]:
    """``7-22`` (both ends included) or ``7,9,12``."""
    seeds: list[int] = []
    for part in spelled.split(","):
        first, _, last = part.partition("-")
        start = int(first)
        stop = int(last) if last else start
        if stop < start:
            raise argparse.ArgumentTypeError(f"seeds {part!r}: the range ends before it starts")
        seeds.extend(range(start, stop + 1))
    return tuple(seeds)


def failure_odds(runs: Sequence[VariantRun], attempts: int) -> float:
    """The chance the test fails with this miss rate: every one of its ``attempts`` runs misses."""
    if not runs:
        return 0.0
    return (sum(run.missed for run in runs) / len(runs)) ** attempts


def _targets(unbroken: bool) -> dict[str, tuple[PipelineFactory, ChaosConfig, tuple[str, ...]]]:
    """By name: the wiring, configuration and figures of each broken variant, or of each focused configuration
    (the production wiring, and what its test needs it to draw)."""
    if not unbroken:
        from tests.integration.test_chaos import BROKEN_VARIANTS  # noqa: PLC0415

        return dict(BROKEN_VARIANTS)
    from tally_local.chaos.harness import wire_pipeline  # noqa: PLC0415
    from tests.integration import test_chaos, test_chaos_patterns  # noqa: PLC0415

    tables = (test_chaos.FOCUSED, test_chaos_patterns.FOCUSED)
    clashes = set(tables[0]) & set(tables[1])
    if clashes:
        raise RuntimeError(f"focused configurations named alike in two test files: {sorted(clashes)}")
    return {name: (wire_pipeline, config, needs) for table in tables for name, (config, needs) in table.items()}


def _run(
    target: tuple[PipelineFactory, ChaosConfig, tuple[str, ...]], name: str, seeds: Sequence[int], *, unbroken: bool
) -> list[VariantRun]:
    from tally_local.dynamodb_local import SHORT_LIVED_JVM_OPTIONS, DynamoDBLocal  # noqa: PLC0415
    from tests.support.chaos import run_on, situations_missing  # noqa: PLC0415
    from tests.support.tables import fresh_tables  # noqa: PLC0415

    factory, config, figures = target
    runs = []
    with DynamoDBLocal(jvm_options=SHORT_LIVED_JVM_OPTIONS) as ddb:
        for seed in seeds:
            started = time.process_time()
            with fresh_tables(ddb) as tables:
                result = run_on(ddb, tables, replace(config, seed=seed), pipeline_factory=factory)
            run = VariantRun(
                name=name,
                seed=seed,
                passed=result.passed,
                figures_missing=tuple(situations_missing(result, figures)),
                cpu_s=round(time.process_time() - started, 2),
                unbroken=unbroken,
            )
            print(f"  seed {seed}: {run.describe()}, {run.cpu_s} s of this process's CPU", file=sys.stderr, flush=True)
            runs.append(run)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.variant_misses", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("names", nargs="*", help="broken variants (or focused configurations) by name; none: list them")
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("7-14"), help="e.g. 7-22 or 7,9 (7-14)")
    parser.add_argument("--unbroken", action="store_true", help="focused configurations, run unbroken, by name")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)

    from tests.integration.test_chaos import VARIANT_RUNS  # noqa: PLC0415
    from tests.support.chaos import UNBROKEN_RUNS  # noqa: PLC0415

    targets = _targets(args.unbroken)
    attempts = UNBROKEN_RUNS if args.unbroken else VARIANT_RUNS
    if not args.names:
        print("\n".join(sorted(targets)))
        return 0
    unknown = [name for name in args.names if name not in targets]
    if unknown:
        kind = "focused configuration" if args.unbroken else "broken variant"
        parser.error(f"no {kind} named {', '.join(map(repr, unknown))} (run without names to list them)")
    summary = []
    defects = 0
    for name in args.names:
        print(f"{name}: {len(args.seeds)} seeds", file=sys.stderr)
        runs = _run(targets[name], name, args.seeds, unbroken=args.unbroken)
        defects += sum(run.defect for run in runs)
        summary.append(
            {
                "name": name,
                "runs": len(runs),
                "missed": sum(run.missed for run in runs),
                "missed_seeds": [run.seed for run in runs if run.missed],
                "failed_unbroken_seeds": [run.seed for run in runs if run.defect],
                "test_failure_odds": failure_odds(runs, attempts),
                "cpu_s_per_run": round(sum(run.cpu_s for run in runs) / len(runs), 2),
            }
        )
    if args.json:
        print(json.dumps({"runs_a_test_gets": attempts, "unbroken": args.unbroken, "results": summary}, indent=2))
        return 1 if defects else 0
    print(f"{'missed':>8} {'test fails (' + str(attempts) + ' runs)':>22} {'CPU s/run':>10}  name")
    for row in summary:
        odds = row["test_failure_odds"]
        print(
            f"{row['missed']:>3} of {row['runs']:<2} {'1 in ' + format(round(1 / odds), ',') if odds else 'never seen':>22}"
            f" {row['cpu_s_per_run']:>10}  {row['name']}"
        )
    if defects:
        print(f"{defects} unbroken run(s) FAILED: a defect, not a miss (the seeds above)")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
