"""``tally notifications list``: every threshold crossing tally recorded, the items the pipe announces.

Each crossing of a level declared in ``CounterThresholds`` is recorded once, in the transaction that committed
the counts that made it, under a deterministic ``notification_id``; EventBridge Pipes puts each to the bus
(detail-type ``tally.threshold-crossed``). This command reads the record (a ``Scan`` of the notifications
table, ``OperatorPolicy``): what consumers should have received, to compare or to put again after
``NotificationsDeadLetterAlarm`` (docs/runbook.md).
"""

from __future__ import annotations

import os

import click

from tally.cli.output import console, json_option, print_json, table
from tally.cli.resolve import Resolver, stack_option


@click.group()
def notifications() -> None:
    """Threshold crossings: what was announced on EventBridge."""


@notifications.command("list")
@json_option("Print a JSON list: each crossing's notification_id and the event's detail.")
@stack_option
@click.option(
    "--table", "table_name", help="The notifications table (default: the stack's, or $TALLY_NOTIFICATIONS_TABLE)."
)
@click.option("--key", help="Only this key's crossings.")
@click.option("--counter", help="Only this counter's crossings.")
def list_(as_json: bool, stack_name: str | None, table_name: str | None, key: str | None, counter: str | None) -> None:
    """List every recorded threshold crossing, oldest first (a Scan of the notifications table)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import client, failure
    from tally.errors import TallyError
    from tally.reader.notifications import NotificationReader
    from tally.store.notifications import iso_utc

    resolver = Resolver(stack_name, os.environ)
    name = resolver.required("TALLY_NOTIFICATIONS_TABLE", table_name, "the notifications table", "--table")
    try:
        found = NotificationReader(name, client=client("dynamodb")).list(key=key, counter=counter)
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"read the notifications table {name!r}", "dynamodb", exc) from exc
    if as_json:
        print_json(
            [
                {
                    "notification_id": c.notification_id,
                    "key": c.key,
                    "counter": c.counter,
                    "level": c.level,
                    "direction": str(c.direction),
                    "window": c.window,
                    "value": c.value,
                    "step_value": c.step_value,
                    "message_id": c.message_id,
                    "at": c.at_ms,
                    "time": iso_utc(c.at_ms),
                }
                for c in found
            ]
        )
        return
    rows = table(
        f"{len(found)} threshold crossings",
        ["time", "key", "counter", "window", "level", "direction", "value", "message id"],
        right=["level", "value"],
    )
    for c in found:
        rows.add_row(
            iso_utc(c.at_ms), c.key, c.counter, c.window, str(c.level), str(c.direction), str(c.value), c.message_id
        )
    console().print(rows)
