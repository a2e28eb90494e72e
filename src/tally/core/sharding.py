"""Hot-key write sharding: spread a hot key's writes over several items with distinct partition keys.

DynamoDB takes about 1,000 write units per second per partition, and concurrent transactions on one item
conflict. A key declared hot writes each batch's increment to one of its ``N`` shard items, chosen per
batch, so concurrent batches mostly touch different items. Reads of a hot key sum all ``MAX_SHARDS``
possible shard items, so changing ``N`` later (up or down) never hides or doubles anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tally.core.items import item_parts, make_item
from tally.core.patterns import KeyPattern
from tally.core.views import NO_VIEWS, split_outside_views

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tally.core.items import ItemKey
    from tally.core.numbers import Number
    from tally.core.views import CounterViews

MAX_SHARDS: Final = 16
"""The most shards a key may have; reads of a hot key always cover all of them."""


@dataclass(frozen=True, slots=True)
class HotKeys:
    """Declared hot keys: exact keys or prefixes (``tenant:*``) with their shard counts."""

    rules: tuple[tuple[KeyPattern, int], ...] = ()

    def shards_for(self, key: str) -> int:
        """How many shards ``key`` writes to (1: not hot). The first matching rule wins."""
        for pattern, shards in self.rules:
            if pattern.matches(key):
                return shards
        return 1

    def is_hot(self, key: str) -> bool:
        return any(pattern.matches(key) for pattern, _ in self.rules)

    def overlaps(self, pattern: KeyPattern) -> bool:
        """Whether some key ``pattern`` matches could be hot."""
        return any(pattern.overlaps(hot) for hot, _ in self.rules)


def parse_hot_keys(text: str, views: CounterViews = NO_VIEWS) -> HotKeys:
    """``"page:/home=8,tenant:*=4,api[customer]=8"`` -> ``HotKeys`` (shard counts from 1 to ``MAX_SHARDS``; a view
    pattern, ``tally.core.views``, names a view's items)."""
    rules = []
    for part in filter(None, (p.strip() for p in split_outside_views(text, ",", views))):
        pattern, _, count = part.rpartition("=")
        if not pattern or not count.isdigit() or not 1 <= int(count) <= MAX_SHARDS:
            raise ValueError(f"bad hot key {part!r}: expected KEY=N or PREFIX*=N with N from 1 to {MAX_SHARDS}")
        rules.append((KeyPattern(views.pattern(pattern)), int(count)))
    return HotKeys(tuple(rules))


def assign_shards(
    totals: Mapping[ItemKey, Mapping[str, Number]], hot: HotKeys, pick: Callable[[str, int], int]
) -> dict[ItemKey, Mapping[str, Number]]:
    """Move each hot key's increments to the shard ``pick(key, shards)`` chose for this batch."""
    moved: dict[ItemKey, Mapping[str, Number]] = {}
    for item, counters in totals.items():
        parts = item_parts(item)
        shards = hot.shards_for(parts.key)
        target = make_item(parts.key, parts.window, pick(parts.key, shards), parts.expires_at_s) if shards > 1 else item
        moved[target] = counters
    return moved
