"""The DynamoDB counter store: direct transactions, and reads of counters and markers.

A direct transaction commits a chunk of messages in one ``TransactWriteItems``: a conditional marker
``Put`` per message and one ``ADD`` per key, all or nothing. Larger units of a batch go through the
commit journal (``tally.store.journal``); both share the item schema in ``tally.store.schema``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.items import make_item
from tally.core.ledger import MarkerRecord
from tally.core.numbers import EXACT
from tally.core.sharding import MAX_SHARDS, HotKeys
from tally.errors import StoreError
from tally.store.schema import (
    ALL_TIME,
    EXPIRES_AT,
    LEDGER_ID,
    MARKER_APPLIED_AT,
    MARKER_BATCH,
    MARKER_DIGEST,
    MAX_COUNTER_KEY_BYTES,
    MAX_MESSAGE_ID_BYTES,
    PARTITION_KEY,
    SORT_KEY,
    add_update,
    batch_get_consistent,
    counters_from_item,
    item_key,
    marker_id,
    marker_put,
    translate,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient

    from tally.core.plan import Chunk
    from tally.core.windows import WindowUnit

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

MAX_SERIES_WINDOWS: Final = 10_000
_ZERO: Final = Decimal(0)


def _summed(parts: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    """Counters added up in ``EXACT``: 16 shards of 38 digits each must read back as DynamoDB stores them.

    (Python's default context keeps 28 digits and would round a hot key's total silently, issue 14.)
    """
    total: dict[str, Decimal] = {}
    for counters in parts:
        for name, value in counters.items():
            total[name] = EXACT.add(total.get(name, _ZERO), value)
    return total


def _marker_record(message_id: str, item: Mapping[str, Any]) -> MarkerRecord:
    batch = item.get(MARKER_BATCH)
    digest = item.get(MARKER_DIGEST)
    return MarkerRecord(
        message_id=message_id,
        applied_at_ms=int(item[MARKER_APPLIED_AT]["N"]),
        expires_at_s=int(item[EXPIRES_AT]["N"]),
        batch_id=batch["S"] if batch is not None else None,
        digest=bytes(digest["B"]) if digest is not None else None,
    )


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
        hot_keys: HotKeys | None = None,
    ) -> None:
        self.hot_keys = hot_keys or HotKeys()
        self.client = client
        self.counters_table = counters_table
        self.markers_table = markers_table
        self.marker_ttl_seconds = marker_ttl_seconds

    def apply(self, chunk: Chunk, now_ms: int) -> None:
        """Commit one chunk atomically: all its markers and all its increments, or nothing.

        Raises ``MarkersExistError`` naming the messages that already have markers (with the batch and
        content digest of each), ``RetryableStoreError`` for throttling, conflicts and unknown outcomes,
        ``WriteRejectedError`` when DynamoDB refuses an increment itself.
        """
        expires_at = now_ms // 1000 + self.marker_ttl_seconds
        actions = [
            marker_put(self.markers_table, message.message_id, now_ms, expires_at, digest=message.digest)
            for message in chunk.messages
        ]
        actions += [add_update(self.counters_table, key, counters) for key, counters in chunk.increments.items()]
        try:
            self.client.transact_write_items(TransactItems=[action for action, _ in actions])
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, [role for _, role in actions]) from exc

    def read_counters(self, key: str) -> dict[str, Decimal]:
        """The all-time counters of ``key`` (strongly consistent), summed over its shards if it is hot."""
        if not self.hot_keys.is_hot(key):
            return counters_from_item(self._get(item_key(key)))
        items = [make_item(key, shard=shard) for shard in range(MAX_SHARDS)]
        return _summed(counters_from_item(item) for item in self._batch_get([item_key(item) for item in items]))

    def read_series(self, key: str, unit: WindowUnit, from_ms: int, to_ms: int) -> list[tuple[int, dict[str, Decimal]]]:
        """The counters of every ``unit`` window of ``key`` from ``from_ms`` to ``to_ms``, in order.

        One ``Query`` per partition (one, or one per shard of a hot key) on the sort-key range; windows
        with no counts come back as empty maps, so the series has no gaps.
        """
        first, last = unit.start_ms(from_ms), unit.start_ms(to_ms)
        if last < first:
            return []
        if (last - first) // unit.duration_ms >= MAX_SERIES_WINDOWS:
            raise StoreError(f"at most {MAX_SERIES_WINDOWS} windows per read")
        shards = range(MAX_SHARDS) if self.hot_keys.is_hot(key) else range(1)
        found: dict[str, dict[str, Decimal]] = {}
        for shard in shards:
            partition = item_key(make_item(key, shard=shard))[PARTITION_KEY]
            for item in self._query(partition, unit.window_id(first), unit.window_id(last)):
                window = item[SORT_KEY]["S"]
                found[window] = _summed([found.get(window, {}), counters_from_item(item)])
        return [
            (start, found.get(unit.window_id(start), {}))
            for start in range(first, last + unit.duration_ms, unit.duration_ms)
        ]

    def _get(self, key: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            response = self.client.get_item(TableName=self.counters_table, Key=key, ConsistentRead=True)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc
        return response.get("Item", {})

    def _batch_get(self, keys: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return batch_get_consistent(self.client, self.counters_table, keys)

    def _query(self, partition: Mapping[str, Any], first: str, last: str) -> list[Mapping[str, Any]]:
        items: list[Mapping[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.counters_table,
            "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last",
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#sk": SORT_KEY},
            "ExpressionAttributeValues": {":pk": partition, ":first": {"S": first}, ":last": {"S": last}},
            "ConsistentRead": True,
        }
        while True:
            try:
                response = self.client.query(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc) from exc
            items.extend(response.get("Items", []))
            if "LastEvaluatedKey" not in response:
                return items
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def read_markers(self, message_ids: Sequence[str]) -> dict[str, MarkerRecord]:
        """The markers that exist among ``message_ids`` (eventually consistent ``BatchGetItem``s of 100).

        Read before writing so that a batch's redelivered or re-sent messages do not cancel, and waste,
        whole transactions: a read unit costs a fifth of a write unit. The read is only advice, so it is
        eventually consistent, at half the read units: the conditional marker writes are what guard
        exactly-once. A marker the read misses cancels one transaction (whose cancellation reasons,
        strongly consistent, then name it); a stale marker of an aborted batch that has since been
        replaced fails the replacing claim's condition the same way.
        """
        found: dict[str, MarkerRecord] = {}
        for start in range(0, len(message_ids), 100):
            keys = [{LEDGER_ID: {"S": marker_id(mid)}} for mid in message_ids[start : start + 100]]
            request: Any = {self.markers_table: {"Keys": keys, "ConsistentRead": False}}
            while request:
                try:
                    response = self.client.batch_get_item(RequestItems=request)
                except (ClientError, BotoCoreError) as exc:
                    raise translate(exc) from exc
                for item in response.get("Responses", {}).get(self.markers_table, []):
                    record = _marker_record(item["id"]["S"][2:], item)
                    found[record.message_id] = record
                request = response.get("UnprocessedKeys") or None
        return found

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
        return None if item is None else _marker_record(message_id, item)
