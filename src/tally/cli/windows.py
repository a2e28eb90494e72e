"""``tally windows close``: move every key's ended windows off its item.

The batch handler moves a key's ended hour, day and month windows when a later batch writes the key
(``tally.store.windows``); a key never written again keeps them on its item, where every read still counts
them exactly and hides them once past retention. This command moves them all: a ``Scan`` of the key items
and a move per group of keys, each exactly once, safe to run at any time, beside running batches, and
again (a second run finds nothing left to move). Needs ``OperatorPolicy`` (``dynamodb:Scan``,
``dynamodb:UpdateItem`` on the counters table).
"""

from __future__ import annotations

import os
import time
from typing import Final

import click

from tally.cli.output import console, json_option, print_json
from tally.cli.resolve import Resolver, stack_option

_NO_DEADLINE_MS: Final = 2**62


@click.group()
def windows() -> None:
    """Time windows: move ended windows off key items."""


@windows.command()
@json_option("Print the figures as JSON.")
@stack_option
@click.option("--table", "table_name", help="The counters table (default: the stack's, or $TALLY_COUNTERS_TABLE).")
def close(as_json: bool, stack_name: str | None, table_name: str | None) -> None:
    """Move every key's ended hour, day and month windows to their window items (a Scan of the counters table)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import client, failure
    from tally.commit.retrying import DEFAULT_RETRY_POLICY
    from tally.core.windows import parse_window_spec
    from tally.errors import TallyError
    from tally.post_commit import attempt_within
    from tally.store.windows import DynamoDBWindowMover

    resolver = Resolver(stack_name, os.environ)
    table = resolver.required("TALLY_COUNTERS_TABLE", table_name, "the counters table", "--table")
    try:
        spec = parse_window_spec(resolver.value("TALLY_WINDOWS") or "", resolver.value("TALLY_WINDOW_RETENTION") or "")
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc

    # An operator's command has no invocation deadline: a move cancelled by a late event or a conflict is sent
    # again under the batches' retry policy, by attempts alone.
    attempt = attempt_within(DEFAULT_RETRY_POLICY, lambda: _NO_DEADLINE_MS, time.sleep)
    try:
        moved = DynamoDBWindowMover(client("dynamodb"), table, spec).close_all(time.time_ns() // 1_000_000, attempt)
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"move the ended windows of table {table!r}", "dynamodb", exc) from exc
    figures = {
        "key_items_checked": moved.checked,
        "key_items_moved": moved.moved_items,
        "windows_moved": moved.windows,
        "window_items_written": moved.window_items,
        "transactions": moved.transactions,
        "key_items_left": moved.left,
    }
    if as_json:
        print_json(figures)
        return
    console().print(
        f"{moved.windows:,} ended windows of {moved.moved_items:,} key items moved ({moved.checked:,} checked, "
        f"{moved.transactions:,} transactions)"
        + (f"; {moved.left:,} key items left (run it again)" if moved.left else "")
    )
