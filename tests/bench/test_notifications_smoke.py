"""``bench.notifications`` at a tiny size: every count and crossing exact, and the cost has the shape
docs/explanation/notifications.md says: declared thresholds never crossed cost nothing more than sums, crossings
add no read, per-day levels over late events read each key's item once per batch, and every crossing reaches
the bus within the 2 s target on the local pipe model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.notifications import LOADS, measure

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 400
KEYS = 10


def test_thresholds_cost_nothing_until_crossed_and_each_crossing_is_announced(dynamodb_local: DynamoDBLocal) -> None:
    rows = {load: measure(load, EVENTS, KEYS, dynamodb_local) for load in LOADS}
    assert all(row["exact"] for row in rows.values()), rows
    sums, never, crossed = rows["sums"], rows["thresholds, never crossed"], rows["thresholds, crossed"]
    assert never["write_units_per_event"] == sums["write_units_per_event"]
    assert never["transactions"] == sums["transactions"]
    assert crossed["read_units_per_event"] == sums["read_units_per_event"]  # no read added
    assert crossed["crossings"] == 4 * KEYS
    assert crossed["commit_to_put_ms"]["n"] == 4 * KEYS
    assert crossed["commit_to_put_ms"]["max"] < 2_000
    # AND per-day levels over late events (their day moved off the key items after the first batch) cross the
    # same levels; each batch's write reads every key's item once, and nothing more: the key item's pointer says
    # the day's moved part (no day item read), and the attempt after a refusal at a level reads nothing (the
    # refusal returned the item): at most one read per thresholded key and batch, and no write added
    windows, late = rows["day windows"], rows["day thresholds, late"]
    assert late["crossings"] == 4 * KEYS
    extra_items = (late["read_units_per_event"] - windows["read_units_per_event"]) * EVENTS
    assert 0 < extra_items <= KEYS * (EVENTS // 100), (windows, late)
    assert late["write_units_per_event"] - windows["write_units_per_event"] == pytest.approx(
        crossed["write_units_per_event"] - sums["write_units_per_event"]
    ), (windows, late, crossed, sums)  # what the crossings cost, as on all-time levels: nothing per event
