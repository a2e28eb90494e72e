"""What the chaos run found, reduced to deterministic reproductions (docs/reliability.md, "Findings").

Each test states the behaviour tally should have. A test marked ``xfail(strict=True)`` reproduces a defect
that is not fixed yet: it fails today, and the day the fix lands it passes, which strict mode turns into a
failure so that the marker is removed.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from tally.core.ledger import Claim
from tally.core.model import SourceRecord
from tally.store.journal import DynamoDBJournal
from tests.support.counts import read_all
from tests.support.pipeline import make_pipeline, make_store
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from tests.conftest import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 1_000


def test_two_messages_of_one_expired_journal_batch_are_claimed_again_together(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a journal batch that claimed two messages sharing a key, then died before committing
    # (an invocation killed at its deadline): its header is PREPARING and its lease has expired
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, 35 * 86_400)
    journal.open("dead-batch", NOW_MS - 1, [Claim("m-1"), Claim("m-2")], NOW_MS - 60_000)
    pipeline, dead_letters = make_pipeline(store)
    records = [
        SourceRecord("r-1", '{"id":"m-1","key":"shared","delta":1}', SENT_MS),
        SourceRecord("r-2", '{"id":"m-2","key":"shared","delta":2}', SENT_MS),
    ]

    # WHEN both messages are redelivered in one batch
    result = pipeline.process(records, NOW_MS, lambda: 60_000)

    # THEN the dead batch is aborted, both messages are claimed again and counted once
    assert result.failed_record_ids == ()
    assert dead_letters.letters == []
    assert read_all(store, ["shared"]) == {"shared": {"count": Decimal(3)}}
