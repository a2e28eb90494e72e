"""What a hand-written counting handler does per event: ``json.loads`` the body, one ``UpdateItem ADD``.

Shared by the naive peer and the Powertools peer, whose record handler does the same work inside
``idempotent_function``. Decimal deltas are parsed exactly (``parse_float=Decimal``) and all counters of
an event travel in one update, so both peers count right except where their idempotency falls short.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from mypy_boto3_dynamodb import DynamoDBClient


def events_of(body: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(key, deltas) of each event of a message body, single or packed (``delta`` means ``count``)."""
    message = json.loads(body, parse_float=Decimal)
    for event in message.get("events", [message]):
        deltas = event["deltas"] if "deltas" in event else {"count": event["delta"]}
        yield event["key"], deltas


def add_event(client: DynamoDBClient, table: str, key_attribute: str, key: str, deltas: Mapping[str, Any]) -> None:
    """One atomic ``UpdateItem ... ADD`` of every counter of one event, as the seed articles write it."""
    client.update_item(
        TableName=table,
        Key={key_attribute: {"S": key}},
        UpdateExpression="ADD " + ", ".join(f"#c{i} :v{i}" for i in range(len(deltas))),
        ExpressionAttributeNames={f"#c{i}": name for i, name in enumerate(deltas)},
        ExpressionAttributeValues={f":v{i}": {"N": str(delta)} for i, delta in enumerate(deltas.values())},
        ReturnValues="UPDATED_NEW",
    )


def read_counter_item(client: DynamoDBClient, table: str, key_attribute: str, key: str) -> dict[str, Decimal]:
    """The counters of one key (a strongly consistent read; empty if never counted)."""
    item = client.get_item(TableName=table, Key={key_attribute: {"S": key}}, ConsistentRead=True).get("Item", {})
    return {name: Decimal(str(value["N"])) for name, value in item.items() if name != key_attribute}
