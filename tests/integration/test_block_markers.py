"""Block markers for numbered message ids, against DynamoDB Local.

Numbered ids (``<session>.<seq>``, ``tally.core.numbered_ids``) keep their markers as attributes of shared block
items. Each test checks that every reader sees what a marker of its own would say, and that the faults the
per-message markers are proven under (duplicates within and across batches, concurrent invocations on the
same block with injected ``TransactionConflict``, lost responses, aborted journal claims, other content
under a used id) still count each message once. The fault tests of ``test_exactly_once.py`` run with
numbered ids too (``block-markers``).
"""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.commit.applier import unfenced_batch_id
from tally.core.aggregate import message_totals
from tally.core.digest import DIGEST_BYTES
from tally.core.ledger import Claim, MarkersExistError
from tally.core.model import CounterEvent, Message, SourceRecord
from tally.core.numbered_ids import BLOCK_SEQS, MAX_SEQ, numbered_id
from tally.core.plan import plan_transactions
from tally.cost.capacity import item_size
from tally.reader.store_view import read_counters
from tally.store.journal import DynamoDBJournal
from tally.store.markers import BLOCK_EXPIRY_MARGIN_S
from tally_local.kit.faults import DynamoDBFaults
from tests.integration.test_bounded_counters import bounded_pipeline, record, value_of
from tests.integration.test_id_conflicts import pipeline_with_gate
from tests.support.counts import nonzero, read_all
from tests.support.pipeline import TTL_DAYS, make_pipeline, make_store, plenty, write_chunk
from tests.support.tables import scan_all
from tests.support.threads import at_once
from tests.support.workload import SENT_MS, generate

if TYPE_CHECKING:
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 1_000
SESSION = "0123456789abcdef0123456789abcdef"


def single(record_id: str, seq: int, key: str = "page", delta: int = 1, session: str = SESSION) -> SourceRecord:
    body = {"id": numbered_id(session, seq), "key": key, "delta": delta}
    return SourceRecord(record_id, json.dumps(body), SENT_MS)


def ledger_items(tables: DynamoDBTables) -> list[dict[str, Any]]:
    return scan_all(tables.client, tables.markers_table)


