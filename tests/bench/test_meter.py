"""The meter against DynamoDB Local: known calls, known bills, and DynamoDB Local's own single-item figures."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from bench.peers.tables import create_table, drop_tables

from tally_local.kit.meter import DynamoDBMeter

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

BIG = "x" * 1_490  # with its name and key, an item of about 1.5 KB: two write units


@pytest.fixture
def metered(dynamodb_local: DynamoDBLocal) -> Iterator[tuple[DynamoDBClient, str, DynamoDBMeter]]:
    admin = dynamodb_local.client()
    table = f"bench-meter-{uuid.uuid4().hex[:10]}"
    create_table(admin, table, [("id", "S")], ttl_attribute=None)
    client = dynamodb_local.client()
    meter = DynamoDBMeter()
    meter.track(table, ["id"], "things")
    meter.attach(client)
    try:
        yield client, table, meter
    finally:
        meter.detach(client)
        drop_tables(admin, [table])


def test_single_item_calls_are_billed_by_size_and_agree_with_dynamodb_local(
    metered: tuple[DynamoDBClient, str, DynamoDBMeter],
) -> None:
    client, table, meter = metered
    # GIVEN a small item, a 1.5 KB item, an ADD to the large one, and reads of both and of a missing key
    client.put_item(TableName=table, Item={"id": {"S": "small"}, "n": {"N": "1"}})
    client.put_item(TableName=table, Item={"id": {"S": "big"}, "blob": {"S": BIG}})
    client.update_item(
        TableName=table,
        Key={"id": {"S": "big"}},
        UpdateExpression="ADD #n :v",
        ExpressionAttributeNames={"#n": "n"},
        ExpressionAttributeValues={":v": {"N": "5"}},
    )
    client.get_item(TableName=table, Key={"id": {"S": "big"}}, ConsistentRead=True)
    client.get_item(TableName=table, Key={"id": {"S": "small"}})
    client.get_item(TableName=table, Key={"id": {"S": "missing"}}, ConsistentRead=True)
    usage = meter.usage()
    # THEN writes are 1 + 2 + 2 units, reads 1 + 0.5 + 1 units, and DynamoDB Local says the same
    assert usage.write_units == 5
    assert usage.read_units == 2.5
    assert usage.calls == {"PutItem": 2, "UpdateItem": 1, "GetItem": 3}
    assert usage.attempts == 6
    assert usage.single_item_mismatches == 0
    assert usage.local_reported_single_item == usage.computed_single_item == 7.5


def test_a_failed_conditional_write_is_still_billed(metered: tuple[DynamoDBClient, str, DynamoDBMeter]) -> None:
    client, table, meter = metered
    client.put_item(TableName=table, Item={"id": {"S": "big"}, "blob": {"S": BIG}})
    meter.reset()
    # GIVEN an existing 1.5 KB item WHEN a conditional put on its key fails
    with pytest.raises(client.exceptions.ConditionalCheckFailedException):
        client.put_item(
            TableName=table,
            Item={"id": {"S": "big"}},
            ConditionExpression="attribute_not_exists(id)",
        )
    # THEN it costs the larger of the two items, and nothing changed in the model
    usage = meter.usage()
    assert usage.conditional_failures == 1
    assert usage.write_units == 2


def test_transactions_cost_two_units_per_item_and_a_cancelled_one_its_prepare(
    metered: tuple[DynamoDBClient, str, DynamoDBMeter],
) -> None:
    client, table, meter = metered
    # GIVEN a transaction of three small puts, then one of two actions that a condition cancels
    client.transact_write_items(
        TransactItems=[{"Put": {"TableName": table, "Item": {"id": {"S": f"t{i}"}}}} for i in range(3)]
    )
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": table,
                        "Item": {"id": {"S": "t0"}},
                        "ConditionExpression": "attribute_not_exists(id)",
                    }
                },
                {"Put": {"TableName": table, "Item": {"id": {"S": "t9"}}}},
            ]
        )
    usage = meter.usage()
    # THEN the committed one costs 3 x 2, the cancelled one 2 x 1 (shown apart), and nothing else
    assert usage.transaction_write_units == 6
    assert usage.cancelled_transactions == 1
    assert usage.cancelled_write_units == 2
    assert usage.write_units == 8
    assert usage.transaction_items == 5
    assert usage.cancellation_reasons == {"ConditionalCheckFailed on things": 1}


def test_batch_writes_are_billed_per_item_by_size(metered: tuple[DynamoDBClient, str, DynamoDBMeter]) -> None:
    """The journal writes its pages with BatchWriteItem: a meter that skips it under-bills every journal batch."""
    client, table, meter = metered
    # GIVEN one BatchWriteItem of a small item and a 1.5 KB item
    client.batch_write_item(
        RequestItems={
            table: [
                {"PutRequest": {"Item": {"id": {"S": "small"}, "n": {"N": "1"}}}},
                {"PutRequest": {"Item": {"id": {"S": "big"}, "blob": {"S": BIG}}}},
            ]
        }
    )
    # THEN 1 + 2 write units (a standard write per item, per started KB), counted as one call
    usage = meter.usage()
    assert usage.write_units == 3
    assert usage.calls == {"BatchWriteItem": 1}
    # AND the items are in the shadow: overwriting the large one with a small one bills the larger size
    client.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": {"id": {"S": "big"}}}}]})
    assert meter.usage().write_units == 3 + 2


def test_writes_add_up_per_class_of_item(dynamodb_local: DynamoDBLocal) -> None:
    """A benchmark says which items a difference in write units comes from: every write of a table given a
    ``classify`` (a single write, a conditional one that failed, each action of a transaction committed or
    cancelled, each item of a batch write) is added to its item's class, with its units and its size."""
    admin = dynamodb_local.client()
    table = f"bench-meter-{uuid.uuid4().hex[:10]}"
    create_table(admin, table, [("id", "S")], ttl_attribute=None)
    client = dynamodb_local.client()
    meter = DynamoDBMeter()
    meter.track(table, ["id"], "things", classify=lambda key: "big" if key["id"]["S"].startswith("big") else "small")
    try:
        with meter.attached(client):
            client.put_item(TableName=table, Item={"id": {"S": "small1"}})
            with pytest.raises(client.exceptions.ConditionalCheckFailedException):
                client.put_item(
                    TableName=table, Item={"id": {"S": "small1"}}, ConditionExpression="attribute_not_exists(id)"
                )
            client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": table, "Item": {"id": {"S": "big1"}, "blob": {"S": BIG}}}},
                    {
                        "Update": {
                            "TableName": table,
                            "Key": {"id": {"S": "small2"}},
                            "UpdateExpression": "SET n = :n",
                            "ExpressionAttributeValues": {":n": {"N": "1"}},
                        }
                    },
                ]
            )
            with pytest.raises(client.exceptions.TransactionCanceledException):
                client.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": table,
                                "Item": {"id": {"S": "big1"}},
                                "ConditionExpression": "attribute_not_exists(id)",
                            }
                        },
                    ]
                )
            client.batch_write_item(
                RequestItems={table: [{"PutRequest": {"Item": {"id": {"S": "big2"}, "b": {"S": BIG}}}}]}
            )
    finally:
        drop_tables(admin, [table])
    usage = meter.usage()
    # THEN small: 1 + 1 (the failed condition) + 2 (a transaction's action); big: 4 (a 1.5 KB action) + 2 (its
    # cancelled prepare) + 2 (a 1.5 KB batch put); and the classes add up to the whole bill
    small, big = usage.by_class["small"], usage.by_class["big"]
    assert (small.writes, small.write_units, small.over_one_kb) == (3, 4, 0)
    assert (big.writes, big.write_units, big.over_one_kb) == (3, 8, 3)
    assert big.smallest_bytes > 1024
    assert small.largest_bytes < 100
    assert small.write_units + big.write_units == usage.write_units
    assert usage.written_items == 6
