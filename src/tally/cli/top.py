"""``tally top [N]``: the largest all-time counters, as a table (or JSON), hot-key shards summed; with ``--view``,
the largest values of a view in a window (``tally.cli.views``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from tally.cli.output import console, json_option, print_json, table
from tally.cli.resolve import Resolver, stack_option

if TYPE_CHECKING:
    from rich.table import Table

    from tally.reader import Ranked


@click.command()
@click.argument("n", type=click.IntRange(min=1), required=False)
@click.option("--limit", type=click.IntRange(min=1), help="How many (the same as N; default 10).")
@click.option("--counter", help="Only counters of this name (e.g. count, revenue); with --view, the one ranked.")
@click.option("--view", help="Rank the values of a view: KEY[DIM] or KEY[DIM+DIM] (e.g. 'api[customer]').")
@click.option(
    "--window", type=click.Choice(["minute", "hour", "day", "month"]), help="With --view: in this window (UTC)."
)
@click.option("--at", help="With --view and --window, the window holding this time (default: now).")
@json_option("Print a JSON list of {key, counter, value}, largest first (with --view, the view's rows).")
@stack_option
@click.option("--table", "table_name", help="The counters table (default: the stack's, or $TALLY_COUNTERS_TABLE).")
def top(
    *,
    n: int | None,
    limit: int | None,
    counter: str | None,
    view: str | None,
    window: str | None,
    at: str | None,
    as_json: bool,
    stack_name: str | None,
    table_name: str | None,
) -> None:
    """Print the N largest counters: all-time of every key (a Scan), or of a view's values (--view: Queries)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import client, failure
    from tally.errors import TallyError
    from tally.reader import CounterReader

    if n is not None and limit is not None and n != limit:
        raise click.UsageError("give N or --limit, not two different numbers")
    n = n or limit or 10
    resolver = Resolver(stack_name, os.environ)
    if view is not None:
        from tally.cli.resolve import counter_reader
        from tally.cli.views import parse_view_option, print_top, read_group

        key, dims = parse_view_option(view)
        group = read_group(counter_reader(resolver, table_name), key, dims, window=window, at=at, what=f"read {view!r}")
        print_top(group, n, counter, as_json)
        return
    if window is not None or at is not None:
        raise click.UsageError("--window and --at rank a view's values: give --view")
    name = resolver.required("TALLY_COUNTERS_TABLE", table_name, "the counters table", "--table")
    try:
        rows = CounterReader(name, client=client("dynamodb")).top(n, counter)
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"scan table {name!r}", "dynamodb", exc) from exc
    if as_json:
        print_json(top_document(rows))
        return
    console().print(top_table(rows, name, counter))


def top_document(rows: list[Ranked]) -> list[dict[str, object]]:
    """Exact numbers, never through a float."""
    return [{"key": row.key, "counter": row.counter, "value": row.value} for row in rows]


def top_table(rows: list[Ranked], table_name: str, counter: str | None) -> Table:
    title = f"largest {counter + ' ' if counter else ''}counters in {table_name}"
    ranked = table(title, ["#", "key", "counter", "value"], right=["#", "value"])
    for rank, row in enumerate(rows, 1):
        ranked.add_row(str(rank), row.key, row.counter, f"{row.value:,}")
    if not rows:
        ranked.caption = "no counters yet"
    return ranked
