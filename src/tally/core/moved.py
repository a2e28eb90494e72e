"""What a key's item says about the parts of its ended windows already moved off it: a pointer per window unit.

A write of a late event for an ended window with a declared level needs that window's moved part ``w``
(``tally.core.thresholds``: the window's value is the key item's attribute ``k`` plus ``w``). Reading the
window item for it costs a second read per key and attempt; instead the mover keeps, on the key's item, per
window unit with levels for that key, a **pointer** to the newest window of the unit it has moved, with the
total moved so far for each counter with levels (``MovedPointer``), and rewrites it in the move's own
transaction, conditioned on the key item's count of moves (``moves``) being what it read. The write then
reads the key's item alone (one strongly consistent read: ``moves``, the pointer and ``k`` in one snapshot):

- a window newer than the pointer's was never moved: ``w`` = 0 (also a window in its last minute);
- the pointer's own window: ``w`` = the pointer's total for the counter;
- an older one, or a pointer the write cannot trust: ``moved_part`` says None, and the window item is read.

The pointer is trusted only while every move of the key item kept it: each move that keeps it records the
count of moves it leaves (``MovedPointer.kept_at``), so a move by anything that does not keep it (a mover
under another threshold configuration, an older version of tally, ``tally windows close`` without the
thresholds) leaves the count ahead and the pointer untrusted until the next move that keeps it starts it
again (``next_pointer``: from the newest window any clock may have moved, totals unknown). A window id of one
unit sorts in time, so "newer" is a comparison of ids.

Any snapshot's ``(moves, w)`` stays true for as long as the item's count of moves is that ``moves`` (only a
move changes a moved part, and every move adds 1 to it): a write conditioned on ``moves`` may use the ``w`` of
any snapshot it has, the read before its first attempt or a refused attempt's ``ALL_OLD``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from tally.core.items import CounterItem, window_counter
from tally.core.numbers import EXACT
from tally.core.thresholds import MOVE_CLOCK_MARGIN_MS
from tally.core.windows import hours_on_day_items, parse_window_id

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.core.windows import WindowSpec, WindowUnit


@dataclass(frozen=True, slots=True)
class MovedPointer:
    """One window unit's pointer on a key's item, as read with the item's count of moves."""

    window: str | None = None
    """The newest window of the unit moved while the pointer was kept (None: none)."""
    totals: Mapping[str, Decimal] = field(default_factory=dict)
    """Counter -> the total moved so far off the key item for ``window``; a counter it does not name: unknown."""
    kept_at: Decimal | None = None
    """The key item's count of moves right after the last move that kept this pointer (None: never kept)."""

    def trusted(self, moves: Decimal | None) -> bool:
        """Whether every move of the item kept this pointer: the count of moves is the one its last keeper
        left (an item never moved, with no pointer, trivially)."""
        return (self.kept_at or Decimal(0)) == (moves or Decimal(0))


def moved_part(pointer: MovedPointer, moves: Decimal | None, window: str, counter: str) -> Decimal | None:
    """The part of ``window``'s ``counter`` moved off the key item, as the pointer read with ``moves`` says;
    None when it cannot say (an older window, a counter it does not keep, a pointer not kept by every move):
    the window item must be read."""
    if not pointer.trusted(moves):
        return None
    if pointer.window is None or window > pointer.window:
        return Decimal(0)
    if window == pointer.window:
        return pointer.totals.get(counter)
    return None


def moved_home(key: str, window: str, counter: str, windows: WindowSpec) -> tuple[CounterItem, str]:
    """Where a move puts an ended window's counter of ``key``: (window item, the counter's name there, as a batch's
    totals name it). An hour goes to its day's item, as that hour's window counter, when ``hours_on_day_items``,
    else to an item of its own, as a day or a month does; the same choice as the mover's
    (``tally.store.windows.plan_move``): a write that needs a window's moved part reads it there."""
    unit, start_ms = parse_window_id(window)
    if unit == "hour" and hours_on_day_items(windows):
        day = windows.unit("day")
        return CounterItem(key, day.window_id(day.start_ms(start_ms))), window_counter(window, counter)
    return CounterItem(key, window), counter


def anchor_window(unit: WindowUnit, now_ms: int) -> str:
    """The newest window of ``unit`` that any container's clock may have ended (and so moved) by ``now_ms``:
    the one before the window holding ``now_ms + MOVE_CLOCK_MARGIN_MS``."""
    holding = unit.start_ms(now_ms + MOVE_CLOCK_MARGIN_MS)
    return unit.window_id(unit.start_ms(holding - 1))


def next_pointer(
    pointer: MovedPointer,
    moves: Decimal | None,
    moved: Mapping[str, Mapping[str, Decimal]],
    counters: Iterable[str],
    anchor: str,
) -> MovedPointer:
    """The pointer a move leaves, planned from ``pointer`` read with ``moves`` (the move is conditioned on the
    count still being ``moves``, and adds 1 to it).

    ``moved``: the windows of the unit this move takes off the key item -> counter -> value; ``counters``: the
    counters with levels the pointer keeps totals of; ``anchor``: ``anchor_window`` at the mover's clock, where
    a pointer that was not trusted starts again (every window after it was never moved, by any clock; its own
    and older ones are unknown).
    """
    kept = (moves or Decimal(0)) + 1
    names = tuple(counters)
    if not pointer.trusted(moves):
        newest = max([anchor, *moved])
        return MovedPointer(newest, {}, kept)
    if not moved:
        return MovedPointer(pointer.window, {n: v for n, v in pointer.totals.items() if n in names}, kept)
    newest = max(moved)
    if pointer.window is None or newest > pointer.window:  # never moved before: this move's part is all of it
        return MovedPointer(newest, {name: moved[newest].get(name, Decimal(0)) for name in names}, kept)
    if newest == pointer.window:
        totals = {
            name: EXACT.add(total, moved[newest].get(name, Decimal(0)))
            for name, total in pointer.totals.items()
            if name in names
        }
        return MovedPointer(pointer.window, totals, kept)
    return MovedPointer(pointer.window, {n: v for n, v in pointer.totals.items() if n in names}, kept)
