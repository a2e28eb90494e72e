"""On DynamoDB Local: a fenced write (``tally.store.actions.fenced_update``) as the journal's store sends it.

- DynamoDB decides its condition as the reference model does (``admits_fenced``), over any marks on the item, any
  part and any marks it removes: a committed write adds its counters, sets its mark and removes what it prunes; a
  refused one changes nothing and returns the marks as they were;
- sent again after a lost answer, or by a finisher with the batch's own epoch, it is refused as applied;
- it is billed one write unit on a key item about to move its windows with ten marks (``ConsumedCapacity`` of a
  single-item write is right on DynamoDB Local);
- a sum DynamoDB cannot store is refused as the request's own fault, and the item is unchanged;
- a start value is added once, and an item's most counters for a fenced write fit DynamoDB's 4 KB expression.
"""

from __future__ import annotations

import secrets
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally.core.defaults import CounterDefaults, CounterRule
from tally.core.epochs import FencedBatch, WriterEpoch
from tally.core.fence import MAX_PRUNES_PER_WRITE, Refusal, mark_value, plan_fenced_apply, refusal
from tally.core.items import CounterItem
from tally.core.patterns import KeyPattern
from tally.core.windows import MOVE_AT_BYTES
from tally.core.write import FencedWrite
from tally.cost.capacity import item_size
from tally.errors import WriteRejectedError
from tally.store.actions import fenced_update
from tally.store.expressions import counters_per_add
from tally.store.journal import DynamoDBJournal
from tally.store.schema import counter_attribute, fence_attribute, fence_from_item, item_counters, item_key
from tests.support.reference import admits_fenced

if TYPE_CHECKING:
    from tally.core.aggregate import Totals
    from tally.core.items import ItemKey
    from tally.store.schema import RawItem
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

