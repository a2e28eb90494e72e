"""The template's batching defaults cost at most 1.2x the floor for the traffic they are meant for.

The parameter descriptions say which traffic that is: steady traffic of at least 150
messages a second (single events or packed) on SQS, 200 records a second per Kinesis shard, 1,000-ish
Zipf keys, the template's windows. ``tally.cost.model.floor`` is the fewest write units per event any allowed setting
reaches for a traffic; ``price(..., window_s=...)`` prices the defaults as deployed. A default that
drifts from the floor (someone lowering ``BatchSize`` back to 100) fails here, with the ratio.
"""

from __future__ import annotations

from typing import Any

import pytest

from tally.cost.model import Traffic, floor, price

# The planner's floor for each source and rate: seconds of CPU each (make test-fast skips it).
pytestmark = pytest.mark.slow


MEANT_FOR = [
    Traffic(150, keys=1000),
    Traffic(1000, keys=1000),
    Traffic(100 * 220, keys=1000, events_per_message=220),  # 100 messages/s of the producer's default packing
    Traffic(200, keys=1000, source="Kinesis"),
    Traffic(1000, keys=10_000, zipf_s=0.8, windows=()),
]


@pytest.mark.parametrize(
    "traffic", MEANT_FOR, ids=lambda t: f"{t.source}-{t.events_per_second:g}/s-x{t.events_per_message}"
)
def test_the_batching_defaults_are_within_1_2x_of_the_floor(template: dict[str, Any], traffic: Traffic) -> None:
    parameters = template["Parameters"]
    names = (
        ("BatchSize", "BatchingWindowSeconds")
        if traffic.source == "SQS"
        else ("StreamBatchSize", "StreamBatchingWindowSeconds")
    )
    batch, window = (int(parameters[name]["Default"]) for name in names)
    deployed = price(traffic, batch, window_s=window, batches=2)
    lowest = floor(traffic, batches=2)
    assert deployed.units.write_units <= 1.2 * lowest.units.write_units, (
        f"{names}={batch},{window}: {deployed.units.write_units:.4f} WU/event, floor {lowest.units.write_units:.4f}"
    )


def test_the_old_defaults_were_not() -> None:
    """BatchSize 100 with a 1 s window (the earlier defaults) wrote 1.97x the floor at 150 events/s."""
    traffic = MEANT_FOR[0]
    old = price(traffic, 100, window_s=1, batches=2)
    assert old.units.write_units > 1.2 * floor(traffic, batches=2).units.write_units
