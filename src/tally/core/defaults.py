"""Counter declarations of a deployment: start values and default deltas.

The ``CounterDefaults`` template parameter (``TALLY_COUNTER_DEFAULTS``) declares, per key pattern and
counter, a **start value** (what the counter holds before its first increment: the Java enhanced client's
``@DynamoDbAtomicCounter(startValue = 10)``) and/or a **default delta** (what an event that omits
``delta``/``deltas`` adds: ``@DynamoDbAtomicCounter(delta = 5)``)::

    stock:*#stock=start:100,delta:-1;views:*#count=delta:1

Rules are separated by ``;``: ``PATTERN#COUNTER=SETTINGS``, the pattern as in ``HotKeys`` (an exact key, or
a prefix ending in ``*``; the last ``#`` before ``=`` separates it from the counter name), the settings
``start:N`` and/or ``delta:N`` separated by ``,``. For each (key, counter) the first matching rule wins.

What they mean, decided here once (docs/explanation/counter-patterns.md, "Start values, default deltas and gauges"):

- A default delta is applied when the event is decoded: an event without ``delta``/``deltas`` counts the
  default delta of every counter declared with one for its key (``missing_delta`` when there is none).
  The message's content digest is taken from the decoded events, so it includes the filled-in deltas.
- A start value lives in the store: the write of a key's all-time item is ``SET c = if_not_exists(c,
  :start) + :delta`` instead of ``ADD c :delta``, in the same action (still one write per item). Only the
  all-time item starts from it; window items count from zero (a window holds what happened in it, not a
  level). A start value on a hot key is refused (``parse_counter_defaults`` is given the hot keys): its
  shards would each need to know whether another shard already started.

Plain data for the core: parsed at the edge (``tally.config``), never read from the environment here.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from tally.core.numbers import Number, checked_canonical
from tally.core.patterns import KeyPattern
from tally.core.views import NO_VIEWS, split_outside_views

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tally.core.sharding import HotKeys
    from tally.core.views import CounterViews


@dataclass(frozen=True, slots=True)
class CounterRule:
    """One declaration: the counter ``counter`` of keys matching ``pattern``."""

    pattern: KeyPattern
    counter: str
    start: Number | None = None
    delta: Number | None = None


@dataclass(frozen=True, slots=True)
class CounterDefaults:
    """Every declared start value and default delta (empty: ``ADD`` from zero, deltas required)."""

    rules: tuple[CounterRule, ...] = ()

    @property
    def has_starts(self) -> bool:
        return any(rule.start is not None for rule in self.rules)

    def default_deltas(self, key: str) -> dict[str, Number]:
        """What an event of ``key`` without ``delta``/``deltas`` adds: counter -> default delta (maybe none)."""
        found: dict[str, Number | None] = {}
        for rule in self.rules:
            if rule.counter not in found and rule.pattern.matches(key):
                found[rule.counter] = rule.delta
        return {counter: delta for counter, delta in found.items() if delta is not None}

    def starts(self, key: str) -> Mapping[str, Number]:
        """The start value of each counter of ``key`` that has one."""
        if not self.rules:
            return {}
        found: dict[str, Number | None] = {}
        for rule in self.rules:
            if rule.counter not in found and rule.pattern.matches(key):
                found[rule.counter] = rule.start
        return {counter: start for counter, start in found.items() if start is not None}


NO_DEFAULTS = CounterDefaults()


def parse_number(text: str, where: str) -> Number:
    """A declared number (a start value, a default delta, a bound): finite, storable, an int when whole."""
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"{where}: {text!r} is not a number") from exc
    if not value.is_finite():
        raise ValueError(f"{where}: {text!r} is not a finite number")
    problem, number = checked_canonical(value)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")
    return int(number) if number == number.to_integral_value() else number


def parse_counter_defaults(
    text: str, hot_keys: HotKeys | None = None, views: CounterViews = NO_VIEWS
) -> CounterDefaults:
    """``"stock:*#stock=start:100,delta:-1;views:*#count=delta:1"`` -> ``CounterDefaults`` (a view pattern,
    ``tally.core.views``, names a view's items: ``credits[customer]#balance=start:100``).

    Raises ``ValueError`` naming the rule for anything malformed, and for a start value on a key that
    ``hot_keys`` shards (see the module docstring).
    """
    rules: list[CounterRule] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        target, *rest = split_outside_views(part, "=", views)
        equals, settings = ("=", "=".join(rest)) if rest else ("", "")
        spelled, hash_, counter = target.rpartition("#")
        pattern = views.pattern(spelled) if hash_ and spelled else spelled
        if not equals or not hash_ or not pattern or not counter or len(counter.encode("utf-8")) > 255:
            raise ValueError(f"bad counter default {part!r}: expected PATTERN#COUNTER=start:N,delta:N")
        values: dict[str, Number] = {}
        for setting in filter(None, (s.strip() for s in settings.split(","))):
            name, colon, number = setting.partition(":")
            if not colon or name not in ("start", "delta") or name in values:
                raise ValueError(f"bad counter default {part!r}: settings are start:N and delta:N, once each")
            values[name] = parse_number(number.strip(), f"counter default {part!r}")
        if not values:
            raise ValueError(f"bad counter default {part!r}: give start:N, delta:N or both")
        if values.get("delta") == 0:
            raise ValueError(f"bad counter default {part!r}: a default delta of zero counts nothing")
        rule = CounterRule(KeyPattern(pattern), counter, values.get("start"), values.get("delta"))
        if rule.start is not None and hot_keys is not None and hot_keys.overlaps(rule.pattern):
            raise ValueError(
                f"counter default {part!r}: a start value on a hot key (HotKeys) is not supported: "
                "its shards cannot tell which of them starts"
            )
        rules.append(rule)
    return CounterDefaults(tuple(rules))
