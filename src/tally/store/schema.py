"""The item schema of tally's two tables, and the one translation of DynamoDB errors.

Counters table: one item per key, ``pk`` = the counter key, ``sk`` = ``"all"`` for all-time values; each
named counter is a Number attribute ``c#<name>`` (the prefix keeps any user counter name clear of the key
attributes). An open hour or day window's counter is ``w#<window id>\x1f<name>`` on the same item
(``w#h#2026-11-22T03:00Z\x1fcount``, issue 16: a batch writes one item per key) until the window has ended
and ``tally.store.windows`` moves it to the window's own item (``sk`` = the window id, ``c#<name>``, TTL).
Gauges (issue 15) live on the key's all-time item too: ``max#<name>``, ``min#<name>``,
``latest#<name>`` (Number, or String for a latest text) with ``latest_order#<name>`` (Binary). Distinct
counts (issue 15) are ``dc#<set>`` on the key's all-time and window items (on a hot key, on its shards: the
reader sums them), and each counted member is an item of its own in the key's member partition
``<key>\x1fd`` (``member_key``; written by ``tally.store.distinct``).

Markers table (the idempotency ledger), partition key ``id`` with a prefix per kind of item:

- ``m#<message id>``: a message's marker. Without ``batch`` it was written in the same transaction as
  the message's deltas (a direct transaction). With ``batch`` it belongs to that journal batch and counts
  as applied exactly when that batch is COMMITTED or DONE. ``digest`` (Binary, 16 bytes) is the digest of
  the content it counts (``tally.core.digest``); markers written before digests existed have none.
- ``b#<batch id>``: a journal header (``state``, ``lease_until``, ``chunks``).
- ``b#<batch id>#p<i>``: page ``i`` of a committed batch, the encoded increments of apply chunk ``i``.
- ``b#<batch id>#a<i>``: the record that apply chunk ``i`` was applied.

Every item carries ``expires_at`` (epoch seconds, the table's TTL attribute).
"""

from __future__ import annotations

import random
import re
import time
from decimal import Decimal
from itertools import islice
from typing import TYPE_CHECKING, Any, Final

