"""Bounded counters: a floor and/or a ceiling per counter, declared per deployment.

The ``CounterBounds`` template parameter (``TALLY_COUNTER_BOUNDS``) declares, per key pattern and counter,
a **floor** (``>=``) or a **ceiling** (``<=``)::

    stock:*#stock>=0;quota:*#calls<=1000;seats:*#taken>=0;seats:*#taken<=50

Rules are separated by ``;``: ``PATTERN#COUNTER>=N`` or ``PATTERN#COUNTER<=N``, the pattern as in
``HotKeys`` and ``CounterDefaults`` (an exact key, or a prefix ending in ``*``). A counter may have both
(two rules); for each (key, counter) the first matching floor and the first matching ceiling win.

What a bound means, decided here once (docs/explanation/counter-patterns.md, "Bounded counters"):

- A bound applies to a key's all-time value (windows count what happened, not a level). A bound on a hot
  key is refused (its shards cannot see each other's sum), and so is a start value outside its bound.
- Messages are the steps: a message's net delta on the counter is one step, applied whole or refused
  whole. A step that **lowers** the counter must leave it ``>= floor``; a step that **raises** it must
  leave it ``<= ceiling``. A step in the other direction is never refused, so a restock always applies,
  even to a counter that was below its floor before the floor was declared.
- One write carries many messages' net delta; it must hold for every step of its messages, in their
  order (the source's). ``bound_checks`` turns the steps into one condition on the stored value per
  counter: ``stored >= floor - m``, where ``m`` is the lowest running sum reached by a lowering step, and
  ``stored <= ceiling - M`` likewise with the highest running sum reached by a raising step (each rounded
  outward to a storable number, which every stored value compares with as with the exact one). So when the
  net of a whole batch applies in one write, no prefix of the applied order crosses the bound.
- A counter that does not exist yet holds its start value (``CounterDefaults``) or 0: the condition
  accepts a missing counter exactly when the steps hold from there (``BoundCheck.if_missing``).

Plain data for the core: parsed at the edge (``tally.config``), never read from the environment here.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from tally.core.defaults import NO_DEFAULTS, CounterDefaults, parse_number
from tally.core.items import ALL_TIME, item_label, item_parts
from tally.core.model import RejectCode, Rejection
from tally.core.numbers import LARGEST_STORABLE, Number, add, storable_at_least, storable_at_most
from tally.core.patterns import WILDCARD, KeyPattern
from tally.core.views import NO_VIEWS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from tally.core.aggregate import MessageTotals, Totals
    from tally.core.items import ItemKey
    from tally.core.sharding import HotKeys
    from tally.core.views import CounterViews


@dataclass(frozen=True, slots=True)
class BoundRule:
    """One declaration: a floor or a ceiling of the counter ``counter`` of keys matching ``pattern``."""

    pattern: KeyPattern
    counter: str
    floor: Number | None = None
    ceiling: Number | None = None


@dataclass(frozen=True, slots=True)
class Bound:
    """The bounds of one counter of one key (either may be None, never both)."""

    floor: Number | None = None
    ceiling: Number | None = None

    def refusal(self, value: Number, amount: Number) -> RejectCode | None:
        """Whether one step of ``amount`` from ``value`` crosses the bound, and which way."""
        after = add(value, amount)
        if amount < 0 and self.floor is not None and after < self.floor:
            return RejectCode.BELOW_FLOOR
        if amount > 0 and self.ceiling is not None and after > self.ceiling:
            return RejectCode.ABOVE_CEILING
        return None


@dataclass(frozen=True, slots=True)
class BoundCheck:
    """The condition one write must carry for one bounded counter, so that every step of it holds.

    ``stored >= at_least`` (a floor to keep) and ``stored <= at_most`` (a ceiling); ``if_missing``: whether
    a counter that does not exist yet passes (its start value, or 0, satisfies every step).

    Both are storable Numbers, whatever the digits of the bound minus a running sum (``-0.125 + 123...456`` has
    39): that difference rounded outward to the nearest storable number (``tally.core.numbers.storable_at_least``,
    ``storable_at_most``), which no stored value can tell from it. Steps that would leave the bound from every
    storable value carry ``LARGEST_STORABLE`` and its negation, a condition no stored value meets.
    """

    counter: str
    at_least: Number | None
    at_most: Number | None
    if_missing: bool


@dataclass(frozen=True, slots=True)
class CounterBounds:
    """Every declared bound (empty: no counter is bounded, no write carries a condition)."""

    rules: tuple[BoundRule, ...] = ()

    def bounds(self, key: str) -> dict[str, Bound]:
        """The bounds of each bounded counter of ``key``."""
        floors: dict[str, Number] = {}
        ceilings: dict[str, Number] = {}
        for rule in self.rules:
            if rule.pattern.matches(key):
                if rule.floor is not None:
                    floors.setdefault(rule.counter, rule.floor)
                if rule.ceiling is not None:
                    ceilings.setdefault(rule.counter, rule.ceiling)
        return {name: Bound(floors.get(name), ceilings.get(name)) for name in floors.keys() | ceilings.keys()}

    def item_bounds(self, item: ItemKey) -> dict[str, Bound]:
        """The bounds of an item: a key's all-time item has its key's, a window or a shard has none."""
        if not self.rules:
            return {}
        parts = item_parts(item)
        if parts.window != ALL_TIME or parts.shard != 0:
            return {}
        return self.bounds(parts.key)

    def is_bounded(self, item: ItemKey) -> bool:
        """Whether writes to ``item`` carry a bound condition (the planner keeps such units off the journal)."""
        return bool(self.item_bounds(item))


NO_BOUNDS = CounterBounds()

MAX_BOUNDED_COUNTERS = 40
"""Distinct bounded counter names a deployment may declare. One write's condition checks each bounded counter
of its item: at most 72 bytes and 6 operators each, so 40 stay within DynamoDB's 4 KB per expression and its
300 operators (``tests/unit/test_bounds.py`` measures the built expression)."""


def _negate(value: Number) -> Number:
    return -value if isinstance(value, int) else value.copy_negate()  # exact: no context rounding


def bound_checks(
    steps: Iterable[Totals], bounds: CounterBounds, defaults: CounterDefaults = NO_DEFAULTS
) -> dict[ItemKey, tuple[BoundCheck, ...]]:
    """The conditions one write of the net of ``steps`` (messages' totals, in their order) must carry.

    Only counters moved toward a bound get a check; an item with none is left out. Exact arithmetic
    (``tally.core.numbers.add``) throughout.
    """
    if not bounds.rules:
        return {}
    running: dict[tuple[ItemKey, str], Number] = {}
    lowest: dict[tuple[ItemKey, str], Number] = {}  # the lowest running sum a lowering step reached
    highest: dict[tuple[ItemKey, str], Number] = {}  # the highest running sum a raising step reached
    bounds_of: dict[ItemKey, dict[str, Bound]] = {}
    for totals in steps:
        for item, counters in totals.items():
            item_bounds = bounds_of.get(item)
            if item_bounds is None:
                item_bounds = bounds_of[item] = bounds.item_bounds(item)
            for name, amount in counters.items():
                bound = item_bounds.get(name)
                if bound is None or not amount:
                    continue
                slot = (item, name)
                total = running[slot] = add(running.get(slot, 0), amount)
                if amount < 0 and bound.floor is not None and (slot not in lowest or total < lowest[slot]):
                    lowest[slot] = total
                if amount > 0 and bound.ceiling is not None and (slot not in highest or total > highest[slot]):
                    highest[slot] = total
    checks: dict[ItemKey, list[BoundCheck]] = {}
    for slot in running:
        if slot not in lowest and slot not in highest:
            continue
        item, name = slot
        bound = bounds_of[item][name]
        start = defaults.starts(item_parts(item).key).get(name, 0)
        at_least = at_most = None
        if_missing = True
        never = False
        if slot in lowest and bound.floor is not None:
            at_least = storable_at_least(add(bound.floor, _negate(lowest[slot])))
            never = at_least is None
            if_missing = add(start, lowest[slot]) >= bound.floor
        if slot in highest and bound.ceiling is not None:
            at_most = storable_at_most(add(bound.ceiling, _negate(highest[slot])))
            never = never or at_most is None
            if_missing = if_missing and add(start, highest[slot]) <= bound.ceiling
        if never:  # the steps leave the bound from every storable value: a condition no stored value meets
            at_least, at_most = LARGEST_STORABLE, LARGEST_STORABLE.copy_negate()
        checks.setdefault(item, []).append(BoundCheck(name, at_least, at_most, if_missing))
    return {item: tuple(found) for item, found in checks.items()}


def refusal(totals: Totals, stored: Mapping[ItemKey, Mapping[str, Decimal]], bounds: CounterBounds) -> Rejection | None:
    """Why one message is refused by its bounds, given the stored values its write met (``stored``: item
    -> counter -> value, a missing counter already read as its start value or 0); None if no step crosses.

    The detail names the counter, its value and the amount, so an operator can restock and redrive.
    """
    for item, counters in totals.items():
        item_bounds = bounds.item_bounds(item)
        values = stored.get(item, {})
        for name, amount in counters.items():
            bound = item_bounds.get(name)
            if bound is None:
                continue
            value = values.get(name, Decimal(0))
            code = bound.refusal(value, amount)
            if code is not None:
                limit = bound.floor if code is RejectCode.BELOW_FLOOR else bound.ceiling
                word = "floor" if code is RejectCode.BELOW_FLOOR else "ceiling"
                detail = f"{item_label(item)!r}/{name!r}: value {value}, amount {amount}, {word} {limit}"
                return Rejection(code, detail)
    return None


def bounds_hold(
    messages: Sequence[MessageTotals], stored: Mapping[ItemKey, Mapping[str, Decimal]], bounds: CounterBounds
) -> bool:
    """Whether the messages, applied one by one in order from the values ``stored`` (item -> counter ->
    value, as a refused condition met them), keep every bound: then a refused write was refused for another
    condition it carried (a threshold's crossing, ``tally.core.thresholds``), not for a bound."""
    if not bounds.rules:
        return True
    values: dict[ItemKey, dict[str, Decimal]] = {item: dict(counters) for item, counters in stored.items()}
    for message in messages:
        if refusal(message.totals, values, bounds) is not None:
            return False
        for item, counters in message.totals.items():
            if item in values:
                for name, amount in counters.items():
                    values[item][name] = Decimal(add(values[item].get(name, Decimal(0)), amount))
    return True


def runs_within_bounds(
    messages: Sequence[MessageTotals], stored: Mapping[ItemKey, Mapping[str, Decimal]], bounds: CounterBounds
) -> list[list[MessageTotals]]:
    """After a bound refused a transaction: its messages (in order) cut into runs to write one after another.

    ``stored`` holds the values the refused conditions met (item -> counter -> value). Applying the
    messages one by one from there, the consecutive ones predicted to hold form one run (one write, whose
    condition still guards it), and each one predicted to cross is a run of its own (its write is refused,
    or applies if the value moved). A counter whose value is not known is predicted to hold. So a refused
    batch costs a few transactions, not one per message.
    """
    values: dict[tuple[ItemKey, str], Number] = {
        (item, name): value for item, counters in stored.items() for name, value in counters.items()
    }
    runs: list[list[MessageTotals]] = []
    current: list[MessageTotals] = []
    for message in messages:
        moved: dict[tuple[ItemKey, str], Number] = {}
        crosses = False
        for item, counters in message.totals.items():
            item_bounds = bounds.item_bounds(item)
            for name, amount in counters.items():
                slot = (item, name)
                bound = item_bounds.get(name)
                if bound is None or slot not in values:
                    continue
                if bound.refusal(values[slot], amount) is not None:
                    crosses = True
                moved[slot] = add(values[slot], amount)
        if crosses:
            if current:
                runs.append(current)
                current = []
            runs.append([message])
        else:
            values.update(moved)
            current.append(message)
    if current:
        runs.append(current)
    return runs


def parse_counter_bounds(
    text: str, hot_keys: HotKeys | None = None, defaults: CounterDefaults = NO_DEFAULTS, views: CounterViews = NO_VIEWS
) -> CounterBounds:
    """``"stock:*#stock>=0;quota:*#calls<=1000"`` -> ``CounterBounds`` (a view pattern, ``tally.core.views``, names
    a view's items: ``api[customer]#calls<=1000``, each customer's calls across its routes).

    Raises ``ValueError`` naming the rule for anything malformed, for a bound on a key that ``hot_keys``
    shards, and for a start value (``defaults``) outside a bound of the same counter.
    """
    rules: list[BoundRule] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        operator = ">=" if ">=" in part else "<=" if "<=" in part else None
        target, _, number = part.rpartition(operator) if operator else ("", "", "")
        spelled, hash_, counter = target.rpartition("#")
        if operator is None or not hash_ or not spelled or not counter or len(counter.encode("utf-8")) > 255:
            raise ValueError(f"bad counter bound {part!r}: expected PATTERN#COUNTER>=N or PATTERN#COUNTER<=N")
        pattern = views.pattern(spelled)
        limit = parse_number(number.strip(), f"counter bound {part!r}")
        declared_pattern = KeyPattern(pattern)
        rule = BoundRule(
            declared_pattern, counter, limit if operator == ">=" else None, limit if operator == "<=" else None
        )
        if hot_keys is not None and hot_keys.overlaps(declared_pattern):
            raise ValueError(
                f"counter bound {part!r}: a bound on a hot key (HotKeys) is not supported: "
                "its shards cannot see each other's sum"
            )
        for declared in defaults.rules:
            if declared.start is None or declared.counter != counter or not declared_pattern.overlaps(declared.pattern):
                continue
            if (rule.floor is not None and declared.start < rule.floor) or (
                rule.ceiling is not None and declared.start > rule.ceiling
            ):
                raise ValueError(
                    f"counter bound {part!r}: the start value {declared.start} of {declared.pattern}#{counter} "
                    "(CounterDefaults) is outside it"
                )
        rules.append(rule)
    if len({rule.counter for rule in rules}) > MAX_BOUNDED_COUNTERS:
        raise ValueError(
            f"counter bounds: at most {MAX_BOUNDED_COUNTERS} bounded counter names (one write's condition checks "
            "each, within DynamoDB's 4 KB and 300 operators per expression)"
        )
    bounds = CounterBounds(tuple(rules))
    for rule in rules:
        bound = bounds.bounds(rule.pattern.text.removesuffix(WILDCARD))
        found = bound.get(rule.counter)
        if found is not None and found.floor is not None and found.ceiling is not None and found.floor > found.ceiling:
            raise ValueError(f"counter bound of {rule.pattern}#{rule.counter}: floor above ceiling")
    return bounds
