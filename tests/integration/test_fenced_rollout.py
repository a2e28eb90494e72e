"""A deploy that mixes the released code (``tests.support.released``: main before the fenced apply, run from git as it
is) with this code, on DynamoDB Local: neither may count anything twice, and every batch either leaves behind ends
exactly counted.

- a fenced batch left unfinished (its owner killed among its fenced writes) met by a container of the released
  code: it must refuse it (a fenced batch has no applied-records: finishing it by chunks would add again every item
  already written), leave it as it is, and a container of this code then finishes it exactly, with the fenced
  apply on or off (the rollback lever), after which the released code settles the messages as counted;
- a chunked batch the released code left unfinished (killed just after its commit) is finished by this code with
  the fenced apply on.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from tally.config import Settings
from tally.runtime import wire_pipeline
from tally.sources.sqs import records_from_event
from tally.store.schema import item_counters, item_key
from tests.support.pipeline import RecordingDeadLetterQueue
from tests.support.released import ReleasedInvocation, invoke_released_sqs, released_source
from tests.support.tables import scan_all

if TYPE_CHECKING:
    from pathlib import Path

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

KEYS = [f"k{i:03}" for i in range(150)]
"""More keys than one transaction holds (the template's 100 actions): the unit takes the journal, in two pages."""


class Crash(BaseException):
    """The process dies: nothing after this point of the invocation happens."""


def _event(*bodies: dict[str, Any]) -> dict[str, Any]:
    sent = str(time.time_ns() // 1_000_000)
    arn = "arn:aws:sqs:us-east-1:000000000000:tally-events"
    return {
        "Records": [
            {
                "messageId": f"rec-{uuid.uuid4().hex[:8]}",
                "receiptHandle": "handle",
                "body": json.dumps(body),
                "attributes": {"SentTimestamp": sent, "ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }
            for body in bodies
        ]
    }


def _packed(message_id: str, keys: list[str], delta: int) -> dict[str, Any]:
    return {"id": message_id, "events": [{"key": key, "deltas": {"count": delta}} for key in keys]}


def _settings(tables: DynamoDBTables) -> Settings:
    return Settings(counters_table=tables.counters_table, markers_table=tables.markers_table, dlq_url=None)


def _process(client: DynamoDBClient, tables: DynamoDBTables, event: dict[str, Any], *, fenced: bool) -> tuple[str, ...]:
    pipeline = wire_pipeline(client, RecordingDeadLetterQueue(), _settings(tables), fenced=fenced)
    return pipeline.process(records_from_event(event), time.time_ns() // 1_000_000, lambda: 60_000).failed_record_ids


def _released(
    source: Path, tables: DynamoDBTables, event: dict[str, Any], die_after_transactions: int | None = None
) -> ReleasedInvocation:
    return invoke_released_sqs(
        source,
        event,
        endpoint_url=tables.endpoint_url,
        counters_table=tables.counters_table,
        markers_table=tables.markers_table,
        die_after_transactions=die_after_transactions,
    )


def _counts(tables: DynamoDBTables) -> dict[str, Any]:
    found = {}
    for key in KEYS:
        item = tables.client.get_item(TableName=tables.counters_table, Key=item_key(key), ConsistentRead=True)
        found[key] = item_counters(item["Item"]).get("count") if "Item" in item else None
    return found


def _journal(tables: DynamoDBTables) -> dict[str, dict[str, Any]]:
    """Every journal item (headers, pages, applied-records) by id, as stored."""
    return {
        item["id"]["S"]: item for item in scan_all(tables.client, tables.markers_table) if item["id"]["S"][:2] == "b#"
    }


def _header_states(tables: DynamoDBTables) -> dict[str, str]:
    return {item_id: item["state"]["S"] for item_id, item in _journal(tables).items() if "state" in item}


def _killed_among_fenced_writes(
    client: DynamoDBClient, tables: DynamoDBTables, event: dict[str, Any], writes: int
) -> None:
    """This code, the fenced apply on, on its own ``client``, killed just before its counters write after the first
    ``writes``."""
    sent = 0

    def die(params: dict[str, Any], **_: Any) -> None:
        nonlocal sent
        if params.get("TableName") == tables.counters_table:
            sent += 1
            if sent > writes:
                raise Crash

    client.meta.events.register("provide-client-params.dynamodb.UpdateItem", die)
    with pytest.raises(Crash):
        _process(client, tables, event, fenced=True)


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return released_source(tmp_path_factory.mktemp("released"))


@pytest.mark.parametrize("finisher_fenced", [True, False], ids=["finished-fenced-on", "finished-fenced-off"])
def test_the_released_code_refuses_an_unfinished_fenced_batch_and_this_code_finishes_it(
    ddb_tables: DynamoDBTables, dynamodb_local: DynamoDBLocal, released: Path, finisher_fenced: bool
) -> None:
    # GIVEN a fenced batch of two messages on 150 keys, its owner killed after 40 of its fenced writes
    event = _event(_packed("m-1", KEYS[:100], 1), _packed("m-2", KEYS[50:], 2))
    _killed_among_fenced_writes(dynamodb_local.client(), ddb_tables, event, 40)
    before_counts, before_journal = _counts(ddb_tables), _journal(ddb_tables)
    assert sum(count is not None for count in before_counts.values()) >= 40
    # WHEN the records, and a new message, come to a container of the released code
    fresh = _event(_packed("m-3", KEYS[:10], 5))
    redelivery = {"Records": [*event["Records"], *fresh["Records"]]}
    old = _released(released, ddb_tables, redelivery)
    # THEN it refuses the fenced batch: nothing of it counted again, the journal as it was (no applied-record, no
    # page gone, the header not moved)
    assert {key: count for key, count in _counts(ddb_tables).items() if key not in KEYS[:10]} == {
        key: count for key, count in before_counts.items() if key not in KEYS[:10]
    }
    assert {item_id: item for item_id, item in _journal(ddb_tables).items() if item_id in before_journal} == (
        before_journal
    )
    # (it cannot read the state: a function error, so the source redelivers the whole batch later)
    assert old.error == "ValueError: 'FENCED' is not a valid BatchState"
    # WHEN a container of this code gets them all again
    assert _process(ddb_tables.client, ddb_tables, redelivery, fenced=finisher_fenced) == ()
    # THEN every count is exact, every header DONE or aborted
    expected = {key: (1 if key < "k050" else 3 if key < "k100" else 2) + (5 if key < "k010" else 0) for key in KEYS}
    assert _counts(ddb_tables) == expected
    assert set(_header_states(ddb_tables).values()) <= {"DONE", "ABORTED"}
    # AND the released code, meeting the fenced batch DONE, settles the records as counted
    again = _released(released, ddb_tables, redelivery)
    assert again.error is None
    assert again.failed_ids == []
    assert _counts(ddb_tables) == expected


def test_a_chunked_batch_the_released_code_left_unfinished_is_finished_by_this_code_fenced(
    ddb_tables: DynamoDBTables, released: Path
) -> None:
    # GIVEN the released code killed just after it committed a batch of two pages (its chunk 0 applied)
    event = _event(_packed("m-1", KEYS[:100], 1), _packed("m-2", KEYS[50:], 2))
    ids = dict(endpoint_url=ddb_tables.endpoint_url, counters_table=ddb_tables.counters_table)
    old = invoke_released_sqs(released, event, markers_table=ddb_tables.markers_table, die_after_transactions=2, **ids)
    assert old.killed
    assert list(_header_states(ddb_tables).values()) == ["COMMITTED"]
    # WHEN the records come back to a container of this code, the fenced apply on
    assert _process(ddb_tables.client, ddb_tables, event, fenced=True) == ()
    # THEN the batch is finished by its chunks: DONE, every count exact
    assert list(_header_states(ddb_tables).values()) == ["DONE"]
    assert _counts(ddb_tables) == {key: (1 if key < "k050" else 3 if key < "k100" else 2) for key in KEYS}