import msgspec
from botocore.exceptions import BotoCoreError, ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from tally.core.items import (
    ALL_TIME,
    SHARD_SEPARATOR,
    WINDOW_COUNTER_MARK,
    ItemKey,
    item_label,
    item_parts,
    make_item,
    window_counter,
)
from tally.core.numbers import to_wire
from tally.errors import (
    BatchStateError,
    BoundRefusedError,
    ChunkAppliedError,
    MarkersExistError,
    RetryableStoreError,
    StoreError,
    WriteRejectedError,
)
from tally.store.expressions import (
    OPERATOR_AT,
    OPERATOR_ID,
    add_expression,
    bound_condition,
    bound_placeholders,
    name_placeholder,
    operator_placeholders,
    operator_sets,
    start_placeholder,
    value_placeholder,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from tally.core.aggregate import Totals
    from tally.core.bounds import BoundCheck
    from tally.core.resets import OperatorStamp

__all__ = ["ALL_TIME"]  # re-exported: the sort key value of all-time items

PARTITION_KEY: Final = "pk"
SORT_KEY: Final = "sk"
COUNTER_PREFIX: Final = "c#"
WINDOW_PREFIX: Final = "w#"
"""An open window's counter on a key's item: ``w#<window id>\x1f<counter>`` (``counter_attribute``)."""

LEDGER_ID: Final = "id"
EXPIRES_AT: Final = "expires_at"
MARKER_APPLIED_AT: Final = "applied_at"
MARKER_BATCH: Final = "batch"
MARKER_DIGEST: Final = "digest"
HEADER_STATE: Final = "state"
HEADER_LEASE_UNTIL: Final = "lease_until"
HEADER_CHUNKS: Final = "chunks"
PAGE_DATA: Final = "data"
APPLIED_REFUSED: Final = "refused"

MAX_COUNTER_KEY_BYTES: Final = 2000
"""DynamoDB allows 2,048 bytes of partition key; 48 stay reserved for suffixes such as shard numbers."""
MAX_MESSAGE_ID_BYTES: Final = 1024
"""Marker ids must fit the 2,048-byte partition key with room for the prefix."""

# How DynamoDB words an ADD whose result leaves the Number range (magnitude or 38-digit precision).
NUMBER_RANGE: Final = re.compile(r"Number overflow|Number underflow|significant digits|precision", re.IGNORECASE)
# How DynamoDB words a per-action size limit ("Expression size has exceeded the maximum allowed size",
# "Item size has exceeded ..."): the request as a whole, without naming the action; the caller isolates it.
SIZE_LIMIT: Final = re.compile(r"size has exceeded the maximum allowed size", re.IGNORECASE)

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


def marker_id(message_id: str) -> str:
    return "m#" + message_id


def header_id(batch_id: str) -> str:
    return "b#" + batch_id


def page_id(batch_id: str, index: int) -> str:
    return f"b#{batch_id}#p{index}"


def applied_id(batch_id: str, index: int) -> str:
    return f"b#{batch_id}#a{index}"


# ------------------------------------------------------------------------------------------ actions
# Each transaction action is paired with its role, so a cancellation can be read back by position.
Role = tuple[str, str]
"""("marker", message id) | ("add", counter key) | ("batch", batch id) | ("applied", batch id)."""


def marker_put(
    table: str,
    message_id: str,
    now_ms: int,
    expires_at_s: int,
    *,
    batch_id: str | None = None,
    replaces: str | None = None,
    digest: bytes = b"",
) -> tuple[TransactWriteItemTypeDef, Role]:
    """A message's marker; conditional on no marker, or on one of the (aborted) batch it replaces.

    ``ALL_OLD`` returns an existing marker in the cancellation reason: its batch and digest settle the
    message without another read.
    """
    item: dict[str, Any] = {
        LEDGER_ID: {"S": marker_id(message_id)},
        MARKER_APPLIED_AT: {"N": str(now_ms)},
        EXPIRES_AT: {"N": str(expires_at_s)},
    }
    if batch_id is not None:
        item[MARKER_BATCH] = {"S": batch_id}
    if digest:
        item[MARKER_DIGEST] = {"B": digest}
    put: dict[str, Any] = {"TableName": table, "Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    if replaces is None:
        put.update(ConditionExpression="attribute_not_exists(#id)", ExpressionAttributeNames={"#id": LEDGER_ID})
    else:
        put.update(
            ConditionExpression="#batch = :replaced",
            ExpressionAttributeNames={"#batch": MARKER_BATCH},
            ExpressionAttributeValues={":replaced": {"S": replaces}},
        )
    return {"Put": put}, ("marker", message_id)  # type: ignore[typeddict-item]


def batch_state_check(table: str, batch_id: str, state: str) -> tuple[TransactWriteItemTypeDef, Role]:
    """A condition that a journal batch is in ``state`` (checked atomically with the other actions)."""
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": {LEDGER_ID: {"S": header_id(batch_id)}},
            "ConditionExpression": "#state = :state",
            "ExpressionAttributeNames": {"#state": HEADER_STATE},
            "ExpressionAttributeValues": {":state": {"S": state}},
        }
    }, ("batch", batch_id)


def item_key(item: ItemKey) -> dict[str, Any]:
    """The primary key of a counter item: shards get their own partition key, windows their sort key."""
    parts = item_parts(item)
    partition = parts.key if parts.shard == 0 else f"{parts.key}{SHARD_SEPARATOR}{parts.shard}"
    return {PARTITION_KEY: {"S": partition}, SORT_KEY: {"S": parts.window}}


