"""The typed results of the read API: plain frozen values, numbers as exact ``Decimal``.

Counter values are ``Decimal`` because DynamoDB keeps 38 significant digits and a float keeps about 16;
a counter that was never written reads as zero (``Counters.value``), which is what a page showing a
count wants, and an empty mapping, which is what a script comparing totals wants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

_ZERO = Decimal(0)


def iso_utc(ms: int) -> str:
    """``2026-11-22T03:00:00Z``: a window start as the docs and the HTTP endpoint print it."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class OperatorRecord:
    """A counter's last reset (``amount``: the value it was set to) or correction (``amount``: the delta)."""

    at_ms: int
    """The operator message's ``ts``, or when the source accepted it if it had none (epoch ms)."""
    message_id: str
    amount: Decimal

    @property
    def at(self) -> str:
        return iso_utc(self.at_ms)


@dataclass(frozen=True, slots=True)
class Counters:
    """The counters of one key (hot-key shards summed): counter name -> exact value."""

    key: str
    values: Mapping[str, Decimal] = field(default_factory=dict)
    gauges: Mapping[str, Mapping[str, Decimal | str]] = field(default_factory=dict)
    """Gauge kind (``max``, ``min``, ``latest``) -> gauge name -> value (a latest may be text)."""
    distinct: Mapping[str, Decimal] = field(default_factory=dict)
    """Distinct-count set -> how many different members it has seen, all-time."""
    operators: Mapping[str, Mapping[str, OperatorRecord]] = field(default_factory=dict)
    """``reset`` / ``correction`` -> counter -> its last one; empty when never reset or corrected."""

    def value(self, counter: str = "count") -> Decimal:
        """One counter's value; zero when it was never counted."""
        return self.values.get(counter, _ZERO)


@dataclass(frozen=True, slots=True)
class Window:
    """One time window of a series: ``[start_ms, start_ms + duration)`` in UTC, and its counters."""

    start_ms: int
    values: Mapping[str, Decimal] = field(default_factory=dict)
    distinct: Mapping[str, Decimal] = field(default_factory=dict)
    """Distinct-count set -> different members seen in this window (members of events with a ``ts``)."""

    @property
    def start(self) -> str:
        return iso_utc(self.start_ms)


@dataclass(frozen=True, slots=True)
class Series:
    """Every ``window`` (minute, hour, day, month) of ``key`` from the one holding ``from_ms`` to the one holding
    ``to_ms``, in order, with no gaps: a window nothing was counted in has empty values."""

    key: str
    window: str
    windows: tuple[Window, ...]


@dataclass(frozen=True, slots=True)
class KeyState:
    """Everything the counters table holds for one key (hot-key shards summed): what ``tally audit`` compares
    with the archive's recount. Windows of every unit, wherever they are (open on the key's item, moved to
    window items, ended hours on their day's item); a window past its retention reads as absent."""

    key: str
    values: Mapping[str, Decimal] = field(default_factory=dict)
    """All-time counters."""
    windows: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    """Window id (``h#2026-11-22T03:00Z``, ``d#2026-11-22``, ...) -> counter -> value."""
    gauges: Mapping[str, Mapping[str, Decimal | str]] = field(default_factory=dict)
    """Gauge kind -> gauge name -> value, as ``Counters.gauges``."""
    distinct: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    """``all`` or a window id -> set -> distinct members counted."""


@dataclass(frozen=True, slots=True)
class Ranked:
    """One named counter of one key, as ``top`` ranks them."""

    key: str
    counter: str
    value: Decimal
