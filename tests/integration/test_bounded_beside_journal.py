"""Bounded counters beside the commit journal, on DynamoDB Local through the production wiring.

A message on a bounded counter travels only in a direct transaction that carries its bound condition,
whatever shares its batch: a big message of the same producer session (their markers share a block item),
a big message sharing one of its keys, a big message whose marker names an aborted journal batch (killed
after its claim, redelivered after the visibility timeout). And a big message is never refused for its
size because a bounded message shares its block or a key: it goes through the journal, which holds it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.config import Settings
from tally.core.bounds import parse_counter_bounds
from tally.core.declarations import Declarations
from tally.core.ledger import BatchState, Claim
from tally.core.model import SourceRecord
from tally.core.numbered_ids import numbered_id
from tally.core.windows import parse_window_spec
from tally.reader import CounterReader
from tally.runtime import wire_pipeline
from tally.store.journal import DynamoDBJournal
from tally.store.schema import HEADER_STATE
from tests.support.pipeline import RecordingDeadLetterQueue
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.pipeline import BatchPipeline
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

SESSION = "5e55a0115e55a0115e55a0115e55a011"
FLOOR = "stock:*#stock>=0"
VISIBILITY_TIMEOUT_MS = 420_000  # the template's, for the default 60 s function timeout
BIG_KEYS = 120


class InvocationKilled(BaseException):
    """Lambda killed the invocation (its deadline): nothing of the handler runs after it."""


def killing_after_the_first_claim(client: DynamoDBClient) -> DynamoDBClient:
    """``client``, but the first journal claim that commits kills the invocation right after (once)."""
    send = client.transact_write_items
    fired = False

    def transact(**params: Any) -> Any:
        nonlocal fired
        answer = send(**params)
        opens = any(
            action.get("Put", {}).get("Item", {}).get(HEADER_STATE, {}).get("S") == BatchState.PREPARING
            for action in params["TransactItems"]
        )
        if opens and not fired:
            fired = True
            raise InvocationKilled("killed between the journal claim and the commit")
        return answer

    client.transact_write_items = transact  # type: ignore[method-assign]
    return client


def pipeline_on(
    client: DynamoDBClient, tables: DynamoDBTables, *, windows: str = "hour,day"
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    """A fresh container's pipeline, wired as the handlers wire it, with the floor declared."""
    dead_letters = RecordingDeadLetterQueue()
    settings = Settings(
        counters_table=tables.counters_table,
        markers_table=tables.markers_table,
        dlq_url=None,
        declarations=Declarations(
            windows=parse_window_spec(windows, "minute=7,hour=90,day=0"), bounds=parse_counter_bounds(FLOOR)
        ),
    )
    return wire_pipeline(client, dead_letters, settings), dead_letters


def packed(message_id: str, keys: int, *, ts: Callable[[int], int] | None = None) -> SourceRecord:
    events = [{"key": f"k:{n}", "delta": 1, **({"ts": ts(n)} if ts is not None else {})} for n in range(keys)]
    return SourceRecord(f"r-{message_id}", json.dumps({"id": message_id, "events": events}), SENT_MS)


def sale(message_id: str, amount: int, *, also: str | None = None) -> SourceRecord:
    events: list[dict[str, Any]] = [{"key": "stock:a", "deltas": {"stock": amount}}]
    if also is not None:
        events.append({"key": also, "delta": 1})
    return SourceRecord(f"r-{message_id}", json.dumps({"id": message_id, "events": events}), SENT_MS)


def stock_at_3(tables: DynamoDBTables) -> None:
    pipeline, dead_letters = pipeline_on(tables.client, tables)
    result = pipeline.process([sale("restock", 3)], SENT_MS + 1_000, lambda: 60_000)
    assert result.failed_record_ids == ()
    assert dead_letters.letters == []


def read(tables: DynamoDBTables, key: str, counter: str) -> Decimal | None:
    return CounterReader(tables.counters_table, client=tables.client).get(key).values.get(counter)


