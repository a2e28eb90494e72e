"""``tally``: read counters from the command line.

It reads the same environment variables as the Lambda function (``TALLY_COUNTERS_TABLE``,
``TALLY_MARKERS_TABLE``) and boto3's own (``AWS_ENDPOINT_URL`` for local endpoints, ``AWS_REGION``,
credentials), so pointing it at DynamoDB Local or a deployed stack is a matter of environment.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import boto3
import click
import msgspec
from rich.console import Console
from rich.table import Table

from tally.cli.dlq import dlq
from tally.cli.locate import Locator, stack_option
from tally.cli.publish import publish
from tally.cli.stack_command import stack
from tally.cli.top import top
from tally.config import Settings
from tally.errors import TallyError
from tally.runtime import CLIENT_CONFIG
from tally.store.dynamodb import DynamoDBCounterStore

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal

_JSON = msgspec.json.Encoder(decimal_format="number")


def counters_json(counters: Mapping[str, Decimal]) -> bytes:
    """Exactly a JSON object of counter name to value, numbers written exactly (never via float)."""
    return _JSON.encode(dict(sorted(counters.items())))


def _settings(stack_name: str | None = None) -> Settings:
    """The environment's settings; with a stack, its Outputs and Parameters fill in what is not set."""
    return Settings.from_env(Locator(stack_name).environment(os.environ), require_dlq=False)


def _store(settings: Settings | None = None) -> DynamoDBCounterStore:
    settings = settings or _settings()
    client = boto3.session.Session().client("dynamodb", config=CLIENT_CONFIG)
    return DynamoDBCounterStore(
        client, settings.counters_table, settings.markers_table, settings.marker_ttl_seconds, settings.hot_keys
    )


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds, or ISO 8601 with an offset or Z (the same rules as an event's ``ts``)."""
    if text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise click.BadParameter(f"{text!r} needs a UTC offset or Z")
    return int(moment.timestamp()) * 1000 + moment.microsecond // 1000


def series_json(series: list[tuple[int, dict[str, Decimal]]]) -> bytes:
    """A JSON list of windows in order: start (ISO 8601, UTC) and counters (missing windows: {})."""
    return _JSON.encode(
        [
            {"start": datetime.fromtimestamp(start / 1000, tz=UTC).isoformat().replace("+00:00", "Z"), "counters": c}
            for start, c in series
        ]
    )


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
@stack_option
def get(
    *, key: str, as_json: bool, window: str | None, from_: str | None, to: str | None, stack_name: str | None
) -> None:
    """Print the counters of KEY: all-time, or per window with --window (strongly consistent reads)."""
    try:
        settings = _settings(stack_name)
        store = _store(settings)
        if window is None:
            _print_counters(key, store.read_counters(key), as_json)
            return
        unit = settings.windows.unit(window)
        to_ms = parse_time_ms(to) if to else time.time_ns() // 1_000_000
        from_ms = parse_time_ms(from_) if from_ else to_ms - 23 * unit.duration_ms
        series = store.read_series(key, unit, from_ms, to_ms)
    except (TallyError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        sys.stdout.buffer.write(series_json(series) + b"\n")
        return
    names = sorted({name for _, counters in series for name in counters})
    table = Table(title=f"{key!r} per {window} (UTC)")
    table.add_column("window start")
    for name in names:
        table.add_column(name, justify="right")
    for start, counters in series:
        label = datetime.fromtimestamp(start / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M")
        table.add_row(label, *(str(counters.get(name, 0)) for name in names))
    Console().print(table)


def _print_counters(key: str, counters: dict[str, Decimal], as_json: bool) -> None:
    if as_json:
        sys.stdout.buffer.write(counters_json(counters) + b"\n")
        return
    table = Table(title=f"counters of {key!r}")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for name, value in sorted(counters.items()):
        table.add_row(name, str(value))
    console = Console()
    if counters:
        console.print(table)
    else:
        console.print(f"no counters for {key!r} yet")


cli.add_command(publish)
cli.add_command(top)
cli.add_command(dlq)
cli.add_command(stack)

if __name__ == "__main__":  # pragma: no cover
    cli()
