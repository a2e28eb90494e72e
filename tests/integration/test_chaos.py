"""The chaos run's small configuration, and proof that the same harness catches broken variants.

The smoke run (``bench.chaos.config.SMOKE``) goes through the production pipeline on DynamoDB Local, from
SQS and Kinesis, with every fault kind injected and every situation of issue 14 produced; it must count
exactly once. Two deliberately broken
variants, defined here and never in src/, run under the same harness and must be caught:

- a counter store whose direct transactions carry the ADDs without the idempotency markers;
- a journal whose apply chunks carry the ADDs without the applied-record condition.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import pytest
from bench.chaos.config import SMOKE, DynamoDBFaultRates
from bench.chaos.harness import PipelineFactory, Tables, run_chaos, wire_pipeline
from botocore.exceptions import BotoCoreError, ClientError

from tally.runtime import CLIENT_CONFIG
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally.store.schema import add_update, translate

if TYPE_CHECKING:
    from bench.chaos.config import ChaosConfig
    from bench.chaos.harness import ChaosResult
    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.core.aggregate import Totals
    from tally.core.plan import Chunk
    from tally.local.dynamodb_local import DynamoDBLocal
    from tally.marker_reads import MarkerReadGate
    from tally.pipeline import BatchPipeline, DeadLetterQueue
    from tests.conftest import DynamoDBTables

pytestmark = pytest.mark.integration


class StoreWithoutMarkers(DynamoDBCounterStore):
    """BROKEN on purpose: a direct transaction applies the ADDs and writes no marker."""

    def apply(self, chunk: Chunk, now_ms: int) -> None:
        actions = [add_update(self.counters_table, key, counters) for key, counters in chunk.increments.items()]
        try:
            self.client.transact_write_items(TransactItems=[action for action, _ in actions])
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, [role for _, role in actions]) from exc


class JournalWithoutAppliedRecords(DynamoDBJournal):
    """BROKEN on purpose: an apply chunk's ADDs are not conditional on its applied-record."""

    def apply_chunk(self, batch_id: str, index: int, increments: Totals, lease_until_ms: int) -> None:
        self._transact(self._adds(increments))


def _store_without_markers(
    client: DynamoDBClient,
    tables: Tables,
    dead_letters: DeadLetterQueue,
    config: ChaosConfig,
    *,
    marker_read_gate: MarkerReadGate | None = None,
) -> BatchPipeline:
    store = StoreWithoutMarkers(client, tables.counters, tables.markers, 35 * 86_400)
    return wire_pipeline(client, tables, dead_letters, config, store=store, marker_read_gate=marker_read_gate)


def _journal_without_applied_records(
    client: DynamoDBClient,
    tables: Tables,
    dead_letters: DeadLetterQueue,
    config: ChaosConfig,
    *,
    marker_read_gate: MarkerReadGate | None = None,
) -> BatchPipeline:
    journal = JournalWithoutAppliedRecords(client, tables.counters, tables.markers, 35 * 86_400)
    return wire_pipeline(client, tables, dead_letters, config, journal=journal, marker_read_gate=marker_read_gate)


def _run(
    dynamodb_local: DynamoDBLocal,
    ddb_tables: DynamoDBTables,
    config: ChaosConfig,
    pipeline_factory: PipelineFactory = wire_pipeline,
) -> ChaosResult:
    tables = Tables(ddb_tables.counters_table, ddb_tables.markers_table)
    client_factory = partial(dynamodb_local.client, CLIENT_CONFIG)
    return run_chaos(config, client_factory, tables, pipeline_factory=pipeline_factory)


def test_smoke_run_counts_every_event_exactly_once_under_every_fault(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN the smoke configuration: SQS and Kinesis, concurrent consumers, every fault kind at its rate
    # WHEN it runs through the production pipeline on DynamoDB Local
    result = _run(dynamodb_local, ddb_tables, SMOKE)

    # THEN nothing is lost or doubled, every counter is exact, poison and doomed messages are accounted
    verdict = result.verdict
    assert (verdict.lost_events, verdict.doubled_events, verdict.counters_wrong) == (0, 0, 0), verdict.examples
    assert verdict.poison_accounted == verdict.poison_messages > 0
    assert verdict.doomed_in_dlq == verdict.doomed > 0
    assert (verdict.valid_in_dlq, verdict.unknown_letters, verdict.given_up_left, verdict.stray_keys) == (0, 0, 0, ())
    assert result.jepsen_reads > 0
    assert result.jepsen_violations == ()
    assert result.unexpected_errors == ()
    assert result.passed
    # AND the run really was chaotic: every DynamoDB fault kind and every delivery fault happened
    ddb_kinds = {f"ddb.{name}" for name in DynamoDBFaultRates.__dataclass_fields__}
    delivery_kinds = {
        "delivery.crash_after_commit",
        "delivery.visibility_expiry",
        "delivery.kinesis_rewind",
        "delivery.dlq_refusal",
        "producer.resend",
        "producer.dlq_redriven",
        "poison.published",
    }
    missing = {kind for kind in ddb_kinds | delivery_kinds if not result.faults.get(kind)}
    assert not missing, f"fault kinds never injected: {missing}"
    assert result.events >= SMOKE.events
    assert result.redeliveries.get("redelivery.sqs_receive_again", 0) > 0
    assert result.redeliveries.get("redelivery.kinesis_records", 0) > 0
    # AND it produced every situation of issue 14: warm consumers whose marker read gate has closed, kills
    # between a journal claim and the commit redelivered after the lease (also to a closed gate), claims
    # lost near the deadline (a fault kind above), sums needing more than 38 digits in a later chunk
    situations = {
        "situation.gate_closed_invocations",
        "situation.claim_killed_redelivered",
        "situation.claim_killed_redelivered_after_lease",
        "situation.claim_killed_redelivered_gate_closed",
        "situation.sum_over_38_digits_published",
        "situation.sum_over_38_digits_dead_lettered",
    }
    assert not {name for name in situations if not result.situations.get(name)}, result.situations
    assert result.counts.get("pipeline.refused_chunks", 0) == 0


BROKEN_VARIANTS = {
    "direct transactions without markers": (_store_without_markers, replace(SMOKE, events=1_000)),
    "journal chunks without applied-records": (
        _journal_without_applied_records,
        # Large packed messages over many keys make multi-chunk journal batches; lost responses make their
        # chunks be applied again (measured: 300-700 doubled events per run, never 0 in 4 runs).
        replace(
            SMOKE,
            events=2_000,
            keys=200,
            packed_share=0.6,
            max_packed_events=60,
            dynamodb=replace(SMOKE.dynamodb, lost_response=0.3),
        ),
    ),
}


@pytest.mark.parametrize("variant", sorted(BROKEN_VARIANTS))
def test_the_harness_catches_a_broken_variant(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables, variant: str
) -> None:
    # GIVEN a pipeline with one exactly-once guard removed
    factory, config = BROKEN_VARIANTS[variant]

    # WHEN it runs under the same harness and faults
    result = _run(dynamodb_local, ddb_tables, config, pipeline_factory=factory)

    # THEN the harness reports doubled events and fails the run
    assert result.verdict.doubled_events > 0
    assert result.verdict.counters_wrong > 0
    assert not result.passed
