"""Thresholds: levels whose crossing is announced, once per crossing, declared per deployment.

The ``CounterThresholds`` template parameter (``TALLY_COUNTER_THRESHOLDS``) declares, per key pattern and
counter, **rising** levels (``>=``: announced when the value comes to be at or above the level) and
**falling** levels (``<=``: announced when it comes to be at or below)::

    usage:*#calls>=800,1000;stock:*#stock<=10

Rules are separated by ``;``: ``PATTERN#COUNTER>=L1,L2,...`` or ``PATTERN#COUNTER<=L1,...``, the pattern as in
``CounterBounds`` (an exact key, or a prefix ending in ``*``). For each (key, counter) and direction the first
matching rule wins.

What a crossing is, decided here once (docs/explanation/notifications.md):

- A threshold applies to a key's all-time value, as a bound does; one on a hot key is refused (its shards
  cannot see each other's sum).
- Messages are the steps, as for bounds: a message's net delta on the counter moves the stored value from
  ``v`` to ``v + d``. A rising level ``L`` is crossed by that step when ``v < L <= v + d``; a falling level when
  ``v > L >= v + d``. A value that goes back and crosses again is crossed again, by another message.
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
from typing import TYPE_CHECKING

from tally.core.bounds import CounterBounds, patterns_overlap
from tally.core.defaults import NO_DEFAULTS, CounterDefaults, parse_number
from tally.core.items import ALL_TIME, item_label, item_parts
from tally.core.numbers import Number, add, canonical

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from tally.core.aggregate import MessageTotals, Totals
    from tally.core.items import ItemKey
    from tally.core.sharding import HotKeys


class Direction(StrEnum):
    """Which way a level is crossed to be announced."""

    RISING = "rising"
    """From below the level to at or above it (``>=`` in the declaration)."""
    FALLING = "falling"
    """From above the level to at or below it (``<=``)."""


@dataclass(frozen=True, slots=True)
class ThresholdRule:
    """One declaration: levels of the counter ``counter`` of keys matching ``pattern``, crossed one way."""

    pattern: str
    counter: str
    direction: Direction
    levels: tuple[Number, ...]

    def matches(self, key: str) -> bool:
        return self.pattern == key or (self.pattern.endswith("*") and key.startswith(self.pattern[:-1]))


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
    """

    counter: str
    direction: Direction
    low: Number
    high: Number
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
class CounterThresholds:
    """Every declared threshold (empty: no write carries a crossing condition)."""

    rules: tuple[ThresholdRule, ...] = ()

    def thresholds(self, key: str) -> dict[str, Levels]:
        """The levels of each thresholded counter of ``key``."""
        found: dict[tuple[str, Direction], tuple[Number, ...]] = {}
        for rule in self.rules:
            if rule.matches(key):
                found.setdefault((rule.counter, rule.direction), rule.levels)
        counters = {counter for counter, _ in found}
        return {
            name: Levels(found.get((name, Direction.RISING), ()), found.get((name, Direction.FALLING), ()))
            for name in counters
        }

    def item_thresholds(self, item: ItemKey) -> dict[str, Levels]:
        """The levels of an item: a key's all-time item has its key's, a window or a shard item none."""
        if not self.rules:
            return {}
        parts = item_parts(item)
        if parts.window != ALL_TIME or parts.shard != 0:
            return {}
        return self.thresholds(parts.key)

    def is_thresholded(self, item: ItemKey) -> bool:
        """Whether writes to ``item`` carry a crossing condition (the planner keeps them off the journal)."""
        return bool(self.item_thresholds(item))

    def touches(self, totals: Totals) -> bool:
        """Whether a message's totals step a thresholded counter (only then does it need the exact path)."""
        for item, counters in totals.items():
            levels = self.item_thresholds(item)
            if any(name in levels for name in counters):
                return True
        return False


NO_THRESHOLDS = CounterThresholds()


def conditioned(bounds: CounterBounds, thresholds: CounterThresholds) -> Callable[[ItemKey], bool] | None:
    """The items whose writes carry a condition only a direct transaction can (a bound, a crossing): the planner
    pins the messages that touch one to direct transactions (``tally.core.plan.plan_batch``). None: no item."""
    if not bounds.rules and not thresholds.rules:
        return None

    def pinned(item: ItemKey) -> bool:
        return bounds.is_bounded(item) or thresholds.is_thresholded(item)

    return pinned


