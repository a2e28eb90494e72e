"""Turn events into messages: ids assigned once, many events per message where allowed.

Packing is what makes exactly-once cheap: the consumer writes one idempotency marker per *message*, so
a message of 2,000 events costs one marker where 2,000 single messages cost 2,000. Packs are filled
greedily, in order, up to the service's size limit and the consumer's limits on events and distinct keys.

An event that carries its own ``id`` is never packed: its id names exactly that event, and folding it
into a message with another id would make a later re-send of it count again.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tally.core.limits import WIRE_LIMITS
from tally.core.numbered_ids import numbered_id
from tally.core.views import NO_VIEWS, CounterViews
from tally.core.windows import MINUTE_MS
from tally.producer.wire import OutgoingMessage, event_json, packed_body, packed_overhead, single_message

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from tally.producer.event import Event

DEFAULT_MAX_KEYS_PER_MESSAGE = 99
"""Distinct keys in one packed message: what the consumer can commit in one transaction with its
marker (100 actions). A larger message is still exactly-once (it goes through the commit journal) but
costs more writes when it is alone in its batch; raise it deliberately (``max_keys_per_message`` of
``SqsPublisher`` and ``KinesisPublisher``). At high volume it is worth it: every batch goes through the
journal anyway, and the cap is what limits events per message (220 on 1,000 Zipf keys), so the markers'
share of the writes (docs/explanation/costs.md)."""


def new_message_id() -> str:
    """A fresh message id: a random UUID, 32 hex digits (valid as an SQS FIFO deduplication id)."""
    return uuid.uuid4().hex


class NumberedIds:
    """Numbered message ids, ``<session>.<seq>``: the publishers' default.

    One instance per publisher: a random 128-bit session (32 hex digits) and a counter from 0. The consumer keeps the
    markers of 16 consecutive seqs on one item (``tally.core.numbered_ids``), so a batch of single-event messages writes
    one marker item per 16 messages instead of one per message (docs/reference/event-format.md, "Numbered ids"). Each
    id is drawn once, when a message is prepared, and reused on every retry of it, like ``new_message_id``'s; a fresh
    instance (a new process, a new publisher) starts a new session, so ids never repeat. Valid as SQS FIFO
    deduplication ids. ``next()`` on ``itertools.count`` is atomic, so threads may share an instance."""

    def __init__(self, session: str | None = None) -> None:
        self.session = session if session is not None else uuid.uuid4().hex
        numbered_id(self.session, 0)  # validates the session
        self._seqs = itertools.count()

    def __call__(self) -> str:
        return numbered_id(self.session, next(self._seqs))


@dataclass(frozen=True, slots=True)
class PackLimits:
    """How big a packed message may get: bytes (the service's limit), events and distinct keys."""

    max_bytes: int
    max_events: int = WIRE_LIMITS.max_events_per_message
    max_keys: int = DEFAULT_MAX_KEYS_PER_MESSAGE
    """Counter items one message may write: a key's item, and with ``minute_windows`` each of its minutes."""
    minute_windows: bool = False
    """The consumer counts minute windows (``TALLY_WINDOWS`` names ``minute``): each minute an event of a key
    falls in is one more item of the message (hour and day windows ride on the key's item). An event without
    ``ts`` falls in its arrival minute, shared by the whole message."""
    views: CounterViews = NO_VIEWS
    """The consumer's views (``TALLY_COUNTER_VIEWS``): each view an event of a key counts in is one more item of
    the message (its value's item, as a key's), which ``max_keys`` counts too."""

    def __post_init__(self) -> None:
        if self.max_bytes < 256 or self.max_events < 1 or self.max_keys < 1:
            raise ValueError(f"pack limits too small to hold an event: {self}")
        if self.max_events > WIRE_LIMITS.max_events_per_message:
            raise ValueError(f"max_events above the consumer's {WIRE_LIMITS.max_events_per_message} per message")


def build_messages(
    events: Iterable[Event],
    limits: PackLimits | None,
    new_id: Callable[[], str] = new_message_id,
    views: CounterViews = NO_VIEWS,
) -> list[OutgoingMessage]:
    """Messages for ``events``: packed under ``limits``, or one per event when ``limits`` is None. With the
    consumer's ``views``, an event whose ``dims`` they would refuse is refused here (``ValueError``), before any
    message is built."""
    events = list(events)
    if views.rules:
        for event in events:
            problem = views.check_dims(event.key, event.dims, reset=event.reset is not None)
            if problem is not None:
                raise ValueError(f"{problem.code}: {problem.detail}")
    messages: list[OutgoingMessage] = []
    pack: list[Event] = []
    fragments: list[str] = []
    items: set[str | tuple[str, int | None]] = set()
    size = 0
    pack_id = ""

    def close() -> None:
        nonlocal size
        if len(pack) == 1:
            messages.append(single_message(pack[0], pack_id))
        elif pack:
            messages.append(OutgoingMessage(pack_id, tuple(pack), packed_body(pack_id, fragments), packed=True))
        pack.clear()
        fragments.clear()
        items.clear()
        size = 0

    for event in events:
        if event.is_operator:  # an operator's event travels alone, after the events given before it
            close()
            messages.append(single_message(event, event.id if event.id is not None else new_id()))
            continue
        if event.id is not None or limits is None:
            messages.append(single_message(event, event.id if event.id is not None else new_id()))
            continue
        fragment = event_json(event)
        added = len(fragment) + (1 if pack else 0)  # ASCII: characters are bytes; a comma between events
        touched = _items(event, minute_windows=limits.minute_windows, views=limits.views)
        new_items = len(touched - items)
        if pack and (
            size + added > limits.max_bytes
            or len(pack) == limits.max_events
            or (new_items and len(items) + new_items > limits.max_keys)
        ):
            close()
            added = len(fragment)
        if not pack:
            pack_id = new_id()
            size = packed_overhead(pack_id)
        pack.append(event)
        fragments.append(fragment)
        items.update(touched)
        size += added
    close()
    return messages


def _items(event: Event, *, minute_windows: bool, views: CounterViews) -> set[str | tuple[str, int | None]]:
    """The counter items ``event`` writes, as the consumer plans them: its key's item and its views' (the one
    derivation the consumer uses, ``tally.core.views``), and each one's minute."""
    keys = (event.key, *views.view_keys(event.key, event.dims)) if event.dims else (event.key,)
    if not minute_windows:
        return set(keys)
    ts_ms = event.ts_ms
    minute = ts_ms // MINUTE_MS if ts_ms is not None else None
    return {*keys, *((key, minute) for key in keys)}
