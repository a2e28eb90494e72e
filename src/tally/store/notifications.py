"""The notifications table: one item per crossing of a declared level, written in the commit's transaction.

Partition key ``notification_id``: the crossing's deterministic id (``tally.core.thresholds.notification_id``).
Attributes: ``key`` (a view's item as ``api[customer=acme]``), ``counter``, ``level`` (N), ``direction``
(``rising``/``falling``), ``window``, ``value``
(N: the counter after the write that recorded it), ``step_value`` (N: after the crossing message's own step),
``message_id``, ``at`` (N: epoch ms of the write), ``time`` (the same, ISO 8601 UTC) and ``expires_at`` (the TTL
attribute).

The table's stream (``NEW_IMAGE``) is what EventBridge Pipes reads: a new item is an ``INSERT`` record, which
the pipe's filter keeps and its input template turns into the event's detail (template.yaml,
``NotificationsPipe``). The ``Put`` is unconditional: the message's marker, in the same transaction, already
makes it happen once; should the same id be written again (a message redelivered past its marker's horizon)
the record is a ``MODIFY``, or none at all when nothing changed, and is not announced again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.items import item_label
from tally.core.numbers import to_wire
from tally.core.thresholds import Crossing, Direction
from tally.store.actions import Role
from tally.store.requests import translate

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


NOTIFICATION_ID: Final = "notification_id"
KEY: Final = "key"
COUNTER: Final = "counter"
LEVEL: Final = "level"
DIRECTION: Final = "direction"
WINDOW: Final = "window"
VALUE: Final = "value"
STEP_VALUE: Final = "step_value"
MESSAGE_ID: Final = "message_id"
AT: Final = "at"
TIME: Final = "time"
EXPIRES_AT: Final = "expires_at"


def notification_item(crossing: Crossing, expires_at_s: int) -> dict[str, Any]:
    """The item of one crossing (DynamoDB's typed form). A view's crossing names its item as people write it,
    ``api[customer=acme]`` (its identity is the notification id, derived from the view item's key)."""
    return {
        NOTIFICATION_ID: {"S": crossing.notification_id},
        KEY: {"S": item_label(crossing.key)},
        COUNTER: {"S": crossing.counter},
        LEVEL: {"N": to_wire(crossing.level)},
        DIRECTION: {"S": str(crossing.direction)},
        WINDOW: {"S": crossing.window},
        VALUE: {"N": to_wire(crossing.value)},
        STEP_VALUE: {"N": to_wire(crossing.step_value)},
        MESSAGE_ID: {"S": crossing.message_id},
        AT: {"N": str(crossing.at_ms)},
        TIME: {"S": iso_utc(crossing.at_ms)},
        EXPIRES_AT: {"N": str(expires_at_s)},
    }


def iso_utc(at_ms: int) -> str:
    """``2026-11-26T10:15:00.123Z``: the event time as EventBridge consumers read times."""
    moment = datetime.fromtimestamp(at_ms // 1000, UTC) + timedelta(milliseconds=at_ms % 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def notification_put(table: str, crossing: Crossing, expires_at_s: int) -> tuple[TransactWriteItemTypeDef, Role]:
    """The transaction action recording one crossing (unconditional: see the module's docstring)."""
    return {"Put": {"TableName": table, "Item": notification_item(crossing, expires_at_s)}}, Role(
        "notification", crossing.notification_id
    )


def _number(value: Mapping[str, str]) -> Decimal:
    return Decimal(value["N"])


def crossing_from_item(item: Mapping[str, Any]) -> Crossing:
    """One stored notification read back (numbers as exact ``Decimal``)."""
    return Crossing(
        notification_id=item[NOTIFICATION_ID]["S"],
        key=item[KEY]["S"],
        counter=item[COUNTER]["S"],
        level=_number(item[LEVEL]),
        direction=Direction(item[DIRECTION]["S"]),
        message_id=item[MESSAGE_ID]["S"],
        value=_number(item[VALUE]),
        step_value=_number(item[STEP_VALUE]),
        at_ms=int(item[AT]["N"]),
        window=item[WINDOW]["S"],
    )


def scan_notifications(client: DynamoDBClient, table: str) -> Iterator[Crossing]:
    """Every stored notification (a paginated, strongly consistent ``Scan``: crossings are rare, the table is
    small, and TTL keeps it so)."""
    pages = client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    try:
        for page in pages:
            for item in page.get("Items", []):
                yield crossing_from_item(item)
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc) from exc
