"""Synthetic load for ``tally publish --generate``: seeded, skewed, with its own exact totals.

Keys follow a Zipf-like law (key of rank r is picked with weight 1 / r**skew), which is what real
counters look like: a few hot keys take most of the events, which is the case that stresses
transactions. Every event adds 1 to ``count`` and a two-decimal ``amount``, so exact decimal
arithmetic is exercised too. The totals are summed here, independently of any tally code path, so a
user can compare them with ``tally get``.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from itertools import accumulate

from tally.producer.event import Event


@dataclass(frozen=True, slots=True)
class Load:
    """The events to publish and what they must add up to (key -> counter -> exact total)."""

    events: tuple[Event, ...]
    totals: dict[str, dict[str, Decimal]]


def generate(count: int, keys: int, *, seed: int, now_ms: int, skew: float = 1.1, prefix: str = "load:") -> Load:
    """``count`` events over ``keys`` keys; ``now_ms`` (read once by the caller) is every event's ``ts``."""
    if count < 1 or keys < 1 or skew < 0:
        raise ValueError("count and keys must be positive and skew non-negative")
    rng = random.Random(seed)
    width = len(str(keys - 1))
    names = [f"{prefix}{rank:0{width}d}" for rank in range(keys)]
    cumulative = list(accumulate(1 / (rank + 1) ** skew for rank in range(keys)))
    chosen = rng.choices(names, cum_weights=cumulative, k=count)
    totals: dict[str, dict[str, Decimal]] = defaultdict(lambda: {"count": Decimal(0), "amount": Decimal(0)})
    events = []
    for key in chosen:
        amount = Decimal(rng.randint(1, 99_999)).scaleb(-2)
        events.append(Event(key, {"count": 1, "amount": amount}, ts=now_ms))
        totals[key]["count"] += 1
        totals[key]["amount"] += amount
    return Load(tuple(events), dict(totals))
