"""``bench.resets`` at a tiny size: every pattern counts exactly, and its cost has the shape docs/explanation/costs.md says.

A reset or correction per batch adds transactions (its own, and the segment after it), not a second write
of every key: only messages on the operator's key are ordered around it. Every message a reset is one
transaction per message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.resets import BATCH, PATTERNS, measure

from tally.runtime import CLIENT_CONFIG

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 300
KEYS = 10


def test_each_reset_pattern_is_exact_and_costs_what_the_readme_says(dynamodb_local: DynamoDBLocal) -> None:
    admin, client = dynamodb_local.client(), dynamodb_local.client(CLIENT_CONFIG)
    rows = {name: measure(name, EVENTS, KEYS, client, admin) for name in PATTERNS}
    assert all(row["exact"] for row in rows.values()), rows
    batches = EVENTS // BATCH
    for name in ("1 reset per batch", "1 correction per batch"):
        extra = rows[name]["transactions"] - rows["sums"]["transactions"]
        assert 0 < extra <= 2 * batches, (name, rows[name], rows["sums"])
    assert rows["every message a reset"]["transactions"] == EVENTS
