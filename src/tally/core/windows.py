"""Time windows: which window an event falls in, when a window's counters expire, and what is late.

Windows are half-open, ``[start, end)``, in UTC: minute, hour and day windows are aligned to the epoch and
last a fixed time; a month window is a calendar month of UTC (28 to 31 days, from the first day's 00:00),
its arithmetic left to ``datetime`` and ``calendar``. A window id sorts in time within its unit
(``h#2026-11-22T03:00Z``, ``mo#2026-11``), so a range of windows of one key is one DynamoDB ``Query`` on the
sort key. Time is always passed in.

Hour, day and month windows are *open on the key's item* while they last: a batch adds an
event's hour, day and month deltas to the key's own item, as counters named by ``tally.core.items.window_counter``,
so it writes one item per key instead of four; once a window has ended it is moved to its own window item
(``tally.store.windows``). Minute windows stay items of their own from the start: a key-minute would need a
move of its own, which costs more than writing the window item in each batch unless many batches write the
key within the same minute.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from decimal import Decimal

MINUTE_MS: Final = 60_000
HOUR_MS: Final = 3_600_000
DAY_MS: Final = 86_400_000

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS: Final = timedelta(milliseconds=1)


def _moment(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC ``datetime`` (integer arithmetic: no float rounding)."""
    return _EPOCH + timedelta(milliseconds=ms)


def _epoch_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // _ONE_MS


@lru_cache(maxsize=4096)
def _window_id(prefix: str, id_format: str, start_ms: int) -> str:
    """A window id, remembered: a batch's events fall in a few windows, and formatting a date costs more than the
    rest of an event's placement (``strftime``: 6 us of the recount's 30 per single-event message)."""
    return f"{prefix}#{_moment(start_ms).strftime(id_format)}"


def _month_index(ms: int) -> int:
    """Months since year 0 of the month holding ``ms``: consecutive months have consecutive indexes."""
    moment = _moment(ms)
    return moment.year * 12 + moment.month - 1


def _month_start(index: int) -> int:
    year, month = divmod(index, 12)
    return _epoch_ms(datetime(year, month + 1, 1, tzinfo=UTC))


