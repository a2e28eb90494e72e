"""On DynamoDB Local: many counter names on one item, within the 4 KB expression limit.

DynamoDB Local enforces the limit as AWS documents it ("The maximum length of any expression string is
4 KB"): an ADD of ``counters_per_add`` counters is accepted and one more is refused with a whole-request
``ValidationException`` (in a transaction too, without cancellation reasons, so the culprit is not named).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError

from tally.core.items import CounterItem
from tally.core.model import SourceRecord
from tally.core.plan import no_counter_limit
from tally.core.windows import parse_window_spec
from tally.reader.store_view import read_counters, read_series
from tally.store.actions import add_update
from tally.store.expressions import counters_per_add
from tests.support.pipeline import make_pipeline, make_store, plenty
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 60_000


def hundred_counters(message_id: str, first: int, key: str = "wide") -> str:
    """An ordinary single-event message: 100 named counters (the per-event maximum) on one key."""
    return json.dumps({"id": message_id, "key": key, "deltas": {f"n{first + i:03d}": i + 1 for i in range(100)}})


@pytest.mark.parametrize("window", [False, True], ids=["all-time", "window"])
def test_dynamodb_local_enforces_the_bound_exactly(ddb_tables: DynamoDBTables, window: bool) -> None:
    item = CounterItem("k", "h#2100-01-01T00:00Z", 0, 4_102_444_800) if window else "k"
    most = counters_per_add(item)
    fits, action_fits = add_update(ddb_tables.counters_table, item, {f"n{i}": 1 for i in range(most)})
    over, _ = add_update(ddb_tables.counters_table, item, {f"n{i}": 1 for i in range(most + 1)})
    del action_fits
    ddb_tables.client.transact_write_items(TransactItems=[fits])
    with pytest.raises(ClientError) as refused:
        ddb_tables.client.transact_write_items(TransactItems=[over])
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "Expression size has exceeded" in refused.value.response["Error"]["Message"]
    assert "CancellationReasons" not in refused.value.response


def test_four_ordinary_messages_on_one_key_are_counted_with_the_innocent_ones(ddb_tables: DynamoDBTables) -> None:
    # GIVEN one batch: four messages of 100 counters each on one key (400 names), among innocent messages
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    bodies = [hundred_counters(f"wide-{i}", 100 * i) for i in range(4)]
    bodies += [json.dumps({"id": f"innocent-{i}", "key": f"page:{i}", "delta": 1}) for i in range(5)]
    records = [SourceRecord(f"r{i}", body, SENT_MS) for i, body in enumerate(bodies)]
    # WHEN it is processed (and redelivered)
    result = pipeline.process(records, NOW_MS, plenty)
    again = pipeline.process(records, NOW_MS, plenty)
    # THEN every record is done, every counter exact, nothing dead-lettered, the redelivery a no-op
    assert result.failed_record_ids == ()
    assert result.figures["MessagesApplied"] == 9
    assert dlq.letters == []
    assert again.figures["MessagesApplied"] == 0
    assert read_counters(store, "wide") == {f"n{100 * m + i:03d}": Decimal(i + 1) for m in range(4) for i in range(100)}
    assert all(read_counters(store, f"page:{i}") == {"count": 1} for i in range(5))


def test_one_packed_message_with_a_thousand_counters_on_one_key_and_its_windows(ddb_tables: DynamoDBTables) -> None:
    # GIVEN one packed message: ten events of 100 counters on one key, counted all-time and per hour
    windows = parse_window_spec("hour", "hour=90")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, windows=windows)
    events = [{"key": "wide", "deltas": {f"n{100 * e + i}": 1 for i in range(100)}, "ts": SENT_MS} for e in range(10)]
    record = SourceRecord("r1", json.dumps({"id": "packed-wide", "events": events}), SENT_MS)
    # WHEN it is processed
    result = pipeline.process([record], NOW_MS, plenty)
    # THEN it is applied once, all 1,000 counters on the all-time item and on the hour's item
    assert result.failed_record_ids == ()
    assert dlq.letters == []
    assert result.figures["MessagesApplied"] == 1
    assert read_counters(store, "wide") == {f"n{i}": 1 for i in range(1000)}
    ((_, hour),) = read_series(store, "wide", windows.unit("hour"), SENT_MS, SENT_MS)
    assert hour == {f"n{i}": 1 for i in range(1000)}
    assert pipeline.process([record], NOW_MS, plenty).figures["MessagesApplied"] == 0


@pytest.mark.parametrize("use_journal", [True, False], ids=["journal", "chunked"])
def test_an_add_dynamodb_refuses_for_its_size_isolates_its_message(
    ddb_tables: DynamoDBTables, use_journal: bool
) -> None:
    # GIVEN an applier whose bound misses a limit DynamoDB enforces (here: no bound at all), and a batch
    # where one message alone makes an ADD of 400 counters, among innocent messages sharing its transaction
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, use_journal=use_journal)
    pipeline._applier.counter_limit = no_counter_limit
    culprit = json.dumps(
        {
            "id": "culprit",
            "events": [{"key": "wide", "deltas": {f"n{100 * e + i}": 1 for i in range(100)}} for e in range(4)],
        }
    )
    bodies = [json.dumps({"id": f"innocent-{i}", "key": f"page:{i}", "delta": 1}) for i in range(3)]
    records = [SourceRecord("r-culprit", culprit, SENT_MS)] + [
        SourceRecord(f"r{i}", b, SENT_MS) for i, b in enumerate(bodies)
    ]
    # WHEN the batch is processed
    result = pipeline.process(records, NOW_MS, plenty)
    # THEN the batch does not fail: the innocent messages are applied, only the culprit is dead-lettered
    assert result.failed_record_ids == ()
    assert result.figures["MessagesApplied"] == 3
    assert all(read_counters(store, f"page:{i}") == {"count": 1} for i in range(3))
    assert dlq.codes() == {"r-culprit": "write_refused"}
    assert "Expression size has exceeded" in dlq.letters[0].rejection.detail
    assert read_counters(store, "wide") == {}


def test_an_item_grown_past_400_kb_refuses_only_the_message_that_would_grow_it(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a key whose item already holds 1,500 counters with 255-byte names (about 390 KB)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)

    def name(index: int) -> str:
        return f"{index:05d}" + "x" * 248

    for start in range(0, 1500, 300):
        action, _ = add_update(ddb_tables.counters_table, "big", {name(i): 1 for i in range(start, start + 300)})
        ddb_tables.client.transact_write_items(TransactItems=[action])
    # WHEN a message adding 100 more names arrives in one transaction with innocent messages
    grow = json.dumps({"id": "grow", "key": "big", "deltas": {name(i): 1 for i in range(1500, 1600)}})
    bodies = [grow] + [json.dumps({"id": f"innocent-{i}", "key": f"page:{i}", "delta": 1}) for i in range(3)]
    result = pipeline.process([SourceRecord(f"r{i}", b, SENT_MS) for i, b in enumerate(bodies)], NOW_MS, plenty)
    # THEN DynamoDB refuses that action (a ValidationError cancellation reason: "Item size to update has
    # exceeded the maximum allowed size"); only that message is dead-lettered, with the right reason
    assert result.failed_record_ids == ()
    assert dlq.codes() == {"r0": "write_refused"}
    assert "Item size" in dlq.letters[0].rejection.detail
    assert all(read_counters(store, f"page:{i}") == {"count": 1} for i in range(3))
