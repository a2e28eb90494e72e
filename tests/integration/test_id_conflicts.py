"""An id reused with different content (issue 14, defect 6), against DynamoDB Local.

Two producers, or one buggy producer, may send different events under one id. Exactly one content may
count under an id (its marker says which); every other content must be dead-lettered as ``id_conflict``,
never silently dropped as a duplicate. Each way an existing marker is met is exercised: another copy in
the same batch, the marker read before writing, a direct transaction cancelled by the marker (the read
gate closed), a journal claim cancelled by it, and the marker read after DynamoDB refused the increment.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from tally.apply import Applier
from tally.core.decode import DecodeLimits
from tally.core.model import SourceRecord
from tally.marker_reads import MarkerReadGate
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.store.dynamodb import MAX_COUNTER_KEY_BYTES, MAX_MESSAGE_ID_BYTES, DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tests.support.counts import read_all
from tests.support.pipeline import FAST_RETRIES, TTL_DAYS, RecordingDeadLetterQueue, make_store
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from tests.conftest import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 1_000
ID_CONFLICT = "id_conflict"
DEFECT_6 = pytest.mark.xfail(strict=True, reason="issue 14 defect 6: the first content wins silently")


def plenty() -> int:
    return 60_000


def pipeline_with_gate(
    store: DynamoDBCounterStore, *, reads_markers: bool
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    """The production pipeline; ``reads_markers=False`` closes the marker read gate for good, so existing
    markers are only met by cancelled writes."""
    dlq = RecordingDeadLetterQueue()
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    gate = MarkerReadGate() if reads_markers else MarkerReadGate(quiet_batches=0)
    applier = Applier(store, journal, policy=FAST_RETRIES, sleep=lambda _: None, marker_read_gate=gate)
    settings = PipelineSettings(
        limits=DecodeLimits(max_key_bytes=MAX_COUNTER_KEY_BYTES, max_id_bytes=MAX_MESSAGE_ID_BYTES),
        dedup_horizon_ms=TTL_DAYS * 86_400_000,
    )
    return BatchPipeline(applier, dlq, settings), dlq


def record(record_id: str, body: object) -> SourceRecord:
    return SourceRecord(record_id, body if isinstance(body, str) else json.dumps(body), SENT_MS)


def packed(message_id: str, keys: int, delta: int) -> dict[str, object]:
    """A message over ``keys`` keys: more than a direct transaction holds, so it goes through the journal."""
    return {"id": message_id, "events": [{"key": f"j:{index}", "delta": delta} for index in range(keys)]}


@DEFECT_6
def test_a_copy_in_the_same_batch_with_other_content_is_dead_lettered_and_the_first_counts(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN one batch holding two messages under one id, with different deltas
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=True)
    records = [
        record("r-1", {"id": "m-1", "key": "page", "delta": 1}),
        record("r-2", {"id": "m-1", "key": "page", "delta": 5}),
        record("r-3", {"id": "m-1", "key": "page", "delta": 1}),  # the first content again: a duplicate
    ]

    # WHEN it is processed
    result = pipeline.process(records, NOW_MS, plenty)

    # THEN the first content counts, the other is dead-lettered as id_conflict, the repeat is a duplicate
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(1)}}
    assert dlq.codes() == {"r-2": ID_CONFLICT}
    assert result.failed_record_ids == ()
    assert result.duplicates_in_batch == 1


def test_the_same_events_written_another_way_are_a_duplicate_not_a_conflict(ddb_tables: DynamoDBTables) -> None:
    # GIVEN one message, then the same events spelled differently under its id: the `delta` shorthand
    # against `deltas`, 1.0 against 1, counters in another order, ts in ISO 8601 against epoch ms, and a
    # packed message's events in another order
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=False)
    first = [
        record("r-1", '{"id":"s-1","key":"k","delta":1,"ts":4102444740000}'),
        record("r-2", '{"id":"s-2","events":[{"key":"a","deltas":{"x":1,"y":2.50}},{"key":"b","delta":3}]}'),
    ]
    again = [
        record("r-3", '{"id":"s-1","key":"k","deltas":{"count":1.0},"ts":"2099-12-31T23:59:00Z"}'),
        record("r-4", '{"id":"s-2","events":[{"key":"b","deltas":{"count":3}},{"key":"a","deltas":{"y":2.5,"x":1}}]}'),
    ]

    # WHEN both are processed, in one batch and then in another
    pipeline.process(first + again, NOW_MS, plenty)
    second = pipeline.process(again, NOW_MS, plenty)

    # THEN every copy is a duplicate: nothing is dead-lettered and the counts are the first content's
    assert dlq.letters == []
    assert second.already_applied == 2
    assert read_all(store, ["k", "a", "b"]) == {
        "k": {"count": Decimal(1)},
        "a": {"x": Decimal(1), "y": Decimal("2.5")},
        "b": {"count": Decimal(3)},
    }


@DEFECT_6
@pytest.mark.parametrize("reads_markers", [True, False], ids=["marker-read", "cancelled-transaction"])
def test_a_later_batch_with_other_content_is_dead_lettered(ddb_tables: DynamoDBTables, reads_markers: bool) -> None:
    # GIVEN a message applied in one batch
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=reads_markers)
    pipeline.process([record("r-1", {"id": "m-1", "key": "page", "delta": 1})], NOW_MS, plenty)

    # WHEN a later batch brings other content under its id (besides an innocent message), its marker met
    # by the marker read, or (gate closed) by the cancelled direct transaction
    result = pipeline.process(
        [
            record("r-2", {"id": "m-1", "key": "page", "deltas": {"count": 1, "amount": 9.99}}),
            record("r-3", {"id": "m-2", "key": "page", "delta": 2}),
        ],
        NOW_MS,
        plenty,
    )

    # THEN the other content is dead-lettered as id_conflict, the innocent message counts
    assert result.marker_reads == (1 if reads_markers else 0)
    assert dlq.codes() == {"r-2": ID_CONFLICT}
    assert result.failed_record_ids == ()
    assert result.already_applied == 0
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(3)}}


@DEFECT_6
@pytest.mark.parametrize("reads_markers", [True, False], ids=["marker-read", "cancelled-claim"])
def test_a_journal_message_reused_with_other_content_is_dead_lettered(
    ddb_tables: DynamoDBTables, reads_markers: bool
) -> None:
    # GIVEN a packed message over 120 keys, applied through the commit journal
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=reads_markers)
    assert pipeline.process([record("r-1", packed("j-1", 120, 1))], NOW_MS, plenty).journal_batches == 1

    # WHEN its id comes back with other deltas (gate closed: the journal claim meets the marker)
    result = pipeline.process([record("r-2", packed("j-1", 120, 2))], NOW_MS, plenty)

    # THEN it is dead-lettered as id_conflict and the first content stays counted
    assert dlq.codes() == {"r-2": ID_CONFLICT}
    assert result.failed_record_ids == ()
    assert read_all(store, ["j:0", "j:119"]) == {"j:0": {"count": Decimal(1)}, "j:119": {"count": Decimal(1)}}


@DEFECT_6
def test_other_content_whose_increment_dynamodb_refuses_is_an_id_conflict(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a counter near DynamoDB's largest Number, and a message applied under id m-1
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=False)
    pipeline.process(
        [
            record("r-0", '{"id":"edge","key":"edge","deltas":{"big":9E+125}}'),
            record("r-1", {"id": "m-1", "key": "page", "delta": 1}),
        ],
        NOW_MS,
        plenty,
    )

    # WHEN m-1 comes back with content DynamoDB refuses (it checks the Number range before the marker's
    # condition, so the marker is met by the read after the refusal)
    result = pipeline.process([record("r-2", '{"id":"m-1","key":"edge","deltas":{"big":9E+125}}')], NOW_MS, plenty)

    # THEN it is an id conflict, not a duplicate nor an out-of-range counter
    assert dlq.codes() == {"r-2": ID_CONFLICT}
    assert result.already_applied == 0
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(1)}}
