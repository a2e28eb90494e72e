"""The counters table's transaction actions: one atomic ``ADD`` per item, bound checks, and batch-state checks.

Each action is built with its ``Role`` beside it, so a cancelled transaction's reasons can be read back by
position (``tally.store.requests.translate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias

from tally.core.items import (
    ALL_TIME,
    ItemKey,
    item_parts,
)
from tally.core.ledger import BatchState, Claim
from tally.core.numbers import to_wire
from tally.store.expressions import (
    FENCE_AFTER,
    FENCE_MARK,
    FENCE_NAME,
    FENCE_SET,
    OPERATOR_AT,
    OPERATOR_ID,
    add_expression,
    bound_condition,
    bound_placeholders,
    fence_condition,
    name_placeholder,
    operator_placeholders,
    operator_sets,
    prune_placeholders,
    start_placeholder,
    threshold_condition,
    threshold_placeholders,
    value_placeholder,
)
from tally.store.schema import (
    COUNTER_PREFIX,
    EXPIRES_AT,
    HEADER_STATE,
    LEDGER_ID,
    OPERATOR_PREFIXES,
    WINDOW_MOVES,
    counter_attribute,
    fence_attribute,
    header_id,
    item_key,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb.type_defs import (
        ConditionCheckTypeDef,
        TransactWriteItemTypeDef,
        UpdateItemInputTypeDef,
        UpdateTypeDef,
    )

    from tally.core.bounds import BoundCheck
    from tally.core.resets import OperatorStamp
    from tally.core.thresholds import CrossingFree, ExactCheck
    from tally.core.write import FencedWrite, ItemWrite, MovesSeen


MOVES_NAME = "#moves"
MOVES_VALUE = ":moves"


RoleKind: TypeAlias = Literal["marker", "block", "add", "batch", "applied", "notification"]


class Role(NamedTuple):
    """What one transaction action does, paired with it so that a cancellation's reasons (one per action, in
    request order) can be read back by position (``tally.store.requests.translate``)."""

    kind: RoleKind
    name: str = ""
    """The message id of a ``marker``, the batch id of a ``batch`` check or an ``applied`` record, the
    notification id of a ``notification``."""
    item: ItemKey | None = None
    """The counter item an ``add`` writes or checks: its identity (``item_label`` only names it in logs)."""
    claims: tuple[Claim, ...] = ()
    """The claims a ``block`` action writes (numbered messages of one block item)."""


def add_role(item: ItemKey) -> Role:
    """The role of an action that writes or checks the counter item ``item``."""
    return Role("add", item=item)


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
    }, Role("batch", batch_id)


def replaced_batch_check(table: str, batch_id: str) -> tuple[TransactWriteItemTypeDef, Role]:
    """A condition that a marker naming ``batch_id`` may be replaced: the batch is ABORTED (it can never
    commit), or its header is gone.

    A header is only ever deleted by TTL, a day after every marker of its batch passed its own horizon
    (``tally.store.journal``: the journal outlives its markers), and a marker naming a batch is only written
    in a transaction that finds its header. So a missing header means the marker is past its horizon: it
    counts as absent, as a marker item TTL has deleted does (docs/journal.md, "Past the horizon"). A block
    item, which every write keeps alive, is how such a marker is still there to be met.
    """
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": {LEDGER_ID: {"S": header_id(batch_id)}},
            "ConditionExpression": "#state = :state OR attribute_not_exists(#id)",
            "ExpressionAttributeNames": {"#state": HEADER_STATE, "#id": LEDGER_ID},
            "ExpressionAttributeValues": {":state": {"S": BatchState.ABORTED}},
        }
    }, Role("batch", batch_id)


def item_action(table: str, write: ItemWrite) -> tuple[TransactWriteItemTypeDef, Role]:
    """The one action of an item the core planned (``tally.core.write.ItemWrite``): its ``Update``, or, when it
    writes nothing, the ``ConditionCheck`` of its conditions."""
    if not write.writes:
        return bound_check(table, write.item, write.bounds, write.free, write.exact, moves=write.moves)
    return add_update(
        table,
        write.item,
        write.adds,
        write.starts,
        write.bounds,
        sets=write.sets,
        stamp=write.stamp,
        free=write.free,
        exact=write.exact,
        moves=write.moves,
    )


def add_update(
    table: str,
    item: ItemKey,
    counters: Mapping[str, Any],
    starts: Mapping[str, Any] | None = None,
    bounds: Sequence[BoundCheck] = (),
    *,
    sets: Mapping[str, Any] | None = None,
    stamp: OperatorStamp | None = None,
    free: Sequence[CrossingFree] = (),
    exact: Sequence[ExactCheck] = (),
    moves: MovesSeen | None = None,
    fence: _Condition | None = None,
) -> tuple[TransactWriteItemTypeDef, Role]:
    """One atomic ``ADD`` of every counter of one item (and, for a window, its expiry if not set yet).

    ``starts`` (counter -> start value, ``tally.core.defaults``) applies to a key's all-time item only:
    those counters are ``SET c = if_not_exists(c, :start) + :delta`` in the same action. ``bounds``
    (``tally.core.bounds.bound_checks``) make the write conditional: a bound it would cross cancels the
    transaction, with the item as it was (``ALL_OLD``) in the cancellation reason.

    ``sets`` (a reset's values: ``SET c = :value``, no ``if_not_exists``: after a reset the value is the
    reset's) and ``stamp`` (the record of a reset or correction: ``reset_at#c``, ``reset_id#c``,
    ``reset_to#c`` or ``corrected_at#c``, ``corrected_id#c``, ``corrected_by#c``) ride in the same action,
    so the item is still written once.

    ``free`` and ``exact`` (``tally.core.thresholds``) add the crossing condition: a write that would cross a
    declared level (or whose thresholded counters no longer hold the values it was planned from) is cancelled
    with the item as it was (``ALL_OLD``), as a bound's is. ``moves``: the key item's count of window moves
    when the moved part of an ended window was read; the write is conditioned on it (no move since). ``fence``: a
    fenced write's mark, removals and condition (``fenced_update``).
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
    removes: list[str] = []
    if fence is not None:
        extra.append(FENCE_SET)
        removes = [name for name in fence.names if name != FENCE_NAME]
    # Built by ``expressions``, whose ``counters_per_add`` bounds it within DynamoDB's 4 KB.
    expression = add_expression(
        len(ordered), sets_expiry=expires_at_s is not None, started=first_plain, extra_sets=extra, removes=removes
    )
    if expires_at_s is not None:
        names["#expires"] = EXPIRES_AT
        values[":expires"] = {"N": str(expires_at_s)}
    update: UpdateTypeDef = {
        "TableName": table,
        "Key": item_key(item),
        "UpdateExpression": expression,
        "ExpressionAttributeNames": names,
    }
    if bounds or free or exact or moves is not None:
        condition = _condition(bounds, free, exact, moves)
        names.update(condition.names)
        values.update(condition.values)
        update["ConditionExpression"] = condition.expression
        update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    elif fence is not None:
        names.update(fence.names)
        values.update(fence.values)
        update["ConditionExpression"] = fence.expression
        update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    if values:
        update["ExpressionAttributeValues"] = values
    return {"Update": update}, add_role(item)


def fenced_update(table: str, write: FencedWrite) -> UpdateItemInputTypeDef:
    """The plain ``UpdateItem`` of one part of one item of a fenced journal batch (``tally.core.fence``): its ADDs
    (a started counter from its start value, a window's expiry) and ``SET f#<epoch> = mark``, on the condition of
    ``fence_condition``; the marks it removes, each conditioned on the value seen. A refusal returns the item as
    it was (``ALL_OLD``), a success the item as it is (``ALL_NEW``), so that the marks are known either way."""
    names = {FENCE_NAME: fence_attribute(write.epoch)}
    values: dict[str, Any] = {FENCE_MARK: {"N": str(write.mark)}}
    if write.after is not None:
        values[FENCE_AFTER] = {"N": str(write.after)}
    for index, (epoch, seen) in enumerate(write.prune.items()):
        name, value = prune_placeholders(index)
        names[name] = fence_attribute(epoch)
        values[value] = {"N": str(seen)}
    condition = _Condition(fence_condition(first=write.after is None, prunes=len(write.prune)), names, values)
    action, _ = add_update(table, write.item, write.adds, write.starts, fence=condition)
    update = action["Update"]
    request: UpdateItemInputTypeDef = {
        "TableName": update["TableName"],
        "Key": update["Key"],
        "UpdateExpression": update["UpdateExpression"],
        "ConditionExpression": update["ConditionExpression"],
        "ExpressionAttributeNames": update["ExpressionAttributeNames"],
        "ExpressionAttributeValues": update["ExpressionAttributeValues"],
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    return request


def bound_check(
    table: str,
    item: ItemKey,
    bounds: Sequence[BoundCheck],
    free: Sequence[CrossingFree] = (),
    exact: Sequence[ExactCheck] = (),
    *,
    moves: MovesSeen | None = None,
) -> tuple[TransactWriteItemTypeDef, Role]:
    """A ``ConditionCheck`` of an item's bounds (and crossing condition), for an item whose net in the
    transaction is zero but whose steps move it (``-5`` then ``+5`` must not take a counter at 3 below a floor
    of 0 on the way, nor cross a declared level and back unannounced)."""
    condition = _condition(bounds, free, exact, moves)
    check: ConditionCheckTypeDef = {
        "TableName": table,
        "Key": item_key(item),
        "ConditionExpression": condition.expression,
        "ExpressionAttributeNames": condition.names,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if condition.values:
        check["ExpressionAttributeValues"] = condition.values
    return {"ConditionCheck": check}, add_role(item)


@dataclass(frozen=True, slots=True)
class _Condition:
    """A write's condition: its expression, and the names and values it refers to."""

    expression: str
    names: dict[str, str]
    values: dict[str, Any]


def _condition(
    bounds: Sequence[BoundCheck],
    free: Sequence[CrossingFree],
    exact: Sequence[ExactCheck],
    moves: MovesSeen | None = None,
) -> _Condition:
    """The condition of a bounded or thresholded write (every part ANDed; DynamoDB returns the item as it was,
    ``ALL_OLD``, when it fails)."""
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    for index, check in enumerate(bounds):
        name, low, high = bound_placeholders(index)
        names[name] = COUNTER_PREFIX + check.counter
        if check.at_least is not None:
            values[low] = {"N": to_wire(check.at_least)}
        if check.at_most is not None:
            values[high] = {"N": to_wire(check.at_most)}
    for index, level in enumerate(free):
        name, low, high = threshold_placeholders(index)
        names[name] = counter_attribute(level.counter)  # an open window's counter is a ``w#`` attribute
        if level.low is not None:
            values[low] = {"N": to_wire(level.low)}
        if level.high is not None:
            values[high] = {"N": to_wire(level.high)}
    for index, held in enumerate(exact, start=len(free)):
        name, value, _ = threshold_placeholders(index)
        names[name] = counter_attribute(held.counter)
        values[value] = {"N": to_wire(held.value)}
    guard = ""
    if moves is not None:
        names[MOVES_NAME] = WINDOW_MOVES
        if moves.count is None:
            guard = f"attribute_not_exists({MOVES_NAME})"
        else:
            values[MOVES_VALUE] = {"N": to_wire(moves.count)}
            guard = f"{MOVES_NAME} = {MOVES_VALUE}"
    parts = [
        part for part in (bound_condition(bounds) if bounds else "", threshold_condition(free, exact), guard) if part
    ]
    return _Condition(" AND ".join(parts), names, values)


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
