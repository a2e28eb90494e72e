"""Reads by dimension from the command line: ``tally get KEY --by DIM``, ``tally top --view KEY[DIM]``,
``tally values KEY DIM``.

Each reads a view's items (``tally.reader.views``: ``Query``s of one item collection, never a scan) in one window,
the one holding ``--at`` (default now), or all-time without ``--window``; tables for people, ``--json`` for
scripts (numbers exact).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from tally.cli.output import console, json_option, print_json, table
from tally.cli.resolve import Resolver, counter_reader, stack_option

if TYPE_CHECKING:
    from rich.table import Table

    from tally.reader import CounterReader, ViewGroup, ViewRow

WINDOW_CHOICE = click.Choice(["minute", "hour", "day", "month"])


def parse_view_option(spelled: str) -> tuple[str, str]:
    """``api[customer]`` or ``api[customer+route]`` -> (key, view); ``BadParameter`` otherwise."""
    key, bracket, inner = spelled.rpartition("[")
    if not bracket or not key or not inner.endswith("]") or not inner[:-1]:
        raise click.BadParameter(f"{spelled!r}: expected KEY[DIM] or KEY[DIM+DIM] (e.g. 'api[customer]')")
    return key, inner[:-1]


def read_group(reader: CounterReader, key: str, by: str, *, window: str | None, at: str | None, what: str) -> ViewGroup:
    """The view's rows, with a request the reader refuses said as a usage error."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import failure
    from tally.errors import InvalidReadError, TallyError
    from tally.reader import parse_time_ms

    if at is not None and window is None:
        raise click.UsageError("--at picks a window: give --window too")
    try:
        return reader.group(key, by, window, parse_time_ms(at) if at else None)
    except InvalidReadError as exc:
        raise click.ClickException(str(exc)) from exc
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"{what} from table {reader.counters_table!r}", "dynamodb", exc) from exc


def group_document(group: ViewGroup, rows: tuple[ViewRow, ...] | list[ViewRow]) -> dict[str, object]:
    """``{"key", "view", "window", "start", "rows": [{"dims", "counters"}]}``, numbers exact."""
    from tally.reader import iso_utc

    return {
        "key": group.key,
        "view": group.view,
        "window": group.window,
        "start": None if group.start_ms is None else iso_utc(group.start_ms),
        "rows": [{"dims": dict(row.dims), "counters": dict(row.counters)} for row in rows],
    }


def group_table(group: ViewGroup, rows: tuple[ViewRow, ...] | list[ViewRow], *, ranked: bool = False) -> Table:
    """One line per value: its dimensions, then its counters."""
    from tally.reader import iso_utc

    dims = group.view.split("+")
    names = sorted({name for row in rows for name in row.counters})
    when = "all-time" if group.start_ms is None else f"the {group.window} from {iso_utc(group.start_ms)}"
    columns = (["#"] if ranked else []) + dims + names
    shown = table(f"{group.key!r} by {group.view}, {when}", columns, right=["#", *names])
    for rank, row in enumerate(rows, 1):
        shown.add_row(
            *([str(rank)] if ranked else []),
            *(row.dims[dim] for dim in dims),
            *(f"{row.counters[name]:,}" if name in row.counters else "" for name in names),
        )
    if not rows:
        shown.caption = "nothing counted in this view and window"
    return shown


def print_group(group: ViewGroup, as_json: bool) -> None:
    if as_json:
        print_json(group_document(group, group.rows))
        return
    console().print(group_table(group, group.rows))


def ranked_counter(group: ViewGroup, counter: str | None) -> str:
    """The counter ``top`` ranks by: the one asked for, else ``count``, else the only one the view's rows have."""
    if counter is not None:
        return counter
    names = sorted({name for row in group.rows for name in row.counters})
    if "count" in names or not names:
        return "count"
    if len(names) == 1:
        return names[0]
    raise click.UsageError(f"the view's values have several counters: name one with --counter ({', '.join(names)})")


def print_top(group: ViewGroup, limit: int, counter: str | None, as_json: bool) -> None:
    from tally.errors import InvalidReadError

    counter = ranked_counter(group, counter)
    try:
        rows = group.top(limit, counter)
    except InvalidReadError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        print_json(group_document(group, rows))
        return
    console().print(group_table(group, rows, ranked=True))


@click.command()
@click.argument("key")
@click.argument("dim")
@click.option("--window", type=WINDOW_CHOICE, help="The values counted in this window (default: all-time).")
@click.option("--at", help="Which window: one holding this time (epoch ms or ISO 8601 with offset; default: now).")
@json_option("Print a JSON list of the values.")
@stack_option
@click.option("--table", "table_name", help="The counters table (default: the stack's, or $TALLY_COUNTERS_TABLE).")
def values(
    *,
    key: str,
    dim: str,
    window: str | None,
    at: str | None,
    as_json: bool,
    stack_name: str | None,
    table_name: str | None,
) -> None:
    """List the values of dimension DIM counted for KEY (a Query of a view holding DIM: never a scan)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import failure
    from tally.errors import InvalidReadError, TallyError
    from tally.reader import parse_time_ms

    reader = counter_reader(Resolver(stack_name, os.environ), table_name)
    if at is not None and window is None:
        raise click.UsageError("--at picks a window: give --window too")
    try:
        found = reader.values(key, dim, window, parse_time_ms(at) if at else None)
    except InvalidReadError as exc:
        raise click.ClickException(str(exc)) from exc
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"list {dim!r} of {key!r} from table {reader.counters_table!r}", "dynamodb", exc) from exc
    if as_json:
        print_json(found)
        return
    shown = table(f"{dim} values of {key!r}{'' if window is None else ' in the ' + window}", [dim])
    for value in found:
        shown.add_row(value)
    if not found:
        shown.caption = "none counted"
    console().print(shown)
