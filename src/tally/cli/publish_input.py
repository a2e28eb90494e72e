"""What ``tally publish`` reads: events from arguments, and events or whole messages from JSON lines.

Everything is parsed and checked before anything is sent. A message sent gets its id for good, and an
event without an id gets a fresh one each run, so a run that stopped half-way at a bad line and was run
again would count the first half twice; refusing the whole input up front avoids that.

Numbers are read exactly: a JSON number's literal text becomes an ``int`` or a ``Decimal``, never a
float, and ``NaN``/``Infinity`` are refused, as the consumer refuses them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from tally.producer.event import DEFAULT_COUNTER, Event
from tally.producer.wire import packed_message

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.producer.wire import OutgoingMessage

_EVENT_FIELDS = frozenset({"key", "delta", "deltas", "ts", "id", "gauges", "distinct", "reset", "correction", "dims"})
_PACKED_EVENT_FIELDS = _EVENT_FIELDS - {"id", "reset", "correction"}  # an operator's event is never packed


class InputError(ValueError):
    """A line or argument that is not a valid event; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """Events still to be given ids (and maybe packed), and messages that already have theirs."""

    events: tuple[Event, ...] = ()
    messages: tuple[OutgoingMessage, ...] = ()

    @property
    def event_count(self) -> int:
        return len(self.events) + sum(len(message.events) for message in self.messages)


