"""Thresholds: levels whose crossing is announced, once per crossing, declared per deployment.

The ``CounterThresholds`` template parameter (``TALLY_COUNTER_THRESHOLDS``) declares, per key pattern and
counter, **rising** levels (``>=``: announced when the value comes to be at or above the level) and
**falling** levels (``<=``: announced when it comes to be at or below)::

    usage:*#calls>=800,1000;stock:*#stock<=10

Rules are separated by ``;``: ``PATTERN#COUNTER>=L1,L2,...`` or ``PATTERN#COUNTER<=L1,...``, the pattern as in
``CounterBounds`` (an exact key, or a prefix ending in ``*``). For each (key, counter) and direction the first
matching rule wins.

What a crossing is, decided here once (docs/explanation/notifications.md):

- A threshold applies to a key's all-time value, as a bound does, or, declared ``COUNTER@hour`` (``@day``,
  ``@month``, ``@minute``), to the key's value in each such window: ``usage:*#calls@day>=800`` is announced once
  per day.
  One on a hot key is refused (its shards cannot see each other's sum), one on a window not counted too.
- A window's value starts from 0 (no start value) and is, for hour, day and month, an attribute of the key's item
  while the window is open (``tally.core.items.window_counter``): its write carries the condition there, as an
  all-time counter's does. Once the window has ended, a move may have taken part of it onto a window item, and
  a late event then adds to what is left on the key's item: the value is the sum of both. Such a write reads
  the moved part first (``window_reads``; the store also conditions the write on no move since) and shifts
  its conditions by it (``parts``).
- Messages are the steps, as for bounds: a message's net delta on the counter moves the stored value from
  ``v`` to ``v + d``. A rising level ``L`` is crossed by that step when ``v < L <= v + d``; a falling level when
  ``v > L >= v + d``. A value that goes back and crosses again is crossed again, by another message. An
  operator's correction is such a step; a reset to ``r`` is the step from ``v`` to ``r`` (``reset_counters``:
  its write is always planned from the value read, since which side ``v`` lies on is all that decides it).
- So a crossing is named by (key, counter, level, direction, message id): every message is applied exactly
  once (its marker is written in the same transaction), so that name is deterministic whatever the retries,
  and ``notification_id`` digests it into the notification's id.
- A write holding many messages' steps must know the value before it to find its crossings. It does not read
  it: the write carries, per level, the condition that none of its steps' running sums crosses it
  (``crossing_free``: ``stored < L - M OR stored >= L - m`` for a rising level, ``m``/``M`` the lowest and
  highest running sums including 0). Far from every level, that holds, and the write costs nothing more. When
  it fails, DynamoDB returns the item as it was (``ALL_OLD``): the write is sent again conditioned on exactly
  that value (``exact_checks``), carrying one notification per crossing its steps make from there
  (``crossings``). If another writer moved the value meanwhile, that condition fails in turn and the write is
  planned again from the new value (a bounded number of times).

Plain data for the core: parsed at the edge (``tally.config``), never read from the environment here.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from hashlib import blake2b
from typing import TYPE_CHECKING, TypeAlias

from tally.core.defaults import NO_DEFAULTS, CounterDefaults, parse_number
from tally.core.items import ALL_TIME, item_parts, split_window_counter
from tally.core.numbers import Number, add, canonical, storable_at_least, storable_at_most
from tally.core.patterns import KeyPattern
from tally.core.views import NO_VIEWS
from tally.core.windows import MINUTE_MS, UNITS, WindowSpec, parse_window_id, unit_named

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.core.aggregate import MessageTotals, Totals
    from tally.core.items import ItemKey
    from tally.core.sharding import HotKeys
    from tally.core.views import CounterViews


class Direction(StrEnum):
    """Which way a level is crossed to be announced."""

    RISING = "rising"
    """From below the level to at or above it (``>=`` in the declaration)."""
    FALLING = "falling"
    """From above the level to at or below it (``<=``)."""


@dataclass(frozen=True, slots=True)
class ThresholdRule:
    """One declaration: levels of the counter ``counter`` of keys matching ``pattern``, crossed one way."""

    pattern: KeyPattern
    counter: str
    direction: Direction
    levels: tuple[Number, ...]
    window: str = ALL_TIME
    """The window unit whose value the levels are about (``minute``, ``hour``, ``day``, ``month``), or ``all``."""


@dataclass(frozen=True, slots=True)
class Levels:
    """The levels of one counter of one key: those announced rising and those announced falling."""

    rising: tuple[Number, ...] = ()
    falling: tuple[Number, ...] = ()

    def each(self) -> Iterable[tuple[Number, Direction]]:
        yield from ((level, Direction.RISING) for level in self.rising)
        yield from ((level, Direction.FALLING) for level in self.falling)


def crossed(level: Number, direction: Direction, before: Number, after: Number) -> bool:
    """Whether one step from ``before`` to ``after`` crosses ``level`` the way ``direction`` announces."""
    if direction is Direction.RISING:
        return before < level <= after
    return before > level >= after


@dataclass(frozen=True, slots=True)
class CrossingFree:
    """The condition one write carries for one level of one counter: none of its steps crosses the level.

    The stored value ``v`` must lie outside ``[low, high)`` (rising) or ``(low, high]`` (falling): every running
    sum then stays on one side of the level. ``if_missing``: whether a counter that does not exist yet (its
    start value, or 0) passes.

    ``low`` and ``high`` are the level minus a running sum as storable Numbers, rounded outward (no stored value
    compares with them otherwise than with the exact ends); None: that end lies beyond every Number, so its side
    never holds (``v >= high`` rising, ``v <= low`` falling) and is left out.
    """

    counter: str
    direction: Direction
    low: Number | None
    high: Number | None
    if_missing: bool


@dataclass(frozen=True, slots=True)
class ExactCheck:
    """The condition of a write planned from a known value: the counter holds exactly ``value``.

    ``if_missing``: a missing counter holds its start value, so it passes when ``value`` is that start."""

    counter: str
    value: Number
    if_missing: bool


@dataclass(frozen=True, slots=True)
class Crossing:
    """One crossing, as recorded in the transaction that commits the step that made it (the notification)."""

    notification_id: str
    key: str
    counter: str
    level: Number
    direction: Direction
    message_id: str
    value: Number
    """The counter's value after the write (the batch's transaction) that committed the crossing."""
    step_value: Number
    """The value right after the crossing message's own step."""
    at_ms: int
    """When the write that recorded it was made (the batch's clock, epoch ms)."""
    window: str = ALL_TIME
    """The window whose value crossed (``all``: the all-time value)."""


