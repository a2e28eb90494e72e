"""Messages as they go on the wire: one id, one or many events, one exact JSON body.

An ``OutgoingMessage`` is built once, before the first attempt, with its id already in the body; every
retry sends that very body. That is what makes a producer re-send a no-op at the consumer: the id is
the unit of idempotency, and a message is never re-packed or re-numbered between attempts.

Numbers are written as their exact literals (``str`` of an ``int`` or a ``Decimal``), never through a
float. Strings are written ASCII-only (``\\uXXXX`` escapes), so every body is valid UTF-8 and inside
the character set SQS accepts, whatever the keys contain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tally.core.limits import WIRE_LIMITS
from tally.producer.event import DEFAULT_COUNTER, Event, check_text

if TYPE_CHECKING:
    from collections.abc import Sequence
    from decimal import Decimal


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message: its id (assigned once), its events, and the exact body sent on every attempt."""

    message_id: str
    events: tuple[Event, ...]
    body: bytes
    packed: bool
    """True for the packed shape (``{"id", "events": [...]}``), even with a single event in it."""

    @property
    def single_key(self) -> str | None:
        """The counter key when the message carries one event, else None (used for partition keys)."""
        return self.events[0].key if len(self.events) == 1 else None

    @property
    def size(self) -> int:
        return len(self.body)


def single_message(event: Event, message_id: str) -> OutgoingMessage:
    """``{"id": ..., "key": ..., "delta"|"deltas": ..., "ts"?: ...}``."""
    check_text(message_id, "message id", WIRE_LIMITS.max_id_bytes)
    body = '{"id":' + _string(message_id) + "," + event_fields(event) + "}"
    return OutgoingMessage(message_id, (event,), body.encode("ascii"), packed=False)


def packed_message(events: Sequence[Event], message_id: str) -> OutgoingMessage:
    """``{"id": ..., "events": [...]}``: the whole message counts once, however many events it holds."""
    check_text(message_id, "message id", WIRE_LIMITS.max_id_bytes)
    if not events:
        raise ValueError("a packed message needs at least one event")
    if len(events) > WIRE_LIMITS.max_events_per_message:
        raise ValueError(f"{len(events)} events in one message (at most {WIRE_LIMITS.max_events_per_message})")
    if any(event.is_operator for event in events):
        raise ValueError("a reset or correction is a message of its own: it cannot be packed")
    body = packed_body(message_id, [event_json(event) for event in events])
    return OutgoingMessage(message_id, tuple(events), body, packed=True)


def packed_body(message_id: str, event_bodies: Sequence[str]) -> bytes:
    """The body of a packed message from already-encoded events (the packer measures these)."""
    return ('{"id":' + _string(message_id) + ',"events":[' + ",".join(event_bodies) + "]}").encode("ascii")


def packed_overhead(message_id: str) -> int:
    """Bytes of a packed body besides its events and the commas between them."""
    return len(packed_body(message_id, []))


def event_json(event: Event) -> str:
    """One event as a JSON object (an element of a packed message's ``events``)."""
    return "{" + event_fields(event) + "}"


def event_fields(event: Event) -> str:
    """The event's members without braces, shared by single and packed bodies."""
    deltas = event.deltas
    if event.reset is not None:  # an operator's reset: docs/explanation/counter-patterns.md, "Corrections and resets"
        values = ",".join(_string(name) + ":" + _number(value) for name, value in event.reset.items())
        parts = ['"key":' + _string(event.key), '"reset":{' + values + "}"]
    elif not deltas:  # the deployment's default deltas count it, or it carries gauges only
        parts = ['"key":' + _string(event.key)]
    elif len(deltas) == 1 and DEFAULT_COUNTER in deltas:
        parts = ['"key":' + _string(event.key), '"delta":' + _number(deltas[DEFAULT_COUNTER])]
    else:
        counters = ",".join(_string(name) + ":" + _number(value) for name, value in deltas.items())
        parts = ['"key":' + _string(event.key), '"deltas":{' + counters + "}"]
    if event.correction:
        parts.append('"correction":true')
    if event.ts_ms is not None:
        parts.append('"ts":' + str(event.ts_ms))
    if event.gauges:
        readings = ",".join(
            _string(name)
            + ":{"
            + _string(kind)
            + ":"
            + (_string(value) if isinstance(value, str) else _number(value))
            + "}"
            for name, (kind, value) in event.gauges.items()
        )
        parts.append('"gauges":{' + readings + "}")
    if event.distinct:
        members = ",".join(_string(name) + ":" + _string(member) for name, member in event.distinct.items())
        parts.append('"distinct":{' + members + "}")
    if event.dims:
        values = ",".join(_string(name) + ":" + _string(value) for name, value in event.dims.items())
        parts.append('"dims":{' + values + "}")
    return ",".join(parts)


def _string(value: str) -> str:
    return json.dumps(value, ensure_ascii=True)


def _number(value: int | Decimal) -> str:
    # str() of an int or a finite Decimal is a valid JSON number literal ("1E+2", "-0.10", "7"),
    # and it is the exact value: the consumer parses the literal's text straight into a Decimal.
    return str(value)
