"""What a read may ask for, checked before anything is sent to DynamoDB (pure: no I/O, time passed in).

The rules are the wire format's (docs/reference/event-format.md): a key is 1 to 2,000 bytes of UTF-8 without
U+001F (the shard separator: a key holding it would read one shard item of another key); a window is one
of minute, hour, day, month (and, when the deployment's ``Windows`` are known, one it counts); a time is epoch
milliseconds or ISO 8601 with a UTC offset or ``Z``, as an event's ``ts``. A series is bounded in windows,
because each window is an item read and a line of the answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final

from tally.core.items import SHARD_SEPARATOR
from tally.core.limits import MAX_TS_MS, WIRE_LIMITS
from tally.core.windows import UNITS, unit_named
from tally.errors import InvalidReadError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tally.core.windows import WindowSpec, WindowUnit

MAX_SERIES_WINDOWS: Final = 10_000
"""The most windows one series read returns (a year of hours is 8,760)."""
DEFAULT_SERIES_WINDOWS: Final = 24
"""Without ``from``, a series covers this many windows up to ``to``."""


def check_key(key: str) -> str:
    """``key`` if a producer could have counted it; otherwise ``InvalidReadError`` saying why."""
    if not key:
        raise InvalidReadError("the key is empty")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidReadError("the key is not valid Unicode (a lone surrogate)") from exc
    if size > WIRE_LIMITS.max_key_bytes:
        raise InvalidReadError(f"the key is {size} bytes of UTF-8 (at most {WIRE_LIMITS.max_key_bytes})")
    if SHARD_SEPARATOR in key:
        raise InvalidReadError("keys may not contain U+001F (it separates shard numbers)")
    return key


def window_unit(name: str, counted: WindowSpec | None = None) -> WindowUnit:
    """The window ``name`` (minute, hour, day, month); with ``counted``, only one the deployment counts."""
    if name not in UNITS:
        raise InvalidReadError(f"unknown window {name!r}: choose from {', '.join(UNITS)}")
    if counted is not None:
        names = [unit.name for unit in counted.units]
        if name not in names:
            raise InvalidReadError(f"window {name!r} is not counted here (counted: {', '.join(names) or 'none'})")
        return counted.unit(name)
    return unit_named(name)  # retention only matters to writes


def parse_time_ms(text: str) -> int:
    """Epoch milliseconds, or ISO 8601 with a UTC offset or Z (the rules of an event's ``ts``)."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        ms = int(text)
    else:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError as exc:
            raise InvalidReadError(f"{text!r} is neither epoch milliseconds nor ISO 8601") from exc
        if moment.tzinfo is None:
            raise InvalidReadError(f"{text!r} needs a UTC offset or Z")
        ms = int(moment.replace(microsecond=0).timestamp()) * 1000 + moment.microsecond // 1000
    if not 0 <= ms <= MAX_TS_MS:
        raise InvalidReadError(f"{text!r} is outside 1970-01-01 to 9999-12-31")
    return ms


def series_starts(unit: WindowUnit, from_ms: int, to_ms: int, max_windows: int = MAX_SERIES_WINDOWS) -> Sequence[int]:
    """The start of every window from the one holding ``from_ms`` to the one holding ``to_ms``."""
    for ms in (from_ms, to_ms):
        if not 0 <= ms <= MAX_TS_MS:
            raise InvalidReadError(f"{ms} is outside 1970-01-01 to 9999-12-31 (epoch milliseconds)")
    count = unit.count(from_ms, to_ms)
    if count == 0:
        raise InvalidReadError("from is after to")
    if count > max_windows:
        raise InvalidReadError(f"{count} {unit.name} windows asked for (at most {max_windows} per read)")
    return unit.starts(from_ms, to_ms)


def default_bounds(unit: WindowUnit, from_ms: int | None, to_ms: int | None, now_ms: int) -> tuple[int, int]:
    """``to`` defaults to now, ``from`` to ``DEFAULT_SERIES_WINDOWS`` windows ending at ``to``."""
    end = now_ms if to_ms is None else to_ms
    start = max(0, unit.shifted(unit.start_ms(end), 1 - DEFAULT_SERIES_WINDOWS)) if from_ms is None else from_ms
    return start, end
