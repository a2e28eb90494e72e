"""The journal's edges, each reproduced against DynamoDB Local with the real adapters.

1. A redelivered message whose marker names an aborted or expired batch was dropped on the direct path
   (a warm container whose marker read gate has closed sends it there): neither applied, nor failed.
2. A claim whose outcome is unknown when retries run out let the batch commit without those messages.
3. A later journal chunk DynamoDB refuses (a sum that needs more than 38 digits) dropped every key in it.
4. A claim DynamoDB refuses as sent (any ``ValidationException``) failed the whole batch on every delivery.

Plus the stall: a record held back by a live journal lease says which batch holds it, and until when.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ReadTimeoutError

from tally.commit.applier import RetryPolicy
from tally.commit.marker_reads import MarkerReadGate
from tally.core.ledger import BatchState, Claim
from tally.core.model import RejectCode, SourceRecord
from tally.store.journal import DynamoDBJournal
from tally_local.kit.faults import DynamoDBFaults
from tests.support.counts import read_all
from tests.support.pipeline import FAST_RETRIES, RecordingDeadLetterQueue, make_pipeline, make_store, plenty
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from tally.pipeline import BatchPipeline
    from tally.store.dynamodb import DynamoDBCounterStore
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 1_000
TTL_S = 35 * 86_400


def warm_pipeline(
    store: DynamoDBCounterStore, *, policy: RetryPolicy = FAST_RETRIES, max_actions: int = 100
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    """The production pipeline in a warm container whose marker read gate has closed (it reads nothing)."""
    return make_pipeline(
        store, policy=policy, max_actions=max_actions, marker_read_gate=MarkerReadGate(quiet_batches=0)
    )


def journal_of(ddb_tables: DynamoDBTables) -> DynamoDBJournal:
    return DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_S)


def header_state(journal: DynamoDBJournal, batch_id: str) -> BatchState | None:
    record = journal.read(batch_id)
    return None if record is None else record.state


# --- 1. a marker naming an aborted or expired batch, met on the direct path ---------------------------


def test_a_redelivery_meeting_an_expired_claim_on_the_direct_path_is_counted(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a message claimed by a journal batch whose invocation was killed before committing (its lease
    # has run out), and a warm container whose marker read gate has closed
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = journal_of(ddb_tables)
    journal.open("killed", NOW_MS - 1, [Claim("m-1")], NOW_MS - 120_000)
    pipeline, dlq = warm_pipeline(store)
    record = SourceRecord("r-1", '{"id":"m-1","key":"k","delta":5}', SENT_MS)

    # WHEN the message is redelivered (alone: a small unit, so the direct path)
    result = pipeline.process([record], NOW_MS, plenty)

    # THEN it is counted once (or handed back), never silently dropped
    assert (result.failed_record_ids, dlq.letters) == ((), [])
    assert read_all(store, ["k"]) == {"k": {"count": Decimal(5)}}
    assert header_state(journal, "killed") is BatchState.ABORTED
    # AND a second redelivery is a duplicate
    again = pipeline.process([record], NOW_MS, plenty)
    assert (again.figures["DuplicatesAlreadyApplied"], again.failed_record_ids) == (1, ())
    assert read_all(store, ["k"]) == {"k": {"count": Decimal(5)}}


def test_a_refused_chunk_split_into_singles_keeps_a_message_claimable_again(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a counter at the top of the Number range, a message whose marker names an aborted batch, and
    # a warm container whose marker read gate has closed
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = journal_of(ddb_tables)
    seed, _ = make_pipeline(store)
    seed.process([SourceRecord("r-0", '{"id":"big-0","key":"huge","delta":9E+125}', SENT_MS)], NOW_MS, plenty)
    journal.open("aborted", NOW_MS + 60_000, [Claim("m-1")], NOW_MS - 1_000)
    assert journal.abort("aborted", NOW_MS, expired_only=False)
    pipeline, dlq = warm_pipeline(store)
    records = [
        SourceRecord("r-1", '{"id":"m-1","key":"small","delta":1}', SENT_MS),
        SourceRecord("r-2", '{"id":"big-1","key":"huge","delta":9E+125}', SENT_MS),
    ]

    # WHEN both arrive in one direct transaction, which DynamoDB refuses for the range (split into singles)
    result = pipeline.process(records, NOW_MS, plenty)

    # THEN the culprit is dead-lettered and the re-claimable message is counted, not dropped
    assert dlq.codes() == {"r-2": "counter_out_of_range"}
    assert result.failed_record_ids == ()
    assert read_all(store, ["small", "huge"]) == {"small": {"count": Decimal(1)}, "huge": {"count": Decimal("9E+125")}}


def test_a_culprit_isolated_through_the_journal_is_counted_when_redriven_later(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN a counter at the top of the Number range, and a small message that would push it past, sharing
    # a key with a message too wide for a direct transaction: their unit goes through the journal, which
    # isolates the culprit and dead-letters it (its marker naming the aborted batch it was isolated in)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    seed, _ = make_pipeline(store)
    seed.process([SourceRecord("r-0", '{"id":"big-0","key":"huge","delta":9E+125}', SENT_MS)], NOW_MS, plenty)
    culprit = SourceRecord(
        "r-1", '{"id":"big-1","events":[{"key":"huge","delta":9E+125},{"key":"shared","delta":1}]}', SENT_MS
    )
    events = ",".join(f'{{"key":"w-{i}","delta":1}}' for i in range(5))
    wide = SourceRecord("r-2", f'{{"id":"wide","events":[{{"key":"shared","delta":1}},{events}]}}', SENT_MS)
    pipeline, dlq = warm_pipeline(store, max_actions=4)
    first = pipeline.process([culprit, wide], NOW_MS, plenty)
    assert (first.failed_record_ids, dlq.codes()) == ((), {"r-1": "counter_out_of_range"})

    # WHEN the counter has come down meanwhile, and the dead letter is redriven alone (a new record, the
    # same body: a small unit, the direct path) to a container whose gate has closed
    down = SourceRecord("r-3", '{"id":"down","key":"huge","delta":-9E+125}', SENT_MS)
    assert pipeline.process([down], NOW_MS, plenty).figures["MessagesApplied"] == 1
    redriven = pipeline.process([SourceRecord("r-4", culprit.body, SENT_MS)], NOW_MS, plenty)

    # THEN it is counted now (its marker names an aborted batch: absent), neither dropped nor dead-lettered
    assert (redriven.failed_record_ids, redriven.figures["MessagesApplied"]) == ((), 1)
    assert dlq.codes() == {"r-1": "counter_out_of_range"}
    expected = {"huge": {"count": Decimal("9E+125")}, "shared": {"count": Decimal(2)}, "w-0": {"count": Decimal(1)}}
    assert read_all(store, ["huge", "shared", "w-0"]) == expected


# --- 2. a claim whose outcome is unknown when the retries run out --------------------------------------


class LoseSecondClaim:
    """The second ``TransactWriteItems`` (the second claim transaction) commits, its answer is lost, and the
    invocation has 4.5 s left when the read timeout comes back (the production client waits 10 s)."""

    def __init__(self, ddb_tables: DynamoDBTables) -> None:
        self.remaining_ms = 60_000
        self.transactions = 0
        self._lose = False
        events = ddb_tables.client.meta.events
        events.register("before-call.dynamodb.TransactWriteItems", self._before)
        events.register("after-call.dynamodb.TransactWriteItems", self._after)

    def remaining(self) -> int:
        return self.remaining_ms

    def _before(self, **_: Any) -> None:
        self.transactions += 1
        self._lose = self.transactions == 2

    def _after(self, **_: Any) -> None:
        if self._lose:
            self._lose = False
            self.remaining_ms = 4_500
            raise ReadTimeoutError(endpoint_url="injected://lost-claim")


def test_a_claim_lost_near_the_deadline_never_lets_the_batch_commit_without_it(ddb_tables: DynamoDBTables) -> None:
    # GIVEN 150 packed messages over the same 20 keys (one journal unit, two claim transactions), the
    # production retry policy, and a second claim that commits but whose answer is lost with 4.5 s left
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    fault = LoseSecondClaim(ddb_tables)
    pipeline, _ = make_pipeline(store, policy=RetryPolicy())  # the sleeps between retries are skipped
    events = ",".join(f'{{"key":"s-{k}","delta":1}}' for k in range(20))
    records = [SourceRecord(f"r-{i}", f'{{"id":"p-{i}","events":[{events}]}}', SENT_MS) for i in range(150)]

    # WHEN the batch is processed, then every record it reported failed is redelivered (with time to spare)
    first = pipeline.process(records, NOW_MS, fault.remaining)
    assert first.figures["JournalBatches"] >= 1
    fault.remaining_ms = 60_000
    failed = set(first.failed_record_ids)
    for _ in range(3):
        if not failed:
            break
        again = pipeline.process([r for r in records if r.record_id in failed], NOW_MS + 600_000, plenty)
        failed = set(again.failed_record_ids)

    # THEN every message counts exactly once: none is marked applied without its deltas
    assert failed == set()
    keys = [f"s-{k}" for k in range(20)]
    assert read_all(store, keys) == {key: {"count": Decimal(150)} for key in keys}


# --- 3. a later journal chunk that DynamoDB refuses ----------------------------------------------------


def test_a_later_chunk_needing_more_than_38_digits_dead_letters_only_its_culprit(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a counter holding 1E+20, and a batch whose journal unit needs two apply chunks: a wide message
    # (150 keys) adding 1E-20 to that counter in its second chunk (41 digits: DynamoDB refuses it), and an
    # innocent message on a key of that same chunk
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    pipeline.process([SourceRecord("r-0", '{"id":"seed","key":"edge","delta":1E+20}', SENT_MS)], NOW_MS, plenty)
    wide = ",".join(f'{{"key":"w-{i}","delta":1}}' for i in range(150)) + ',{"key":"edge","delta":1E-20}'
    records = [
        SourceRecord("r-wide", f'{{"id":"wide","events":[{wide}]}}', SENT_MS),
        SourceRecord("r-ok", '{"id":"ok","events":[{"key":"w-140","delta":10},{"key":"w-1","delta":10}]}', SENT_MS),
    ]

    # WHEN the batch is processed
    result = pipeline.process(records, NOW_MS, plenty)

    # THEN only the message that fed the refused counter is dead-lettered, with the reason; the rest counts
    assert result.failed_record_ids == ()
    assert dlq.codes() == {"r-wide": "counter_out_of_range"}
    assert result.figures["RefusedChunks"] == 0
    expected = {"edge": {"count": Decimal("1E+20")}, "w-1": {"count": Decimal(10)}, "w-140": {"count": Decimal(10)}}
    assert read_all(store, ["edge", "w-1", "w-140", "w-0", "w-149"]) == expected
    # AND a redelivery of both changes nothing
    again = pipeline.process(records, NOW_MS, plenty)
    assert again.failed_record_ids == ()
    assert read_all(store, ["edge", "w-1", "w-140", "w-0", "w-149"]) == expected


# --- the stall ------------------------------------------------------------------------------------------


def test_a_record_held_by_a_live_lease_says_which_batch_holds_it_and_until_when(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a message claimed by a journal batch of another invocation that is still running
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal_of(ddb_tables).open("running", NOW_MS + 90_000, [Claim("m-1")], NOW_MS - 1_000)
    pipeline, _ = make_pipeline(store)
    record = SourceRecord("r-1", '{"id":"m-1","key":"k","delta":1}', SENT_MS)

    # WHEN the message is redelivered meanwhile
    result = pipeline.process([record], NOW_MS, plenty)

    # THEN it is handed back, and the result names the batch and its lease end
    assert result.failed_record_ids == ("r-1",)
    assert [(s.record_id, s.batch_id, s.lease_until_ms) for s in result.stalls] == [("r-1", "running", NOW_MS + 90_000)]


# --- 4. a claim DynamoDB refuses as sent --------------------------------------------------------------------


def test_a_claim_dynamodb_refuses_settles_only_the_message_it_refuses(ddb_tables: DynamoDBTables) -> None:
    # GIVEN twelve messages sharing three keys (a journal unit once transactions hold 4 actions), and DynamoDB
    # refusing, as sent, the unit's first claim and then the first message's claim alone
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = warm_pipeline(store, max_actions=4)
    faults = DynamoDBFaults(ddb_tables.client)
    faults.fail("ValidationException", 2)
    body = '{{"id":"m-{n}","events":[{{"key":"a","delta":1}},{{"key":"b","delta":1}},{{"key":"c","delta":1}}]}}'
    records = [SourceRecord(f"r-{n}", body.format(n=n), SENT_MS) for n in range(12)]
    # WHEN the batch is processed
    result = pipeline.process(records, NOW_MS, plenty)
    # THEN the batch does not fail: the refused message is dead-lettered with DynamoDB's words, the rest counted
    assert result.failed_record_ids == ()
    assert faults.injected == ["error", "error"]
    assert [(letter.record.record_id, letter.rejection.code) for letter in dlq.letters] == [
        ("r-0", RejectCode.WRITE_REFUSED)
    ]
    assert read_all(store, ["a", "b", "c"]) == {key: {"count": Decimal(11)} for key in "abc"}
