"""``bench.resets`` at a tiny size: every pattern counts exactly, and its cost has the shape docs/explanation/costs.md says.

A reset or correction per batch adds transactions (its own, and the segment after it), not a second write
of every key: only messages on the operator's key are ordered around it. Every message a reset is one
transaction per message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.metered_load import BATCH, measure_each
from bench.resets import PATTERNS, measure

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 300
KEYS = 10


def test_each_reset_pattern_is_exact_and_costs_what_the_readme_says(dynamodb_local: DynamoDBLocal) -> None:
    rows = measure_each(dynamodb_local, PATTERNS, measure, EVENTS, KEYS)
    assert all(row["exact"] for row in rows.values()), rows
    batches = EVENTS // BATCH
    for name in ("1 reset per batch", "1 correction per batch"):
        extra = rows[name]["transactions"] - rows["sums"]["transactions"]
        assert 0 < extra <= 2 * batches, (name, rows[name], rows["sums"])
    assert rows["every message a reset"]["transactions"] == EVENTS
