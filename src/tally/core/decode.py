"""Decode and validate one message body into a ``Message``, or say precisely why it can never count.

The wire format (docs/reference/event-format.md) in one breath: a JSON object with a producer-assigned
``id`` and either one event (``key`` with ``delta`` or ``deltas``, optional ``ts``, ``gauges``, ``distinct`` and
``dims``) or a packed list ``events``. ``delta``/``deltas`` may be left out where the deployment declares default
deltas for the key (``tally.core.defaults``), or when the event carries only gauges or distinct members. Decoding is
strict: unknown fields are refused rather than ignored, because a misspelled
``"detla"`` silently counting nothing is worse than a dead-lettered message that says why.

msgspec does the JSON parsing and the structural type checks in C; numbers come through as ``int`` or,
for decimal and exponent literals, as ``Decimal`` built from the literal's text (``float_hook``), so no
delta ever passes through a binary float.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET, UnsetType

from tally.core.defaults import NO_DEFAULTS, CounterDefaults
from tally.core.items import SHARD_SEPARATOR
from tally.core.limits import (
    MAX_GAUGE_TEXT_BYTES,
    MAX_MEMBER_BYTES,
    MAX_OPERATOR_COUNTERS,
    MAX_TS_MS,
    WIRE_LIMITS,
    WireLimits,
)
from tally.core.model import CounterEvent, Gauge, GaugeKind, Message, RejectCode, Rejection
from tally.core.numbers import Number, checked_canonical, storage_problem
from tally.core.views import NO_VIEWS, CounterViews

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_COUNTER = "count"
"""The counter that ``"delta": n`` adds to: it is shorthand for ``"deltas": {"count": n}``."""

_GAUGE_KINDS = {kind.value: kind for kind in GaugeKind}


class _WireEvent(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    key: str | UnsetType = UNSET
    delta: Any = UNSET
    deltas: dict[str, Any] | UnsetType = UNSET
    ts: int | str | UnsetType = UNSET
    gauges: dict[str, Any] | UnsetType = UNSET
    reset: dict[str, Any] | UnsetType = UNSET
    correction: bool | UnsetType = UNSET
    distinct: dict[str, Any] | UnsetType = UNSET
    dims: Any = UNSET


class _WireMessage(_WireEvent, forbid_unknown_fields=True, gc=False):
    id: str | UnsetType = UNSET
    events: list[_WireEvent] | UnsetType = UNSET


_ZERO = Decimal(0)
_INT_LIMIT = 10**38  # an int strictly inside (-10**38, 10**38) has at most 38 digits: always storable
# A decimal literal of at most this many characters and no exponent has at most 37 digits and an
# adjusted exponent within [-36, 36]: always a storable DynamoDB Number.
_SHORT_LITERAL = 38


class _UncheckedDecimal(Decimal):
    """A literal the float hook could not vouch for (long, or with an exponent): ``_number`` checks it."""

    __slots__ = ()


def _decimal_literal(text: str) -> Decimal:
    """msgspec's float_hook: the literal's exact value, never through a binary float.

    Short plain literals (``49.99``, nearly all of them) are storable by construction, so the hook
    returns them as plain, canonical ``Decimal`` (trailing fraction zeros stripped) and the per-counter
    check is a type test. Anything else comes back as ``_UncheckedDecimal`` for the full check.
    """
    if len(text) > _SHORT_LITERAL or "e" in text or "E" in text:
        return _UncheckedDecimal(text)
    if text[-1] == "0":  # "1.50" -> "1.5", "10.0" -> "10", "0.00" -> 0
        text = text.rstrip("0")
        if text[-1] == ".":
            text = text[:-1]
        if text in ("0", "-0"):
            return _ZERO
    return Decimal(text)


_DECODER = msgspec.json.Decoder(_WireMessage, float_hook=_decimal_literal)
_UTF8_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
# A JSON escape: a backslash and what it escapes; scanning left to right keeps "\\\\" pairs together.
_ESCAPE = re.compile(rb"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)


class _Invalid(Exception):
    """Internal: carries a rejection out of the nested validation helpers."""

    def __init__(self, code: RejectCode, detail: str) -> None:
        super().__init__(detail)
        self.rejection = Rejection(code, detail)


def decode_message(
    body: str | bytes,
    limits: WireLimits = WIRE_LIMITS,
    defaults: CounterDefaults = NO_DEFAULTS,
    views: CounterViews = NO_VIEWS,
) -> Message | Rejection:
    """Decode one message body; return the ``Message`` or the ``Rejection`` that explains the refusal.

    ``defaults`` are the deployment's declared default deltas (``tally.core.defaults``): an event that
    omits ``delta`` and ``deltas`` counts them, instead of being refused as ``missing_delta``. ``views`` are its
    declared views (``tally.core.views``): an event's ``dims`` must be exactly what its key's views need.
    """
    try:
        return _decode(body, limits, defaults, views)
    except _Invalid as invalid:
        return invalid.rejection


def _decode(body: str | bytes, limits: WireLimits, defaults: CounterDefaults, views: CounterViews) -> Message:
    if isinstance(body, str):
        try:
            raw = body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _Invalid(RejectCode.LONE_SURROGATE, f"body holds a lone surrogate at {exc.start}") from exc
    else:
        raw = body
    wire = _parse(raw)
    message_id = _check_id(wire.id, limits)
    if wire.events is UNSET:
        if (
            wire.key is UNSET
            and wire.delta is UNSET
            and wire.deltas is UNSET
            and wire.gauges is UNSET
            and wire.distinct is UNSET
        ):
            raise _Invalid(RejectCode.MISSING_KEY, "a message needs a key and a delta, or events")
        return Message(message_id, (_event(wire, limits, None, defaults, views),))
    if (
        wire.key is not UNSET
        or wire.delta is not UNSET
        or wire.deltas is not UNSET
        or wire.ts is not UNSET
        or wire.gauges is not UNSET
        or wire.reset is not UNSET
        or wire.correction is not UNSET
        or wire.distinct is not UNSET
        or wire.dims is not UNSET
    ):
        raise _Invalid(
            RejectCode.AMBIGUOUS_SHAPE,
            "a packed message carries only id and events; key, delta(s), gauges, distinct, dims and ts belong on each "
            "event",
        )
    if not wire.events:
        raise _Invalid(RejectCode.EMPTY_MESSAGE, "events is empty")
    if len(wire.events) > limits.max_events_per_message:
        raise _Invalid(
            RejectCode.TOO_MANY_EVENTS,
            f"{len(wire.events)} events (at most {limits.max_events_per_message} per message)",
        )
    events = tuple([_event(event, limits, index, defaults, views) for index, event in enumerate(wire.events)])
    return Message(message_id, events)


def _parse(raw: bytes) -> _WireMessage:
    try:
        return _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        code = RejectCode.NUMBER_OUT_OF_RANGE if "out of range" in text else RejectCode.INVALID_FIELD
        raise _Invalid(code, text) from exc
    except msgspec.DecodeError as exc:
        text = str(exc)
        # msgspec names a lone surrogate escape, except near the end of the body, where it reads ahead
        # for the low half and reports truncation instead: look for the escape ourselves then.
        lone = "surrogate" in text or _has_lone_surrogate_escape(raw)
        raise _Invalid(RejectCode.LONE_SURROGATE if lone else RejectCode.MALFORMED_JSON, text) from exc
    except UnicodeDecodeError as exc:
        # UTF-8-encoded surrogates (ED A0..BF xx) are how a lone surrogate looks in raw bytes.
        encoded_surrogate = _UTF8_SURROGATE.search(raw) is not None
        code = RejectCode.LONE_SURROGATE if encoded_surrogate else RejectCode.MALFORMED_JSON
        raise _Invalid(code, f"body is not valid UTF-8: {exc.reason}") from exc
    except ArithmeticError as exc:
        # An exponent beyond even Python's Decimal range (1e1000000000000000000) fails in float_hook.
        raise _Invalid(RejectCode.NUMBER_OUT_OF_RANGE, "number exponent out of range") from exc
    except RecursionError as exc:
        raise _Invalid(RejectCode.MALFORMED_JSON, "JSON nested too deeply") from exc


def _check_id(message_id: str | UnsetType, limits: WireLimits) -> str:
    if message_id is UNSET or not message_id:
        raise _Invalid(RejectCode.MISSING_ID, "id is missing or empty")
    if _utf8_len_over(message_id, limits.max_id_bytes):
        raise _Invalid(RejectCode.ID_TOO_LONG, f"id is over {limits.max_id_bytes} bytes of UTF-8")
    return message_id


def _where(index: int | None) -> str:
    """Where in the body an event is, for rejection details (built only when something is refused)."""
    return "$" if index is None else f"$.events[{index}]"


def _event(
    wire: _WireEvent, limits: WireLimits, index: int | None, defaults: CounterDefaults, views: CounterViews
) -> CounterEvent:
    """One event, validated. The common case runs without building a single string: the path of the
    event (``index``: ``None`` for a single-event message) is only formatted into a rejection."""
    key = wire.key
    if key is UNSET or not key:
        raise _Invalid(RejectCode.MISSING_KEY, f"key is missing or empty at `{_where(index)}`")
    if len(key) * 4 > limits.max_key_bytes and len(key.encode("utf-8")) > limits.max_key_bytes:
        raise _Invalid(
            RejectCode.KEY_TOO_LONG, f"key is over {limits.max_key_bytes} bytes of UTF-8 at `{_where(index)}`"
        )
    if SHARD_SEPARATOR in key:
        raise _Invalid(
            RejectCode.INVALID_KEY, f"keys may not contain U+001F (it separates shard numbers) at `{_where(index)}`"
        )
    ts = wire.ts
    ts_ms = None if ts is UNSET else _ts_ms(ts, index)
    dims: dict[str, str] | None = None
    if wire.dims is not UNSET or views.rules:
        dims = None if wire.dims is UNSET else wire.dims
        problem = views.check_dims(key, dims, where=_where(index), reset=wire.reset is not UNSET)
        if problem is not None:
            raise _Invalid(RejectCode(problem.code), problem.detail)
    if wire.reset is not UNSET or wire.correction is not UNSET:
        return _operator_event(wire, limits, index, key, ts_ms, dims=dims)
    if wire.gauges is UNSET and wire.distinct is UNSET:
        return CounterEvent(key, _deltas(wire, limits, index, defaults, key), ts_ms, dims=dims)
    gauges = None if wire.gauges is UNSET else _gauges(wire.gauges, ts_ms, limits, index)
    members = None if wire.distinct is UNSET else _distinct(wire.distinct, limits, index)
    deltas = _deltas(wire, limits, index, defaults, key, has_gauges=True)
    return CounterEvent(key, deltas, ts_ms, gauges, members, dims=dims)


def _distinct(raw: dict[str, Any], limits: WireLimits, index: int | None) -> dict[str, str]:
    """``{"viewers": "user-17"}``: set name -> one member (a string) per set and event.

    One member per set keeps an event's content small and its digest simple; an event naming several
    members of one set is several events of a packed message (docs/explanation/counter-patterns.md, "Distinct counts").
    """
    where = f"{_where(index)}.distinct"
    if not raw:
        raise _Invalid(RejectCode.INVALID_DISTINCT, f"distinct is empty at `{where}`")
    if len(raw) > limits.max_counters_per_event:
        raise _Invalid(
            RejectCode.TOO_MANY_COUNTERS,
            f"{len(raw)} distinct sets at `{where}` (at most {limits.max_counters_per_event})",
        )
    for name, member in raw.items():
        if not name or _utf8_len_over(name, limits.max_counter_name_bytes) or SHARD_SEPARATOR in name:
            raise _Invalid(
                RejectCode.INVALID_DISTINCT,
                f"set names are 1 to {limits.max_counter_name_bytes} bytes of UTF-8 without U+001F at `{where}`",
            )
        if not isinstance(member, str) or not member:
            raise _Invalid(RejectCode.INVALID_DISTINCT, f"a member is a non-empty string at `{where}.{name}`")
        if _utf8_len_over(member, MAX_MEMBER_BYTES) or SHARD_SEPARATOR in member:
            raise _Invalid(
                RejectCode.INVALID_DISTINCT,
                f"a member is at most {MAX_MEMBER_BYTES} bytes of UTF-8 without U+001F at `{where}.{name}`",
            )
    return raw


"""The most counters one reset or correction names: each also records when, by which id and by how much
on the key's item, and the whole write must stay one update expression within DynamoDB's 4 KB."""


def _operator_event(
    wire: _WireEvent, limits: WireLimits, index: int | None, key: str, ts_ms: int | None, *, dims: dict[str, str] | None
) -> CounterEvent:
    """A reset (``"reset": {"stock": 100}``) or a correction (deltas with ``"correction": true``).

    Both are an operator's message of their own (never a packed event: each is ordered against the
    batch's other messages on its own, ``tally.commit.applier``). A reset sets counters and moves nothing else, so
    it carries no ``delta``/``deltas``/``gauges`` (and no default deltas are filled in); a correction names
    its deltas explicitly and carries no gauges.
    """
    where = _where(index)
    if index is not None:
        raise _Invalid(RejectCode.INVALID_RESET, f"a reset or correction is a message of its own, not at `{where}`")
    if wire.gauges is not UNSET or wire.distinct is not UNSET:
        raise _Invalid(RejectCode.INVALID_RESET, "a reset or correction carries no gauges and no distinct members")
    if wire.reset is UNSET:
        if wire.correction is not True:
            raise _Invalid(RejectCode.INVALID_RESET, '"correction" is true or absent')
        if wire.delta is UNSET and wire.deltas is UNSET:
            raise _Invalid(RejectCode.MISSING_DELTA, "a correction names its delta or deltas")
        deltas = _deltas(wire, limits, index, NO_DEFAULTS, key)
        if len(deltas) > MAX_OPERATOR_COUNTERS:
            raise _Invalid(
                RejectCode.INVALID_RESET, f"{len(deltas)} counters in one correction (at most {MAX_OPERATOR_COUNTERS})"
            )
        return CounterEvent(key, deltas, ts_ms, correction=True, dims=dims)
    if wire.correction is not UNSET or wire.delta is not UNSET or wire.deltas is not UNSET:
        raise _Invalid(RejectCode.INVALID_RESET, "a reset carries no delta, deltas or correction")
    raw = wire.reset
    if not raw or len(raw) > MAX_OPERATOR_COUNTERS:
        raise _Invalid(RejectCode.INVALID_RESET, f"a reset names 1 to {MAX_OPERATOR_COUNTERS} counters")
    values: dict[str, Number] = {}
    for name, value in raw.items():
        _check_name(name, limits, RejectCode.INVALID_COUNTER_NAME, "counter", "$.reset")
        values[name] = _number(value, f"$.reset.{name}")
    return CounterEvent(key, {}, ts_ms, reset=values, dims=dims)


def _gauges(raw: dict[str, Any], ts_ms: int | None, limits: WireLimits, index: int | None) -> dict[str, Gauge]:
    """``{"peak": {"max": 17}, "lastPurchaseAt": {"latest": "..."}}``: one kind per gauge name."""
    where = f"{_where(index)}.gauges"
    if not raw:
        raise _Invalid(RejectCode.INVALID_GAUGE, f"gauges is empty at `{where}`")
    if len(raw) > limits.max_counters_per_event:
        raise _Invalid(
            RejectCode.TOO_MANY_COUNTERS, f"{len(raw)} gauges at `{where}` (at most {limits.max_counters_per_event})"
        )
    gauges: dict[str, Gauge] = {}
    for name, reading in raw.items():
        _check_name(name, limits, RejectCode.INVALID_GAUGE, "gauge", where)
        if not isinstance(reading, dict) or len(reading) != 1:
            raise _Invalid(RejectCode.INVALID_GAUGE, f'a gauge is {{"max"|"min"|"latest": value}} at `{where}.{name}`')
        ((kind_name, value),) = reading.items()
        kind = _GAUGE_KINDS.get(kind_name)
        if kind is None:
            raise _Invalid(RejectCode.INVALID_GAUGE, f"gauge kinds are max, min and latest at `{where}.{name}`")
        if kind is GaugeKind.LATEST:
            if ts_ms is None:
                raise _Invalid(RejectCode.INVALID_GAUGE, f"a latest gauge needs the event's ts at `{where}.{name}`")
            if isinstance(value, str):
                if _utf8_len_over(value, MAX_GAUGE_TEXT_BYTES):
                    raise _Invalid(
                        RejectCode.INVALID_GAUGE,
                        f"a latest gauge's text is at most {MAX_GAUGE_TEXT_BYTES} bytes at `{where}.{name}`",
                    )
                gauges[name] = Gauge(kind, value)
                continue
        gauges[name] = Gauge(kind, _number(value, f"{where}.{name}.{kind_name}"))
    return gauges


def _deltas(
    wire: _WireEvent,
    limits: WireLimits,
    index: int | None,
    defaults: CounterDefaults,
    key: str,
    *,
    has_gauges: bool = False,
) -> Mapping[str, Number]:
    delta = wire.delta
    if delta is not UNSET:
        if wire.deltas is not UNSET:
            raise _Invalid(RejectCode.AMBIGUOUS_SHAPE, f"both delta and deltas at `{_where(index)}`")
        kind = type(delta)
        if not (kind is Decimal or (kind is int and -_INT_LIMIT < delta < _INT_LIMIT)):
            delta = _number(delta, f"{_where(index)}.delta")
        return {DEFAULT_COUNTER: delta}
    deltas = wire.deltas
    if deltas is UNSET and defaults.rules:
        declared = defaults.default_deltas(key)
        if declared:
            return declared
    if deltas is UNSET and has_gauges:
        return {}  # a gauges-only or distinct-only event: no counter moves
    if deltas is UNSET or not deltas:
        raise _Invalid(RejectCode.MISSING_DELTA, f"delta or a non-empty deltas is required at `{_where(index)}`")
    if len(deltas) > limits.max_counters_per_event:
        raise _Invalid(
            RejectCode.TOO_MANY_COUNTERS,
            f"{len(deltas)} counters at `{_where(index)}` (at most {limits.max_counters_per_event})",
        )
    max_name_bytes = limits.max_counter_name_bytes
    # The decoder built this dict for this event alone: it is checked, and fixed up, in place.
    for name, value in deltas.items():
        if (
            not name
            or (len(name) * 4 > max_name_bytes and len(name.encode("utf-8")) > max_name_bytes)
            or SHARD_SEPARATOR in name
        ):
            # U+001F marks an open window's counter on the key's item (``tally.core.items.window_counter``).
            raise _Invalid(
                RejectCode.INVALID_COUNTER_NAME,
                f"counter names are 1 to {max_name_bytes} bytes of UTF-8 without U+001F at `{_where(index)}.deltas`",
            )
        kind = type(value)
        # The fast path: a short decimal literal (vouched for by the float hook) or a small int.
        if not (kind is Decimal or (kind is int and -_INT_LIMIT < value < _INT_LIMIT)):
            deltas[name] = _number(value, f"{_where(index)}.deltas.{name}")
    return deltas


def _number(value: object, where: str) -> Number:
    """The full check of a number the fast path could not accept: big ints, long or exponent literals,
    and everything that is not a number at all."""
    # bool is a subclass of int: test the exact type so `true` can never count as 1.
    if type(value) is int:
        problem = storage_problem(value)
        if problem is None:
            return value
    elif isinstance(value, Decimal):
        # Canonical form: every accepted number then has at most 38 digits between 1E-167 and 1E+126.
        problem, number = checked_canonical(Decimal(value))
        if problem is None:
            return number
    else:
        kind = "boolean" if isinstance(value, bool) else type(value).__name__
        raise _Invalid(RejectCode.INVALID_NUMBER, f"expected a JSON number, got {kind} at `{where}`")
    raise _Invalid(RejectCode.NUMBER_OUT_OF_RANGE, f"{problem} at `{where}`")


def _ts_ms(ts: int | str, index: int | None) -> int:
    where = _where(index)
    if isinstance(ts, int):
        if not 0 <= ts <= MAX_TS_MS:
            raise _Invalid(RejectCode.INVALID_TS, f"epoch milliseconds out of range at `{where}.ts`")
        return ts
    try:
        moment = datetime.fromisoformat(ts)
    except ValueError as exc:
        raise _Invalid(RejectCode.INVALID_TS, f"not ISO 8601 at `{where}.ts`") from exc
    if moment.tzinfo is None:
        raise _Invalid(RejectCode.INVALID_TS, f"ISO 8601 ts needs a UTC offset or Z at `{where}.ts`")
    stamp = _exact_ms(moment)
    if not 0 <= stamp <= MAX_TS_MS:
        raise _Invalid(RejectCode.INVALID_TS, f"ts out of range at `{where}.ts`")
    return stamp


def _exact_ms(moment: datetime) -> int:
    """Milliseconds since the epoch without a float round trip (sub-millisecond digits are cut)."""
    epoch_seconds = int(moment.replace(microsecond=0).timestamp())
    return epoch_seconds * 1000 + moment.microsecond // 1000


def _has_lone_surrogate_escape(raw: bytes) -> bool:
    """Whether the JSON text holds a ``\\uD800``-style escape without its other half."""
    pending_high_end = -1  # end offset of a high-surrogate escape still waiting for its low half
    for match in _ESCAPE.finditer(raw):
        escaped = match.group(1)
        unit = int(escaped[1:], 16) if len(escaped) == 5 else -1  # 5 bytes: a full u+4-hex-digit escape
        is_high, is_low = 0xD800 <= unit <= 0xDBFF, 0xDC00 <= unit <= 0xDFFF
        if pending_high_end >= 0 and not (is_low and match.start() == pending_high_end):
            return True
        if is_low and pending_high_end < 0:
            return True
        pending_high_end = match.end() if is_high else -1
    return pending_high_end >= 0


def _check_name(name: str, limits: WireLimits, code: RejectCode, kind: str, where: str) -> None:
    """A reset's counter name or a gauge name: 1 to ``max_counter_name_bytes`` bytes of UTF-8."""
    if not name or _utf8_len_over(name, limits.max_counter_name_bytes):
        raise _Invalid(code, f"{kind} names are 1 to {limits.max_counter_name_bytes} bytes of UTF-8 at `{where}`")


def _utf8_len_over(text: str, limit: int) -> bool:
    # Every code point is at most 4 bytes of UTF-8: short strings skip the encode entirely.
    return len(text) * 4 > limit and len(text.encode("utf-8")) > limit
