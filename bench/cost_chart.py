"""``python -m bench.cost_chart``: write units per event against batch size, windows on and off.

Why: the template's ``BatchSize`` and batching window move tally's bill more than anything else, and a
user choosing them trades cost against latency. This draws the trade-off for workload U (1,000 Zipf
keys, two counters): ``tally.cost.model``'s curves (write units per event at each ``BatchSize`` from 10
to 10,000, every batch cut to Lambda's 6 MB payload as ``Traffic.record_bytes`` counts it, so a curve
goes flat where the payload, not ``BatchSize``, decides the batch) for single-event messages, messages
of 100 packed events, and of 1,000 (the high-volume setting: the producer's ``max_keys_per_message``
raised), each with the template's windows (hour, day) on and off; and, with ``--measure``, measured
points on them: the real pipeline on DynamoDB Local billed by ``tally_local.kit.meter`` (``bench.plan_check``'s
runs, no re-sends), so the chart shows where the model was checked.

Prints a table (or ``--json``) and writes the chart (SVG, matplotlib from the ``bench`` extra) and its
data (JSON, so ``--from-data`` redraws it without measuring again).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

from bench.plan_check import PREDICTED_MEASURED, Config, run_checks, store_page_bytes, u_records_per_batch, u_traffic
from bench.results import EXACT, Grid, table
from bench.results import console as results_console
from bench.workloads import PACK
from tally.cost.model import Prices, simulate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from tally.cost.model import Traffic

KEYS: Final = 1000
HIGH_PACK: Final = 1000
CURVE_SIZES: Final = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000)
TARGET: Final = 0.03
"""The high-volume target: packed U at <= 0.03 write units per event with the high-volume settings."""
ROOT: Final = Path(__file__).resolve().parents[1]
DEFAULT_SVG: Final = ROOT / "docs" / "cost-by-batch-size.svg"
DEFAULT_DATA: Final = ROOT / "docs" / "cost-by-batch-size.json"
BENCHMARKS_MD: Final = ROOT / "docs" / "benchmarks.md"
SECTION: Final = "## Cost against batch size and windows"


@dataclass(frozen=True, slots=True)
class Series:
    """One curve: a way of sending events, windows on or off."""

    pack: int
    """Events per message (1: single-event messages)."""
    windows: bool

    @property
    def name(self) -> str:
        kind = "single events" if self.pack == 1 else f"packed ({self.pack:,} events/message)"
        return f"{kind}, windows {'hour,day' if self.windows else 'off'}"

    def traffic(self) -> Traffic:
        return u_traffic(self.pack, windows=self.windows, keys=KEYS)

    @property
    def cut(self) -> int:
        """The most records Lambda's 6 MB payload holds."""
        return u_records_per_batch(self.pack)


SERIES: Final = tuple(Series(pack, windows) for pack in (1, PACK, HIGH_PACK) for windows in (False, True))


@dataclass(frozen=True, slots=True)
class Point:
    """The model's write units per event at one ``BatchSize``."""

    series: str
    batch_size: int
    records: int
    """Records per batch: the batch size cut to the 6 MB payload."""
    write_units: float


def measured_configs(series: Sequence[Series] = SERIES) -> list[Config]:
    """Where the chart is checked: small, middling and the largest batch the payload allows."""
    out = []
    for line in series:
        sizes = (
            (10, 100, 1000, line.cut) if line.pack == 1 else (10, 100, line.cut) if line.pack == PACK else (line.cut,)
        )
        out += [Config(line.pack > 1, line.windows, size, line.pack) for size in sizes if size <= line.cut]
    return out


