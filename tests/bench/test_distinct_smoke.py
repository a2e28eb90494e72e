"""``bench.distinct`` at a tiny size: every workload counts exactly, and its cost has the shape docs/explanation/costs.md says.

A new member adds its member item (2 write units in the transaction) and its share of the count's ADD, and
one read unit, per set it counts in (all-time, and each window of its ``ts``); a known member only its read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.distinct import PATTERNS, measure
from bench.metered_load import BATCH, measure_each

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 300
KEYS = 10


def test_each_distinct_workload_is_exact_and_costs_what_the_readme_says(dynamodb_local: DynamoDBLocal) -> None:
    rows = measure_each(dynamodb_local, PATTERNS, measure, EVENTS, KEYS)
    assert all(row["exact"] for row in rows.values()), rows
    sums, new = rows["sums"], rows["distinct, every member new"]
    per_key_per_batch = BATCH / KEYS  # members of one key in one batch share one ADD of 2 write units
    assert new["members_added"] == EVENTS
    assert new["write_units_per_event"] == pytest.approx(sums["write_units_per_event"] + 2 + 2 / per_key_per_batch)
    assert new["read_units_per_event"] == pytest.approx(sums["read_units_per_event"] + 1)
    windowed = rows["distinct new, hour+day"]
    assert windowed["members_added"] == 3 * EVENTS
    assert windowed["write_units_per_event"] == pytest.approx(
        rows["sums, hour+day"]["write_units_per_event"] + 3 * (2 + 2 / per_key_per_batch)
    )
    repeat = rows["distinct, members repeat"]
    # at most one read per event: a member named twice in one batch is read once
    assert sums["read_units_per_event"] < repeat["read_units_per_event"] <= sums["read_units_per_event"] + 1
    assert repeat["write_units_per_event"] < new["write_units_per_event"]
