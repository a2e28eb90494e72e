"""``tally``: read counters from the command line.

Reads go through ``tally.reader`` (the one read path, also the HTTP endpoint's). It reads the same
environment variables as the Lambda function (``TALLY_COUNTERS_TABLE``, ``TALLY_HOT_KEYS``,
``TALLY_WINDOWS``) and boto3's own (``AWS_ENDPOINT_URL`` for local endpoints, ``AWS_REGION``,
credentials), so pointing it at DynamoDB Local or a deployed stack is a matter of environment.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click
import msgspec
from rich.console import Console
from rich.table import Table

from tally.cli.dlq import dlq
from tally.cli.locate import Locator, client, stack_option
from tally.cli.operator import correct, reset
from tally.cli.plan import plan
from tally.cli.publish import publish
from tally.cli.stack_command import stack
from tally.cli.top import top
from tally.cli.windows import windows
from tally.config import COUNTERS_TABLE
from tally.errors import TallyError
from tally.reader import CounterReader, Series, Window, parse_time_ms

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal
    from typing import Any

    from tally.reader import OperatorRecord

_JSON = msgspec.json.Encoder(decimal_format="number")


def counters_json(counters: Mapping[str, Decimal]) -> bytes:
    """Exactly a JSON object of counter name to value, numbers written exactly (never via float)."""
    return _JSON.encode(dict(sorted(counters.items())))


def _reader(stack_name: str | None = None) -> CounterReader:
    """The environment's counters table, hot keys and windows; with a stack, its Outputs and Parameters fill
    in what is not set. Only the counters table is needed: reads never touch the markers."""
    locator = Locator(stack_name)
    env = locator.environment(os.environ, needed=(COUNTERS_TABLE,))
    locator.required(COUNTERS_TABLE, env.get(COUNTERS_TABLE), "the counters table")  # before any client is built
    return CounterReader.from_environment(env, client=client("dynamodb"))


def series_json(series: Series) -> bytes:
    """A JSON list of windows in order: start (ISO 8601, UTC) and counters (missing windows: {})."""
    return _JSON.encode([{"start": window.start, "counters": dict(window.values)} for window in series.windows])


def distinct_series_json(series: Series) -> bytes:
    """A JSON list of windows in order: start and distinct counts (set -> members; missing windows: {})."""
    return _JSON.encode([{"start": window.start, "distinct": dict(window.distinct)} for window in series.windows])


@click.group()
@click.version_option(package_name="tally")
def cli() -> None:
    """tally: exactly-once counters from event streams on AWS."""


@cli.command()
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: counter -> value (a list of windows with --window).")
@click.option("--window", type=click.Choice(["minute", "hour", "day"]), help="Read a series of time windows.")
@click.option("--from", "from_", help="Series start: epoch ms or ISO 8601 with offset (default: 24 windows back).")
@click.option("--to", help="Series end, inclusive: epoch ms or ISO 8601 with offset (default: now).")
@click.option("--gauges", "gauges", is_flag=True, help="Print the gauges (max, min, latest) instead of the counters.")
@click.option("--operators", "operators", is_flag=True, help="Print each counter's last reset and correction.")
@click.option(
    "--distinct", "distinct", is_flag=True, help="Print the distinct counts (members per set) instead of the counters."
)
@stack_option
def get(
    *,
    key: str,
    as_json: bool,
    window: str | None,
    from_: str | None,
    to: str | None,
    gauges: bool,
    operators: bool,
    distinct: bool,
    stack_name: str | None,
) -> None:
    """Print the counters of KEY: all-time, or per window with --window (strongly consistent reads)."""
    try:
        reader = _reader(stack_name)
        if operators:
            _print_operators(key, reader.get(key).operators, as_json)
            return
        if gauges:
            _print_gauges(key, reader.get(key).gauges, as_json)
            return
        if window is None:
            found = reader.get(key)
            _print_counters(key, dict(found.distinct if distinct else found.values), as_json, distinct=distinct)
            return
        series = reader.series(key, window, parse_time_ms(from_) if from_ else None, parse_time_ms(to) if to else None)
    except TallyError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        sys.stdout.buffer.write((distinct_series_json(series) if distinct else series_json(series)) + b"\n")
        return
    if distinct:
        series = Series(key, series.window, tuple(Window(w.start_ms, w.distinct) for w in series.windows))
    names = sorted({name for window_counts in series.windows for name in window_counts.values})
    table = Table(title=f"{key!r} per {window} (UTC)")
    table.add_column("window start")
    for name in names:
        table.add_column(name, justify="right")
    for window_counts in series.windows:
        table.add_row(window_counts.start, *(str(window_counts.values.get(name, 0)) for name in names))
    Console().print(table)


def _print_gauges(key: str, gauges: Mapping[str, Mapping[str, Decimal | str]], as_json: bool) -> None:
    """Gauges as kind -> name -> value: numbers exact, a latest text as a JSON string."""
    ordered = {kind: dict(sorted(values.items())) for kind, values in sorted(gauges.items())}
    if as_json:
        sys.stdout.buffer.write(_JSON.encode(ordered) + b"\n")
        return
    table = Table(title=f"gauges of {key!r}")
    for column in ("kind", "gauge", "value"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for kind, values in ordered.items():
        for name, value in values.items():
            table.add_row(kind, name, str(value))
    console = Console()
    if ordered:
        console.print(table)
    else:
        console.print(f"no gauges for {key!r} yet")


def operators_json(operators: Mapping[str, Mapping[str, OperatorRecord]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"reset": {"stock": {"at": "2026-...Z", "at_ms": ..., "id": ..., "value": 100}}, "correction": {...
    "delta": -3}}``: the last reset and correction of each counter."""
    amount = {"reset": "value", "correction": "delta"}
    return {
        kind: {
            name: {"at": record.at, "at_ms": record.at_ms, "id": record.message_id, amount[kind]: record.amount}
            for name, record in sorted(records.items())
        }
        for kind, records in sorted(operators.items())
    }