TTL_S = 86_400
EPOCHS = ("AAAAAAAAAAA", "BBBBBBBBBBB", "CCCCCCCCCCC", "DDDDDDDDDDD")
MARK = st.integers(1, 6).map(lambda v: mark_value(v // 2 + 1, v % 2))


def _journal(tables: DynamoDBTables, defaults: CounterDefaults | None = None) -> DynamoDBJournal:
    if defaults is None:
        return DynamoDBJournal(tables.client, tables.counters_table, tables.markers_table, TTL_S)
    return DynamoDBJournal(tables.client, tables.counters_table, tables.markers_table, TTL_S, defaults=defaults)


def _put(tables: DynamoDBTables, item: ItemKey, counters: dict[str, int], fence: dict[str, int]) -> None:
    raw = {**item_key(item), **{counter_attribute(n): {"N": str(v)} for n, v in counters.items()}}
    raw.update({fence_attribute(e): {"N": str(v)} for e, v in fence.items()})
    tables.client.put_item(TableName=tables.counters_table, Item=raw)


def _get(tables: DynamoDBTables, item: ItemKey) -> RawItem:
    raw = tables.client.get_item(TableName=tables.counters_table, Key=item_key(item), ConsistentRead=True)
    return raw.get("Item", {})


@st.composite
def situations(draw: st.DrawFn) -> tuple[dict[str, int], FencedWrite]:
    fence = draw(st.dictionaries(st.sampled_from(EPOCHS), MARK, max_size=4))
    epoch = draw(st.sampled_from(EPOCHS))
    mark = draw(MARK)
    first = mark % 1024 == 0
    after = None if first else draw(st.sampled_from([mark - 1, mark - 2, mark]))
    others = [e for e in EPOCHS if e != epoch]
    pruned = draw(st.lists(st.sampled_from(others), unique=True, max_size=2))
    prune = {e: draw(st.sampled_from([fence.get(e, 1024), fence.get(e, 1024) + 1])) for e in pruned}
    write = FencedWrite("k", {"n": draw(st.integers(1, 9))}, {}, epoch, mark, after, prune)
    return fence, write


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(situations())
def test_dynamodb_decides_a_fenced_write_as_the_reference_does(
    ddb_tables: DynamoDBTables, situation: tuple[dict[str, int], FencedWrite]
) -> None:
    fence, write = situation
    _put(ddb_tables, "k", {"n": 5}, fence)
    answer = _journal(ddb_tables).apply_fenced(write)
    after = _get(ddb_tables, "k")
    assert answer.committed is admits_fenced(write, fence)
    if answer.committed:
        expected = {**{e: v for e, v in fence.items() if e not in write.prune}, write.epoch: write.mark}
        assert fence_from_item(after) == expected == dict(answer.fence)
        assert item_counters(after)["n"] == 5 + write.adds["n"]
    else:
        assert dict(answer.fence) == fence == fence_from_item(after)
        assert item_counters(after)["n"] == 5


def test_a_write_sent_again_or_by_a_finisher_is_refused_as_applied(ddb_tables: DynamoDBTables) -> None:
    journal = _journal(ddb_tables)
    _, batch = WriterEpoch().next_batch(secrets.token_bytes)
    increments: Totals = {"k": {"n": 3, "m": 4}, CounterItem("k", "h#2100-01-01T03:00Z", 0, 4_102_444_800): {"n": 3}}
    owner = plan_fenced_apply(increments, batch, defaults=CounterDefaults(), counter_limit=lambda _: 1)
    for writes in owner:
        for write in writes:
            assert journal.apply_fenced(write).committed
            again = journal.apply_fenced(write)  # the owner's answer was lost: it sends the write again
            assert not again.committed
            assert refusal(write, again.fence) is Refusal.APPLIED
    finisher = plan_fenced_apply(
        increments, FencedBatch.parse(batch.batch_id) or batch, defaults=CounterDefaults(), counter_limit=lambda _: 1
    )
    for writes in finisher:
        for write in writes:
            answer = journal.apply_fenced(write)
            assert not answer.committed
            assert refusal(write, answer.fence) is Refusal.APPLIED
    assert item_counters(_get(ddb_tables, "k")) == {"n": 3, "m": 4}


def test_a_fenced_write_on_a_key_item_about_to_move_with_ten_marks_costs_one_write_unit(
    ddb_tables: DynamoDBTables,
) -> None:
    # The key's item just under MOVE_AT_BYTES (the mover's threshold), ten marks, then an hour of two counters.
    raw: dict[str, dict[str, str]] = {**item_key("k"), "pad": {"S": ""}}
    raw["pad"] = {"S": "x" * (MOVE_AT_BYTES - 1 - item_size(raw))}
    for index in range(10):
        raw[fence_attribute(f"{index:02d}AAAAAAAAA")] = {"N": str(mark_value(4_000_000_000, 1023))}
    ddb_tables.client.put_item(TableName=ddb_tables.counters_table, Item=raw)
    write = FencedWrite(
        "k",
        {"\x1fh#2100-01-01T03:00Z\x1funits": Decimal("1" * 38), "\x1fh#2100-01-01T03:00Z\x1fcost": Decimal("1" * 38)},
        {},
        "zzAAAAAAAAA",
        mark_value(4_000_000_000, 0),
        None,
    )
    request = fenced_update(ddb_tables.counters_table, write)
    request["ReturnConsumedCapacity"] = "TOTAL"
    answer = ddb_tables.client.update_item(**request)
    assert item_size(answer["Attributes"]) <= 1024, item_size(answer["Attributes"])
    assert answer["ConsumedCapacity"]["CapacityUnits"] == 1.0


def test_a_sum_dynamodb_cannot_store_is_refused_as_the_request_s_fault(ddb_tables: DynamoDBTables) -> None:
    _put(ddb_tables, "k", {}, {})
    ddb_tables.client.update_item(
        TableName=ddb_tables.counters_table,
        Key=item_key("k"),
        UpdateExpression="SET #c = :v",
        ExpressionAttributeNames={"#c": counter_attribute("n")},
        ExpressionAttributeValues={":v": {"N": "9" * 38}},
    )
    write = FencedWrite("k", {"n": Decimal("0.1")}, {}, EPOCHS[0], mark_value(1, 0), None)
    with pytest.raises(WriteRejectedError):
        _journal(ddb_tables).apply_fenced(write)
    assert fence_from_item(_get(ddb_tables, "k")) == {}


def test_a_start_value_counts_once_and_the_most_counters_fit_the_expression(ddb_tables: DynamoDBTables) -> None:
    defaults = CounterDefaults((CounterRule(KeyPattern("k"), "stock", Decimal(100)),))
    journal = _journal(ddb_tables, defaults)
    _, batch = WriterEpoch().next_batch(secrets.token_bytes)
    most = counters_per_add("k", started=True, fenced_prunes=MAX_PRUNES_PER_WRITE)
    counters = {"stock": Decimal(-3), **{f"n{i}": Decimal(1) for i in range(most - 1)}}
    prune: dict[ItemKey, dict[str, int]] = {"k": {e: mark_value(1, 0) for e in EPOCHS}}
    _put(ddb_tables, "k", {}, {e: mark_value(1, 0) for e in EPOCHS})
    ((write,),) = plan_fenced_apply(
        {"k": counters}, batch, defaults=defaults, counter_limit=lambda _: most, prune=prune
    )
    assert len(write.prune) == MAX_PRUNES_PER_WRITE
    assert journal.apply_fenced(write).committed
    assert not journal.apply_fenced(write).committed
    stored = item_counters(_get(ddb_tables, "k"))
    assert stored["stock"] == 97
    assert len(stored) == most
    assert fence_from_item(_get(ddb_tables, "k")) == {batch.epoch: write.mark}
