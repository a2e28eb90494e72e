"""Reads for callers that hold a counter store rather than a reader: the local demo, benchmarks and tests.

The store writes and the reader reads; the store must not import the reader (its arrow points down, to the
item schema). A caller that built a ``DynamoDBCounterStore`` reads what it wrote through these two functions,
which build the reader over the same table, client and hot-key rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tally.reader.dynamodb import CounterReader

if TYPE_CHECKING:
    from decimal import Decimal

    from tally.core.windows import WindowUnit
    from tally.store.dynamodb import DynamoDBCounterStore


def _reader(store: DynamoDBCounterStore) -> CounterReader:
    return CounterReader(store.counters_table, client=store.client, hot_keys=store.hot_keys)


def read_counters(store: DynamoDBCounterStore, key: str) -> dict[str, Decimal]:
    """The all-time counters of ``key``, hot-key shards summed (what ``tally get`` reads)."""
    return dict(_reader(store).get(key).values)


def read_series(
    store: DynamoDBCounterStore, key: str, unit: WindowUnit, from_ms: int, to_ms: int
) -> list[tuple[int, dict[str, Decimal]]]:
    """Every ``unit`` window of ``key`` from ``from_ms`` to ``to_ms``, in order, gaps as empty maps."""
    series = _reader(store).series(key, unit.name, from_ms, to_ms)
    return [(window.start_ms, dict(window.values)) for window in series.windows]
