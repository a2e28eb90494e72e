"""Reads for callers that hold a counter store rather than a reader: the local demo, benchmarks and tests.

The store writes and the reader reads; the store must not import the reader (its arrow points down, to the
item schema). A caller that built a ``DynamoDBCounterStore`` reads what it wrote through these two functions,
which build the reader over the same table and client, and the hot-key rules it is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tally.core.sharding import HotKeys
from tally.reader.dynamodb import CounterReader

if TYPE_CHECKING:
    from decimal import Decimal

    from tally.core.windows import WindowUnit
    from tally.store.dynamodb import DynamoDBCounterStore


def _reader(store: DynamoDBCounterStore, hot_keys: HotKeys | None) -> CounterReader:
    return CounterReader(store.counters_table, client=store.client, hot_keys=hot_keys or HotKeys())


def read_counters(store: DynamoDBCounterStore, key: str, hot_keys: HotKeys | None = None) -> dict[str, Decimal]:
    """The all-time counters of ``key``, the shards of a key ``hot_keys`` declares hot summed (what ``tally get``
    reads)."""
    return dict(_reader(store, hot_keys).get(key).values)


def read_series(
    store: DynamoDBCounterStore,
    key: str,
    unit: WindowUnit,
    from_ms: int,
    to_ms: int,
    *,
    hot_keys: HotKeys | None = None,
) -> list[tuple[int, dict[str, Decimal]]]:
    """Every ``unit`` window of ``key`` from ``from_ms`` to ``to_ms``, in order, gaps as empty maps."""
    series = _reader(store, hot_keys).series(key, unit.name, from_ms, to_ms)
    return [(window.start_ms, dict(window.values)) for window in series.windows]