@dataclass(frozen=True, slots=True)
class CrossingPage:
    """A journal page of crossings to record: those that did not fit the transaction that committed their message
    (``tally.core.plan.Spill``). Applying it writes each one's notification, once."""

    crossings: tuple[Crossing, ...]


_UNIT_OF_PREFIX = {prefix: name for name, (prefix, _duration) in UNITS.items()}


def window_unit(window: str) -> str | None:
    """The unit name (``minute``, ``hour``, ``day``, ``month``) of a window id, ``all`` for the all-time value, None for
    an id this code cannot read."""
    if window == ALL_TIME:
        return ALL_TIME
    return _UNIT_OF_PREFIX.get(window.partition("#")[0])


def threshold_target(item: ItemKey, name: str) -> tuple[str, str, str] | None:
    """(key, counter, window id) whose value a totals counter ``name`` of ``item`` moves: an open window's
    counter on a key's item (``window_counter``) is that window's; a window item's counter its window's; a
    shard's none (its key's value is the sum of its shards)."""
    parts = item_parts(item)
    if parts.shard != 0:
        return None
    if parts.window != ALL_TIME:
        return parts.key, name, parts.window
    split = split_window_counter(name)
    if split is None:
        return parts.key, name, ALL_TIME
    window, counter = split
    return parts.key, counter, window


