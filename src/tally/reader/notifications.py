"""``NotificationReader``: the threshold crossings tally recorded (the items EventBridge Pipes announces).

Each crossing of a declared level (``CounterThresholds``) is one item of the notifications table, written in
the transaction that committed the counts that made it; the pipe puts it to the bus once it is there. Reading
the table is how an application or an operator sees every crossing whatever happened to the delivery (a bus
that refused, a consumer that was down)::

    from tally.reader import NotificationReader

    reader = NotificationReader.from_environment()           # TALLY_NOTIFICATIONS_TABLE
    for crossing in reader.list(key="stock:sku-1"):
        print(crossing.notification_id, crossing.level, crossing.direction, crossing.value)

One ``Scan`` of the table (paginated, strongly consistent): crossings are rare and the table's TTL keeps it
small (``MarkerTtlDays``). The IAM it needs is ``dynamodb:Scan`` on the table (``ReaderPolicy``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tally.config import NOTIFICATIONS_TABLE
from tally.core.thresholds import Crossing
from tally.errors import ConfigurationError
from tally.store.notifications import scan_notifications

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mypy_boto3_dynamodb.client import DynamoDBClient

Notification = Crossing
"""One recorded crossing: ``notification_id``, ``key``, ``counter``, ``level``, ``direction``, ``window``,
``value`` (after the batch that crossed), ``step_value`` (after the crossing message's own step),
``message_id`` and ``at_ms`` (when it was committed)."""


class NotificationReader:
    """The crossings recorded in one notifications table."""

    def __init__(self, notifications_table: str, *, client: DynamoDBClient | None = None) -> None:
        if not notifications_table:
            raise ConfigurationError("the notifications table's name is empty")
        self.notifications_table = notifications_table
        self.client: DynamoDBClient = client if client is not None else _default_client()

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, client: DynamoDBClient | None = None
    ) -> NotificationReader:
        """From ``TALLY_NOTIFICATIONS_TABLE`` (``tally stack NAME --env`` prints it)."""
        env = os.environ if environ is None else environ
        if not env.get(NOTIFICATIONS_TABLE):
            raise ConfigurationError(f"missing environment variable(s): {NOTIFICATIONS_TABLE}")
        return cls(env[NOTIFICATIONS_TABLE], client=client)

    def list(
        self, *, key: str | None = None, counter: str | None = None, since_ms: int | None = None
    ) -> list[Notification]:
        """Every recorded crossing (of ``key``, of ``counter``, committed at or after ``since_ms``), oldest first."""
        found = [
            crossing
            for crossing in scan_notifications(self.client, self.notifications_table)
            if (key is None or crossing.key == key)
            and (counter is None or crossing.counter == counter)
            and (since_ms is None or crossing.at_ms >= since_ms)
        ]
        return sorted(found, key=lambda c: (c.at_ms, c.key, c.counter, c.message_id, c.level))


def _default_client() -> DynamoDBClient:
    """boto3's default client, imported only when no client is given (the CLI gives its own: importing boto3
    costs a command more than its work)."""
    import boto3  # noqa: PLC0415 - only without a client of the caller's

    return boto3.client("dynamodb")
