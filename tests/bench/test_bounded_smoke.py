"""``bench.bounded`` at a tiny size: every load counts exactly, and its cost has the shape docs/explanation/costs.md says.

A condition that holds costs nothing beside the direct transactions a bounded message takes; plain sums, free to take
the fenced journal, cost no more; each refused sale costs one cancelled transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.bounded import LOADS, measure
from bench.metered_load import BATCH, measure_each

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 300
KEYS = 10


def test_each_load_is_exact_and_costs_what_the_readme_says(dynamodb_local: DynamoDBLocal) -> None:
    rows = measure_each(dynamodb_local, LOADS, measure, EVENTS, KEYS)
    assert all(row["exact"] for row in rows.values()), rows
    never = rows["floor, never reached"]
    # A bound that holds: the direct path's price, 2 units for each message's marker and each key's item per batch
    # (random ids, every key in every batch), in two transactions a batch (110 actions)
    assert never["write_units_per_event"] == pytest.approx(2 * (BATCH + KEYS) / BATCH)
    assert never["transactions"] == 2 * (EVENTS // BATCH)
    # Plain sums take the fenced journal where it costs less (each key's item 1 unit, not 2): never more
    assert rows["sums"]["write_units_per_event"] <= never["write_units_per_event"]
    refused = rows["floor, half refused"]
    assert refused["refused"] == EVENTS // 2
    assert refused["transactions"] >= never["transactions"] + refused["refused"]
