"""``python -m tally_local.chaos``: the chaos run (``make chaos``, ``make chaos-smoke``).

Starts DynamoDB Local (and stops it), creates the tables from template.yaml, runs the configuration,
prints the summary, optionally writes it as JSON, and exits 1 unless nothing was lost or doubled and every
other check passed.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tally.runtime import CLIENT_CONFIG
from tally_local import machine
from tally_local.chaos.config import PRESETS
from tally_local.chaos.harness import Tables, run_chaos
from tally_local.chaos.report import as_json, summary_table
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.template import load_template, table_definitions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ROOT: Final = Path(__file__).resolve().parents[3]


def create_tables(client: DynamoDBClient) -> Tables:
    """Fresh tables with the key schemas of template.yaml."""
    definitions = table_definitions(load_template(ROOT / "template.yaml"))
    suffix = uuid.uuid4().hex[:8]
    tables = Tables(f"chaos-counters-{suffix}", f"chaos-markers-{suffix}")
    client.create_table(**definitions["CountersTable"].create_table_kwargs(tables.counters))
    client.create_table(**definitions["MarkersTable"].create_table_kwargs(tables.markers))
    return tables


@click.command()
@click.option("--config", "preset", type=click.Choice(sorted(PRESETS)), default="full", show_default=True)
@click.option("--seed", type=int, help="Default: the preset's seed.")
@click.option("--events", type=int, help="Valid events to publish (default: the preset's).")
@click.option(
    "--refused-keys",
    type=click.IntRange(min=0),
    help="g: and page: keys whose gauge and member writes DynamoDB refuses for good (default: the preset's).",
)
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the figures as JSON.")
def main(preset: str, seed: int | None, events: int | None, refused_keys: int | None, json_out: Path | None) -> None:
    """Count a seeded load exactly once through SQS and Kinesis under injected faults, and prove it."""
    console = Console()
    config = PRESETS[preset]
    if seed is not None:
        config = replace(config, seed=seed)
    if events is not None:
        config = replace(config, events=events)
    if refused_keys is not None:
        config = replace(config, refused_keys=refused_keys)
    about: dict[str, Any] = {**machine.describe(), "started_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    with DynamoDBLocal() as ddb:
        tables = create_tables(ddb.client())
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            tasks: dict[str, Any] = {}
            last_line = [0.0]

            def advance(phase: str, acknowledged: int, messages: int) -> None:
                if phase not in tasks:
                    tasks[phase] = progress.add_task(f"{phase}: messages acknowledged", total=messages)
                progress.update(tasks[phase], completed=acknowledged)
                if not console.is_terminal and time.monotonic() - last_line[0] > 30:  # a log, not a bar
                    last_line[0] = time.monotonic()
                    console.print(f"{phase}: {acknowledged:,} / {messages:,} messages acknowledged")

            result = run_chaos(config, lambda: ddb.client(CLIENT_CONFIG), tables, on_progress=advance)
    console.print(summary_table(result))
    if json_out is not None:
        figures = as_json(result) | {"machine": about | {"load_after": machine.load()}, "code": machine.code_label()}
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(figures, indent=2, default=str) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}")
    raise SystemExit(0 if result.passed else 1)


if __name__ == "__main__":
    main()
