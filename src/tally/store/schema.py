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
- ``s#<session>#<block>``: the markers of numbered messages ``<session>.<seq>`` (issue 16, part 3;
  ``tally.core.numbered``) whose ``seq // 16`` is ``block``, one per attribute: ``<seq % 16>`` (Binary:
  the applied time, 6 bytes of epoch ms, then the 16-byte digest if any) and, for a journal claim,
  ``b<seq % 16>`` (the batch). Each says what an ``m#`` marker says about its message
  (``marker_records`` reads both kinds into the same ``MarkerRecord``).
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
from tally.core.ledger import MarkerRecord
from tally.core.numbered import marker_item, parse_numbered
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
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from tally.core.aggregate import Totals
    from tally.core.bounds import BoundCheck
    from tally.core.ledger import Claim
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
    """The ledger id of the item holding ``message_id``'s marker (its own, or its block's)."""
    return marker_item(message_id)


BLOCK_EXPIRY_MARGIN_S: Final = 3_600
"""A block item's ``expires_at`` is its latest write's claim time + TTL + this margin. Writes to one block can
land out of order only while both are in flight, and an invocation's claim time is at most its timeout (900 s)
before its writes, so the block never expires before any of its markers' own expiry (claim time + TTL)."""
_BLOCK_TIME_BYTES: Final = 6
"""Applied time on a block attribute: epoch ms in 6 bytes (until the year 10889)."""
_ROLE_SEPARATOR: Final = "\x1e"
_REPLACES_SEPARATOR: Final = "\x1f"


def header_id(batch_id: str) -> str:
    return "b#" + batch_id


def page_id(batch_id: str, index: int) -> str:
    return f"b#{batch_id}#p{index}"


def applied_id(batch_id: str, index: int) -> str:
    return f"b#{batch_id}#a{index}"


# ------------------------------------------------------------------------------------------ actions
# Each transaction action is paired with its role, so a cancellation can be read back by position.
Role = tuple[str, str]
"""("marker", message id) | ("block", its claims: ``_block_role``) | ("add", counter key) | ("batch", batch id)
| ("applied", batch id)."""


def marker_actions(
    table: str, claims: Sequence[Claim], now_ms: int, expires_at_s: int, *, batch_id: str | None = None
) -> list[tuple[TransactWriteItemTypeDef, Role]]:
    """One conditional action per marker item for ``claims`` (a direct transaction's messages: no batch, and
    ``replaces`` only for a bounded message replacing an aborted claim; a journal claim's: ``batch_id``), in
    the order of their first message.

    A message with a marker item of its own gets ``marker_put``; the numbered messages of one block share
    one ``block_update``, as the planner counted (``tally.core.plan``).
    """
    by_item: dict[str, list[Claim]] = {}
    for claim in claims:
        by_item.setdefault(marker_item(claim.message_id), []).append(claim)
    actions = []
    for item, members in by_item.items():
        if item.startswith("s#"):
            actions.append(block_update(table, item, members, now_ms, expires_at_s, batch_id=batch_id))
        else:
            (claim,) = members
            actions.append(
                marker_put(
                    table,
                    claim.message_id,
                    now_ms,
                    expires_at_s,
                    batch_id=batch_id,
                    replaces=claim.replaces,
                    digest=claim.digest,
                )
            )
    return actions


