"""``tally windows close``: move every key's ended windows off its item.

The batch handler moves a key's ended hour and day windows when a later batch writes the key
(``tally.store.windows``); a key never written again keeps them on its item, where every read still counts
them exactly and hides them once past retention. This command moves them all: a ``Scan`` of the key items
and a move per group of keys, each exactly once, safe to run at any time, beside running batches, and
again (a second run finds nothing left to move). Needs ``OperatorPolicy`` (``dynamodb:Scan``,
``dynamodb:UpdateItem`` on the counters table).
"""

from __future__ import annotations

import os
import sys
import time

import click
import msgspec
from rich.console import Console

from tally.cli.locate import Locator, client, stack_option
from tally.config import COUNTERS_TABLE, WINDOW_RETENTION, WINDOWS
from tally.core.windows import parse_window_spec
from tally.errors import TallyError
from tally.store.windows import DynamoDBWindowMover

_JSON = msgspec.json.Encoder()


@click.group()
def windows() -> None:
    """Time windows: move ended windows off key items."""


@windows.command()
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@stack_option
def close(as_json: bool, stack_name: str | None) -> None:
    """Move every key's ended hour and day windows to their window items (a Scan of the counters table)."""
    locator = Locator(stack_name)
    env = locator.environment(os.environ, needed=(COUNTERS_TABLE,))
    table = locator.required(COUNTERS_TABLE, env.get(COUNTERS_TABLE), "the counters table")
    try:
        spec = parse_window_spec(env.get(WINDOWS, ""), env.get(WINDOW_RETENTION, ""))
        moved = DynamoDBWindowMover(client("dynamodb"), table, spec).close_all(time.time_ns() // 1_000_000)
    except (TallyError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    figures = {
        "key_items_checked": moved.checked,
        "key_items_moved": moved.moved_items,
        "windows_moved": moved.windows,
        "window_items_written": moved.window_items,
        "transactions": moved.transactions,
        "key_items_left": moved.left,
    }
    if as_json:
        sys.stdout.buffer.write(_JSON.encode(figures) + b"\n")
        return
    Console().print(
        f"{moved.windows:,} ended windows of {moved.moved_items:,} key items moved ({moved.checked:,} checked, "
        f"{moved.transactions:,} transactions)"
        + (f"; {moved.left:,} key items left (run it again)" if moved.left else "")
    )
