"""``tally top [N]``: the largest all-time counters, as a table (or JSON), hot-key shards summed."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click
import msgspec
from rich.console import Console
from rich.table import Table

from tally.cli.locate import Locator, client, stack_option
from tally.errors import TallyError
from tally.reader import CounterReader

if TYPE_CHECKING:
    from tally.reader import Ranked

_JSON = msgspec.json.Encoder(decimal_format="number")


@click.command()
@click.argument("n", type=click.IntRange(min=1), default=10)
@click.option("--counter", help="Only counters of this name (e.g. count, revenue).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {key, counter, value}, largest first.")
@stack_option
@click.option("--table", "table_name", envvar="TALLY_COUNTERS_TABLE", help="Counters table (or $TALLY_COUNTERS_TABLE).")
def top(n: int, counter: str | None, as_json: bool, stack_name: str | None, table_name: str | None) -> None:
    """Print the N largest all-time counters (a Scan of the counters table: for operators, not for hot paths)."""
    table = Locator(stack_name).required("TALLY_COUNTERS_TABLE", table_name, "the counters table")
    try:
        rows = CounterReader(table, client=client("dynamodb")).top(n, counter)
    except TallyError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        sys.stdout.buffer.write(top_json(rows) + b"\n")
        return
    Console().print(top_table(rows, table, counter))


def top_json(rows: list[Ranked]) -> bytes:
    """Exact numbers, never through a float."""
    return _JSON.encode([{"key": row.key, "counter": row.counter, "value": row.value} for row in rows])


def top_table(rows: list[Ranked], table_name: str, counter: str | None) -> Table:
    title = f"largest {counter + ' ' if counter else ''}counters in {table_name}"
    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("key")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for rank, row in enumerate(rows, 1):
        table.add_row(str(rank), row.key, row.counter, f"{row.value:,}")
    if not rows:
        table.caption = "no counters yet"
    return table