@dataclass(frozen=True, slots=True)
class CounterThresholds:
    """Every declared threshold (empty: no write carries a crossing condition)."""

    rules: tuple[ThresholdRule, ...] = ()

    def thresholds(self, key: str, window: str = ALL_TIME) -> dict[str, Levels]:
        """The levels of each thresholded counter of ``key``'s value in ``window``'s unit (``all``: all-time)."""
        found: dict[tuple[str, Direction], tuple[Number, ...]] = {}
        for rule in self.rules:
            if rule.window == window and rule.pattern.matches(key):
                found.setdefault((rule.counter, rule.direction), rule.levels)
        counters = {counter for counter, _ in found}
        return {
            name: Levels(found.get((name, Direction.RISING), ()), found.get((name, Direction.FALLING), ()))
            for name in counters
        }

    def counter_levels(self, item: ItemKey, name: str) -> Levels | None:
        """The levels of the value the totals counter ``name`` of ``item`` moves (``threshold_target``); None:
        no level, the write carries no crossing condition for it."""
        if not self.rules:
            return None
        target = threshold_target(item, name)
        if target is None:
            return None
        key, counter, window = target
        unit = window_unit(window)
        if unit is None:
            return None
        rising: tuple[Number, ...] | None = None
        falling: tuple[Number, ...] | None = None
        for rule in self.rules:
            if rule.counter != counter or rule.window != unit or not rule.pattern.matches(key):
                continue
            if rule.direction is Direction.RISING and rising is None:
                rising = rule.levels
            elif rule.direction is Direction.FALLING and falling is None:
                falling = rule.levels
        if rising is None and falling is None:
            return None
        return Levels(rising or (), falling or ())

    def item_thresholds(self, item: ItemKey) -> dict[str, Levels]:
        """The all-time levels of an item: a key's all-time item has its key's, a window or a shard item none
        (a window's levels are looked up per counter: ``counter_levels``)."""
        if not self.rules:
            return {}
        parts = item_parts(item)
        if parts.window != ALL_TIME or parts.shard != 0:
            return {}
        return self.thresholds(parts.key)

    def is_thresholded(self, item: ItemKey) -> bool:
        """Whether writes to ``item`` may carry a crossing condition (the planner keeps them off the journal):
        a key's item for its all-time, hour, day and month rules (those windows are open on it), a minute item
        for its minute rules."""
        if not self.rules:
            return False
        parts = item_parts(item)
        if parts.shard != 0:
            return False
        units = (
            {ALL_TIME} | {name for name in UNITS if unit_named(name).on_key_item}
            if parts.window == ALL_TIME
            else {window_unit(parts.window)}
        )
        return any(rule.window in units and rule.pattern.matches(parts.key) for rule in self.rules)

    def touches(self, totals: Totals) -> bool:
        """Whether a message's totals step a thresholded counter (only then does it need the exact path)."""
        return any(
            self.counter_levels(item, name) is not None for item, counters in totals.items() for name in counters
        )


NO_THRESHOLDS = CounterThresholds()


MAX_THRESHOLD_LEVELS = 10
"""Distinct (counter, direction, level) a deployment may declare. A write's condition holds each level of its
item (about 60 bytes and 5 operators) beside its bounds (``MAX_BOUNDED_COUNTERS``: up to 240 operators): ten
keep it within DynamoDB's 4 KB and 300 operators per expression (``tests/unit/test_thresholds.py`` builds the
worst case)."""


def _negate(value: Number) -> Number:
    return -value if isinstance(value, int) else value.copy_negate()  # exact: no context rounding


MOVE_CLOCK_MARGIN_MS = MINUTE_MS
"""How long before a thresholded window's end a write already reads its moved part (``window_reads``): a
window is moved off the key's item once it has ended by the mover's clock, and another container's clock may
run ahead of this one's (Lambda's clocks are synchronised far closer than this)."""

Parts: TypeAlias = "Mapping[ItemKey, Mapping[str, Number]]"
"""Key item -> totals counter name -> the part of an ended window's value that a move took off the key's
item onto a window item (``window_reads``); a counter it does not name has no such part."""


def _start(item: ItemKey, name: str, defaults: CounterDefaults) -> Number:
    """What a counter holds before its first increment: its declared start value on a key's all-time item
    (``tally.core.defaults``); a window counts from zero."""
    parts = item_parts(item)
    if parts.window != ALL_TIME or parts.shard != 0 or split_window_counter(name) is not None:
        return 0
    return defaults.starts(parts.key).get(name, 0)