def test_a_batch_of_numbered_messages_writes_one_marker_item_per_block(ddb_tables: DynamoDBTables) -> None:
    # GIVEN 100 consecutive numbered single-event messages over 7 keys
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    records = [single(f"r{seq}", seq, key=f"k{seq % 7}") for seq in range(100)]
    calls: list[str] = []
    ddb_tables.client.meta.events.register("before-call.dynamodb.TransactWriteItems", lambda **_: calls.append("tx"))

    # WHEN they are processed, then processed again (a redelivery)
    first = pipeline.process(records, NOW_MS, plenty)
    again = pipeline.process(records, NOW_MS, plenty)

    # THEN one transaction wrote them (7 blocks + 7 keys), the ledger holds the 7 block items and no
    # per-message marker, and the redelivery counted nothing
    assert (first.figures["MessagesApplied"], first.failed_record_ids, calls) == (100, (), ["tx"])
    assert (again.figures["MessagesApplied"], again.figures["DuplicatesAlreadyApplied"]) == (0, 100)
    ids = sorted(item["id"]["S"] for item in ledger_items(ddb_tables))
    assert ids == sorted(f"s#{SESSION}#{block}" for block in range(-(-100 // BLOCK_SEQS)))
    assert sum(read_counters(store, f"k{i}")["count"] for i in range(7)) == 100
    assert dlq.letters == []


def test_every_marker_read_says_what_an_own_marker_says(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a numbered message and a random-id message, each applied with the same content
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    numbered, own = numbered_id(SESSION, 37), "f" * 32
    messages = [message_totals(Message(mid, (CounterEvent("page", {"count": 1}),))) for mid in (numbered, own)]
    chunk = plan_transactions(messages).chunks[0]
    write_chunk(store, chunk, NOW_MS)

    # WHEN each marker is read strongly, eventually (with a neighbour of the block never written), and met
    # by a cancelled transaction
    with pytest.raises(MarkersExistError) as exists:
        write_chunk(store, chunk, NOW_MS)
    eventually = store.read_markers([numbered, own, numbered_id(SESSION, 36)])

    # THEN both kinds give the same record, field by field, and the unwritten neighbour has none
    assert set(eventually) == {numbered, own}
    assert exists.value.message_ids == {numbered, own}
    for message in messages:
        strongly = store.read_marker(message.message_id)
        assert strongly == eventually[message.message_id]
        assert strongly is not None
        assert (strongly.applied_at_ms, strongly.batch_id, strongly.digest) == (NOW_MS, None, message.digest)
        assert exists.value.markers[message.message_id].digest == message.digest
    assert store.read_marker(numbered_id(SESSION, 36)) is None
    own_marker, block_marker = store.read_marker(own), store.read_marker(numbered)
    assert own_marker is not None
    assert block_marker is not None
    assert block_marker.expires_at_s == own_marker.expires_at_s + BLOCK_EXPIRY_MARGIN_S


def test_a_re_send_meeting_its_block_cancels_only_itself(ddb_tables: DynamoDBTables) -> None:
    # GIVEN seq 3 applied, and the marker read gate closed (existing markers met only by cancelled writes)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=False)
    pipeline.process([single("a3", 3)], NOW_MS, plenty)

    # WHEN a batch brings seqs 0..15 of that block, seq 3 among them (one action on the block: cancelled)
    result = pipeline.process([single(f"b{seq}", seq) for seq in range(BLOCK_SEQS)], NOW_MS, plenty)

    # THEN seq 3 is settled as a duplicate and the other 15 are written on the second try
    assert (
        result.figures["MessagesApplied"],
        result.figures["DuplicatesAlreadyApplied"],
        result.failed_record_ids,
    ) == (15, 1, ())
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(BLOCK_SEQS)}}
    assert dlq.letters == []


@pytest.mark.parametrize("reads_markers", [True, False], ids=["read-first", "cancelled"])
def test_other_content_under_a_used_numbered_id_is_an_id_conflict(
    ddb_tables: DynamoDBTables, reads_markers: bool
) -> None:
    # GIVEN seq 5 applied with delta 1
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=reads_markers)
    pipeline.process([single("r1", 5)], NOW_MS, plenty)

    # WHEN seq 5 comes again with delta 9, beside seq 6 of the same block
    pipeline.process([single("r2", 5, delta=9), single("r3", 6)], NOW_MS, plenty)

    # THEN the other content is dead-lettered as an id conflict and seq 6 counts
    assert dlq.codes() == {"r2": "id_conflict"}
    assert read_all(store, ["page"]) == {"page": {"count": Decimal(2)}}


def test_two_invocations_writing_the_same_blocks_with_conflicts_count_each_message_once(
    ddb_tables: DynamoDBTables, dynamodb_local: object
) -> None:
    # GIVEN two containers (their own clients), each given the even or the odd seqs of the same blocks,
    # and overlapping copies; DynamoDB Local never raises TransactionConflict, so each client is given
    # three, as AWS raises when two transactions write one item at once
    records = [single(f"r{seq}", seq, key=f"k{seq % 5}") for seq in range(160)]
    halves = [records[0::2] + records[1:40:2], records[1::2] + records[0:40:2]]
    clients = [ddb_tables.client, dynamodb_local.client()]  # type: ignore[attr-defined]
    stores = [make_store(client, ddb_tables.counters_table, ddb_tables.markers_table) for client in clients]
    pipelines = [make_pipeline(store)[0] for store in stores]
    for client in clients:
        DynamoDBFaults(client).cancel("TransactionConflict", count=3)
    barrier = threading.Barrier(2)
    results = []

    def run(index: int) -> None:
        barrier.wait()
        results.append(pipelines[index].process(halves[index], NOW_MS, plenty))

    at_once(run, [0, 1])

    # WHEN what either reported failed is redelivered (a copy held by the other's live batch comes back)
    failed = {record_id for result in results for record_id in result.failed_record_ids}
    again = pipelines[0].process([r for r in records if r.record_id in failed], NOW_MS, plenty)

    # THEN every message counted exactly once
    assert again.failed_record_ids == ()
    assert sum(result.figures["MessagesApplied"] for result in [*results, again]) == 160
    assert {f"k{i}": read_counters(stores[0], f"k{i}") for i in range(5)} == {
        f"k{i}": {"count": Decimal(32)} for i in range(5)
    }


def test_a_lost_journal_claim_on_blocks_is_recognised_as_its_own(ddb_tables: DynamoDBTables) -> None:
    # GIVEN 1,800 numbered single events over 3 keys: 113 blocks and 3 keys, one unit too large for a
    # transaction (the journal), whose first claim's answer is lost
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    workload = generate(seed=21, messages=1_800, keys=3, packed_every=10**6, resend_rate=0.05, numbered=True)
    faults.lose_responses(1)

    # WHEN the batch is processed, and then redelivered whole
    first = pipeline.process(workload.records, NOW_MS, plenty)
    again = pipeline.process(workload.records, NOW_MS, plenty)

    # THEN the retried claim met its own markers in the blocks and carried on: all counted once
    assert faults.injected == ["lose_response"]
    assert first.figures["JournalBatches"] == 1
    assert (first.figures["MessagesApplied"], first.failed_record_ids) == (1_800, ())
    assert again.figures["MessagesApplied"] == 0
    assert read_all(store, workload.expected) == nonzero(workload.expected)


def test_a_claim_of_an_aborted_batch_in_a_block_is_replaced_beside_new_claims(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a journal batch that claimed seqs 0-3 of a block with other content, then died (lease over)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    # (and the receive time that placed its events without ts)
    dead = [Claim(numbered_id(SESSION, seq), None, b"\x01" * DIGEST_BYTES, NOW_MS - 5) for seq in range(4)]
    journal.open("dead-batch", NOW_MS - 1, dead, NOW_MS - 60_000)
    pipeline, dlq = pipeline_with_gate(store, reads_markers=True)

    # WHEN seqs 0-15 arrive (so the journal's claim replaces 4 markers and writes 12 in one block action)
    records = [single(f"r{seq}", seq, key=f"k{seq % 2}") for seq in range(BLOCK_SEQS)]
    result = pipeline.process(records, NOW_MS, plenty)

    # THEN the aborted claims counted nothing: every message counts once, under its new content
    assert (result.figures["MessagesApplied"], result.failed_record_ids, dlq.letters) == (BLOCK_SEQS, (), [])
    assert {key: read_counters(store, key) for key in ("k0", "k1")} == {
        "k0": {"count": Decimal(8)},
        "k1": {"count": Decimal(8)},
    }
    marker = store.read_marker(numbered_id(SESSION, 2))
    assert marker is not None
    assert marker.batch_id not in {None, "dead-batch"}
    assert marker.digest != b"\x01" * DIGEST_BYTES
    # AND no marker keeps the aborted claim's placing time (these count in no window: they keep none)
    assert marker.placed_ms is None


@pytest.mark.parametrize(
    ("batch_id", "placed_ms", "size"),
    [
        pytest.param("f" * 24, NOW_MS - 1, 997, id="fenced batch, placing times"),
        pytest.param(unfenced_batch_id(), NOW_MS - 1, 965, id="chunked batch, placing times"),
        pytest.param(unfenced_batch_id(), None, 831, id="chunked batch"),
        pytest.param("b" * 32, None, 991, id="a uuid4 batch of earlier code"),
    ],
)
def test_a_full_block_of_journal_claims_stays_within_one_write_unit(
    ddb_tables: DynamoDBTables, batch_id: str, placed_ms: int | None, size: int
) -> None:
    # GIVEN the largest block there is: the last block of a session, every seq claimed by one journal batch, each
    # claim with a digest and, for messages without ts, the receive time that placed them (6 bytes more each)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    seqs = range((MAX_SEQ // BLOCK_SEQS) * BLOCK_SEQS, MAX_SEQ + 1)
    claims = [Claim(numbered_id(SESSION, seq), None, b"\xff" * DIGEST_BYTES, placed_ms) for seq in seqs]
    journal.open(batch_id, NOW_MS + 60_000, claims, NOW_MS)

    # WHEN the stored item is measured by DynamoDB's item size rules
    (item,) = [found for found in ledger_items(ddb_tables) if found["id"]["S"].startswith("s#")]

    # THEN it is within 1 KB: every transactional write to it costs 2 write units (a uuid4 id, which earlier code
    # drew for a chunked batch, with placing times, would make 1,125 bytes: 4 units)
    assert item_size(item) == size <= 1024
    markers = store.read_markers([claim.message_id for claim in claims])
    assert len(markers) == BLOCK_SEQS
    assert {marker.placed_ms for marker in markers.values()} == {placed_ms}


def test_a_block_expires_after_its_latest_marker(ddb_tables: DynamoDBTables) -> None:
    # GIVEN seq 0 applied now and seq 1 of the same block a day later
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    pipeline.process([single("r0", 0)], NOW_MS, plenty)
    later = NOW_MS + 86_400_000
    pipeline.process([single("r1", 1)], later, plenty)

    # WHEN the block is read THEN its expiry is the later write's horizon (plus the margin for writes
    # landing out of order), so no marker it holds expires before its own claim time + TTL
    (item,) = ledger_items(ddb_tables)
    assert int(item["expires_at"]["N"]) == later // 1000 + TTL_DAYS * 86_400 + BLOCK_EXPIRY_MARGIN_S


def test_a_numbered_sale_refused_by_a_bound_and_redriven_after_a_restock_counts_once(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN stock starting at 5 with a floor of 0, and numbered sales of one block: seq 0 sells 3, seq 1 sells 7
    pipeline, dlq = bounded_pipeline(ddb_tables)
    sale = numbered_id(SESSION, 1)
    records = [record(numbered_id(SESSION, 0), "stock:1", stock=-3), record(sale, "stock:1", stock=-7)]

    # WHEN the batch is processed (seq 1 refused at the floor), the dead letter redriven after a restock of 10
    # (a new record, the same body), and then redriven again
    pipeline.process(records, NOW_MS, plenty)
    refused = [letter.record.body for letter in dlq.letters]
    pipeline.process([record(numbered_id(SESSION, 2), "stock:1", stock=10)], NOW_MS, plenty)
    after = pipeline.process([SourceRecord("redrive-1", refused[0], NOW_MS)], NOW_MS, plenty)
    again = pipeline.process([SourceRecord("redrive-2", refused[0], NOW_MS)], NOW_MS, plenty)

    # THEN the refused sale had no marker in the block until it counted, then counted once: 5 - 3 + 10 - 7
    assert [str(letter.rejection.code) for letter in dlq.letters] == ["below_floor"]
    assert (after.figures["MessagesApplied"], again.figures["DuplicatesAlreadyApplied"]) == (1, 1)
    assert value_of(ddb_tables, "stock:1", "stock") == 5
