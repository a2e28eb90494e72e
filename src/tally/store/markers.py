"""The idempotency ledger's markers: how a message's marker is written, and how a stored one reads back.

A message's marker is an item of its own (``m#<message id>``) or, for a numbered id ``<session>.<seq>``, an
attribute of its block item ``s#<session>#<seq // 16>`` shared with up to 15 neighbours
(``tally.core.numbered_ids``). Both are written with a condition (no marker yet, or one naming the aborted
journal batch the claim replaces) and read back into the same ``MarkerRecord``, so the commit protocol never
needs to know which kind a message has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from tally.core.ledger import MarkerRecord
from tally.core.numbered_ids import marker_item, parse_numbered
from tally.store.actions import Role
from tally.store.schema import (
    EXPIRES_AT,
    LEDGER_ID,
    MARKER_APPLIED_AT,
    MARKER_BATCH,
    MARKER_DIGEST,
    MARKER_PLACED_AT,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from mypy_boto3_dynamodb.type_defs import PutTypeDef, TransactWriteItemTypeDef, UpdateTypeDef

    from tally.core.ledger import Claim


def marker_id(message_id: str) -> str:
    """The ledger id of the item holding ``message_id``'s marker (its own, or its block's)."""
    return marker_item(message_id)


BLOCK_EXPIRY_MARGIN_S: Final = 3_600
"""A block item's ``expires_at`` is its latest write's claim time + TTL + this margin. Writes to one block can
land out of order only while both are in flight, and an invocation's claim time is at most its timeout (900 s)
before its writes, so the block never expires before any of its markers' own expiry (claim time + TTL)."""


_BLOCK_TIME_BYTES: Final = 6
"""Applied time on a block attribute: epoch ms in 6 bytes (until the year 10889)."""


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
                    placed_ms=claim.placed_ms,
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
        if claim.placed_ms is not None:
            names[f"#p{offset}"] = f"p{offset}"
            values[f":p{offset}"] = {"B": claim.placed_ms.to_bytes(_BLOCK_TIME_BYTES, "big")}
            sets.append(f"#p{offset} = :p{offset}")
        elif claim.replaces is not None:
            names[f"#p{offset}"] = f"p{offset}"
            removes.append(f"#p{offset}")  # the aborted claim's placing time is not this delivery's
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
    update: UpdateTypeDef = {
        "TableName": table,
        "Key": {LEDGER_ID: {"S": item}},
        "UpdateExpression": "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else ""),
        "ConditionExpression": " AND ".join(conditions),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    return {"Update": update}, Role("block", claims=tuple(claims))


def marker_records(item: Mapping[str, Any], message_ids: Iterable[str]) -> dict[str, MarkerRecord]:
    """The markers of ``message_ids`` that a raw marker item (``m#`` or block) holds, as ``MarkerRecord``s.

    Every reader of markers goes through here (a cancellation's ``ALL_OLD`` item too, in ``translate``), so a
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
        placed = item.get(f"p{numbered.offset}")
        found[message_id] = MarkerRecord(
            message_id=message_id,
            applied_at_ms=int.from_bytes(data[:_BLOCK_TIME_BYTES], "big"),
            expires_at_s=expires_at_s,
            batch_id=batch["S"] if batch is not None else None,
            digest=data[_BLOCK_TIME_BYTES:] or None,
            placed_ms=int.from_bytes(bytes(placed["B"]), "big") if placed is not None else None,
        )
    return found


def _own_marker_record(message_id: str, item: Mapping[str, Any], expires_at_s: int) -> MarkerRecord:
    batch = item.get(MARKER_BATCH)
    digest = item.get(MARKER_DIGEST)
    placed = item.get(MARKER_PLACED_AT)
    return MarkerRecord(
        message_id=message_id,
        applied_at_ms=int(item[MARKER_APPLIED_AT]["N"]),
        expires_at_s=expires_at_s,
        batch_id=batch["S"] if batch is not None else None,
        digest=bytes(digest["B"]) if digest is not None else None,
        placed_ms=int(placed["N"]) if placed is not None else None,
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
    placed_ms: int | None = None,
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
    if placed_ms is not None:
        item[MARKER_PLACED_AT] = {"N": str(placed_ms)}
    put: PutTypeDef = {"TableName": table, "Item": item, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
    if replaces is None:
        put["ConditionExpression"] = "attribute_not_exists(#id)"
        put["ExpressionAttributeNames"] = {"#id": LEDGER_ID}
    else:
        put["ConditionExpression"] = "#batch = :replaced"
        put["ExpressionAttributeNames"] = {"#batch": MARKER_BATCH}
        put["ExpressionAttributeValues"] = {":replaced": {"S": replaces}}
    return {"Put": put}, Role("marker", message_id)