def _ranges(steps: Iterable[Totals], thresholds: CounterThresholds) -> dict[tuple[ItemKey, str], tuple[Number, Number]]:
    """Per thresholded (item, counter) the steps move: the lowest and highest running sums (each including 0)."""
    running: dict[tuple[ItemKey, str], Number] = {}
    ranges: dict[tuple[ItemKey, str], tuple[Number, Number]] = {}
    for totals in steps:
        for item, counters in totals.items():
            for name, amount in counters.items():
                if not amount or thresholds.counter_levels(item, name) is None:
                    continue
                slot = (item, name)
                total = running[slot] = add(running.get(slot, 0), amount)
                low, high = ranges.get(slot, (0, 0))
                ranges[slot] = (min(low, total), max(high, total))
    return ranges


def _moved(parts: Parts | None, item: ItemKey, name: str) -> Number:
    if not parts:
        return 0
    return parts.get(item, {}).get(name, 0)


def crossing_free(
    steps: Iterable[Totals],
    thresholds: CounterThresholds,
    defaults: CounterDefaults = NO_DEFAULTS,
    *,
    parts: Parts | None = None,
) -> dict[ItemKey, tuple[CrossingFree, ...]]:
    """The conditions one write of the net of ``steps`` (messages' totals, in their order) carries so that it
    commits only if none of its steps crosses a declared level; an item it moves no thresholded counter of is
    left out.

    All running sums on one side of a level is what the condition asks, so a write whose steps cross a rising
    level downwards only (never announced) fails it too: it then takes the exact path, which finds no crossing.

    ``parts``: the moved part ``w`` of an ended window (``window_reads``). The window's value is the key item's
    attribute ``k`` plus ``w``, so the condition on ``k`` is the window's shifted by ``w``; the write must then
    also be conditioned on no move having happened since ``w`` was read (the store's part).
    """
    if not thresholds.rules:
        return {}
    checks: dict[ItemKey, list[CrossingFree]] = {}
    for (item, name), (lowest, highest) in _ranges(steps, thresholds).items():
        levels = thresholds.counter_levels(item, name)
        assert levels is not None  # _ranges keeps only thresholded counters
        moved = _moved(parts, item, name)
        missing = _start(item, name, defaults)  # what the attribute holds while it does not exist
        for level, direction in levels.each():
            low, high = add(level, _negate(add(highest, moved))), add(level, _negate(add(lowest, moved)))
            # rising: v + highest < L or v + lowest >= L; falling: v + lowest > L or v + highest <= L
            # (v = k + moved: the bounds on k are shifted by the moved part)
            rising = direction is Direction.RISING
            passes = (missing < low or missing >= high) if rising else (missing <= low or missing > high)
            # The ends as storable numbers (for any stored v: v < c iff v < storable_at_least(c), v <= c iff
            # v <= storable_at_most(c)); an end beyond every Number makes its side always true (then no condition
            # is needed) or never true (None: the side is left out).
            below = storable_at_least(low) if rising else storable_at_most(low)
            above = storable_at_least(high) if rising else storable_at_most(high)
            if (below if rising else above) is None:
                continue
            checks.setdefault(item, []).append(CrossingFree(name, direction, below, above, passes))
    return {item: tuple(found) for item, found in checks.items()}


def stepped_counters(steps: Iterable[Totals], thresholds: CounterThresholds) -> dict[ItemKey, tuple[str, ...]]:
    """The thresholded counters each item's steps move (those an exact write must condition on)."""
    found: dict[ItemKey, list[str]] = {}
    for item, name in _ranges(steps, thresholds):
        found.setdefault(item, []).append(name)
    return {item: tuple(names) for item, names in found.items()}


def reset_counters(messages: Iterable[MessageTotals], thresholds: CounterThresholds) -> dict[ItemKey, tuple[str, ...]]:
    """The thresholded counters the messages' resets set (``MessageTotals.sets``), per item.

    A reset moves the value from whatever it was to the reset's value: whether that crosses a level depends
    on the value before, which no condition on running sums can bound (``crossing_free``), so a write of such a
    reset is always planned from the value read (``exact_checks``, ``crossings``)."""
    found: dict[ItemKey, list[str]] = {}
    for message in messages:
        for item, counters in message.sets.items():
            names = found.setdefault(item, [])
            names.extend(
                name for name in counters if name not in names and thresholds.counter_levels(item, name) is not None
            )
    return {item: tuple(names) for item, names in found.items() if names}


