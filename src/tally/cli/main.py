"""``tally``: read counters from the command line.

Reads go through ``tally.reader`` (the one read path, also the HTTP endpoint's). Where the counters table
is, and how the stack counts (hot keys, windows), follows ``tally.cli.resolve``'s rule: an option, else
``--stack NAME``'s Outputs and Parameters, else the variables the Lambda function reads
(``TALLY_COUNTERS_TABLE``, ``TALLY_HOT_KEYS``, ``TALLY_WINDOWS``), else ``$TALLY_STACK``'s. boto3's own
variables point it at a local endpoint (``AWS_ENDPOINT_URL``) and a region (``AWS_REGION``).

Every command imports what it uses when it runs: ``tally --help`` and ``tally get --help`` load click and
the command modules only (tests/unit/test_cli_imports.py), never the Lambda wiring, the commit protocol or
Powertools, and not boto3 either.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click
import msgspec

from tally.cli.output import console, json_option, table
from tally.cli.resolve import Resolver, counter_reader, stack_option

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal
    from typing import Any

    from tally.reader import OperatorRecord, Series

_JSON = msgspec.json.Encoder(decimal_format="number")


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command is defined, and its one-line help for ``tally --help`` (which then imports nothing)."""

    path: str
    summary: str


COMMANDS: Mapping[str, LazyCommand] = {
    "audit": LazyCommand(
        "tally.cli.audit:audit",
        "Recount the archive and compare every counter, window, gauge and distinct count with the table.",
    ),
    "correct": LazyCommand(
        "tally.cli.corrections:correct",
        "Correct COUNTER of KEY by DELTA (negative to take away), recorded as a correction.",
    ),
    "dlq": LazyCommand("tally.cli.dlq:dlq", "Inspect and redrive the dead-letter queue."),
    "events": LazyCommand(
        "tally.cli.events:events",
        "Print the archived messages that counted into KEY, newest first: when, id, kind, time, what it added.",
    ),
    "notifications": LazyCommand(
        "tally.cli.notifications:notifications", "Threshold crossings: what was announced on EventBridge."
    ),
    "plan": LazyCommand(
        "tally.cli.plan:plan", "Recommend template parameters for a traffic description and predict the bill."
    ),
    "publish": LazyCommand(
        "tally.cli.publish:publish", "Publish counter events (KEY [DELTA] adds DELTA, default 1, to KEY's --counter)."
    ),
    "reset": LazyCommand(
        "tally.cli.corrections:reset",
        "Reset COUNTER of KEY to VALUE (its all-time value; windows keep what happened in them).",
    ),
    "stack": LazyCommand(
        "tally.cli.stack_command:stack",
        "Show stack NAME's resources (its Outputs) and the environment variables tally reads them from.",
    ),
    "top": LazyCommand(
        "tally.cli.top:top",
        "Print the N largest counters: all-time of every key (a Scan), or of a view's values (--view: Queries).",
    ),
    "values": LazyCommand(
        "tally.cli.views:values",
        "List the values of dimension DIM counted for KEY (a Query of a view holding DIM: never a scan).",
    ),
    "void": LazyCommand(
        "tally.cli.void:void",
        "Undo the counted message MESSAGE_ID: a correction of its negated deltas in the windows of its time.",
    ),
    "windows": LazyCommand("tally.cli.windows:windows", "Time windows: move ended windows off key items."),
}
"""Command name -> where it is defined, imported only when the command runs (or its own --help). Each help
is the command's docstring's first line (tests/unit/test_cli_imports.py compares them)."""


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's documented lazy-loading pattern); its own
    help lists them from ``COMMANDS`` without importing them."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, _, attribute = self.lazy[cmd_name].path.partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name].path} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, with the help of a command not imported yet taken from ``COMMANDS``."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is None:
                rows.append((name, click.Command(name, help=self.lazy[name].summary).get_short_help_str(limit)))
            elif not loaded.hidden:
                rows.append((name, loaded.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def counters_json(counters: Mapping[str, Decimal]) -> bytes:
    """Exactly a JSON object of counter name to value, numbers written exactly (never via float)."""
    return _JSON.encode(dict(sorted(counters.items())))


def series_json(series: Series) -> bytes:
    """A JSON list of windows in order: start (ISO 8601, UTC) and counters (missing windows: {})."""
    return _JSON.encode([{"start": window.start, "counters": dict(window.values)} for window in series.windows])


def distinct_series_json(series: Series) -> bytes:
    """A JSON list of windows in order: start and distinct counts (set -> members; missing windows: {})."""
    return _JSON.encode([{"start": window.start, "distinct": dict(window.distinct)} for window in series.windows])


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.version_option(package_name="tally")
def cli() -> None:
    """tally: exactly-once counters from event streams on AWS."""


@cli.command()
@click.argument("key")
@json_option("Print JSON: counter -> value (a list of windows with --window).")
@click.option(
    "--window", type=click.Choice(["minute", "hour", "day", "month"]), help="Read a series of time windows (UTC)."
)
@click.option("--from", "from_", help="Series start: epoch ms or ISO 8601 with offset (default: 24 windows back).")
@click.option("--to", help="Series end, inclusive: epoch ms or ISO 8601 with offset (default: now).")
@click.option("--gauges", "gauges", is_flag=True, help="Print the gauges (max, min, latest) instead of the counters.")
@click.option("--operators", "operators", is_flag=True, help="Print each counter's last reset and correction.")
@click.option(
    "--distinct", "distinct", is_flag=True, help="Print the distinct counts (members per set) instead of the counters."
)
@click.option("--by", help="Group by a view's dimensions (customer, customer+route): one row per value (Queries).")
@click.option("--at", help="With --by and --window, the window holding this time (default: now).")
@stack_option
@click.option("--table", "table_name", help="The counters table (default: the stack's, or $TALLY_COUNTERS_TABLE).")
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
    by: str | None,
    at: str | None,
    stack_name: str | None,
    table_name: str | None,
) -> None:
    """Print the counters of KEY: all-time, or per window with --window, or per value of a view with --by
    (strongly consistent reads)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import failure
    from tally.errors import ConfigurationError, InvalidReadError, TallyError
    from tally.reader import Series, Window, parse_time_ms

    try:
        reader = counter_reader(Resolver(stack_name, os.environ), table_name)
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    if by is not None:
        from tally.cli.views import print_group, read_group

        if gauges or operators or distinct or from_ or to:
            raise click.UsageError(
                "--by reads a view's counters in one window: not with --gauges, --operators, "
                "--distinct, --from or --to (use --at)"
            )
        print_group(read_group(reader, key, by, window=window, at=at, what=f"read {key!r} by {by}"), as_json)
        return
    if at is not None:
        raise click.UsageError("--at picks the window of a view read: give --by (and --window)")
    try:
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
    except (InvalidReadError, ConfigurationError) as exc:  # a request the reader refuses, not a failed read
        raise click.ClickException(str(exc)) from exc
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"read {key!r} from table {reader.counters_table!r}", "dynamodb", exc) from exc
    if as_json:
        sys.stdout.buffer.write((distinct_series_json(series) if distinct else series_json(series)) + b"\n")
        return
    if distinct:
        series = Series(key, series.window, tuple(Window(w.start_ms, w.distinct) for w in series.windows))
    names = sorted({name for window_counts in series.windows for name in window_counts.values})
    rows = table(f"{key!r} per {window} (UTC)", ["window start", *names], right=names)
    for window_counts in series.windows:
        rows.add_row(window_counts.start, *(str(window_counts.values.get(name, 0)) for name in names))
    console().print(rows)


def _print_gauges(key: str, gauges: Mapping[str, Mapping[str, Decimal | str]], as_json: bool) -> None:
    """Gauges as kind -> name -> value: numbers exact, a latest text as a JSON string."""
    ordered = {kind: dict(sorted(values.items())) for kind, values in sorted(gauges.items())}
    if as_json:
        sys.stdout.buffer.write(_JSON.encode(ordered) + b"\n")
        return
    rows = table(f"gauges of {key!r}", ["kind", "gauge", "value"], right=["value"])
    for kind, values in ordered.items():
        for name, value in values.items():
            rows.add_row(kind, name, str(value))
    console().print(rows if ordered else f"no gauges for {key!r} yet")


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
    columns = ["counter", "kind", "at (UTC)", "id", "value / delta"]
    rows = table(f"last reset and correction of {key!r}", columns, right=["value / delta"])
    for kind, records in sorted(operators.items()):
        for name, record in sorted(records.items()):
            rows.add_row(name, kind, record.at, record.message_id, str(record.amount))
    console().print(rows if operators else f"{key!r} was never reset or corrected")


def _print_counters(key: str, counters: dict[str, Decimal], as_json: bool, *, distinct: bool = False) -> None:
    """Counter -> value, or with ``distinct`` set -> distinct members (the same shape: name -> exact number)."""
    if as_json:
        sys.stdout.buffer.write(counters_json(counters) + b"\n")
        return
    what = "distinct counts" if distinct else "counters"
    rows = table(f"{what} of {key!r}", ["set" if distinct else "counter", "value"], right=["value"])
    for name, value in sorted(counters.items()):
        rows.add_row(name, str(value))
    console().print(rows if counters else f"no {what} for {key!r} yet")


if __name__ == "__main__":  # pragma: no cover
    cli()