def curves(series: Sequence[Series] = SERIES, sizes: Sequence[int] = CURVE_SIZES, batches: int = 4) -> list[Point]:
    """The model's curves; each batch size cut to the payload (the curve is flat beyond the cut)."""
    points = []
    for line in series:
        traffic = line.traffic()
        for size in sorted({*sizes, line.cut}):
            records = min(size, line.cut)
            # about 40,000 events per point (at least one batch): enough for the planner's choices
            count = max(1, min(batches, 40_000 // (records * line.pack)))
            units = simulate(traffic, records, batches=count, page_bytes=store_page_bytes)
            points.append(Point(line.name, size, records, units.write_units))
    return points


def curve_grid(points: Sequence[Point]) -> Grid:
    """Rows: batch sizes; columns: the series (S single events, P100 / P1000 events per message)."""
    names = list(dict.fromkeys(point.series for point in points))
    by = {(point.series, point.batch_size): point for point in points}
    rows = [
        [f"{size:,}", *(f"{by[name, size].write_units:.4f}" if (name, size) in by else "" for name in names)]
        for size in sorted({point.batch_size for point in points})
    ]
    return Grid(["BatchSize", *map(_short, names)], rows, numeric_from=0)


def _short(name: str) -> str:
    kind, windows = name.split(", windows ")
    prefix = "S" if kind.startswith("single") else "P" + kind.split("(")[1].split(" ")[0].replace(",", "")
    return f"{prefix} {'on' if windows != 'off' else 'off'}"


def render(data: dict[str, Any], path: Path) -> None:
    """The chart: log-log, one line per series, measured points as markers on their series' colour."""
    import matplotlib as mpl  # noqa: PLC0415 (the bench extra; only this function draws)

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    mpl.rcParams["svg.hashsalt"] = "tally"  # stable ids, so a redraw of the same data diffs clean
    figure, axes = plt.subplots(figsize=(12, 6))
    colours = {1: "tab:red", PACK: "tab:blue", HIGH_PACK: "tab:green"}
    for line in SERIES:
        points = [point for point in data["curves"] if point["series"] == line.name]
        if not points:
            continue
        style = "-" if line.windows else "--"
        axes.plot(
            [p["batch_size"] for p in points],
            [p["write_units"] for p in points],
            style,
            color=colours[line.pack],
            label=f"model: {line.name}",
        )
        measured = [c for c in data["measured"] if c["series"] == line.name]
        if measured:
            axes.plot(
                [c["batch_size"] for c in measured],
                [c["measured_write_units"] for c in measured],
                "o" if line.windows else "s",
                color=colours[line.pack],
                markerfacecolor="white" if not line.windows else colours[line.pack],
                label=f"measured: {line.name}",
            )
    axes.axhline(TARGET, color="grey", linestyle=":", linewidth=1)
    axes.annotate("0.03 (high-volume target)", (2000, TARGET), textcoords="offset points", xytext=(2, 3), fontsize=8)
    for size, text in ((100, "BatchSize 100"), (10_000, "BatchSize default")):
        axes.axvline(size, color="grey", linestyle="-.", linewidth=0.8)
        axes.text(size, 0.45, text, transform=axes.get_xaxis_transform(), fontsize=8, rotation=90, ha="right")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("BatchSize (records per invocation; Lambda's 6 MB payload flattens each curve)")
    axes.set_ylabel("DynamoDB write units per event")
    axes.set_title("tally: write units per event against batch size (workload U, 1,000 Zipf keys)")
    axes.grid(True, which="both", linewidth=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    if path.suffix == ".svg":
        figure.savefig(path, format="svg", metadata={"Date": None})
    else:
        figure.savefig(path, dpi=110)
    plt.close(figure)


def _series_of(config: Config) -> str:
    return Series(config.events_per_message, config.windows).name


@click.command()
@click.option("--measure/--no-measure", default=False, show_default=True, help="Run the measured points too.")
@click.option("--min-events", type=click.IntRange(min=1), default=20_000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the data as JSON instead of tables.")
@click.option("--svg", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_SVG, show_default=True)
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option(
    "--from-data",
    is_flag=True,
    help="Redraw the chart from --data (the measured points kept) instead of computing the curves again.",
)
@click.option(
    "--benchmarks",
    type=click.Path(dir_okay=False, path_type=Path),
    default=BENCHMARKS_MD,
    show_default=True,
    help="Markdown whose cost section is rewritten.",
)
@click.option("--write-section/--no-write-section", default=True, show_default=True)
def main(
    *,
    measure: bool,
    min_events: int,
    as_json: bool,
    svg: Path,
    data: Path,
    from_data: bool,
    benchmarks: Path,
    write_section: bool,
) -> None:
    """Print the model's curves (and measured points), write the chart and its data."""
    console = results_console()
    if from_data:
        document = json.loads(data.read_text())
    else:
        document = build(measure=measure, min_events=min_events, previous=data, console=console)
        data.write_text(json.dumps(document, indent=2) + "\n")
    render(document, svg)
    if write_section and benchmarks.is_file():
        benchmarks.write_text(splice_section(benchmarks.read_text(), markdown_section(document)))
    if as_json:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    title = "model: write units per event against BatchSize (workload U: 1,000 Zipf keys, two counters)"
    console.print(curve_grid([Point(**point) for point in document["curves"]]).rich(title))
    title = "measured on DynamoDB Local (tally_local.kit.meter) against the model"
    console.print(table(title, [*PREDICTED_MEASURED, EXACT], document["measured"]))
    console.print(f"chart: {svg}; data: {data}; section {SECTION!r} of {benchmarks}")


def build(*, measure: bool, min_events: int, previous: Path, console: Console) -> dict[str, Any]:
    """The chart's data: the model's curves, and the measured points (run now, or kept from ``previous``:
    the model may change without the runs changing)."""
    kept = json.loads(previous.read_text()) if previous.exists() else {}
    measured, stamp = kept.get("measured", []), kept.get("measured_at")
    if measure:
        from tally_local.dynamodb_local import DynamoDBLocal  # noqa: PLC0415 (only when measuring)

        configs = measured_configs()
        with DynamoDBLocal() as ddb:
            checks = run_checks(
                ddb,
                keys=KEYS,
                min_events=min_events,
                only=configs,
                progress=lambda name: console.print(f"running {name} ...", style="dim"),
            )
        measured = [
            {**check.row(), "series": _series_of(config), "batch_size": config.batch_size}
            for config, check in zip(configs, checks, strict=True)
        ]
        stamp = _stamp()
    return {
        "workload": "U: 1,000 Zipf (s = 1.1) keys, two counters (units, cost), no re-sends",
        "measured_at": stamp,
        "curves": [asdict(point) for point in curves()],
        "measured": measured,
        "min_events": min_events,
    }


def markdown_section(document: dict[str, Any], chart_name: str = "cost-by-batch-size.svg") -> list[str]:
    """The section of docs/benchmarks.md this tool owns: the measured points, the curves, the chart."""
    measured = document["measured"]
    lines = [
        SECTION,
        "",
        f"> Written by `make bench-cost` (`python -m bench.cost_chart --measure`){_when(document)}. "
        "Do not edit by hand: re-run the command.",
        "",
        f"![write units per event against batch size]({chart_name})",
        "",
        "Workload U (1,000 Zipf keys, s = 1.1, two counters), no re-sends, through the real pipeline on "
        "DynamoDB Local, write units billed by `tally_local.kit.meter`; `predicted` is `tally.cost.model` (its own "
        "batches and seed). Each batch size is at most what Lambda's 6 MB payload holds for that message "
        "size (`Traffic.record_bytes`): about 5,500 single-event records, 700 messages of 100 events, 78 of "
        "1,000. The naive `ADD` per event (not exact) is 1.05 write units per event (Results, above). "
        "The floor of a traffic (What it costs; `tally.cost.model.floor`) is the lowest point "
        "its curve reaches at the batches its rate fills in the longest window: the right-hand end of "
        "a curve for traffic that fills the 6 MB payload.",
        "",
    ]
    if measured:
        lines += [
            "| configuration (messages, windows, records per batch) | events | measured WU/event "
            "| $ per million events (writes) | predicted WU/event | ratio | exact |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for row in measured:
            lines.append(
                f"| {row['config']} | {row['events']:,} | {row['measured_write_units']:.4f} "
                f"| {row['measured_write_units'] * Prices().write_unit * 1e6:.3f} | {row['predicted_write_units']:.4f} "
                f"| {row['ratio']:.3f} | {'yes' if row['exact'] else '**no**'} |"
            )
        lines.append("")
    grid = curve_grid([Point(**point) for point in document["curves"]])
    return [
        *lines,
        "The model's curves (write units per event; S single events, P100 / P1000 events per message; "
        "on/off: windows hour,day or none):",
        "",
        *("| " + " | ".join(cells) + " |" for cells in (grid.header, ["---:"] * len(grid.header), *grid.rows)),
    ]


def _when(document: dict[str, Any]) -> str:
    stamp = document.get("measured_at")
    return f", {stamp}" if stamp else ""


def splice_section(markdown: str, section: Sequence[str]) -> str:
    """``markdown`` with this tool's section replaced (or appended): up to the next ``## `` heading."""
    lines = markdown.rstrip("\n").split("\n")
    if SECTION in lines:
        start = lines.index(SECTION)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = [*section, ""] if end < len(lines) else list(section)
    else:
        lines += ["", *section]
    return "\n".join(lines) + "\n"


def _stamp() -> str:
    import subprocess  # noqa: PLC0415
    from datetime import UTC, datetime  # noqa: PLC0415

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False
    ).stdout.strip()
    return f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC at {commit or 'an unknown commit'}"


if __name__ == "__main__":
    main()
