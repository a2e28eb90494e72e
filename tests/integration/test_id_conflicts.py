"""An id reused with different content, against DynamoDB Local.

Two producers, or one buggy producer, may send different events under one id. Exactly one content may
count under an id (its marker says which); every other content must be dead-lettered as ``id_conflict``,
never silently dropped as a duplicate. Each way an existing marker is met is exercised: another copy in
the same batch, the marker read before writing, a direct transaction cancelled by the marker (the read
gate closed), a journal claim cancelled by it, and the marker read after DynamoDB refused the increment.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.commit.applier import Applier
from tally.commit.marker_reads import MarkerReadGate
from tally.core.aggregate import MessageTotals, message_totals
from tally.core.decode import decode_message
from tally.core.digest import DIGEST_BYTES, content_digest
from tally.core.ledger import Claim, MarkersExistError
from tally.core.limits import WIRE_LIMITS
from tally.core.model import CounterEvent, Message, SourceRecord
from tally.core.plan import plan_transactions
from tally.cost.capacity import item_size
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.store.journal import DynamoDBJournal
from tests.integration.test_stale_reads import answer_marker_reads
from tests.support.counts import read_all
from tests.support.pipeline import FAST_RETRIES, TTL_DAYS, RecordingDeadLetterQueue, make_store, plenty, write_chunk
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from tally.store.dynamodb import DynamoDBCounterStore
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 1_000
ID_CONFLICT = "id_conflict"


def pipeline_with_gate(
    store: DynamoDBCounterStore, *, reads_markers: bool
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    """The production pipeline; ``reads_markers=False`` closes the marker read gate for good, so existing
    markers are only met by cancelled writes."""
    dlq = RecordingDeadLetterQueue()
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    gate = MarkerReadGate() if reads_markers else MarkerReadGate(quiet_batches=0)
    applier = Applier(store, journal, policy=FAST_RETRIES, sleep=lambda _: None, marker_read_gate=gate)
    settings = PipelineSettings(limits=WIRE_LIMITS, dedup_horizon_ms=TTL_DAYS * 86_400_000)
    return BatchPipeline(applier, dlq, settings), dlq


def record(record_id: str, body: object) -> SourceRecord:
    return SourceRecord(record_id, body if isinstance(body, str) else json.dumps(body), SENT_MS)


def packed(message_id: str, keys: int, delta: int) -> dict[str, object]:
    """A message over ``keys`` keys: more than a direct transaction holds, so it goes through the journal."""
    return {"id": message_id, "events": [{"key": f"j:{index}", "delta": delta} for index in range(keys)]}


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
    assert result.figures["DuplicatesInBatch"] == 1


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
    assert second.figures["DuplicatesAlreadyApplied"] == 2
    assert read_all(store, ["k", "a", "b"]) == {
        "k": {"count": Decimal(1)},
        "a": {"x": Decimal(1), "y": Decimal("2.5")},
        "b": {"count": Decimal(3)},
    }


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
    assert result.figures["MarkerReads"] == (1 if reads_markers else 0)
    assert dlq.codes() == {"r-2": ID_CONFLICT}
    assert result.failed_record_ids == ()
    assert result.figures["DuplicatesAlreadyApplied"] == 0
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(3)}}


@pytest.mark.parametrize("reads_markers", [True, False], ids=["marker-read", "cancelled-claim"])
def test_a_journal_message_reused_with_other_content_is_dead_lettered(
    ddb_tables: DynamoDBTables, reads_markers: bool
) -> None:
    # GIVEN a packed message over 120 keys, applied through the commit journal
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=reads_markers)
    assert pipeline.process([record("r-1", packed("j-1", 120, 1))], NOW_MS, plenty).figures["JournalBatches"] == 1

    # WHEN its id comes back with other deltas (gate closed: the journal claim meets the marker)
    result = pipeline.process([record("r-2", packed("j-1", 120, 2))], NOW_MS, plenty)

    # THEN it is dead-lettered as id_conflict and the first content stays counted
    assert dlq.codes() == {"r-2": ID_CONFLICT}
    assert result.failed_record_ids == ()
    assert read_all(store, ["j:0", "j:119"]) == {"j:0": {"count": Decimal(1)}, "j:119": {"count": Decimal(1)}}


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
    assert result.figures["DuplicatesAlreadyApplied"] == 0
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(1)}}


def test_a_marker_of_an_aborted_batch_is_replaced_by_the_new_content(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a journal batch that claimed m-1 with some content, then died before committing (lease over)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    journal.open("dead-batch", NOW_MS - 1, [Claim("m-1", digest=b"\x01" * DIGEST_BYTES)], NOW_MS - 60_000)
    # (the marker read finds it: with the gate closed, the direct path would drop such a
    # message, which the "journal" branch prevents)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=True)

    # WHEN m-1 arrives with other content
    result = pipeline.process([record("r-1", {"id": "m-1", "key": "page", "delta": 4})], NOW_MS, plenty)

    # THEN the aborted claim counted nothing, so there is no conflict: the new content counts, and its
    # digest replaces the old one on the marker
    assert dlq.letters == []
    assert result.figures["MessagesApplied"] == 1
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(4)}}
    marker = store.read_marker("m-1")
    assert marker is not None
    assert marker.digest is not None
    assert marker.digest != b"\x01" * DIGEST_BYTES


def test_a_marker_written_before_digests_existed_matches_any_content(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a marker without a digest (as every marker written before this change), for m-1 applied
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    legacy = MessageTotals("m-1", {"page": {"count": 1}}, 1)  # no digest: none stored
    write_chunk(store, plan_transactions([legacy]).chunks[0], NOW_MS)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=False)

    # WHEN m-1 arrives with any content
    result = pipeline.process([record("r-1", {"id": "m-1", "key": "page", "delta": 7})], NOW_MS, plenty)

    # THEN it is a duplicate, as it was before digests: nothing to compare with
    assert dlq.letters == []
    assert result.figures["DuplicatesAlreadyApplied"] == 1
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(1)}}


def test_a_copy_matching_what_the_marker_counts_is_a_duplicate_even_after_a_conflicting_first_copy(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN m-1 applied with delta 1
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=True)
    pipeline.process([record("r-1", {"id": "m-1", "key": "page", "delta": 1})], NOW_MS, plenty)

    # WHEN a batch brings m-1 with delta 5 first, then m-1 with delta 1 (a redelivery), then delta 6
    pipeline.process(
        [
            record("r-2", {"id": "m-1", "key": "page", "delta": 5}),
            record("r-3", {"id": "m-1", "key": "page", "delta": 1}),
            record("r-4", {"id": "m-1", "key": "page", "delta": 6}),
        ],
        NOW_MS,
        plenty,
    )

    # THEN what the marker counts decides: delta 1 is a duplicate, both other contents are id conflicts
    assert dlq.codes() == {"r-2": ID_CONFLICT, "r-4": ID_CONFLICT}
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(1)}}


def test_conflicting_copies_of_an_unapplied_message_are_redelivered_with_it(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a batch with two contents under one id, and no time left to apply anything
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=True)
    records = [
        record("r-1", {"id": "m-1", "key": "page", "delta": 1}),
        record("r-2", {"id": "m-1", "key": "page", "delta": 5}),
    ]

    # WHEN it is processed
    result = pipeline.process(records, NOW_MS, lambda: 0)

    # THEN nothing is decided yet: both records come back (which content wins is decided when one counts)
    assert set(result.failed_record_ids) == {"r-1", "r-2"}
    assert dlq.letters == []


def test_markers_store_the_digest_and_every_read_returns_it(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a message applied in a direct transaction
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    message = message_totals(Message("m-1", (CounterEvent("page", {"count": 1}),)))
    assert len(message.digest) == DIGEST_BYTES
    chunk = plan_transactions([message]).chunks[0]
    write_chunk(store, chunk, NOW_MS)

    # WHEN its marker is read, strongly and eventually consistently, and met by a cancelled transaction
    with pytest.raises(MarkersExistError) as exists:
        write_chunk(store, chunk, NOW_MS)
    strongly = store.read_marker("m-1")
    eventually = store.read_markers(["m-1"])["m-1"]

    # THEN each says the digest the marker was written with
    assert {mid: met.digest for mid, met in exists.value.markers.items()} == {"m-1": message.digest}
    assert strongly is not None
    assert strongly.digest == eventually.digest == message.digest


def test_the_digest_keeps_a_marker_within_one_write_unit(ddb_tables: DynamoDBTables) -> None:
    # GIVEN markers of a direct transaction and of a journal batch, for producer-assigned ids (32 hex)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = pipeline_with_gate(store, reads_markers=False)
    direct_id, journal_id = "d" * 32, "j" * 32
    pipeline.process(
        [record("r-1", {"id": direct_id, "key": "page", "delta": 1}), record("r-2", packed(journal_id, 120, 1))],
        NOW_MS,
        plenty,
    )

    # WHEN their stored items are measured by DynamoDB's item size rules
    sizes = {}
    for message_id in (direct_id, journal_id):
        item = ddb_tables.client.get_item(
            TableName=ddb_tables.markers_table, Key={"id": {"S": f"m#{message_id}"}}, ConsistentRead=True
        )["Item"]
        assert len(item["digest"]["B"]) == DIGEST_BYTES
        sizes[message_id] = (item_size(item), item_size({k: v for k, v in item.items() if k != "digest"}))

    # THEN the digest adds 22 bytes (name and value), and a marker stays far within 1 KB
    assert sizes == {direct_id: (90, 68), journal_id: (117, 95)}  # a chunked batch's id: 22 characters


def test_a_stale_marker_read_never_decides_against_the_content_that_counts(ddb_tables: DynamoDBTables) -> None:
    # GIVEN m-1 claimed with content X by a batch that died (lease over), then counted with content Y by its
    # redelivery, which replaced the dead claim; the marker read of that redelivery is kept (it names the
    # dead batch and X's digest)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    x = record("r-x", {"id": "m-1", "key": "page", "delta": 1})
    y = record("r-y", {"id": "m-1", "key": "page", "delta": 2})
    x_message = decode_message(str(x.body))
    assert isinstance(x_message, Message)
    journal.open("dead-batch", NOW_MS - 1, [Claim("m-1", digest=content_digest(x_message))], NOW_MS - 60_000)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=True)
    answers: list[dict[str, Any]] = []
    stop = answer_marker_reads(ddb_tables.client, lambda parsed: answers.append(copy.deepcopy(parsed)))
    try:
        assert pipeline.process([y], NOW_MS, plenty).figures["MessagesApplied"] == 1
    finally:
        stop()
    (stale,) = answers

    # WHEN X arrives again while the marker read still answers with the dead batch's marker
    def replay(parsed: dict[str, Any]) -> None:
        parsed.clear()
        parsed.update(copy.deepcopy(stale))

    stop = answer_marker_reads(ddb_tables.client, replay)
    try:
        result = pipeline.process([x], NOW_MS, plenty)
    finally:
        stop()

    # THEN the stale marker only sends X to a replacing claim, whose cancellation returns the current
    # marker: Y counts, so X is an id conflict (not a duplicate of its own stale claim)
    assert result.figures["MarkerReads"] == 1
    assert dlq.codes() == {"r-x": ID_CONFLICT}
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(2)}}