MAX_THRESHOLD_LEVELS = 10
"""Distinct (counter, direction, level) a deployment may declare. A write's condition holds each level of its
item (about 60 bytes and 5 operators) beside its bounds (``MAX_BOUNDED_COUNTERS``: up to 240 operators): ten
keep it within DynamoDB's 4 KB and 300 operators per expression (``tests/unit/test_thresholds.py`` builds the
worst case)."""


def _negate(value: Number) -> Number:
    return -value if isinstance(value, int) else value.copy_negate()  # exact: no context rounding


def _ranges(steps: Iterable[Totals], thresholds: CounterThresholds) -> dict[tuple[ItemKey, str], tuple[Number, Number]]:
    """Per thresholded (item, counter) the steps move: the lowest and highest running sums (each including 0)."""
    running: dict[tuple[ItemKey, str], Number] = {}
    ranges: dict[tuple[ItemKey, str], tuple[Number, Number]] = {}
    levels_of: dict[ItemKey, dict[str, Levels]] = {}
    for totals in steps:
        for item, counters in totals.items():
            levels = levels_of.get(item)
            if levels is None:
                levels = levels_of[item] = thresholds.item_thresholds(item)
            for name, amount in counters.items():
                if name not in levels or not amount:
                    continue
                slot = (item, name)
                total = running[slot] = add(running.get(slot, 0), amount)
                low, high = ranges.get(slot, (0, 0))
                ranges[slot] = (min(low, total), max(high, total))
    return ranges


def crossing_free(
    steps: Iterable[Totals], thresholds: CounterThresholds, defaults: CounterDefaults = NO_DEFAULTS
) -> dict[ItemKey, tuple[CrossingFree, ...]]:
    """The conditions one write of the net of ``steps`` (messages' totals, in their order) carries so that it
    commits only if none of its steps crosses a declared level; an item it moves no thresholded counter of is
    left out.

    All running sums on one side of a level is what the condition asks, so a write whose steps cross a rising
    level downwards only (never announced) fails it too: it then takes the exact path, which finds no crossing.
    """
    if not thresholds.rules:
        return {}
    checks: dict[ItemKey, list[CrossingFree]] = {}
    for (item, name), (lowest, highest) in _ranges(steps, thresholds).items():
        levels = thresholds.item_thresholds(item)[name]
        start = defaults.starts(item_parts(item).key).get(name, 0)
        for level, direction in levels.each():
            low, high = add(level, _negate(highest)), add(level, _negate(lowest))
            # rising: v + highest < L or v + lowest >= L; falling: v + lowest > L or v + highest <= L
            rising = direction is Direction.RISING
            passes = (start < low or start >= high) if rising else (start <= low or start > high)
            checks.setdefault(item, []).append(CrossingFree(name, direction, low, high, passes))
    return {item: tuple(found) for item, found in checks.items()}


def stepped_counters(steps: Iterable[Totals], thresholds: CounterThresholds) -> dict[ItemKey, tuple[str, ...]]:
    """The thresholded counters each item's steps move (those an exact write must condition on)."""
    found: dict[ItemKey, list[str]] = {}
    for item, name in _ranges(steps, thresholds):
        found.setdefault(item, []).append(name)
    return {item: tuple(names) for item, names in found.items()}


def exact_checks(
    steps: Iterable[Totals],
    thresholds: CounterThresholds,
    before: Mapping[str, Mapping[str, Number]],
    defaults: CounterDefaults = NO_DEFAULTS,
) -> dict[ItemKey, tuple[ExactCheck, ...]]:
    """The conditions of a write planned from the values ``before`` (item label -> counter -> value, a missing
    counter as its start value or 0): each thresholded counter it moves holds exactly what was read. Items
    ``before`` does not know are left out (they keep their ``crossing_free`` conditions)."""
    checks: dict[ItemKey, list[ExactCheck]] = {}
    for item, names in stepped_counters(steps, thresholds).items():
        known = before.get(item_label(item))
        if known is None:
            continue
        starts = defaults.starts(item_parts(item).key)
        for name in names:
            value = known.get(name, starts.get(name, 0))
            checks.setdefault(item, []).append(ExactCheck(name, value, value == starts.get(name, 0)))
    return {item: tuple(found) for item, found in checks.items()}


