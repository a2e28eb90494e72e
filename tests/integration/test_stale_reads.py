"""The marker pre-read is eventually consistent: a stale answer may cost a transaction, never a count.

``DynamoDBCounterStore.read_markers`` reads a batch's markers before writing, so that re-sent messages
do not cancel whole transactions; the conditional marker writes are what guard exactly-once. These tests
make DynamoDB Local answer that read stale (a botocore ``after-call`` hook rewrites the parsed response)
and check that every message is still counted once.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.ledger import Claim
from tally.core.model import SourceRecord
from tally.store.journal import DynamoDBJournal
from tests.support.counts import read_all
from tests.support.pipeline import make_pipeline, make_store
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 1_000
MARKER_READ = "after-call.dynamodb.BatchGetItem"


def record(record_id: str, message_id: str, delta: int, key: str = "shared") -> SourceRecord:
    return SourceRecord(record_id, f'{{"id":"{message_id}","key":"{key}","delta":{delta}}}', SENT_MS)


def answer_marker_reads(client: DynamoDBClient, rewrite: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    """Rewrite every parsed ``BatchGetItem`` answer in place; returns the function that stops it."""

    def hook(parsed: dict[str, Any], **_: Any) -> None:
        rewrite(parsed)

    client.meta.events.register(MARKER_READ, hook)
    return lambda: client.meta.events.unregister(MARKER_READ, hook)


def test_markers_the_read_misses_are_caught_by_the_conditional_writes(ddb_tables: DynamoDBTables) -> None:
    # GIVEN three messages counted once
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dead_letters = make_pipeline(store)
    first = [record(f"r-{n}", f"m-{n}", n) for n in (1, 2, 3)]
    assert pipeline.process(first, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # WHEN they come again with a new message, and the marker read answers as if none of them existed yet
    stop = answer_marker_reads(ddb_tables.client, lambda parsed: parsed.update(Responses={}))
    try:
        result = pipeline.process([*first, record("r-4", "m-4", 4)], NOW_MS, lambda: 60_000)
    finally:
        stop()
    # THEN the transaction's conditions catch the three, only the new message counts, nothing is refused
    assert result.failed_record_ids == ()
    assert result.figures["DuplicatesAlreadyApplied"] == 3
    assert result.figures["MessagesApplied"] == 1
    assert dead_letters.letters == []
    assert read_all(store, ["shared"]) == {"shared": {"count": Decimal(1 + 2 + 3 + 4)}}


def test_a_stale_marker_of_an_aborted_batch_does_not_count_its_message_again(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a message claimed by a journal batch that died before committing (its lease has expired)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, 35 * 86_400)
    journal.open("dead-batch", NOW_MS - 1, [Claim("m-1")], NOW_MS - 60_000)
    pipeline, dead_letters = make_pipeline(store)
    message = [record("r-1", "m-1", 5)]
    # AND the marker read of its redelivery, which names the dead batch, kept as a stale answer
    answers: list[dict[str, Any]] = []
    stop = answer_marker_reads(ddb_tables.client, lambda parsed: answers.append(copy.deepcopy(parsed)))
    try:
        # WHEN the redelivery aborts the dead batch and counts the message under a batch of its own
        assert pipeline.process(message, NOW_MS, lambda: 60_000).failed_record_ids == ()
    finally:
        stop()
    (stale,) = answers
    assert stale["Responses"][ddb_tables.markers_table], "the read should have found the dead batch's marker"

    # AND the message comes once more, while the marker read still answers with the dead batch
    def replay(parsed: dict[str, Any]) -> None:
        parsed.clear()
        parsed.update(copy.deepcopy(stale))

    stop = answer_marker_reads(ddb_tables.client, replay)
    try:
        result = pipeline.process(message, NOW_MS, lambda: 60_000)
    finally:
        stop()
    # THEN the replacing claim's condition fails on the current marker, which names a finished batch:
    # the message is already applied and counted once
    assert result.failed_record_ids == ()
    assert result.figures["DuplicatesAlreadyApplied"] == 1
    assert dead_letters.letters == []
    assert read_all(store, ["shared"]) == {"shared": {"count": Decimal(5)}}