def _print_operators(key: str, operators: Mapping[str, Mapping[str, OperatorRecord]], as_json: bool) -> None:
    if as_json:
        sys.stdout.buffer.write(_JSON.encode(operators_json(operators)) + b"\n")
        return
    table = Table(title=f"last reset and correction of {key!r}")
    for column in ("counter", "kind", "at (UTC)", "id", "value / delta"):
        table.add_column(column, justify="right" if column == "value / delta" else "left")
    for kind, records in sorted(operators.items()):
        for name, record in sorted(records.items()):
            table.add_row(name, kind, record.at, record.message_id, str(record.amount))
    console = Console()
    if operators:
        console.print(table)
    else:
        console.print(f"{key!r} was never reset or corrected")


def _print_counters(key: str, counters: dict[str, Decimal], as_json: bool, *, distinct: bool = False) -> None:
    """Counter -> value, or with ``distinct`` set -> distinct members (the same shape: name -> exact number)."""
    if as_json:
        sys.stdout.buffer.write(counters_json(counters) + b"\n")
        return
    what = "distinct counts" if distinct else "counters"
    table = Table(title=f"{what} of {key!r}")
    table.add_column("set" if distinct else "counter")
    table.add_column("value", justify="right")
    for name, value in sorted(counters.items()):
        table.add_row(name, str(value))
    console = Console()
    if counters:
        console.print(table)
    else:
        console.print(f"no {what} for {key!r} yet")


cli.add_command(publish)
cli.add_command(top)
cli.add_command(dlq)
cli.add_command(stack)
cli.add_command(plan)
cli.add_command(reset)
cli.add_command(correct)
cli.add_command(windows)

if __name__ == "__main__":  # pragma: no cover
    cli()
