"""Post-commit steps on DynamoDB Local, through the handlers' wiring (``tally.runtime.wire_pipeline``).

A key's item at DynamoDB's 400 KB item limit takes the counters' ADD (an existing counter keeps its size)
but refuses what would grow it: a new gauge, a new distinct count. Those writes can never succeed; before
the post-commit steps settled each message, the refusal escaped after the commit and failed the batch on
every delivery.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tally.config import Settings
from tally.core.model import SourceRecord
from tally.reader import CounterReader
from tally.runtime import wire_pipeline
from tally.store.schema import item_key
from tests.support.pipeline import RecordingDeadLetterQueue

if TYPE_CHECKING:
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = 4_102_444_800_000
ITEM_LIMIT_BYTES = 400 * 1024
PAD = "pad"


def record(n: int, **body: object) -> SourceRecord:
    return SourceRecord(f"r{n}", json.dumps({"id": f"m{n}", **body}), NOW_MS)


def fill_to_the_limit(tables: DynamoDBTables, key: str, room: int) -> None:
    """Grow ``key``'s item (as years of counters would) until only ``room`` bytes are left below 400 KB."""
    stored = tables.client.get_item(TableName=tables.counters_table, Key=item_key(key), ConsistentRead=True)["Item"]
    size = sum(len(name) + len(next(iter(value.values()))) for name, value in stored.items())
    pad = "x" * (ITEM_LIMIT_BYTES - size - len(PAD) - room)
    tables.client.update_item(
        TableName=tables.counters_table,
        Key=item_key(key),
        UpdateExpression="SET #pad = :pad",
        ExpressionAttributeNames={"#pad": PAD},
        ExpressionAttributeValues={":pad": {"S": pad}},
    )


def test_a_key_item_at_the_size_limit_dead_letters_its_gauges_and_members_and_counts_once(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN the handlers' pipeline, and a key whose item is a few bytes below DynamoDB's 400 KB limit
    settings = Settings(ddb_tables.counters_table, ddb_tables.markers_table, dlq_url=None)
    dlq = RecordingDeadLetterQueue()
    pipeline = wire_pipeline(ddb_tables.client, dlq, settings)
    assert pipeline.process([record(0, key="big", delta=1)], NOW_MS, lambda: 60_000).failed_record_ids == ()
    fill_to_the_limit(ddb_tables, "big", room=6)
    # WHEN a batch adds to its counter (fits) with a new gauge and a new distinct member (do not fit), beside
    # a message on another key, and the batch is delivered twice
    batch = [
        record(1, key="big", delta=1, gauges={"peak_of_the_day": {"max": 7}}),
        record(2, key="big", delta=1, distinct={"viewers": "user-1"}),
        record(3, key="small", delta=1, gauges={"peak_of_the_day": {"max": 7}}, distinct={"viewers": "user-1"}),
    ]
    first = pipeline.process(batch, NOW_MS, lambda: 60_000)
    again = pipeline.process(batch, NOW_MS, lambda: 60_000)
    # THEN neither delivery fails: each message has one fate each time (counted; the refused step's letter)
    assert first.failed_record_ids == again.failed_record_ids == ()
    assert [dlq.codes() for _ in (0,)] == [{"r1": "gauge_refused", "r2": "members_refused"}]
    assert [str(letter.rejection.code) for letter in dlq.letters] == ["gauge_refused", "members_refused"] * 2
    assert "size" in dlq.letters[0].rejection.detail
    # and the counters count once; the small key's gauge and member are written
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client)
    assert reader.get("big").values == {"count": 3}
    small = reader.get("small")
    assert small.values == {"count": 1}
    assert {kind: dict(values) for kind, values in small.gauges.items()} == {"max": {"peak_of_the_day": 7}}
    assert dict(small.distinct) == {"viewers": 1}
