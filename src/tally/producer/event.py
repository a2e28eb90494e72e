"""``Event``: one counter event as a producer states it, checked before it is ever sent.

Checked here, at the producer, is what no retry can fix: the shape of an event and the exactness of its
numbers. A delta is an ``int`` or a finite ``Decimal``, never a ``float`` (``0.1`` as a float is not 0.1,
and ten of them would not add up to 1), so what the consumer adds is exactly what the caller wrote.
Size limits mirror the consumer's (``WireLimits``), and numbers and keys go through the consumer's own
rules (``tally.core.numbers`` and ``tally.core.items``, pure standard library), so an event the
consumer could never count fails at the call, with a reason, instead of in the dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Final

from tally.core.items import SHARD_SEPARATOR
from tally.core.limits import (
    MAX_GAUGE_TEXT_BYTES,
    MAX_MEMBER_BYTES,
    MAX_OPERATOR_COUNTERS,
    MAX_TS_MS,
    WIRE_LIMITS,
)
from tally.core.numbers import storage_problem
from tally.core.views import dims_shape_problem

DEFAULT_COUNTER: Final = "count"
"""The counter a bare ``delta`` adds to (the wire format's ``"delta": n`` shorthand)."""


@dataclass(frozen=True, slots=True)
class Event:
    """Deltas for one or more named counters of one key, with an optional event time and id.

    ``ts`` is epoch milliseconds or a timezone-aware ``datetime`` (a naive one is refused, as the
    consumer refuses a naive ISO time); it is kept, and sent, as epoch milliseconds (``ts_ms``).
    ``id`` is optional: an event given an id is sent alone as a message with exactly that id, so
    re-publishing it later (after a crash, from a log) is recognised as the same message; events
    without one get a fresh id when they are prepared, and may be packed together.
    """

    key: str
    deltas: Mapping[str, int | Decimal]
    ts: int | datetime | None = None
    id: str | None = None
    gauges: Mapping[str, tuple[str, int | Decimal | str]] | None = None
    """Gauge name -> (``"max"``, ``"min"`` or ``"latest"``, reading): docs/explanation/counter-patterns.md.
    ``latest`` needs ``ts``; ``max`` and ``min`` take an int or a Decimal (never a float)."""
    reset: Mapping[str, int | Decimal] | None = None
    """An operator's reset: counter -> the value its all-time total is set to
    (docs/explanation/counter-patterns.md, "Corrections and resets"); such an event has no deltas and no gauges, and
    is always sent as a message of its own."""
    correction: bool = False
    """An operator's correction: the deltas count like any event's and the key records the correction;
    always sent as a message of its own."""
    distinct: Mapping[str, str] | None = None
    """Set name -> the member this event names, e.g. ``{"viewers": "user-17"}``
    (docs/explanation/counter-patterns.md, "Distinct counts"): the key's count of different members per set, all-time
    and in the windows of ``ts``."""
    dims: Mapping[str, str] | None = None
    """Dimension name -> value, e.g. ``{"customer": "acme", "route": "/v1/users"}``
    (docs/explanation/views.md): the event counts once more under each view its key declares (``CounterViews``),
    which need exactly the dimensions they name. A reset's dims name the one view item it sets."""

    def __post_init__(self) -> None:
        check_text(self.key, "key", WIRE_LIMITS.max_key_bytes)
        if SHARD_SEPARATOR in self.key:
            raise ValueError("key may not contain U+001F: the consumer uses it to separate shard numbers")
        if not isinstance(self.deltas, Mapping):
            raise TypeError(f"deltas of {self.key!r} must be a mapping")
        # No deltas: the deployment's default deltas count the event (CounterDefaults), or it carries gauges.
        if len(self.deltas) > WIRE_LIMITS.max_counters_per_event:
            raise ValueError(
                f"{len(self.deltas)} counters on {self.key!r} (at most {WIRE_LIMITS.max_counters_per_event})"
            )
        deltas: dict[str, int | Decimal] = {}
        for name, value in self.deltas.items():
            check_text(name, "counter name", WIRE_LIMITS.max_counter_name_bytes)
            if SHARD_SEPARATOR in name:
                raise ValueError(f"counter {name!r} may not contain U+001F: the consumer marks window counters with it")
            deltas[name] = _check_number(name, value)
        object.__setattr__(self, "deltas", deltas)  # a private copy: later changes by the caller are not sent
        if self.ts is not None:
            object.__setattr__(self, "ts", _epoch_ms(self.ts))
        if self.id is not None:
            check_text(self.id, "id", WIRE_LIMITS.max_id_bytes)
        if self.gauges is not None:
            object.__setattr__(self, "gauges", self._checked_gauges(self.gauges))
        if self.distinct is not None:
            object.__setattr__(self, "distinct", self._checked_distinct(self.distinct))
        if self.dims is not None:
            problem = dims_shape_problem(dict(self.dims) if isinstance(self.dims, Mapping) else self.dims, "dims")
            if problem is not None:
                raise ValueError(f"dims of {self.key!r}: {problem.detail}")
            object.__setattr__(self, "dims", dict(self.dims))
        if self.reset is not None or self.correction:
            self._check_operator()

    @property
    def is_operator(self) -> bool:
        """A reset or a correction: the consumer takes it only as a message of its own."""
        return self.reset is not None or self.correction

    def _check_operator(self) -> None:
        """What the consumer refuses as ``invalid_reset`` (or ``missing_delta``), refused here first."""
        if self.gauges is not None or self.distinct is not None:
            raise ValueError(f"a reset or correction of {self.key!r} carries no gauges and no distinct members")
        if self.reset is None:
            if not self.deltas:
                raise ValueError(f"a correction of {self.key!r} names its deltas")
            amounts: Mapping[str, int | Decimal] = self.deltas
        else:
            if self.deltas or self.correction:
                raise ValueError(f"a reset of {self.key!r} carries no deltas and is not a correction")
            if not isinstance(self.reset, Mapping):
                raise TypeError(f"reset of {self.key!r} must be a mapping")
            values: dict[str, int | Decimal] = {}
            for name, value in self.reset.items():
                check_text(name, "counter name", WIRE_LIMITS.max_counter_name_bytes)
                values[name] = _check_number(name, value)
            object.__setattr__(self, "reset", values)
            amounts = values
        if not 1 <= len(amounts) <= MAX_OPERATOR_COUNTERS:
            raise ValueError(f"a reset or correction names 1 to {MAX_OPERATOR_COUNTERS} counters")

    @classmethod
    def reset_to(
        cls,
        key: str,
        values: Mapping[str, int | Decimal],
        *,
        id: str,
        ts: int | datetime | None = None,
        dims: Mapping[str, str] | None = None,
    ) -> Event:
        """``Event.reset_to("stock:sku-1", {"stock": 100}, id=...)``: an operator's reset (give it an id, and
        give the same id again when re-sending it, so it counts once); with ``dims``, of that view's item."""
        return cls(key, {}, ts=ts, id=id, reset=values, dims=dims)

    @classmethod
    def correct(
        cls,
        key: str,
        deltas: Mapping[str, int | Decimal],
        *,
        id: str,
        ts: int | datetime | None = None,
        dims: Mapping[str, str] | None = None,
    ) -> Event:
        """``Event.correct("stock:sku-1", {"stock": -3}, id=...)``: an operator's correction by a delta (with the
        dims an event of the key carries: it counts into the key's views like one)."""
        return cls(key, deltas, ts=ts, id=id, correction=True, dims=dims)

    def _checked_distinct(self, distinct: Mapping[str, str]) -> dict[str, str]:
        if not isinstance(distinct, Mapping) or not distinct or len(distinct) > WIRE_LIMITS.max_counters_per_event:
            raise ValueError(f"distinct of {self.key!r}: 1 to {WIRE_LIMITS.max_counters_per_event} sets")
        for name, member in distinct.items():
            check_text(name, "set name", WIRE_LIMITS.max_counter_name_bytes)
            check_text(member, f"member of {name!r}", MAX_MEMBER_BYTES)
            if SHARD_SEPARATOR in name or SHARD_SEPARATOR in member:
                raise ValueError(f"distinct {name!r}: set names and members may not contain U+001F")
        return dict(distinct)

    def _checked_gauges(
        self, gauges: Mapping[str, tuple[str, int | Decimal | str]]
    ) -> dict[str, tuple[str, int | Decimal | str]]:
        if not gauges or len(gauges) > WIRE_LIMITS.max_counters_per_event:
            raise ValueError(f"gauges of {self.key!r}: 1 to {WIRE_LIMITS.max_counters_per_event} of them")
        checked: dict[str, tuple[str, int | Decimal | str]] = {}
        for name, reading in gauges.items():
            check_text(name, "gauge name", WIRE_LIMITS.max_counter_name_bytes)
            kind, value = reading
            if kind not in ("max", "min", "latest"):
                raise ValueError(f"gauge {name!r}: the kinds are max, min and latest, not {kind!r}")
            if kind == "latest" and self.ts is None:
                raise ValueError(f"gauge {name!r}: a latest reading needs the event's ts")
            if kind == "latest" and isinstance(value, str):
                check_text(value, f"gauge {name!r}", MAX_GAUGE_TEXT_BYTES)
                checked[name] = (kind, value)
            else:
                checked[name] = (kind, _check_number(name, value))
        return checked

    @classmethod
    def count(
        cls,
        key: str,
        delta: int | Decimal = 1,
        *,
        counter: str = DEFAULT_COUNTER,
        ts: int | datetime | None = None,
        id: str | None = None,
        dims: Mapping[str, str] | None = None,
    ) -> Event:
        """One counter of one key: ``Event.count("page:/home")`` adds 1 to ``count``."""
        return cls(key, {counter: delta}, ts=ts, id=id, dims=dims)

    @property
    def ts_ms(self) -> int | None:
        """The event time as epoch milliseconds (a ``datetime`` given as ``ts`` is converted exactly)."""
        return _epoch_ms(self.ts) if self.ts is not None else None


def check_text(value: object, what: str, max_bytes: int) -> None:
    """A non-empty string of at most ``max_bytes`` of UTF-8 (no lone surrogate), or ``ValueError`` naming ``what``."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} holds a lone surrogate at {exc.start}") from exc
    if size > max_bytes:
        raise ValueError(f"{what} is {size} bytes of UTF-8 (at most {max_bytes})")


def _check_number(name: str, value: object) -> int | Decimal:
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        hint = " (use Decimal('...') or an int: a float is not exact)" if isinstance(value, float) else ""
        raise TypeError(f"delta of {name!r} must be an int or a Decimal, got {type(value).__name__}{hint}")
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"delta of {name!r} must be finite, got {value}")
    problem = storage_problem(value)
    if problem is not None:
        raise ValueError(f"delta of {name!r} cannot be stored: {problem}")
    return value


def _epoch_ms(ts: object) -> int:
    if isinstance(ts, datetime):
        if ts.tzinfo is None or ts.utcoffset() is None:
            raise ValueError("ts must be timezone-aware: a naive time is refused rather than guessed")
        # Whole seconds through timestamp() are exact; the milliseconds are added without a float.
        ts = int(ts.replace(microsecond=0).timestamp()) * 1000 + ts.microsecond // 1000
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= MAX_TS_MS:
        raise ValueError(f"ts must be epoch milliseconds from 1970 to 9999 or an aware datetime, got {ts!r}")
    return ts
