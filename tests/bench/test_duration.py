"""``bench.duration`` at a tiny size: it times batches, and the requests it counts are the model's.

No time is asserted (that belongs to ``python -m bench.duration``): only that the measured split holds
together and that the transactions per batch the real pipeline sent are the ones ``tally plan``'s model
prices its duration with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.duration import measure

from tally.cost.model import Latencies, Traffic, simulate

if TYPE_CHECKING:
    from tally.local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("windows", [False, True])
def test_a_batch_is_timed_and_its_transactions_are_the_models(dynamodb_local: DynamoDBLocal, windows: bool) -> None:
    latencies = Latencies(
        transact_write_ms=10, batch_get_ms=0, batch_write_ms=0, cpu_us_per_item=0, cpu_us_per_event_item=0
    )
    row = measure(
        dynamodb_local, packed=False, windows=windows, batch_size=100, batches=3, keys=40, latencies=latencies
    )
    assert row.batches == 3
    assert 0 < row.local_io_ms <= row.local_ms
    transactions = row.calls["TransactWriteItems"]
    model = simulate(
        Traffic(1, keys=40, counters=2, key_bytes=17, windows=("hour", "day") if windows else ()), 100, batches=3
    )
    assert transactions == pytest.approx(model.transactions_per_batch, rel=0.1)
    # AWS-like duration: the measured CPU (at 512 MB's vCPU share) plus 10 ms per transaction
    assert row.process_cpu_ms > 0
    assert row.aws_like_ms == pytest.approx(row.process_cpu_ms * 1769 / 512 + 10 * transactions)