@pytest.mark.parametrize(
    "link",
    [
        pytest.param("session", id="the sale is of the same producer session (one block marker item)"),
        pytest.param("key", id="the sale shares a key with the big message"),
    ],
)
def test_a_sale_redelivered_beside_a_big_message_killed_after_its_claim_keeps_its_floor(
    ddb_tables: DynamoDBTables, dynamodb_local: Any, link: str
) -> None:
    # GIVEN stock:a at 3 with a floor of 0
    stock_at_3(ddb_tables)
    big_id = numbered_id(SESSION, 0)
    sale_id = numbered_id(SESSION, 1) if link == "session" else "sale-1"
    # AND a batch of one packed message of 120 keys (the journal's), killed right after its claim
    first, _ = pipeline_on(killing_after_the_first_claim(dynamodb_local.client()), ddb_tables)
    with pytest.raises(InvocationKilled):
        first.process([packed(big_id, BIG_KEYS)], SENT_MS + 2_000, lambda: 60_000)

    # WHEN, after the visibility timeout, a fresh container gets it again beside a sale of 5 from the same
    # session (or sharing one key with it)
    second, dead_letters = pipeline_on(dynamodb_local.client(), ddb_tables)
    also = None if link == "session" else "k:7"
    records = [packed(big_id, BIG_KEYS), sale(sale_id, -5, also=also)]
    result = second.process(records, SENT_MS + 2_000 + VISIBILITY_TIMEOUT_MS, lambda: 60_000)

    # THEN the stock stays at 3, the sale is dead-lettered below_floor, the 120 keys are counted once
    assert result.failed_record_ids == ()
    assert read(ddb_tables, "stock:a", "stock") == Decimal(3)
    assert dead_letters.codes() == {f"r-{sale_id}": "below_floor"}
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client)
    assert [reader.get(f"k:{n}").values.get("count") for n in range(BIG_KEYS)] == [Decimal(1)] * BIG_KEYS


@pytest.mark.parametrize(
    ("keys", "windows", "ts"),
    [
        pytest.param(BIG_KEYS, "hour,day", None, id="120 keys"),
        pytest.param(60, "minute,hour,day", lambda n: SENT_MS - 60_000 * (n % 2), id="60 keys over two minute windows"),
    ],
)
def test_a_big_message_beside_a_bounded_sale_of_its_session_is_counted(
    ddb_tables: DynamoDBTables, keys: int, windows: str, ts: Callable[[int], int] | None
) -> None:
    # GIVEN stock:a at 3 with a floor of 0, and a fresh batch: a packed message with more than 99 items
    # (120 keys; or 60 keys whose events fall in two minute windows: 60 key items and 60 minute items) and
    # a sale of 1 from the same producer session
    stock_at_3(ddb_tables)
    pipeline, dead_letters = pipeline_on(ddb_tables.client, ddb_tables, windows=windows)
    records = [packed(numbered_id(SESSION, 0), keys, ts=ts), sale(numbered_id(SESSION, 1), -1)]
    # WHEN it is processed
    result = pipeline.process(records, SENT_MS + 2_000, lambda: 60_000)
    # THEN both count: nothing is dead-lettered for its size
    assert result.failed_record_ids == ()
    assert dead_letters.letters == []
    assert read(ddb_tables, "stock:a", "stock") == Decimal(2)
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client)
    assert [reader.get(f"k:{n}").values.get("count") for n in range(keys)] == [Decimal(1)] * keys


@pytest.mark.parametrize(
    "sale_id",
    [
        pytest.param(numbered_id(SESSION, 1), id="a numbered id (its marker on a block item)"),
        pytest.param("sale-1", id="an id of its own"),
    ],
)
def test_a_bounded_message_claimed_by_a_dead_journal_batch_is_written_with_its_floor(
    ddb_tables: DynamoDBTables, sale_id: str
) -> None:
    # GIVEN stock:a at 3, and two sales claimed by a journal batch that died before its commit (claimed
    # before the floor was declared, the one way a bounded message can carry a journal claim): lease expired
    stock_at_3(ddb_tables)
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, 35 * 86_400)
    small_id = f"{sale_id}-small" if sale_id == "sale-1" else numbered_id(SESSION, 2)
    journal.open("dead-batch", SENT_MS, [Claim(sale_id), Claim(small_id)], SENT_MS - 60_000)
    pipeline, dead_letters = pipeline_on(ddb_tables.client, ddb_tables)

    # WHEN both are redelivered: a sale of 5 (it would cross the floor) and a sale of 1
    records = [sale(sale_id, -5), sale(small_id, -1)]
    result = pipeline.process(records, SENT_MS + VISIBILITY_TIMEOUT_MS, lambda: 60_000)

    # THEN each replaces its dead claim in a direct transaction with the floor's condition: the sale of 1
    # counts, the sale of 5 is dead-lettered below_floor, and a redelivery of both changes nothing
    assert result.failed_record_ids == ()
    assert dead_letters.codes() == {f"r-{sale_id}": "below_floor"}
    assert read(ddb_tables, "stock:a", "stock") == Decimal(2)
    again = pipeline.process(records, SENT_MS + VISIBILITY_TIMEOUT_MS + 1_000, lambda: 60_000)
    assert again.failed_record_ids == ()
    assert read(ddb_tables, "stock:a", "stock") == Decimal(2)
    assert [letter.rejection.code for letter in dead_letters.letters] == ["below_floor", "below_floor"]