def number(text: str, where: str) -> int | Decimal:
    """An integer literal as ``int``, any other finite decimal literal as ``Decimal``."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise InputError(f"{where}: {text!r} is not a number") from None
    if not value.is_finite():
        raise InputError(f"{where}: {text!r} is not a finite number")
    return value


def event_from_spec(spec: str, dims: Mapping[str, str] | None = None) -> Event:
    """``key=page:/home,views=1,ts=1790000000000,id=evt-1`` (counters are the other names), or JSON; ``dims``
    (``--dim``) for an event that names none."""
    if spec.lstrip().startswith("{"):
        item = _json_object(spec, "--event")
        if dims and "dims" not in item:
            item["dims"] = dict(dims)
        return _event_from_object(item, "--event", allow_id=True)
    fields: dict[str, str] = {}
    for part in spec.split(","):
        # "key=shop:1, revenue=3": the spaces a reader types after a comma are not part of the names and values
        name, separator, value = (text.strip() for text in part.partition("="))
        if not separator or not name:
            raise InputError(f"--event {spec!r}: expected name=value pairs separated by commas")
        if name in fields:
            raise InputError(f"--event {spec!r}: {name!r} given twice")
        fields[name] = value
    key = fields.pop("key", None)
    if not key:
        raise InputError(f"--event {spec!r}: key=... is required")
    ts = fields.pop("ts", None)
    event_id = fields.pop("id", None)
    if not fields:
        raise InputError(f"--event {spec!r}: no counter=value given")
    deltas = {name: number(value, f"--event {spec!r}") for name, value in fields.items()}
    when = _ts(ts, f"--event {spec!r}") if ts is not None else None
    return _event(key, deltas, when, event_id, "--event", dims=dims or None)


def parse_lines(lines: Iterable[str], source: str) -> Parsed:
    """JSON lines: one event (``key``, ``delta``/``deltas``, optional ``ts`` and ``id``) or one whole
    message (``id`` and ``events``, as written by ``--failed-out``) per line; blank lines are skipped."""
    events: list[Event] = []
    messages: list[OutgoingMessage] = []
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{line_number}"
        item = _json_object(line, where)
        if "events" in item:
            messages.append(_message_from_object(item, where))
        else:
            events.append(_event_from_object(item, where, allow_id=True))
    return Parsed(tuple(events), tuple(messages))


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_float=Decimal, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, InputError) as exc:
        raise InputError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a JSON object")
    return value


def _refuse_constant(name: str) -> Any:
    raise InputError(f"{name} is not a number")


def _message_from_object(item: dict[str, Any], where: str) -> OutgoingMessage:
    unknown = set(item) - {"id", "events"}
    if unknown:
        raise InputError(f"{where}: a message carries only id and events, not {sorted(unknown)}")
    message_id = item.get("id")
    raw_events = item["events"]
    if not isinstance(message_id, str) or not message_id:
        raise InputError(f"{where}: a message needs its id (re-sending it under another would count it twice)")
    if not isinstance(raw_events, list) or not raw_events:
        raise InputError(f"{where}: events must be a non-empty list")
    events = []
    for index, raw in enumerate(raw_events):
        if not isinstance(raw, dict):
            raise InputError(f"{where}: events[{index}] is not an object")
        events.append(_event_from_object(raw, f"{where} events[{index}]", allow_id=False))
    try:
        return packed_message(events, message_id)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None


def _event_from_object(item: dict[str, Any], where: str, *, allow_id: bool) -> Event:
    allowed = _EVENT_FIELDS if allow_id else _PACKED_EVENT_FIELDS
    unknown = set(item) - allowed
    if unknown:
        raise InputError(f"{where}: unknown field(s) {sorted(unknown)}")
    if "delta" in item and "deltas" in item:
        raise InputError(f"{where}: give at most one of delta and deltas")
    # Neither: the deployment's default deltas count the event (CounterDefaults), or it carries gauges only.
    deltas = {DEFAULT_COUNTER: item["delta"]} if "delta" in item else item.get("deltas", {})
    if not isinstance(deltas, dict):
        raise InputError(f"{where}: deltas must be an object of counter name to number")
    ts = item.get("ts")
    if isinstance(ts, str):
        ts = _ts(ts, where)
    gauges = _gauges(item.get("gauges"), where)
    dims = item.get("dims")
    if "reset" in item or "correction" in item:  # an operator's reset or correction
        return _event(item.get("key"), deltas, ts, item.get("id"), where, gauges=gauges, operator=item, dims=dims)
    return _event(
        item.get("key"), deltas, ts, item.get("id"), where, gauges=gauges, distinct=item.get("distinct"), dims=dims
    )


def _gauges(raw: Any, where: str) -> dict[str, tuple[str, Any]] | None:
    """``{"peak": {"max": 17}}`` -> ``{"peak": ("max", 17)}`` (the producer's ``Event.gauges``)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) and len(v) == 1 for v in raw.values()):
        raise InputError(f'{where}: gauges must be an object of name to {{"max"|"min"|"latest": value}}')
    return {name: next(iter(reading.items())) for name, reading in raw.items()}


def plain_name(value: Any, what: str) -> None:
    """A key or a counter, set or gauge name that a user can type back: no space, tab or newline around it."""
    if isinstance(value, str) and value != value.strip():
        raise ValueError(f"{what} {value!r} begins or ends with a space: remove it (tally get could not find it)")


def _event(
    key: Any,
    deltas: dict[str, Any],
    ts: Any,
    event_id: Any,
    where: str,
    *,
    gauges: dict[str, tuple[str, Any]] | None = None,
    operator: dict[str, Any] | None = None,
    distinct: Any = None,
    dims: Any = None,
) -> Event:
    try:
        plain_name(key, "key")
        reset = operator.get("reset") if operator is not None else None
        for what, names in (("counter", deltas), ("counter", reset), ("gauge", gauges), ("set", distinct)):
            for name in names if isinstance(names, dict) else ():
                plain_name(name, what)
        if operator is not None:
            correction = operator.get("correction", False)
            if not isinstance(correction, bool):
                raise ValueError("correction must be true or absent")
            return Event(
                key,
                deltas,
                ts=ts,
                id=event_id,
                gauges=gauges,
                reset=operator.get("reset"),
                correction=correction,
                dims=dims,
            )
        return Event(key, deltas, ts=ts, id=event_id, gauges=gauges, distinct=distinct, dims=dims)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}") from None


def _ts(text: str, where: str) -> int | datetime:
    if text.isdigit():
        return int(text)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{where}: ts {text!r} is neither epoch milliseconds nor ISO 8601") from None
