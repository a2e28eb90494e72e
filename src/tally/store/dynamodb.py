"""The DynamoDB counter store: direct transactions, and reads of counters and markers.

A direct transaction commits a chunk of messages in one ``TransactWriteItems``: a conditional marker
``Put`` per message and one ``ADD`` per key, all or nothing. Larger units of a batch go through the
commit journal (``tally.store.journal``); both share the item schema in ``tally.store.schema``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.ledger import MarkerRecord
from tally.store.schema import (
    ALL_TIME,
    EXPIRES_AT,
    LEDGER_ID,
    MARKER_APPLIED_AT,
    MARKER_BATCH,
    MAX_COUNTER_KEY_BYTES,
    MAX_MESSAGE_ID_BYTES,
    PARTITION_KEY,
    SORT_KEY,
    add_update,
    counters_from_item,
    marker_id,
    marker_put,
    translate,
)

if TYPE_CHECKING:
    from decimal import Decimal

    from mypy_boto3_dynamodb.client import DynamoDBClient

    from tally.core.plan import Chunk

__all__ = [
    "ALL_TIME",
    "COUNTER_PREFIX",
    "MAX_COUNTER_KEY_BYTES",
    "MAX_MESSAGE_ID_BYTES",
    "PARTITION_KEY",
    "SORT_KEY",
    "DynamoDBCounterStore",
    "MarkerRecord",
    "counters_from_item",
]

from tally.store.schema import COUNTER_PREFIX


class DynamoDBCounterStore:
    """Counter store on two DynamoDB tables; the client is injected so tests and local runs can point it."""

    max_key_bytes: Final = MAX_COUNTER_KEY_BYTES
    max_message_id_bytes: Final = MAX_MESSAGE_ID_BYTES

    def __init__(
        self,
        client: DynamoDBClient,
        counters_table: str,
        markers_table: str,
        marker_ttl_seconds: int,
    ) -> None:
        self.client = client
        self.counters_table = counters_table
        self.markers_table = markers_table
        self.marker_ttl_seconds = marker_ttl_seconds

    def apply(self, chunk: Chunk, now_ms: int) -> None:
        """Commit one chunk atomically: all its markers and all its increments, or nothing.

        Raises ``MarkersExistError`` naming the messages that already have markers (with the batch of
        each journal marker), ``RetryableStoreError`` for throttling, conflicts and unknown outcomes,
        ``WriteRejectedError`` when DynamoDB refuses an increment itself.
        """
        expires_at = now_ms // 1000 + self.marker_ttl_seconds
        actions = [marker_put(self.markers_table, mid, now_ms, expires_at) for mid in chunk.message_ids]
        actions += [add_update(self.counters_table, key, counters) for key, counters in chunk.increments.items()]
        try:
            self.client.transact_write_items(TransactItems=[action for action, _ in actions])
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, [role for _, role in actions]) from exc

    def read_counters(self, key: str) -> dict[str, Decimal]:
        """The all-time counters of ``key`` (a strongly consistent read); empty if it was never counted."""
        try:
            response = self.client.get_item(
                TableName=self.counters_table,
                Key={PARTITION_KEY: {"S": key}, SORT_KEY: {"S": ALL_TIME}},
                ConsistentRead=True,
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc
        return counters_from_item(response.get("Item", {}))

    def read_marker(self, message_id: str) -> MarkerRecord | None:
        """The marker of ``message_id``, if it has one (strongly consistent)."""
        try:
            response = self.client.get_item(
                TableName=self.markers_table,
                Key={LEDGER_ID: {"S": marker_id(message_id)}},
                ConsistentRead=True,
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc
        item = response.get("Item")
        if item is None:
            return None
        batch = item.get(MARKER_BATCH)
        return MarkerRecord(
            message_id=message_id,
            applied_at_ms=int(item[MARKER_APPLIED_AT]["N"]),
            expires_at_s=int(item[EXPIRES_AT]["N"]),
            batch_id=batch["S"] if batch is not None else None,
        )
