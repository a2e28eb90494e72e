"""``bench.duration`` at a tiny size: it times batches, and the requests it counts are the model's.

No time is asserted (that belongs to ``python -m bench.duration``): only that the measured split holds
together and that the transactions per batch the real pipeline sent are the ones ``tally plan``'s model
prices its duration with.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from bench.duration import measure, measure_through_proxy, payload_batches, stalled_s
from bench.workloads import Delivery, lambda_event

from tally.cost.model import Latencies, Traffic, simulate
from tally_local.latency_proxy import LatencyProxy, ProxiedRequest

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("windows", [False, True])
def test_a_batch_is_timed_and_its_transactions_are_the_models(dynamodb_local: DynamoDBLocal, windows: bool) -> None:
    latencies = Latencies(
        transact_write_ms=10,
        batch_get_ms=0,
        batch_write_ms=0,
        single_write_ms=2,
        parallel_writes=4,
        cpu_us_per_request=0,
        cpu_us_per_item=0,
        cpu_us_per_event_item=0,
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
    # the template's path: a batch of 40 keys goes through the fenced journal, one plain write per item, as the
    # model prices it
    single_writes = row.calls.get("UpdateItem", 0.0)
    assert single_writes > 0
    assert single_writes == pytest.approx(model.single_writes_per_batch, rel=0.1)
    # AWS-like duration: the measured CPU (at 512 MB's vCPU share) plus 10 ms per transaction and 2 ms per single
    # write, four at a time
    assert row.process_cpu_ms > 0
    assert row.aws_like_ms == pytest.approx(row.process_cpu_ms * 1769 / 512 + 10 * transactions + 2 * single_writes / 4)


def test_batches_are_cut_at_lambdas_6_mb_payload() -> None:
    """``--proxy`` runs the template's BatchSize as Lambda delivers it: at most 6 MB of event per batch."""
    body = "x" * 250_000
    deliveries = [Delivery(f"r{i}", f"m{i}", body, i, 1, resend=False) for i in range(60)]
    batches = payload_batches(deliveries, 10_000, sent_ms=1_795_000_000_000)
    assert [delivery for batch in batches for delivery in batch] == deliveries
    assert len(batches) == 3
    for batch in batches:
        assert len(json.dumps(lambda_event(batch, 1_795_000_000_000))) <= 6 * 1024 * 1024
    assert len(payload_batches(deliveries, 7, sent_ms=0)[0]) == 7


def test_the_real_handler_through_the_proxy(dynamodb_local: DynamoDBLocal) -> None:
    """One tiny configuration end to end: exact, every request the proxy answered is accounted for."""
    with LatencyProxy(dynamodb_local.endpoint_url) as proxy:
        row = measure_through_proxy(dynamodb_local, proxy, packed=False, batch_size=50, batches=2, keys=40)
    assert row.exact
    assert row.batches == 2
    assert row.records_per_batch == 50
    assert row.requests["TransactWriteItems"] >= 1
    # every request waited at least its modeled latency; the stall is what DynamoDB Local added
    assert row.request_ms >= row.modeled_ms
    assert 0 <= row.stalled_ms <= row.request_ms - row.modeled_ms + 1e-6
    assert row.cpu_ms > 0
    assert row.lambda_ms >= row.cpu_ms * 1769 / 512


def _request(arrived: float, modeled: float, answered: float) -> ProxiedRequest:
    return ProxiedRequest("TransactWriteItems", 100, arrived, answered - arrived, modeled, answered, 200)


def test_the_stall_on_dynamodb_local_is_what_aws_would_not_have_waited() -> None:
    # one after another: the sum of the excesses
    assert stalled_s([_request(0, 1, 3), _request(3, 1, 4), _request(4, 1, 6)]) == pytest.approx(3)
    # eight sent together, DynamoDB Local serialising them: all would have been answered at 1
    serialised = [_request(0, 1, 2 * (i + 1)) for i in range(8)]
    assert 16 - stalled_s(serialised) == pytest.approx(1)
    # overdue while another is legitimately in flight: AWS would have waited for that one anyway
    assert stalled_s([_request(0, 1, 2), _request(0.5, 2, 2.5)]) == pytest.approx(0)
    assert stalled_s([]) == 0