@dataclass(frozen=True, slots=True)
class WindowUnit:
    """A window size, its id prefix, and how long its counters are kept (``None``: forever)."""

    name: str
    prefix: str
    duration_ms: int | None
    """The window's fixed length; None for a calendar month of UTC, whose length varies (28 to 31 days)."""
    retention_ms: int | None

    def start_ms(self, ts_ms: int) -> int:
        """The start of the window holding ``ts_ms``."""
        if self.duration_ms is None:
            return _month_start(_month_index(ts_ms))
        return ts_ms - ts_ms % self.duration_ms

    def window_id(self, start_ms: int) -> str:
        """The sort-key value of the window starting at ``start_ms`` (sorts in time)."""
        return _window_id(self.prefix, self.id_format, start_ms)

    @property
    def id_format(self) -> str:
        """How a window id writes its start (``strftime``; ``parse_window_id`` reads it back)."""
        if self.duration_ms is None:
            return "%Y-%m"
        return "%Y-%m-%d" if self.duration_ms >= DAY_MS else "%Y-%m-%dT%H:%MZ"

    @property
    def on_key_item(self) -> bool:
        """Whether an open window of this unit is counted on the key's item (hour, day, month) rather than its
        own (minute)."""
        return self.duration_ms is None or self.duration_ms >= HOUR_MS

    def end_ms(self, start_ms: int) -> int:
        """The first instant after the window starting at ``start_ms`` (a month's: the next month's first)."""
        if self.duration_ms is None:
            moment = _moment(start_ms)
            return start_ms + calendar.monthrange(moment.year, moment.month)[1] * DAY_MS
        return start_ms + self.duration_ms

    def shifted(self, start_ms: int, windows: int) -> int:
        """The start of the window ``windows`` after (negative: before) the one starting at ``start_ms``."""
        if self.duration_ms is None:
            return _month_start(_month_index(start_ms) + windows)
        return start_ms + windows * self.duration_ms

    def count(self, first_ms: int, last_ms: int) -> int:
        """How many windows from the one holding ``first_ms`` to the one holding ``last_ms``, both counted
        (0 when ``last_ms``'s is before ``first_ms``'s)."""
        if self.duration_ms is None:
            return max(0, _month_index(last_ms) - _month_index(first_ms) + 1)
        return max(0, (self.start_ms(last_ms) - self.start_ms(first_ms)) // self.duration_ms + 1)

    def starts(self, first_ms: int, last_ms: int) -> Sequence[int]:
        """The start of every window from the one holding ``first_ms`` to the one holding ``last_ms``."""
        first = self.start_ms(first_ms)
        if self.duration_ms is None:
            return [self.shifted(first, offset) for offset in range(self.count(first_ms, last_ms))]
        return range(first, self.start_ms(last_ms) + self.duration_ms, self.duration_ms)

    def expires_at_s(self, start_ms: int) -> int | None:
        """When the window's counters may be deleted (epoch seconds), or None to keep them."""
        if self.retention_ms is None:
            return None
        return (self.end_ms(start_ms) + self.retention_ms) // 1000


MOVE_AT_BYTES: Final = 700
"""A key item at least this large (attribute names and values) has its ended windows moved off it even before
its day ends (``tally.store.windows``): about 5 hours of two counters, so the item stays within the first KB
each batch's write of it pays for (2 write units per KB)."""

UNITS: Final[dict[str, tuple[str, int | None]]] = {
    "minute": ("m", MINUTE_MS),
    "hour": ("h", HOUR_MS),
    "day": ("d", DAY_MS),
    "month": ("mo", None),
}
"""Each unit's id prefix and fixed length (None: a calendar month). ``mo#`` sorts apart from ``m#`` (a
minute's ids all begin ``m#``), so a ``BETWEEN`` on one unit's ids never meets the other's."""


def unit_named(name: str, retention_ms: int | None = None) -> WindowUnit:
    """The unit ``name`` (``KeyError`` for another name), kept ``retention_ms`` after its end (None: forever)."""
    prefix, duration = UNITS[name]
    return WindowUnit(name, prefix, duration, retention_ms)


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """The windows counted in a deployment, and how far ahead of the clock an event may be."""

    units: tuple[WindowUnit, ...] = ()
    future_tolerance_ms: int = HOUR_MS

    def unit(self, name: str) -> WindowUnit:
        for unit in self.units:
            if unit.name == name:
                return unit
        raise KeyError(f"window {name!r} is not counted here (counted: {[u.name for u in self.units]})")

    def windows_of(self, ts_ms: int, now_ms: int) -> tuple[list[tuple[WindowUnit, int]], bool]:
        """The (unit, window start) pairs an event counts in, and whether it was late for some unit.

        A window whose retention has already passed is not written (the event counts in the all-time
        value and in its windows still kept): writing it would resurrect an expired counter.
        """
        windows = []
        late = False
        for unit in self.units:
            start = unit.start_ms(ts_ms)
            expiry = unit.expires_at_s(start)
            if expiry is not None and expiry * 1000 <= now_ms:
                late = True
                continue
            windows.append((unit, start))
        return windows, late


def parse_window_id(window: str) -> tuple[str, int]:
    """``"h#2026-11-22T03:00Z"`` -> (``"hour"``, its start in epoch ms); ``ValueError`` for anything else."""
    prefix, _, text = window.partition("#")
    for name, (unit_prefix, _duration) in UNITS.items():
        if unit_prefix == prefix:
            moment = datetime.strptime(text, unit_named(name).id_format).replace(tzinfo=UTC)
            return name, _epoch_ms(moment)
    raise ValueError(f"not a window id: {window!r}")


@dataclass(frozen=True, slots=True)
class EndedWindow:
    """An ended window found open on a key's item: what a move takes off it, and where it goes."""

    window: str
    unit: str
    """``hour``, ``day``, ``month`` (or ``minute``)."""
    start_ms: int
    counters: Mapping[str, Decimal]
    kept: bool
    """False when its retention has passed: it is only removed (writing it would resurrect it)."""
    expires_at_s: int | None


def closed_windows(
    open_windows: Mapping[str, Mapping[str, Decimal]], spec: WindowSpec, now_ms: int
) -> list[EndedWindow]:
    """The windows among ``open_windows`` (window id -> counters) that have ended by ``now_ms``, oldest first.

    A window of a unit the deployment no longer counts keeps its counters forever (no retention is known);
    a window id this code cannot read is never touched.
    """
    ended: list[EndedWindow] = []
    for window, counters in open_windows.items():
        try:
            name, start = parse_window_id(window)
        except ValueError:
            continue
        counted = [unit for unit in spec.units if unit.name == name]
        unit = counted[0] if counted else unit_named(name)
        if unit.window_id(start) != window or unit.end_ms(start) > now_ms:
            continue
        expires = unit.expires_at_s(start)
        kept = expires is None or expires * 1000 > now_ms
        ended.append(EndedWindow(window, name, start, counters, kept, expires))
    ended.sort(key=lambda found: (found.start_ms, found.window))
    return ended


def hours_on_day_items(spec: WindowSpec) -> bool:
    """Whether ended hours are kept on their day's window item (as ``w#`` attributes beside the day's total)
    rather than on hour items of their own: when both are counted and the day item lives at least as long as
    its hours (the day kept forever, or hours kept no longer than days), since TTL deletes whole items."""
    units = {unit.name: unit for unit in spec.units}
    hour, day = units.get("hour"), units.get("day")
    if hour is None or day is None:
        return False
    return day.retention_ms is None or (hour.retention_ms is not None and hour.retention_ms <= day.retention_ms)


def parse_window_spec(windows: str, retention_days: str = "", future_tolerance_ms: int = HOUR_MS) -> WindowSpec:
    """``"hour,day"`` and ``"minute=7,hour=90,day=0,month=0"`` (days after the window's end; 0 keeps forever)
    -> a ``WindowSpec``."""
    retention: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in retention_days.split(","))):
        name, _, text = part.partition("=")
        if name.strip() not in UNITS or not text.strip().isdigit():
            raise ValueError(f"bad window retention {part!r}: expected e.g. hour=90 (days, 0 = keep)")
        retention[name.strip()] = int(text)
    units = []
    for name in filter(None, (p.strip() for p in windows.split(","))):
        if name not in UNITS:
            raise ValueError(f"unknown window {name!r}: choose from {', '.join(UNITS)}")
        kept_days = retention.get(name, 0)
        units.append(unit_named(name, kept_days * DAY_MS if kept_days else None))
    return WindowSpec(tuple(units), future_tolerance_ms)