def crossings(
    messages: Iterable[MessageTotals],
    thresholds: CounterThresholds,
    before: Mapping[str, Mapping[str, Number]],
    defaults: CounterDefaults = NO_DEFAULTS,
    *,
    at_ms: int,
) -> list[Crossing]:
    """Every crossing the messages' steps make, in their order, from the values ``before`` (item label ->
    counter -> value; an item it does not hold is not looked at: its write is crossing-free)."""
    ordered = list(messages)
    values: dict[tuple[str, str], Number] = {}
    found: list[tuple[str, str, Number, Direction, str, Number]] = []
    for message in ordered:
        for item, counters in message.totals.items():
            label = item_label(item)
            known = before.get(label)
            if known is None:
                continue
            levels = thresholds.item_thresholds(item)
            key = item_parts(item).key
            starts = defaults.starts(key)
            for name, amount in counters.items():
                if name not in levels or not amount:
                    continue
                slot = (label, name)
                value = values.get(slot, known.get(name, starts.get(name, 0)))
                after = values[slot] = add(value, amount)
                found.extend(
                    (key, name, level, direction, message.message_id, after)
                    for level, direction in levels[name].each()
                    if crossed(level, direction, value, after)
                )
    return [
        Crossing(
            notification_id(key, name, level, direction, message_id),
            key,
            name,
            level,
            direction,
            message_id,
            values[(key, name)],
            step_value,
            at_ms,
        )
        for key, name, level, direction, message_id, step_value in found
    ]


def notification_id(key: str, counter: str, level: Number, direction: Direction, message_id: str) -> str:
    """The deterministic id of a crossing: BLAKE2b (16 bytes, hex) of its name, fields length-prefixed so that
    no two names run together. The level in plain digits (``8E+2``, ``800.0`` and ``800`` are one level)."""
    digest = blake2b(digest_size=16, person=b"tally-notify-v1")
    for part in (key, counter, format(Decimal(canonical(level)), "f"), str(direction), ALL_TIME, message_id):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(4, "big") + data)
    return digest.hexdigest()


def parse_counter_thresholds(
    text: str, hot_keys: HotKeys | None = None, defaults: CounterDefaults = NO_DEFAULTS
) -> CounterThresholds:
    """``"usage:*#calls>=800,1000;stock:*#stock<=10"`` -> ``CounterThresholds``.

    Raises ``ValueError`` naming the rule for anything malformed, for a threshold on a key that ``hot_keys``
    shards, and for more than ``MAX_THRESHOLD_LEVELS`` levels in all.
    """
    del defaults  # a start value on either side of a level is fine: the first step from it may cross
    rules: list[ThresholdRule] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        operator = ">=" if ">=" in part else "<=" if "<=" in part else None
        target, _, numbers = part.rpartition(operator) if operator else ("", "", "")
        pattern, hash_, counter = target.rpartition("#")
        if operator is None or not hash_ or not pattern or not counter or len(counter.encode("utf-8")) > 255:
            raise ValueError(
                f"bad counter threshold {part!r}: expected PATTERN#COUNTER>=L1,L2,... or PATTERN#COUNTER<=L1,..."
            )
        levels = tuple(parse_number(number.strip(), f"counter threshold {part!r}") for number in numbers.split(","))
        if len(set(levels)) != len(levels):
            raise ValueError(f"counter threshold {part!r}: a level is given twice")
        if hot_keys is not None and any(patterns_overlap(pattern, hot) for hot, _ in hot_keys.rules):
            raise ValueError(
                f"counter threshold {part!r}: a threshold on a hot key (HotKeys) is not supported: "
                "its shards cannot see each other's sum"
            )
        direction = Direction.RISING if operator == ">=" else Direction.FALLING
        rules.append(ThresholdRule(pattern, counter, direction, tuple(sorted(levels))))
    declared = {(rule.counter, rule.direction, level) for rule in rules for level in rule.levels}
    if len(declared) > MAX_THRESHOLD_LEVELS:
        raise ValueError(
            f"counter thresholds: at most {MAX_THRESHOLD_LEVELS} levels in all (one write's condition checks "
            "each, within DynamoDB's 4 KB and 300 operators per expression)"
        )
    return CounterThresholds(tuple(rules))


def expected_crossings(
    start: Number, amounts: Iterable[tuple[str, Number]], levels: Levels
) -> list[tuple[Number, Direction, str]]:
    """Test helper (the chaos check, the properties): the crossings of one counter whose messages' net
    ``amounts`` (message id, amount) are applied one after another from ``start``: (level, direction, message
    id). Any batching of the same messages in the same order gives these."""
    value = start
    found: list[tuple[Number, Direction, str]] = []
    for message_id, amount in amounts:
        after = add(value, amount)
        found.extend(
            (level, direction, message_id)
            for level, direction in levels.each()
            if crossed(level, direction, value, after)
        )
        value = after
    return found
