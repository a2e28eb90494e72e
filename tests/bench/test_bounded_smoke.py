"""``bench.bounded`` at a tiny size: every load counts exactly, and its cost has the shape docs/explanation/costs.md says.

A condition that holds costs nothing beside plain sums; each refused sale costs one cancelled transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.bounded import LOADS, measure
from bench.metered_load import measure_each

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 300
KEYS = 10


def test_each_load_is_exact_and_costs_what_the_readme_says(dynamodb_local: DynamoDBLocal) -> None:
    rows = measure_each(dynamodb_local, LOADS, measure, EVENTS, KEYS)
    assert all(row["exact"] for row in rows.values()), rows
    never = rows["floor, never reached"]
    assert never["write_units_per_event"] == rows["sums"]["write_units_per_event"]
    assert never["transactions"] == rows["sums"]["transactions"]
    refused = rows["floor, half refused"]
    assert refused["refused"] == EVENTS // 2
    assert refused["transactions"] >= rows["sums"]["transactions"] + refused["refused"]