def add_update(
    table: str,
    item: ItemKey,
    counters: Mapping[str, Any],
    starts: Mapping[str, Any] | None = None,
    bounds: Sequence[BoundCheck] = (),
    *,
    sets: Mapping[str, Any] | None = None,
    stamp: OperatorStamp | None = None,
) -> tuple[TransactWriteItemTypeDef, Role]:
    """One atomic ``ADD`` of every counter of one item (and, for a window, its expiry if not set yet).

    ``starts`` (counter -> start value, ``tally.core.defaults``) applies to a key's all-time item only:
    those counters are ``SET c = if_not_exists(c, :start) + :delta`` in the same action. ``bounds``
    (``tally.core.bounds.bound_checks``) make the write conditional: a bound it would cross cancels the
    transaction, with the item as it was (``ALL_OLD``) in the cancellation reason.

    ``sets`` (a reset's values: ``SET c = :value``, no ``if_not_exists``: after a reset the value is the
    reset's) and ``stamp`` (the record of a reset or correction: ``reset_at#c``, ``reset_id#c``,
    ``reset_to#c`` or ``corrected_at#c``, ``corrected_id#c``, ``corrected_by#c``) ride in the same action,
    so the item is still written once (issue 15, part 5).
    """
    parts = item_parts(item)
    started = {} if not starts or parts.window != ALL_TIME or parts.shard != 0 else starts
    ordered = [(name, delta) for name, delta in counters.items() if name in started]
    first_plain = len(ordered)
    ordered += [(name, delta) for name, delta in counters.items() if name not in started]
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    for index, (name, delta) in enumerate(ordered):
        names[name_placeholder(index)] = counter_attribute(name)
        values[value_placeholder(index)] = {"N": to_wire(delta)}
        if index < first_plain:
            values[start_placeholder(index)] = {"N": to_wire(started[name])}
    expires_at_s = parts.expires_at_s
    extra: list[str] = []
    if sets or stamp is not None:
        extra = _operator_clauses(names, values, sets, stamp)
    # Built by ``expressions``, whose ``counters_per_add`` bounds it within DynamoDB's 4 KB.
    expression = add_expression(
        len(ordered), sets_expiry=expires_at_s is not None, started=first_plain, extra_sets=extra
    )
    if expires_at_s is not None:
        names["#expires"] = EXPIRES_AT
        values[":expires"] = {"N": str(expires_at_s)}
    update: dict[str, Any] = {
        "TableName": table,
        "Key": item_key(item),
        "UpdateExpression": expression,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    if bounds:
        _add_bound_condition(update, bounds)
    return {"Update": update}, ("add", item_label(item))  # type: ignore[typeddict-item]


def bound_check(table: str, item: ItemKey, bounds: Sequence[BoundCheck]) -> tuple[TransactWriteItemTypeDef, Role]:
    """A ``ConditionCheck`` of an item's bounds, for a bounded item whose net in the transaction is zero but
    whose steps move it (``-5`` then ``+5`` must not take a counter at 3 below a floor of 0 on the way)."""
    check: dict[str, Any] = {"TableName": table, "Key": item_key(item)}
    _add_bound_condition(check, bounds)
    return {"ConditionCheck": check}, ("add", item_label(item))  # type: ignore[typeddict-item]


def _add_bound_condition(action: dict[str, Any], bounds: Sequence[BoundCheck]) -> None:
    names = action.setdefault("ExpressionAttributeNames", {})
    values = action.setdefault("ExpressionAttributeValues", {})
    for index, check in enumerate(bounds):
        name, low, high = bound_placeholders(index)
        names[name] = COUNTER_PREFIX + check.counter
        if check.at_least is not None:
            values[low] = {"N": to_wire(check.at_least)}
        if check.at_most is not None:
            values[high] = {"N": to_wire(check.at_most)}
    if not values:
        del action["ExpressionAttributeValues"]
    action["ConditionExpression"] = bound_condition(bounds)
    action["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"


OPERATOR_PREFIXES: Final = {
    "reset": ("reset_at#", "reset_id#", "reset_to#"),
    "correction": ("corrected_at#", "corrected_id#", "corrected_by#"),
}
"""The record of a counter's last reset or correction: when (epoch ms), by which message id, and the value it
was reset to or the delta it was corrected by (on the key's all-time item, beside the ``c#`` counters)."""


def _operator_clauses(
    names: dict[str, str], values: dict[str, Any], sets: Mapping[str, Any] | None, stamp: OperatorStamp | None
) -> list[str]:
    """Fill in a reset's and an operator record's placeholders; return their ``SET`` clauses."""
    amounts = sets if sets else (stamp.values if stamp is not None else {})
    for index, (name, amount) in enumerate(amounts.items()):
        counter, value, at, by, recorded = operator_placeholders(index)
        if sets:
            names[counter] = COUNTER_PREFIX + name
        values[value] = {"N": to_wire(amount)}
        if stamp is not None:
            at_prefix, id_prefix, value_prefix = OPERATOR_PREFIXES[stamp.kind.value]
            names[at], names[by], names[recorded] = at_prefix + name, id_prefix + name, value_prefix + name
    if stamp is not None:
        values[OPERATOR_AT] = {"N": str(stamp.at_ms)}
        values[OPERATOR_ID] = {"S": stamp.message_id}
    return operator_sets(len(amounts), sets_counters=bool(sets), stamped=stamp is not None)


def operators_from_item(item: Mapping[str, Any]) -> dict[str, dict[str, tuple[int, str, Decimal]]]:
    """The operator records of a raw counters-table item: kind -> counter -> (at ms, message id, amount)."""
    found: dict[str, dict[str, tuple[int, str, Decimal]]] = {}
    for kind, (at_prefix, id_prefix, value_prefix) in OPERATOR_PREFIXES.items():
        for attribute, value in item.items():
            if attribute.startswith(at_prefix):
                name = attribute[len(at_prefix) :]
                by, amount = item.get(id_prefix + name), item.get(value_prefix + name)
                if by is not None and amount is not None:
                    found.setdefault(kind, {})[name] = (int(value["N"]), by["S"], Decimal(amount["N"]))
    return found


GAUGE_PREFIXES: Final = {"max": "max#", "min": "min#", "latest": "latest#"}
"""A gauge's attribute: ``max#<name>``, ``min#<name>``, ``latest#<name>`` (beside the ``c#`` counters)."""
LATEST_ORDER_PREFIX: Final = "latest_order#"
"""A latest gauge's order (Binary: ``tally.core.gauges.latest_order``), which its writes are conditioned on."""


def gauge_attribute(kind: str, name: str) -> str:
    return GAUGE_PREFIXES[kind] + name


def latest_order_attribute(name: str) -> str:
    return LATEST_ORDER_PREFIX + name


def gauges_from_item(item: Mapping[str, Any]) -> dict[str, dict[str, Decimal | str]]:
    """The gauges of a raw counters-table item: kind (max, min, latest) -> gauge name -> value."""
    gauges: dict[str, dict[str, Decimal | str]] = {}
    for attribute, value in item.items():
        for kind, prefix in GAUGE_PREFIXES.items():
            if attribute.startswith(prefix):
                text = value.get("S")
                gauges.setdefault(kind, {})[attribute[len(prefix) :]] = (
                    text if text is not None else Decimal(value["N"])
                )
    return gauges


DISTINCT_PREFIX: Final = "dc#"
"""A distinct count's attribute on a key's counter items: ``dc#<set>`` (issue 15, part 2; beside ``c#``)."""
MEMBER_PARTITION_SUFFIX: Final = SHARD_SEPARATOR + "d"
"""A key's member items live in partition ``<key>\x1fd`` (a key never holds U+001F; a shard's suffix is a
number), one item per (window, set, member), sort key ``<window>\x1f<set>\x1f<member>``: never ``all``, so
``top``'s scan skips them, and apart from the key's counter items, so a ``series`` query never meets them."""


def member_key(key: str, window: str, name: str, member: str) -> dict[str, Any]:
    """The primary key of the member item that records ``member`` counted in ``key``'s set ``name``."""
    sort = f"{window}{SHARD_SEPARATOR}{name}{SHARD_SEPARATOR}{member}"
    return {PARTITION_KEY: {"S": key + MEMBER_PARTITION_SUFFIX}, SORT_KEY: {"S": sort}}


def member_of_item(item: Mapping[str, Any]) -> tuple[str, str, str]:
    """(window, set, member) of a raw member item (its sort key)."""
    window, name, member = item[SORT_KEY]["S"].split(SHARD_SEPARATOR, 2)
    return window, name, member


def distinct_attribute(name: str) -> str:
    return DISTINCT_PREFIX + name


def distinct_from_item(item: Mapping[str, Any]) -> dict[str, Decimal]:
    """The distinct counts of a raw counter item: set name -> members counted (on this item)."""
    return {
        name[len(DISTINCT_PREFIX) :]: Decimal(value["N"])
        for name, value in item.items()
        if name.startswith(DISTINCT_PREFIX)
    }


def counter_attribute(name: str) -> str:
    """The attribute of a counter in a batch's totals: ``c#<name>``, or, for an open window's counter
    (``tally.core.items.window_counter``), ``w#<window id>\x1f<name>``."""
    if name.startswith(WINDOW_COUNTER_MARK):
        return WINDOW_PREFIX + name[1:]
    return COUNTER_PREFIX + name


def open_windows_from_item(item: Mapping[str, Any]) -> dict[str, dict[str, Decimal]]:
    """The open windows' counters on a raw key item: window id -> counter -> value (``w#`` attributes)."""
    found: dict[str, dict[str, Decimal]] = {}
    for attribute, value in item.items():
        if attribute.startswith(WINDOW_PREFIX):
            window, _, counter = attribute[len(WINDOW_PREFIX) :].partition(SHARD_SEPARATOR)
            found.setdefault(window, {})[counter] = Decimal(value["N"])
    return found


def window_attribute(window: str, counter: str) -> str:
    """The attribute of ``counter`` in the open ``window`` on a key's item."""
    return counter_attribute(window_counter(window, counter))


def item_counters(item: Mapping[str, Any]) -> dict[str, Decimal]:
    """Every counter of a raw item under the name the batch's totals give it: all-time counters by name,
    open windows' by ``window_counter`` (what a journal's range check compares a chunk's increments with)."""
    found = counters_from_item(item)
    for window, counters in open_windows_from_item(item).items():
        found.update({window_counter(window, name): value for name, value in counters.items()})
    return found


def counters_from_item(item: Mapping[str, Any]) -> dict[str, Decimal]:
    """Decode the counters of a raw counters-table item (also for operator tools that scan or query)."""
    return {
        name[len(COUNTER_PREFIX) :]: Decimal(value["N"])
        for name, value in item.items()
        if name.startswith(COUNTER_PREFIX)
    }


# ----------------------------------------------------------------------------------- journal pages
_PAGE_ENCODER = msgspec.msgpack.Encoder()
_PAGE_DECODER = msgspec.msgpack.Decoder(list[tuple[str, str, int, int | None, list[tuple[str, str]]]])


def encode_page(increments: Totals) -> bytes:
    """Compact, exact encoding of one apply chunk's increments (numbers as their decimal text)."""
    rows = []
    for item, counters in increments.items():
        parts = item_parts(item)
        values = [(name, to_wire(delta)) for name, delta in counters.items()]
        rows.append((parts.key, parts.window, parts.shard, parts.expires_at_s, values))
    return _PAGE_ENCODER.encode(rows)


def decode_page(data: bytes) -> dict[ItemKey, dict[str, Decimal]]:
    return {
        make_item(key, window, shard, expires): {name: Decimal(text) for name, text in counters}
        for key, window, shard, expires, counters in _PAGE_DECODER.decode(data)
    }


BATCH_GET_LIMIT: Final = 100
"""Keys one ``BatchGetItem`` may ask for."""
BATCH_GET_MAX_ROUNDS: Final = 8
"""Calls per chunk before keys DynamoDB keeps leaving unprocessed are a ``RetryableStoreError``."""
_BATCH_GET_PAUSE_S: Final = 0.05
_BATCH_GET_MAX_PAUSE_S: Final = 1.0


def batch_get(
    client: DynamoDBClient,
    table: str,
    keys: Iterable[Mapping[str, Any]],
    *,
    consistent: bool = True,
    sleep: Callable[[float], object] = time.sleep,
) -> list[Mapping[str, Any]]:
    """Every stored item of ``keys`` in ``table``: ``BatchGetItem``s of at most 100 keys (strongly consistent
    unless ``consistent=False``), the keys DynamoDB leaves unprocessed asked again; errors translated once,
    here. The one BatchGetItem loop of tally: the reader, the counter store and the journal all use it.

    A partly throttled ``BatchGetItem`` succeeds with ``UnprocessedKeys`` (botocore retries only a call that
    failed as a whole): they are asked again after a pause drawn from a doubling ceiling (full jitter), as
    AWS asks, and after ``BATCH_GET_MAX_ROUNDS`` calls the read fails as retryable instead of spinning for the
    rest of the invocation.

    ``keys`` is read 100 at a time, so a caller may pass a generator: a 10,000-record batch's marker keys,
    built at once, cost 2.4 MB of peak memory (``bench.memory``).
    """
    items: list[Mapping[str, Any]] = []
    pending = iter(keys)
    while page := list(islice(pending, BATCH_GET_LIMIT)):
        request: Any = {table: {"Keys": page, "ConsistentRead": consistent}}
        for round_ in range(1, BATCH_GET_MAX_ROUNDS + 1):
            try:
                response = client.batch_get_item(RequestItems=request)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc) from exc
            items.extend(response.get("Responses", {}).get(table, []))
            request = response.get("UnprocessedKeys") or None
            if request is None:
                break
            if round_ < BATCH_GET_MAX_ROUNDS:
                sleep(random.uniform(0, min(_BATCH_GET_MAX_PAUSE_S, _BATCH_GET_PAUSE_S * 2**round_)))
        else:
            left = len(request.get(table, {}).get("Keys", []))
            raise RetryableStoreError(f"{left} keys left unprocessed by {BATCH_GET_MAX_ROUNDS} BatchGetItem calls")
    return items


# -------------------------------------------------------------------------------- error translation
def _read_marker_reason(
    message_id: str, old_item: Mapping[str, Any], batches: dict[str, str], digests: dict[str, bytes]
) -> None:
    """The batch and digest of an existing marker, from a cancellation reason's ``ALL_OLD`` item."""
    existing = old_item.get(MARKER_BATCH)
    if existing is not None:
        batches[message_id] = existing["S"]
    digest = old_item.get(MARKER_DIGEST)
    if digest is not None:
        digests[message_id] = bytes(digest["B"])


def translate(exc: Exception, roles: Sequence[Role] = ()) -> StoreError:
    """Turn a failed DynamoDB call into tally's errors, reading cancellation reasons by position."""
    if not isinstance(exc, ClientError):
        if isinstance(exc, BotoConnectionError | BotoCoreError):
            # The request may or may not have committed; conditions make the retry safe either way.
            return RetryableStoreError(f"outcome unknown: {exc}")
        return StoreError(str(exc))
    error = exc.response.get("Error", {})
    code = error.get("Code", "")
    message = error.get("Message", "")
    if code != "TransactionCanceledException":
        if code == "ValidationException" and (NUMBER_RANGE.search(message) or SIZE_LIMIT.search(message)):
            # DynamoDB reports a counter leaving the Number range, or an action over a size limit, for the
            # whole request, without naming the action; the caller isolates the culprit (issue 14: failing
            # the batch would fail its innocent messages on every attempt).
            adds = frozenset(name for role, name in roles if role == "add")
            return WriteRejectedError(message, adds, number_range=NUMBER_RANGE.search(message) is not None)
        if code in _RETRYABLE_ERRORS:
            return RetryableStoreError(f"{code}: {message}")
        return StoreError(f"{code}: {message}")
    reasons: Sequence[Mapping[str, Any]] = exc.response.get("CancellationReasons", [])
    markers: set[str] = set()
    batches: dict[str, str] = {}
    digests: dict[str, bytes] = {}
    failed_batch: str | None = None
    applied_failed = False
    rejected_keys: set[str] = set()
    details: list[str] = []
    bounded: dict[str, dict[str, Decimal]] = {}
    out_of_range = True
    retryable = False
    for (role, name), reason in zip(roles, reasons, strict=False):
        reason_code = reason.get("Code") or "None"
        if reason_code == "None":
            continue
        if reason_code == "ConditionalCheckFailed" and role == "marker":
            markers.add(name)
            _read_marker_reason(name, reason.get("Item", {}), batches, digests)
        elif reason_code == "ConditionalCheckFailed" and role == "batch":
            failed_batch = name
        elif reason_code == "ConditionalCheckFailed" and role == "applied":
            applied_failed = True
        elif reason_code == "ConditionalCheckFailed" and role == "add":
            bounded[name] = counters_from_item(reason.get("Item", {}))  # only bounded writes carry a condition
        elif reason_code in _RETRYABLE_REASONS:
            retryable = True
        elif reason_code == "ValidationError" and role == "add":
            rejected_keys.add(name)
            details.append(str(reason.get("Message", "")))
            out_of_range = out_of_range and NUMBER_RANGE.search(details[-1]) is not None
        else:
            details.append(f"{reason_code} on {role} {name!r}: {reason.get('Message', '')}")
    if markers:
        return MarkersExistError(frozenset(markers), batches, digests)
    if failed_batch is not None:
        return BatchStateError(failed_batch)
    if applied_failed:
        return ChunkAppliedError("apply chunk already applied")
    if bounded and not rejected_keys:
        return BoundRefusedError(bounded)
    if rejected_keys:
        return WriteRejectedError("; ".join(details), frozenset(rejected_keys), number_range=out_of_range)
    if retryable:
        return RetryableStoreError("transaction cancelled by a conflict or throttling")
    return StoreError("transaction cancelled: " + ("; ".join(details) or "no reason given"))
