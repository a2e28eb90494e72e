"""Time windows: which window an event falls in, when a window's counters expire, and what is late.

Windows are half-open, ``[start, start + duration)``, in UTC, aligned to the epoch (minute, hour, day).
A window id sorts in time within its unit (``h#2026-11-22T03:00Z``), so a range of windows of one key is
one DynamoDB ``Query`` on the sort key. Time is always passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

MINUTE_MS: Final = 60_000
HOUR_MS: Final = 3_600_000
DAY_MS: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class WindowUnit:
    """A window size, its id prefix, and how long its counters are kept (``None``: forever)."""

    name: str
    prefix: str
    duration_ms: int
    retention_ms: int | None

    def start_ms(self, ts_ms: int) -> int:
        """The start of the window holding ``ts_ms``."""
        return ts_ms - ts_ms % self.duration_ms

    def window_id(self, start_ms: int) -> str:
        """The sort-key value of the window starting at ``start_ms`` (sorts in time)."""
        moment = datetime.fromtimestamp(start_ms / 1000, tz=UTC)
        text = moment.strftime("%Y-%m-%dT%H:%MZ") if self.duration_ms < DAY_MS else moment.strftime("%Y-%m-%d")
        return f"{self.prefix}#{text}"

    def expires_at_s(self, start_ms: int) -> int | None:
        """When the window's counters may be deleted (epoch seconds), or None to keep them."""
        if self.retention_ms is None:
            return None
        return (start_ms + self.duration_ms + self.retention_ms) // 1000


UNITS: Final = {"minute": ("m", MINUTE_MS), "hour": ("h", HOUR_MS), "day": ("d", DAY_MS)}


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


def parse_window_spec(windows: str, retention_days: str = "", future_tolerance_ms: int = HOUR_MS) -> WindowSpec:
    """``"hour,day"`` and ``"minute=7,hour=90,day=0"`` (days; 0 keeps forever) -> a ``WindowSpec``."""
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
        prefix, duration = UNITS[name]
        kept_days = retention.get(name, 0)
        units.append(WindowUnit(name, prefix, duration, kept_days * DAY_MS if kept_days else None))
    return WindowSpec(tuple(units), future_tolerance_ms)
