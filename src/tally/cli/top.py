"""``tally top [N]``: the largest all-time counters, as a table (or JSON), hot-key shards summed."""

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
@click.argument("n", type=click.IntRange(min=1), default=10)
@click.option("--counter", help="Only counters of this name (e.g. count, revenue).")
@json_option("Print a JSON list of {key, counter, value}, largest first.")
@stack_option
@click.option("--table", "table_name", help="The counters table (default: the stack's, or $TALLY_COUNTERS_TABLE).")
def top(n: int, counter: str | None, as_json: bool, stack_name: str | None, table_name: str | None) -> None:
    """Print the N largest all-time counters (a Scan of the counters table: for operators, not for hot paths)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import client, failure
    from tally.errors import TallyError
    from tally.reader import CounterReader

    resolver = Resolver(stack_name, os.environ)
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
