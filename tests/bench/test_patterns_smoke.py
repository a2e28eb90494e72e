"""``bench.patterns`` at a tiny size: every pattern counts exactly, and its cost has the shape docs/explanation/costs.md says.

Start values and default deltas write nothing more than sums (the start rides in the same action); gauges
add one conditional UpdateItem per key with readings per batch, whatever the readings do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.metered_load import BATCH, measure_each
from bench.patterns import PATTERNS, measure

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 300
KEYS = 10


def test_each_pattern_is_exact_and_costs_what_the_readme_says(dynamodb_local: DynamoDBLocal) -> None:
    rows = measure_each(dynamodb_local, PATTERNS, measure, EVENTS, KEYS)
    assert all(row["exact"] for row in rows.values()), rows
    assert rows["start + default delta"]["write_units_per_event"] == rows["sums"]["write_units_per_event"]
    for name in ("gauge max", "gauge latest", "gauge latest, late"):
        assert rows[name]["gauge_writes"] == (EVENTS // BATCH) * KEYS
    assert rows["gauge latest"]["conditional_failures"] == 0  # every batch's reading is newer
    assert rows["gauge latest, late"]["conditional_failures"] == (EVENTS // BATCH - 1) * KEYS
