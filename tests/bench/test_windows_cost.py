"""``bench.windows_cost`` at a tiny size: windows on vs off over simulated hours, every window exact.

Ratios and exactness only, never a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.windows_cost import Config, run

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("packed", [False, True], ids=["single", "packed"])
def test_windows_cost_their_moves_and_every_window_reads_back_exactly(
    dynamodb_local: DynamoDBLocal, packed: bool
) -> None:
    # GIVEN 30 keys, 3 simulated hours at 2 batches an hour, then the final close (the next day's moves)
    result = run(dynamodb_local, Config(packed, batch_records=20, batches_per_hour=2, hours=3), keys=30)
    # THEN every all-time value and every hour and day window is exact, the moves were made and billed
    assert result.exact
    assert result.windows_moved > 0
    assert result.close_write_units > 0
    assert result.write_units_on > result.write_units_off
