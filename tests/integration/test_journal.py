"""The commit journal on DynamoDB Local: one ADD per key per batch, whatever the batch size."""

from __future__ import annotations

import json
import random
from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.model import SourceRecord
from tally.reader.store_view import read_counters
from tests.support.counts import nonzero, read_all
from tests.support.pipeline import make_pipeline, make_store, plenty
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 60_000


class AddCounter:
    """Counts, per counter key, the ADD updates sent in transactions (read from the requests themselves)."""

    def __init__(self, client: DynamoDBClient, counters_table: str) -> None:
        self.adds: Counter[str] = Counter()
        self.requests = 0
        self._table = counters_table
        client.meta.events.register("before-call.dynamodb.*", self._count)

    def _count(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.requests += 1
        if model.name != "TransactWriteItems":
            return
        for action in json.loads(params["body"])["TransactItems"]:
            update = action.get("Update")
            if update and update["TableName"] == self._table:
                self.adds[update["Key"]["pk"]["S"]] += 1


def packed_batch(
    seed: int, messages: int, events: int, keys: int
) -> tuple[list[SourceRecord], dict[str, dict[str, Decimal]]]:
    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** 1.1 for rank in range(keys)]
    expected: dict[str, dict[str, Decimal]] = {}
    records = []
    for number in range(messages):
        body_events = []
        for _ in range(events):
            key = f"key-{rng.choices(range(keys), weights)[0]}"
            delta = Decimal(rng.randint(1, 500)).scaleb(-2)
            body_events.append(f'{{"key":"{key}","deltas":{{"units":1,"cost":{delta}}}}}')
            counters = expected.setdefault(key, {"units": Decimal(0), "cost": Decimal(0)})
            counters["units"] += 1
            counters["cost"] += delta
        body = f'{{"id":"pack-{seed}-{number}","events":[{",".join(body_events)}]}}'
        records.append(SourceRecord(f"r-{seed}-{number}", body, SENT_MS))
    return records, expected


def test_a_large_packed_batch_writes_exactly_one_add_per_key(ddb_tables: DynamoDBTables) -> None:
    # GIVEN 100 packed messages of 50 events over 400 Zipf-distributed keys (one connected unit)
    adds = AddCounter(ddb_tables.client, ddb_tables.counters_table)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    records, expected = packed_batch(seed=3, messages=100, events=50, keys=400)
    # WHEN the batch is processed
    result = pipeline.process(records, NOW_MS, plenty)
    requests = adds.requests
    # THEN every key got exactly one ADD, and the counts are exact
    assert result.failed_record_ids == ()
    assert set(adds.adds.values()) == {1}
    assert set(adds.adds) == set(nonzero(expected))
    assert read_all(store, expected) == nonzero(expected)
    # AND the requests are a handful for 5,000 events
    later_chunks = len(adds.adds) - 98
    range_reads = -(-later_chunks // 100)  # the stored values of the later chunks' items, 100 per BatchGetItem
    # marker read, claims, range check, pages, commit, chunks, finish
    assert requests <= 1 + 2 + range_reads + 1 + 1 + len(adds.adds) // 98 + 1


def test_the_chunked_path_writes_hot_keys_many_times_for_the_same_batch(ddb_tables: DynamoDBTables) -> None:
    # The comparison the journal exists for: same batch, direct transactions only.
    adds = AddCounter(ddb_tables.client, ddb_tables.counters_table)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, use_journal=False)
    records, expected = packed_batch(seed=3, messages=100, events=50, keys=400)
    assert pipeline.process(records, NOW_MS, plenty).failed_record_ids == ()
    assert max(adds.adds.values()) > 10
    assert read_all(store, expected) == nonzero(expected)


def test_a_message_with_more_keys_than_a_transaction_holds_is_counted(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    events = ",".join(f'{{"key":"wide-{i}","delta":{i}}}' for i in range(250))
    record = SourceRecord("r1", f'{{"id":"wide","events":[{events}]}}', SENT_MS)
    result = pipeline.process([record], NOW_MS, plenty)
    again = pipeline.process([record], NOW_MS, plenty)
    assert (result.failed_record_ids, again.figures["MessagesApplied"], dlq.letters) == ((), 0, [])
    assert read_counters(store, "wide-249") == {"count": Decimal(249)}
    marker = store.read_marker("wide")
    assert marker is not None
    assert marker.batch_id is not None


def test_markers_expire_before_the_journal_of_their_batch(ddb_tables: DynamoDBTables) -> None:
    # The TTL rule: a marker is only ever consulted before its own expiry (older messages are refused),
    # and every journal item of its batch expires later, so its batch can always be read.
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    records, _ = packed_batch(seed=5, messages=30, events=20, keys=300)
    assert pipeline.process(records, NOW_MS, plenty).failed_record_ids == ()
    items = ddb_tables.client.scan(TableName=ddb_tables.markers_table, ConsistentRead=True)["Items"]
    markers = [int(item["expires_at"]["N"]) for item in items if item["id"]["S"].startswith("m#")]
    journal = [int(item["expires_at"]["N"]) for item in items if item["id"]["S"].startswith("b#")]
    assert markers
    assert journal
    assert max(markers) < min(journal)
    assert max(markers) == NOW_MS // 1000 + 35 * 86_400
