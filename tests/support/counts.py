"""Compare counters read from the store with a reference, treating absent and zero alike."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from tally.reader.store_view import read_counters

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.store.dynamodb import DynamoDBCounterStore


def nonzero(counters: Mapping[str, Mapping[str, Decimal]]) -> dict[str, dict[str, Decimal]]:
    """Drop zero counters and keys left empty: a never-touched counter and a zero one read the same."""
    result = {key: {name: Decimal(v) for name, v in values.items() if v} for key, values in counters.items()}
    return {key: values for key, values in result.items() if values}


def read_all(store: DynamoDBCounterStore, keys: Iterable[str]) -> dict[str, dict[str, Decimal]]:
    return nonzero({key: read_counters(store, key) for key in keys})
