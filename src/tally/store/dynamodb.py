"""The DynamoDB counter store: applies planned chunks as transactions and reads counters back.

This is the only module that knows the item schema:

- counters table: one item per key, ``pk`` = the counter key, ``sk`` = ``"all"`` for all-time values;
  each named counter is a Number attribute ``c#<name>`` (the prefix keeps any user counter name clear of
  the key attributes).
- markers table: one item per applied message, ``id`` = the producer's message id, ``applied_at`` (epoch
  ms) and ``expires_at`` (epoch seconds, the table's TTL attribute).

One chunk becomes one ``TransactWriteItems``: first a conditional Put per marker
(``attribute_not_exists``), then one ``ADD`` Update per key. A cancelled transaction is read through its
``CancellationReasons`` (request order) and translated once, here, into the errors of ``tally.errors``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from tally.core.numbers import to_wire
from tally.errors import MarkersExistError, RetryableStoreError, StoreError, WriteRejectedError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from tally.core.plan import Chunk

PARTITION_KEY: Final = "pk"
SORT_KEY: Final = "sk"
ALL_TIME: Final = "all"
COUNTER_PREFIX: Final = "c#"
MARKER_ID: Final = "id"
MARKER_APPLIED_AT: Final = "applied_at"
MARKER_EXPIRES_AT: Final = "expires_at"

MAX_COUNTER_KEY_BYTES: Final = 2000
"""DynamoDB allows 2,048 bytes of partition key; 48 stay reserved for suffixes such as shard numbers."""
MAX_MESSAGE_ID_BYTES: Final = 1024
"""Marker ids must fit the 2,048-byte partition key with room to spare."""

_MARKER_ABSENT: Final = "attribute_not_exists(#id)"
# How DynamoDB words an ADD whose result leaves the Number range (magnitude or 38-digit precision).
_NUMBER_RANGE: Final = re.compile(
    r"Number overflow|Number underflow|significant digits|precision", re.IGNORECASE
)

# Cancellation reason codes that a retry can get past (DynamoDB documents these for TransactWriteItems).
_RETRYABLE_REASONS: Final = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
)
# Whole-request error codes that a retry can get past; botocore has already retried most of them.
_RETRYABLE_ERRORS: Final = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "TransactionInProgressException",
        "InternalServerError",
        "ServiceUnavailable",
    }
)


@dataclass(frozen=True, slots=True)
class MarkerRecord:
    """What a marker says about an applied message (used by tests and operator tools)."""

    message_id: str
    applied_at_ms: int
    expires_at_s: int


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
        self._client = client
        self._counters_table = counters_table
        self._markers_table = markers_table
        self._marker_ttl_seconds = marker_ttl_seconds

    # ----------------------------------------------------------------------------------------- writes
    def apply(self, chunk: Chunk, now_ms: int) -> None:
        """Commit one chunk atomically: all its markers and all its increments, or nothing.

        Raises ``MarkersExistError`` naming the messages that were applied before (a duplicate, or an
        earlier attempt whose response was lost), ``RetryableStoreError`` for throttling, conflicts and
        unknown outcomes, ``WriteRejectedError`` when DynamoDB refuses an increment itself.
        """
        items = self._transaction_items(chunk, now_ms)
        try:
            self._client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            raise _translate_transaction_error(exc, chunk) from exc
        except (BotoConnectionError, BotoCoreError) as exc:
            # The request may or may not have committed; markers make the retry safe either way.
            raise RetryableStoreError(f"transaction outcome unknown: {exc}") from exc

    def _transaction_items(self, chunk: Chunk, now_ms: int) -> list[TransactWriteItemTypeDef]:
        expires_at = now_ms // 1000 + self._marker_ttl_seconds
        items: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self._markers_table,
                    "Item": {
                        MARKER_ID: {"S": message_id},
                        MARKER_APPLIED_AT: {"N": str(now_ms)},
                        MARKER_EXPIRES_AT: {"N": str(expires_at)},
                    },
                    "ConditionExpression": _MARKER_ABSENT,
                    "ExpressionAttributeNames": {"#id": MARKER_ID},
                }
            }
            for message_id in chunk.message_ids
        ]
        for key, counters in chunk.increments.items():
            names: dict[str, str] = {}
            values: dict[str, Any] = {}
            clauses: list[str] = []
            for index, (name, delta) in enumerate(counters.items()):
                names[f"#c{index}"] = COUNTER_PREFIX + name
                values[f":v{index}"] = {"N": to_wire(delta)}
                clauses.append(f"#c{index} :v{index}")
            items.append(
                {
                    "Update": {
                        "TableName": self._counters_table,
                        "Key": {PARTITION_KEY: {"S": key}, SORT_KEY: {"S": ALL_TIME}},
                        "UpdateExpression": "ADD " + ", ".join(clauses),
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                }
            )
        return items

    # ------------------------------------------------------------------------------------------ reads
    def read_counters(self, key: str) -> dict[str, Decimal]:
        """The all-time counters of ``key`` (a strongly consistent read); empty if it was never counted."""
        try:
            response = self._client.get_item(
                TableName=self._counters_table,
                Key={PARTITION_KEY: {"S": key}, SORT_KEY: {"S": ALL_TIME}},
                ConsistentRead=True,
            )
        except ClientError as exc:
            raise StoreError(f"reading counters of {key!r} failed: {exc}") from exc
        return counters_from_item(response.get("Item", {}))

    def is_applied(self, message_id: str) -> bool:
        """Whether ``message_id`` has a marker, i.e. was applied (within the marker TTL)."""
        return self.read_marker(message_id) is not None

    def read_marker(self, message_id: str) -> MarkerRecord | None:
        """The marker of ``message_id`` if that message was applied (and its marker has not expired away)."""
        try:
            response = self._client.get_item(
                TableName=self._markers_table, Key={MARKER_ID: {"S": message_id}}, ConsistentRead=True
            )
        except ClientError as exc:
            raise StoreError(f"reading marker {message_id!r} failed: {exc}") from exc
        item = response.get("Item")
        if item is None:
            return None
        return MarkerRecord(
            message_id=message_id,
            applied_at_ms=int(item[MARKER_APPLIED_AT]["N"]),
            expires_at_s=int(item[MARKER_EXPIRES_AT]["N"]),
        )


def counters_from_item(item: Mapping[str, Any]) -> dict[str, Decimal]:
    """Decode the counters of a raw counters-table item (also for operator tools that scan or query)."""
    return {
        name[len(COUNTER_PREFIX) :]: Decimal(value["N"])
        for name, value in item.items()
        if name.startswith(COUNTER_PREFIX)
    }


def _translate_transaction_error(exc: ClientError, chunk: Chunk) -> StoreError:
    error = exc.response.get("Error", {})
    code = error.get("Code", "")
    if code != "TransactionCanceledException":
        message = error.get("Message", "")
        if code == "ValidationException" and _NUMBER_RANGE.search(message):
            # DynamoDB reports a counter leaving the Number range for the whole request, without naming
            # the action; the applier isolates the message by retrying each one alone.
            return WriteRejectedError(message, frozenset(chunk.increments))
        if code in _RETRYABLE_ERRORS:
            return RetryableStoreError(f"{code}: {error.get('Message', '')}")
        return StoreError(f"TransactWriteItems failed: {code}: {error.get('Message', '')}")
    reasons: Sequence[Mapping[str, Any]] = exc.response.get("CancellationReasons", [])
    message_ids = chunk.message_ids
    keys = list(chunk.increments)
    applied_before: set[str] = set()
    rejected_keys: set[str] = set()
    details: list[str] = []
    retryable = False
    for index, reason in enumerate(reasons):
        reason_code = reason.get("Code", "None")
        if reason_code in ("None", None):
            continue
        is_marker = index < len(message_ids)
        if reason_code == "ConditionalCheckFailed" and is_marker:
            applied_before.add(message_ids[index])
        elif reason_code in _RETRYABLE_REASONS:
            retryable = True
        elif reason_code == "ValidationError" and not is_marker:
            rejected_keys.add(keys[index - len(message_ids)])
            details.append(str(reason.get("Message", "")))
        else:
            details.append(f"{reason_code} at action {index}: {reason.get('Message', '')}")
    if applied_before:
        return MarkersExistError(frozenset(applied_before))
    if rejected_keys:
        return WriteRejectedError("; ".join(details), frozenset(rejected_keys))
    if retryable:
        return RetryableStoreError("transaction cancelled by a conflict or throttling")
    return StoreError("transaction cancelled: " + ("; ".join(details) or "no reason given"))


__all__ = [
    "ALL_TIME",
    "MAX_COUNTER_KEY_BYTES",
    "DynamoDBCounterStore",
    "MarkerRecord",
    "counters_from_item",
]
