"""``bench.archive_format`` and ``bench.archive_cost`` at a tiny size: what their tables are made of holds."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from bench import archive_cost, archive_format
from tally.core.archive import decode_records
from tally_local.chaos.archive import ArchiveSite
from tally_local.latency_proxy import LatencyProxy

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal


def test_the_format_bench_measures_what_the_archive_writes_and_recounts_it() -> None:
    batches = archive_format.archived_batches(300, 100, packed=False)
    assert [len(batch) for batch in batches] == [100, 100, 100]
    gzip6 = archive_format._jsonl_gzip(6)
    # the candidate "gzip 6" is the writer's own encoding, byte for byte
    assert decode_records(gzip6.encode(batches[0])) == batches[0]
    measured = archive_format.measure(gzip6, batches, events=300, repeats=1)
    assert 30e6 < measured.bytes_per_million < 120e6  # tens of bytes per single-event message
    timed = archive_format.time_recount(1_000, 100)
    assert timed.messages == 1_000


@pytest.mark.integration
def test_the_cost_bench_runs_the_handlers_wiring_with_and_without_the_archive(
    dynamodb_local: DynamoDBLocal, moto_endpoint: str
) -> None:
    site = ArchiveSite(moto_endpoint, f"tally-bench-{uuid.uuid4().hex[:12]}").create()
    # every counter and the archive's recount are checked inside (a mismatch raises)
    figures = archive_cost.measure(dynamodb_local, site.client(), site.bucket, packed=False, batches=2)
    assert figures.batches == 2
    assert figures.object_bytes > 0
    assert figures.step_ms > 0


@pytest.mark.integration
def test_the_cost_bench_through_the_proxy_runs_the_step_beside_and_after_the_landing(
    dynamodb_local: DynamoDBLocal, moto_endpoint: str
) -> None:
    # GIVEN DynamoDB Local behind the latency proxy and a writer whose PutObject answers 30 ms late (what
    # `python -m bench archive-cost --proxy` runs, at 2 batches)
    site = ArchiveSite(moto_endpoint, f"tally-bench-{uuid.uuid4().hex[:12]}").create()
    with LatencyProxy(dynamodb_local.endpoint_url) as proxy:
        # WHEN the three pipelines (archive off, beside the landing, after it) take the same batches
        figures = archive_cost.measure(
            dynamodb_local,
            site.client(),
            site.bucket,
            packed=False,
            batches=2,
            endpoint_url=proxy.endpoint_url,
            put_delay_s=0.03,
            after=True,
        )
    # THEN each counted every event and each archive recounts them (checked inside: a mismatch raises), and both
    # archiving pipelines waited for their late PutObject (lower bounds only: no figure here leans on the
    # machine's speed)
    assert figures.batches == 2
    assert figures.with_ms >= 30
    assert figures.after_ms >= 30
