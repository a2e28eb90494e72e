"""Corrections and resets: an operator's message, ordered against the batch around it.

A **reset** (``{"id": ..., "key": "stock:1", "reset": {"stock": 100}}``) sets counters of a key's all-time
value; a **correction** (``{"id": ..., "key": ..., "deltas": {"stock": -3}, "correction": true}``) adds its
deltas like any event. Both have their own id, so each counts once (its marker, like any message's), and
both are recorded on the key's all-time item (when, which id, what value or delta) so ``tally get`` can
show when a counter was last reset or corrected (``OperatorStamp``).

**Order.** Applying messages one by one in source order is the meaning every batching must keep. Sums
commute, a reset does not: so a batch holding operator messages is cut into **segments**
(``commit_segments``): of the messages that share a key with an operator message, those before the first
operator message, that message alone, those up to the next one, and so on; every message touching none
of those keys joins the first segment. Segments are committed one after the other; a segment whose messages are
not all settled (one is handed back to the source) stops the batch there: every later message is handed
back too, so the redelivery (Kinesis: from that record on, in order) applies them in source order again.
Against other batches (other shards, other invocations) a reset orders **by commit**: what committed
before it is overwritten, what commits after it adds on top
(docs/explanation/counter-patterns.md, "Corrections and resets").

**Windows and shards.** A reset sets the all-time value only (a window holds what happened in it, and a
reset is not something that happened to the count); a correction's deltas go into windows by its ``ts``
like any event's. On a hot key a reset sets the key's own item to the value and **every** possible shard
item (``MAX_SHARDS``, as reads sum them all) to 0, in the same transaction (``reset_items``).

Pure: no boto3, no clock. The model every test compares with is ``tests/support/reference.py``'s ``expected_values``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypeVar

from tally.core.items import ALL_TIME, item_parts, make_item
from tally.core.sharding import MAX_SHARDS
from tally.core.views import NO_VIEWS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from tally.core.items import ItemKey
    from tally.core.model import Message
    from tally.core.numbers import Number
    from tally.core.sharding import HotKeys
    from tally.core.views import CounterViews


class OperatorKind(StrEnum):
    """What an operator's message does to the counters it names."""

    RESET = "reset"
    CORRECTION = "correction"


@dataclass(frozen=True, slots=True)
class OperatorStamp:
    """What the key's all-time item records of an operator's message, per counter it names.

    ``at_ms`` is the message's ``ts`` when it has one, otherwise when the source accepted the record;
    ``values`` the reset's values or the correction's deltas.
    """

    kind: OperatorKind
    key: str
    message_id: str
    at_ms: int
    values: Mapping[str, Number]


def operator_stamp(message: Message, received_ms: int, views: CounterViews = NO_VIEWS) -> OperatorStamp | None:
    """The stamp of a reset or correction message; None for every other message. A reset's ``key`` is the item it
    sets: its key's own, or the view item its ``dims`` name (``tally.core.views.CounterViews.reset_target``)."""
    if len(message.events) != 1:
        return None
    (event,) = message.events
    at_ms = event.ts_ms if event.ts_ms is not None else received_ms
    if event.reset is not None:
        target = views.reset_target(event.key, event.dims)
        return OperatorStamp(OperatorKind.RESET, target, message.message_id, at_ms, event.reset)
    if event.correction:
        return OperatorStamp(OperatorKind.CORRECTION, event.key, message.message_id, at_ms, event.deltas)
    return None


def reset_items(stamp: OperatorStamp, hot: HotKeys | None = None) -> dict[ItemKey, Mapping[str, Number]]:
    """The items a reset sets and to what: the key's own item to the values, a hot key's shards to 0.

    Every shard a read sums (all ``MAX_SHARDS``, whatever the declared count: a count lowered later must
    not bring back an old shard's share) is set, so the key reads exactly the reset's value afterwards.
    """
    items: dict[ItemKey, Mapping[str, Number]] = {stamp.key: dict(stamp.values)}
    if hot is not None and hot.is_hot(stamp.key):
        zeros = dict.fromkeys(stamp.values, 0)
        for shard in range(1, MAX_SHARDS):
            items[make_item(stamp.key, ALL_TIME, shard)] = zeros
    return items


T = TypeVar("T")


def operator_segments(messages: Sequence[T], is_operator: Iterable[bool]) -> list[list[T]]:
    """Cut messages (in source order) so each operator message is a segment of its own, in place.

    >>> operator_segments(["a", "b", "R", "c", "S"], [False, False, True, False, True])
    [['a', 'b'], ['R'], ['c'], ['S']]
    """
    segments: list[list[T]] = []
    current: list[T] = []
    for message, operator in zip(messages, is_operator, strict=True):
        if operator:
            if current:
                segments.append(current)
            segments.append([message])
            current = []
        else:
            current.append(message)
    if current:
        segments.append(current)
    return segments


class Committed(Protocol):
    """What ``commit_segments`` reads of a message (``tally.core.aggregate.MessageTotals``)."""

    @property
    def totals(self) -> Mapping[ItemKey, Mapping[str, Number]]: ...

    @property
    def stamp(self) -> OperatorStamp | None: ...

    @property
    def is_operator(self) -> bool: ...


M = TypeVar("M", bound=Committed)


def commit_segments(messages: Sequence[M]) -> list[list[M]]:
    """The batch's segments, committed one after the other: ``operator_segments`` of the messages that
    share a key with some operator message of the batch, and every other message in the first segment.

    Sums commute: a message touching no key an operator message touches may commit before or after any of
    them, so it joins the first segment (never a segment of an operator message's own), and a batch with
    one reset costs a few more transactions, not twice the item writes.

    >>> from tally.core.aggregate import MessageTotals
    >>> r = MessageTotals("r", {}, 1, stamp=OperatorStamp(OperatorKind.RESET, "k", "r", 0, {"n": 1}))
    >>> a, b, c = (MessageTotals(mid, {key: {"n": 1}}, 1) for mid, key in (("a", "k"), ("b", "j"), ("c", "k")))
    >>> [[m.message_id for m in segment] for segment in commit_segments([a, r, b, c])]
    [['b', 'a'], ['r'], ['c']]
    """
    operator_keys = {message.stamp.key for message in messages if message.stamp is not None}
    ordered = [
        message
        for message in messages
        if message.is_operator or any(item_parts(item).key in operator_keys for item in message.totals)
    ]
    chosen = {id(message) for message in ordered}
    free = [message for message in messages if id(message) not in chosen]
    segments = operator_segments(ordered, [message.is_operator for message in ordered])
    if not free:
        return segments
    if segments and not segments[0][0].is_operator:
        segments[0] = free + segments[0]
        return segments
    return [free, *segments]