def block_update(
    table: str, item: str, claims: Sequence[Claim], now_ms: int, expires_at_s: int, *, batch_id: str | None = None
) -> tuple[TransactWriteItemTypeDef, Role]:
    """The markers of ``claims`` (numbered messages of the block ``item``) in one ``Update`` of the block.

    Each message's attribute is set on the condition that it does not exist (or, for a claim that
    ``replaces`` an aborted batch's marker, that the marker names that batch), all in one condition, so the
    action succeeds or fails as ``marker_put`` would for each; ``ALL_OLD`` returns the block in the
    cancellation reason, from which ``translate`` reads the markers that stood in the way. The block's
    ``expires_at`` moves to this write's (``BLOCK_EXPIRY_MARGIN_S``).
    """
    names: dict[str, str] = {"#expires": EXPIRES_AT}
    values: dict[str, Any] = {":expires": {"N": str(expires_at_s + BLOCK_EXPIRY_MARGIN_S)}}
    sets = ["#expires = :expires"]
    removes = []
    conditions = []
    for claim in claims:
        numbered = parse_numbered(claim.message_id)
        if numbered is None:
            raise ValueError(f"{claim.message_id!r} is not a numbered id")
        offset = numbered.offset
        names[f"#m{offset}"] = str(offset)
        values[f":m{offset}"] = {"B": now_ms.to_bytes(_BLOCK_TIME_BYTES, "big") + claim.digest}
        sets.append(f"#m{offset} = :m{offset}")
        if batch_id is not None:
            names[f"#b{offset}"] = f"b{offset}"
            values[f":b{offset}"] = {"S": batch_id}
            sets.append(f"#b{offset} = :b{offset}")
        if claim.replaces is None:
            conditions.append(f"attribute_not_exists(#m{offset})")
        else:
            names[f"#b{offset}"] = f"b{offset}"
            values[f":r{offset}"] = {"S": claim.replaces}
            conditions.append(f"#b{offset} = :r{offset}")
            if batch_id is None:
                removes.append(f"#b{offset}")  # a direct marker replacing an aborted claim names no batch
    update: dict[str, Any] = {
        "TableName": table,
        "Key": {LEDGER_ID: {"S": item}},
        "UpdateExpression": "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else ""),
        "ConditionExpression": " AND ".join(conditions),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    return {"Update": update}, ("block", _block_role(claims))  # type: ignore[typeddict-item]


def _block_role(claims: Sequence[Claim]) -> str:
    return _ROLE_SEPARATOR.join(claim.message_id + _REPLACES_SEPARATOR + (claim.replaces or "") for claim in claims)


def _block_claims(role: str) -> list[tuple[str, str | None]]:
    """(message id, the batch it replaces or None) of a block action's role."""
    pairs = []
    for entry in role.split(_ROLE_SEPARATOR):
        message_id, _, replaces = entry.partition(_REPLACES_SEPARATOR)
        pairs.append((message_id, replaces or None))
    return pairs


def marker_records(item: Mapping[str, Any], message_ids: Iterable[str]) -> dict[str, MarkerRecord]:
    """The markers of ``message_ids`` that a raw marker item (``m#`` or block) holds, as ``MarkerRecord``s.

    Every reader of markers goes through here (or ``translate``, for a cancellation's ``ALL_OLD``), so a
    message's marker reads the same whether it has an item of its own or shares its block's.
    """
    expires_at_s = int(item[EXPIRES_AT]["N"])
    found: dict[str, MarkerRecord] = {}
    item_id = item[LEDGER_ID]["S"]
    for message_id in message_ids:
        if not item_id.startswith("s#"):
            if item_id == marker_id(message_id):
                found[message_id] = _own_marker_record(message_id, item, expires_at_s)
            continue
        numbered = parse_numbered(message_id)
        if numbered is None or marker_id(message_id) != item_id:
            continue
        value = item.get(str(numbered.offset))
        if value is None:
            continue
        data = bytes(value["B"])
        batch = item.get(f"b{numbered.offset}")
        found[message_id] = MarkerRecord(
            message_id=message_id,
            applied_at_ms=int.from_bytes(data[:_BLOCK_TIME_BYTES], "big"),
            expires_at_s=expires_at_s,
            batch_id=batch["S"] if batch is not None else None,
            digest=data[_BLOCK_TIME_BYTES:] or None,
        )
    return found


def _own_marker_record(message_id: str, item: Mapping[str, Any], expires_at_s: int) -> MarkerRecord:
    batch = item.get(MARKER_BATCH)
    digest = item.get(MARKER_DIGEST)
    return MarkerRecord(
        message_id=message_id,
        applied_at_ms=int(item[MARKER_APPLIED_AT]["N"]),
        expires_at_s=expires_at_s,
        batch_id=batch["S"] if batch is not None else None,
        digest=bytes(digest["B"]) if digest is not None else None,
    )


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
        LEDGER_ID: {"S": "m#" + message_id},
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


def _markers_in_the_way(
    role: str, name: str, old_item: Mapping[str, Any], batches: dict[str, str], digests: dict[str, bytes]
) -> set[str]:
    """The messages of a cancelled marker or block action whose own condition failed (from ``ALL_OLD``).

    A message whose attribute exists failed ``attribute_not_exists``, unless it claimed to replace an aborted
    batch's marker and the marker still names that batch. A replacing claim whose marker is gone failed too
    (reported with no batch, as ``marker_put``'s cancellation reports a vanished marker).
    """
    if role == "marker":
        _read_marker_reason(name, old_item, batches, digests)
        return {name}
    stood: set[str] = set()
    records = marker_records(old_item, [mid for mid, _ in _block_claims(name)]) if old_item else {}
    for message_id, replaces in _block_claims(name):
        record = records.get(message_id)
        if record is None:
            if replaces is not None:
                stood.add(message_id)
            continue
        if replaces is not None and record.batch_id == replaces:
            continue
        stood.add(message_id)
        if record.batch_id is not None:
            batches[message_id] = record.batch_id
        if record.digest is not None:
            digests[message_id] = record.digest
    return stood


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
        if reason_code == "ConditionalCheckFailed" and role in {"marker", "block"}:
            stood = _markers_in_the_way(role, name, reason.get("Item", {}), batches, digests)
            markers.update(stood)
            if not stood:
                details.append(f"block condition failed without a marker in the way: {reason.get('Message', '')}")
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


def scan_all_time_items(client: DynamoDBClient, table: str) -> Iterator[Mapping[str, Any]]:
    """Every key's all-time item (and a hot key's shard items), strongly consistent: a whole-table ``Scan``
    that reads the window items too and keeps only ``sk = all`` (for batch jobs and operators, never a
    request path)."""
    pages = client.get_paginator("scan").paginate(
        TableName=table,
        FilterExpression="#sk = :all",
        ExpressionAttributeNames={"#sk": SORT_KEY},
        ExpressionAttributeValues={":all": {"S": ALL_TIME}},
        ConsistentRead=True,
    )
    try:
        for page in pages:
            yield from page.get("Items", [])
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc) from exc
