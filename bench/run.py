"""``python -m bench.run``: the benchmark command (``make bench``, ``make bench-smoke``).

It starts its own DynamoDB Local (and stops it), runs every peer on every workload, then measures
handler CPU and peak memory in subprocesses, prints the results and the verdict on each target, and
writes ``benchmarks.md``, ``benchmarks.png`` and ``benchmarks.json`` into the output directory
(``docs/`` for the full size, ``.bench/`` for the smoke size).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench import memory
from bench.report import SuiteResults, as_json, chart, markdown, results_from_json, results_grid, verdicts_grid
from bench.results import console as results_console
from bench.suite import FULL, SMOKE, Workloads, run_workloads
from tally_local import machine
from tally_local.dynamodb_local import DynamoDBLocal

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from bench.suite import SuiteConfig

ROOT: Final = Path(__file__).resolve().parents[1]
SIZES: Final = {"full": FULL, "smoke": SMOKE}
DEFAULT_OUT: Final = {"full": ROOT / "docs", "smoke": ROOT / ".bench"}


def run_suite(
    config: SuiteConfig,
    out_dir: Path,
    *,
    label: str,
    command: str,
    console: Console,
    ddb: DynamoDBLocal | None = None,
    profile: bool = True,
    label_now: Callable[[], str] | None = None,
) -> SuiteResults:
    """Measure everything and write the report files; uses ``ddb`` if given, else starts its own.

    CPU and memory run first, in subprocesses, so that they and the DynamoDB runs (this process imported
    tally at start) measure the same code. ``label_now`` (e.g. ``machine.code_label``) is asked again at
    the end: if the code on disk changed meanwhile, the label says so.
    """
    started = time.monotonic()
    started_utc = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    about = {**machine.describe(), "command": command}
    with ExitStack() as stack:
        if ddb is None:
            console.print("starting DynamoDB Local ...")
            ddb = stack.enter_context(DynamoDBLocal())
        with console.status("generating the workloads ..."):
            workloads = Workloads.build(config.spec)
        with console.status("handler CPU, no I/O, one core ..."):
            cpu = json.loads(_bench_cpu("--events", str(config.cpu_events), "--repeats", str(config.cpu_repeats)))
            profile_text = _bench_cpu("--profile", "single", "--events", str(config.cpu_events)) if profile else ""
        with console.status(f"peak memory of one {config.memory_records:,}-record batch ..."):
            peak = memory.measure(workloads.streams["U/single"], config.memory_records, ddb.endpoint_url)
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            tasks: dict[str, Any] = {}

            def advance(label: str, done: int, total: int) -> None:
                if label not in tasks:
                    tasks[label] = progress.add_task(label, total=total)
                progress.update(tasks[label], completed=done, total=total)

            runs = []
            for run in run_workloads(ddb, config, workloads, advance):
                runs.append(run)
                progress.console.print(f"  {run.workload} {run.peer}: {run.events:,} events in {run.seconds:.1f} s")
    if label_now is not None and (now := label_now()) != label:
        label = f"{label} (the code on disk changed during the run, to: {now}; the figures are of the former)"
    results = SuiteResults(
        label=label,
        started_utc=started_utc,
        seconds=time.monotonic() - started,
        machine={**about, "load_after": machine.load()},
        config=config,
        runs=runs,
        cpu=cpu,
        memory=peak,
        profile=_trim_profile(profile_text),
    )
    write_report(results, out_dir)
    return results


def write_report(results: SuiteResults, out_dir: Path, *, with_json: bool = True) -> None:
    """``benchmarks.md``, ``benchmarks.png`` and (unless re-rendering) ``benchmarks.json`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    chart(results, out_dir / "benchmarks.png")
    (out_dir / "benchmarks.md").write_text(markdown(results, "benchmarks.png"), encoding="utf-8")
    if with_json:
        (out_dir / "benchmarks.json").write_text(as_json(results), encoding="utf-8")


def _bench_cpu(*args: str) -> str:
    command = [sys.executable, "-m", "bench.cpu", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800, cwd=ROOT).stdout


def _trim_profile(text: str, lines: int = 45) -> str:
    """The profile's call tree without pyinstrument's banner, cut to its heaviest lines."""
    body = [line for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(body) if line.lstrip()[:1].isdigit()), 0)
    return "\n".join(body[start : start + lines])


@click.command()
@click.option("--size", type=click.Choice(sorted(SIZES)), default="full", show_default=True, help="Workload size.")
@click.option(
    "--out-dir", type=click.Path(file_okay=False, path_type=Path), help="Default: docs/ (full), .bench/ (smoke)."
)
@click.option("--label", help="Which code is measured (default: the git revision).")
@click.option(
    "--powertools-body-id/--no-powertools-body-id",
    default=True,
    show_default=True,
    help="Also run Powertools on U keyed on the producer's id.",
)
@click.option(
    "--render",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Only re-render benchmarks.md and .png from a benchmarks.json (no measuring).",
)
def main(size: str, out_dir: Path | None, label: str | None, powertools_body_id: bool, render: Path | None) -> None:
    """Benchmark tally against the naive counter and Powertools idempotency on DynamoDB Local."""
    console = results_console()
    if render is not None:
        results = results_from_json(render.read_text(encoding="utf-8"))
        target = out_dir or render.parent
        write_report(results, target, with_json=False)
        console.print(f"re-rendered {target / 'benchmarks.md'} and {target / 'benchmarks.png'} from {render}")
        return
    config = replace(SIZES[size], powertools_body_id=powertools_body_id)
    command = "make bench" if size == "full" else "make bench-smoke"
    target = out_dir or DEFAULT_OUT[size]
    results = run_suite(
        config,
        target,
        label=label or machine.code_label(),
        command=command,
        console=console,
        profile=size == "full",
        label_now=None if label else machine.code_label,
    )
    console.print(results_grid(results).rich(f"tally bench: {results.label}"), verdicts_grid(results).rich("targets"))
    console.print(f"wrote {target / 'benchmarks.md'}, {target / 'benchmarks.png'}, {target / 'benchmarks.json'}")


if __name__ == "__main__":
    main()