def exact_checks(
    steps: Iterable[Totals],
    thresholds: CounterThresholds,
    before: Mapping[ItemKey, Mapping[str, Number]],
    defaults: CounterDefaults = NO_DEFAULTS,
    *,
    parts: Parts | None = None,
    resets: Mapping[ItemKey, Iterable[str]] | None = None,
) -> dict[ItemKey, tuple[ExactCheck, ...]]:
    """The conditions of a write planned from the values ``before`` (item -> counter -> value, a missing
    counter as its start value or 0): each thresholded counter it moves, or a reset of it sets (``resets``:
    ``reset_counters``), holds exactly what was read. Items ``before`` does not know are left out (they keep
    their ``crossing_free`` conditions).

    An ended window's value in ``before`` is the whole window's: its key item's attribute must then hold it
    minus the part moved onto the window item (``parts``)."""
    counters = {item: list(names) for item, names in stepped_counters(steps, thresholds).items()}
    for item, names in (resets or {}).items():
        held = counters.setdefault(item, [])
        held.extend(name for name in names if name not in held)
    checks: dict[ItemKey, list[ExactCheck]] = {}
    for item, names in counters.items():
        known = before.get(item)
        if known is None:
            continue
        for name in names:
            start = _start(item, name, defaults)
            value = add(known.get(name, start), _negate(_moved(parts, item, name)))
            checks.setdefault(item, []).append(ExactCheck(name, value, value == start))
    return {item: tuple(found) for item, found in checks.items()}


def window_reads(steps: Iterable[Totals], thresholds: CounterThresholds, now_ms: int) -> dict[ItemKey, tuple[str, ...]]:
    """Per key item, the thresholded window counters (``window_counter`` names) whose window has ended by
    ``now_ms`` (or ends within ``MOVE_CLOCK_MARGIN_MS``): part of such a window's value may already have been
    moved onto its window item, so a write must read that part and condition on it staying put. A window still
    open is on the key's item alone (a move takes only ended windows)."""
    found: dict[ItemKey, list[str]] = {}
    for item, name in _ranges(steps, thresholds):
        if item_parts(item).window != ALL_TIME:
            continue  # a minute window is an item of its own from the start: nothing is ever moved onto it
        split = split_window_counter(name)
        if split is None:
            continue
        try:
            unit, start_ms = parse_window_id(split[0])
        except ValueError:
            continue
        if unit_named(unit).end_ms(start_ms) <= now_ms + MOVE_CLOCK_MARGIN_MS:
            found.setdefault(item, []).append(name)
    return {item: tuple(names) for item, names in found.items()}


def crossings(
    messages: Iterable[MessageTotals],
    thresholds: CounterThresholds,
    before: Mapping[ItemKey, Mapping[str, Number]],
    defaults: CounterDefaults = NO_DEFAULTS,
    *,
    at_ms: int,
) -> list[Crossing]:
    """Every crossing the messages' steps make, in their order, from the values ``before`` (item ->
    counter -> value; an item it does not hold is not looked at: its write is crossing-free). A window's value
    in ``before`` is the whole window's (its moved part included). A reset's step goes from the value before it
    to the reset's value (``MessageTotals.sets``): a crossing like any other, named by the reset's id."""
    ordered = list(messages)
    values: dict[tuple[ItemKey, str], Number] = {}
    found: list[tuple[tuple[ItemKey, str], str, str, str, Number, Direction, str, Number]] = []
    for message in ordered:
        for item, counters, setting in [
            *((item, counters, True) for item, counters in message.sets.items()),
            *((item, counters, False) for item, counters in message.totals.items()),
        ]:
            known = before.get(item)
            if known is None:
                continue
            for name, amount in counters.items():
                if not amount and not setting:
                    continue
                levels = thresholds.counter_levels(item, name)
                target = threshold_target(item, name)
                if levels is None or target is None:
                    continue
                key, counter, window = target
                slot = (item, name)
                value = values.get(slot, known.get(name, _start(item, name, defaults)))
                after = values[slot] = amount if setting else add(value, amount)
                found.extend(
                    (slot, key, counter, window, level, direction, message.message_id, after)
                    for level, direction in levels.each()
                    if crossed(level, direction, value, after)
                )
    return [
        Crossing(
            notification_id(key, counter, level, direction, message_id, window=window),
            key,
            counter,
            level,
            direction,
            message_id,
            values[slot],
            step_value,
            at_ms,
            window,
        )
        for slot, key, counter, window, level, direction, message_id, step_value in found
    ]


