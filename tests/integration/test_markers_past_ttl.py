"""Markers past their horizon, once TTL has deleted what expired, on DynamoDB Local.

DynamoDB Local runs no TTL: ``tally_local.chaos.ttl.sweep_expired`` deletes what AWS's TTL would have deleted by
then. A numbered message's marker is an attribute of its block item, whose expiry each later write to the
block moves forward, while the journal header its marker names expires a day after that batch's lease. A
message meeting such a marker after the header is gone (a message without ``ts`` redriven past the
horizon, or its id reused with a fresh ``ts``) must be treated as one whose marker TTL has deleted: claimed
again, never a batch that fails on every delivery.

TTL may also delete an expired marker between two requests of one invocation (``tally_local.kit.faults.SweepBefore``):
between the read that found it naming a dead journal batch and the claim that replaces it on the condition that it
still names that batch. The claim is then cancelled with no marker in the way: a marker gone is a marker absent,
never a direct marker (which would settle the message as applied without its deltas).
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING

import pytest

from tally.commit.marker_reads import MarkerReadGate
from tally.core.bounds import NO_BOUNDS, parse_counter_bounds
from tally.core.ledger import Claim
from tally.core.model import SourceRecord
from tally.store.journal import DynamoDBJournal
from tally.store.schema import EXPIRES_AT, LEDGER_ID, header_id
from tally_local.chaos.ttl import sweep_expired
from tally_local.kit.faults import SweepBefore
from tests.support.counts import read_all
from tests.support.pipeline import TTL_DAYS, make_pipeline, make_store, plenty

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000
T0 = 4_102_444_800_000  # 2100-01-01T00:00Z
LATER = T0 + (TTL_DAYS + 5) * DAY_MS  # past the old batch's journal expiry (lease + TTL + 1 day)
SESSION = "0123456789abcdef" * 2
BIG_KEYS = [f"big-{n:03d}" for n in range(120)]


def big_body(message_id: str) -> str:
    """A packed message of 120 keys (more than one transaction holds: the journal), without ``ts``."""
    return json.dumps({"id": message_id, "events": [{"key": key, "delta": 1} for key in BIG_KEYS]})


def body(message_id: str, key: str, delta: int, ts: int | None = None) -> str:
    return json.dumps({"id": message_id, "key": key, "delta": delta} | ({"ts": ts} if ts is not None else {}))


def test_the_sweeper_deletes_only_items_whose_expiry_has_passed(ddb_tables: DynamoDBTables) -> None:
    client, table = ddb_tables.client, ddb_tables.markers_table
    for item_id, expires in (("past", 99), ("now", 100), ("later", 101), ("never", None)):
        item = {LEDGER_ID: {"S": item_id}} | ({EXPIRES_AT: {"N": str(expires)}} if expires is not None else {})
        client.put_item(TableName=table, Item=item)
    assert sweep_expired(client, table, now_s=100) == 1
    left = {item[LEDGER_ID]["S"] for item in client.scan(TableName=table)["Items"]}
    assert left == {"now", "later", "never"}


@pytest.mark.parametrize("gate", ["reads markers", "closed"])
def test_a_block_marker_naming_a_batch_whose_header_ttl_deleted_counts_as_absent(
    ddb_tables: DynamoDBTables, gate: str
) -> None:
    # GIVEN seqs 0 (120 keys) and 1 of one session claimed together by a journal batch at T0, and seq 2 of
    # the same block written 40 days later (so the block's expiry moved past LATER), then TTL's sweep
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    first = [
        SourceRecord("r-0", big_body(f"{SESSION}.0"), T0),
        SourceRecord("r-1", body(f"{SESSION}.1", "reused", 1), T0),
    ]
    assert pipeline.process(first, T0, plenty).failed_record_ids == ()
    (batch_id,) = {
        item[LEDGER_ID]["S"][2:]
        for item in ddb_tables.client.scan(TableName=ddb_tables.markers_table)["Items"]
        if item[LEDGER_ID]["S"].startswith("b#") and "#" not in item[LEDGER_ID]["S"][2:]
    }
    later = SourceRecord("r-2", body(f"{SESSION}.2", "other", 1), LATER)
    assert pipeline.process([later], LATER, plenty).failed_record_ids == ()
    assert sweep_expired(ddb_tables.client, ddb_tables.markers_table, LATER // 1000) > 0
    header = ddb_tables.client.get_item(TableName=ddb_tables.markers_table, Key={LEDGER_ID: {"S": header_id(batch_id)}})
    assert "Item" not in header  # the journal is gone; the block holding seqs 0 and 1 is not
    block = ddb_tables.client.get_item(TableName=ddb_tables.markers_table, Key={LEDGER_ID: {"S": f"s#{SESSION}#0"}})
    assert {"0", "1", "b0", "b1"} <= set(block["Item"])

    # WHEN seq 0 comes back without ts (a redrive past the horizon), and seq 1's id is reused with a fresh ts,
    # to a container that reads markers first, or to one whose marker read gate has closed
    pipeline, dead_letters = make_pipeline(
        store, marker_read_gate=MarkerReadGate(quiet_batches=0) if gate == "closed" else MarkerReadGate()
    )
    again = [
        SourceRecord("r-0-again", big_body(f"{SESSION}.0"), LATER),
        SourceRecord("r-1-reused", body(f"{SESSION}.1", "fresh", 7, LATER), LATER),
    ]
    result = pipeline.process(again, LATER, plenty)

    # THEN neither fails its batch: past its horizon a marker counts as absent, as one TTL deleted would
    assert result.failed_record_ids == ()
    assert dead_letters.letters == []
    counts = read_all(store, [*BIG_KEYS, "reused", "fresh", "other"])
    assert counts == {key: {"count": Decimal(2)} for key in BIG_KEYS} | {
        "reused": {"count": Decimal(1)},
        "fresh": {"count": Decimal(7)},
        "other": {"count": Decimal(1)},
    }
    # AND a third delivery is a duplicate: the new claims are the markers now, within their own horizon
    third = pipeline.process(again, LATER + 60_000, plenty)
    assert third.failed_record_ids == ()
    assert read_all(store, ["big-000", "fresh"]) == {"big-000": {"count": Decimal(2)}, "fresh": {"count": Decimal(7)}}


# --- TTL deletes a marker between the read that found it and the claim that replaces it ---------------------

KILLED = "killed-batch"
STOCK_BOUNDS = parse_counter_bounds("stock:*#stock>=0")


def _expired_claim(ddb_tables: DynamoDBTables, message_id: str, *, header: str) -> None:
    """A journal batch that claimed ``message_id`` long ago and died before committing: at ``LATER`` its marker
    is past its expiry (TTL may delete it at any moment) and its header is there with its lease long over
    (``header="expired lease"``), or TTL has deleted the header already (``header="gone"``: the batch claimed
    a day earlier, journal items outliving their markers by a day)."""
    journal = DynamoDBJournal(
        ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_DAYS * DAY_MS // 1000
    )
    claimed_ms = LATER - TTL_DAYS * DAY_MS - (DAY_MS // 2 if header == "expired lease" else 2 * DAY_MS)
    journal.open(KILLED, claimed_ms + 60_000, [Claim(message_id)], claimed_ms)
    if header == "gone":
        ddb_tables.client.delete_item(TableName=ddb_tables.markers_table, Key={LEDGER_ID: {"S": header_id(KILLED)}})


@pytest.mark.parametrize("header", ["expired lease", "gone"])
@pytest.mark.parametrize("path", ["journal claim", "bounded direct"])
@pytest.mark.parametrize("marker", ["own item", "block item"])
def test_a_marker_ttl_deletes_between_its_read_and_the_claim_replacing_it_counts_as_absent(
    ddb_tables: DynamoDBTables, dynamodb_local: DynamoDBLocal, marker: str, path: str, header: str
) -> None:
    # GIVEN a message whose marker names a journal batch that died before committing, long ago: the marker is
    # past its expiry but still there (AWS's TTL deletes days late), on an item of its own or on its block's
    message_id = "reused-id" if marker == "own item" else f"{SESSION}.3"
    _expired_claim(ddb_tables, message_id, header=header)
    bounds = STOCK_BOUNDS if path == "bounded direct" else NO_BOUNDS
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dead_letters = make_pipeline(store, counter_bounds=bounds)
    key, counter = ("stock:1", "stock") if path == "bounded direct" else ("plain", "count")
    body = json.dumps({"id": message_id, "key": key, "deltas": {counter: 3}, "ts": LATER})
    # AND TTL's sweep, which deletes the expired marker just before the transaction that replaces it (the
    # invocation read the marker, found its batch dead, and claims the message again on the condition that
    # the marker still names that batch)
    sweeper = SweepBefore(
        ddb_tables.client,
        partial(sweep_expired, dynamodb_local.client(), ddb_tables.markers_table, LATER // 1000),
    )
    sweeper.arm(operations=["TransactWriteItems"])

    # WHEN the message arrives again (its id reused with a fresh ts)
    result = pipeline.process([SourceRecord("r-again", body, LATER)], LATER, plenty)

    # THEN the sweep fell between the read and the claim, and a marker gone is a marker absent: the message is
    # claimed again and counted, never settled as applied without its deltas
    assert [sweep.deleted > 0 for sweep in sweeper.swept] == [True]
    assert (result.failed_record_ids, dead_letters.letters) == ((), [])
    assert read_all(store, [key]) == {key: {counter: Decimal(3)}}
    # AND its next delivery is a duplicate of it
    again = pipeline.process([SourceRecord("r-again-2", body, LATER + 1_000)], LATER + 1_000, plenty)
    assert (again.figures["DuplicatesAlreadyApplied"], again.failed_record_ids) == (1, ())
    assert read_all(store, [key]) == {key: {counter: Decimal(3)}}


@pytest.mark.parametrize("marker", ["own item", "block item"])
def test_a_bounded_message_replaces_a_marker_whose_batch_header_ttl_deleted(
    ddb_tables: DynamoDBTables, marker: str
) -> None:
    # GIVEN a message on a bounded counter whose marker names a batch that died long ago, whose header TTL has
    # deleted (the marker, past its expiry too, is still there)
    message_id = "reused-id" if marker == "own item" else f"{SESSION}.3"
    _expired_claim(ddb_tables, message_id, header="gone")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dead_letters = make_pipeline(store, counter_bounds=STOCK_BOUNDS)
    body = json.dumps({"id": message_id, "key": "stock:1", "deltas": {"stock": 3}, "ts": LATER})

    # WHEN it arrives again (its id reused with a fresh ts)
    result = pipeline.process([SourceRecord("r-again", body, LATER)], LATER, plenty)

    # THEN its direct transaction replaces the marker as a journal claim would (the batch can never commit: its
    # header is gone), and it counts; it does not fail on every delivery
    assert (result.failed_record_ids, dead_letters.letters) == ((), [])
    assert read_all(store, ["stock:1"]) == {"stock:1": {"stock": Decimal(3)}}