def notification_id(
    key: str, counter: str, level: Number, direction: Direction, message_id: str, *, window: str = ALL_TIME
) -> str:
    """The deterministic id of a crossing: BLAKE2b (16 bytes, hex) of its name, fields length-prefixed so that
    no two names run together. The level in plain digits (``8E+2``, ``800.0`` and ``800`` are one level); the
    window id (``all``, ``d#2026-11-26``...), so the same level crossed again next period is a new crossing."""
    digest = blake2b(digest_size=16, person=b"tally-notify-v1")
    for part in (key, counter, format(Decimal(canonical(level)), "f"), str(direction), window, message_id):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(4, "big") + data)
    return digest.hexdigest()


def _target_and_window(target: str) -> tuple[str, str]:
    """``PATTERN#COUNTER@UNIT`` -> (``PATTERN#COUNTER``, unit). Counter names may hold ``@``: only a last ``@``
    followed by a window unit or ``all`` is a suffix (``k#x@day@all``: the all-time value of ``x@day``)."""
    head, at, unit = target.rpartition("@")
    if not at or (unit not in UNITS and unit != ALL_TIME) or "#" not in head:
        return target, ALL_TIME
    return head, unit


def parse_counter_thresholds(
    text: str,
    hot_keys: HotKeys | None = None,
    *,
    windows: WindowSpec | None = None,
    views: CounterViews = NO_VIEWS,
) -> CounterThresholds:
    """``"usage:*#calls@day>=800,1000;stock:*#stock<=10"`` -> ``CounterThresholds`` (a view pattern,
    ``tally.core.views``, names a view's items: ``api[customer]#calls@month>=800``).

    A counter may end in ``@minute``, ``@hour``, ``@day`` or ``@month``: the levels are then about its value in each
    such window of the key (announced once per window), which ``windows`` (``TALLY_WINDOWS``) must count.

    Raises ``ValueError`` naming the rule for anything malformed, for a threshold on a key that ``hot_keys``
    shards, for a window not counted, and for more than ``MAX_THRESHOLD_LEVELS`` levels in all.
    """
    counted = {unit.name for unit in (windows or WindowSpec()).units}
    rules: list[ThresholdRule] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        operator = ">=" if ">=" in part else "<=" if "<=" in part else None
        target, _, numbers = part.rpartition(operator) if operator else ("", "", "")
        target, window = _target_and_window(target)
        spelled, hash_, counter = target.rpartition("#")
        if operator is None or not hash_ or not spelled or not counter or len(counter.encode("utf-8")) > 255:
            raise ValueError(
                f"bad counter threshold {part!r}: expected PATTERN#COUNTER>=L1,L2,... or PATTERN#COUNTER<=L1,... "
                "(COUNTER@hour, @day, @month or @minute: per window)"
            )
        pattern = views.pattern(spelled)
        if window != ALL_TIME and window not in counted:
            raise ValueError(f"counter threshold {part!r} needs the {window} window counted (TALLY_WINDOWS)")
        levels = tuple(parse_number(number.strip(), f"counter threshold {part!r}") for number in numbers.split(","))
        if len(set(levels)) != len(levels):
            raise ValueError(f"counter threshold {part!r}: a level is given twice")
        if hot_keys is not None and hot_keys.overlaps(KeyPattern(pattern)):
            raise ValueError(
                f"counter threshold {part!r}: a threshold on a hot key (HotKeys) is not supported: "
                "its shards cannot see each other's sum"
            )
        direction = Direction.RISING if operator == ">=" else Direction.FALLING
        rules.append(ThresholdRule(KeyPattern(pattern), counter, direction, tuple(sorted(levels)), window))
    declared = {(rule.counter, rule.direction, level, rule.window) for rule in rules for level in rule.levels}
    if len(declared) > MAX_THRESHOLD_LEVELS:
        raise ValueError(
            f"counter thresholds: at most {MAX_THRESHOLD_LEVELS} levels in all (one write's condition checks "
            "each, within DynamoDB's 4 KB and 300 operators per expression)"
        )
    return CounterThresholds(tuple(rules))
