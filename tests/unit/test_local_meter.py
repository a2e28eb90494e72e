"""Counting a function's DynamoDB writes from outside it (botocore hooks), and its EMF metrics from its log."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from tally_local.function import emf_metrics
from tally_local.kit.writes import DynamoDBWrites, WriteMeter, writes_of

PUT = {"Put": {"TableName": "m", "Item": {}}}
UPDATE = {"Update": {"TableName": "c", "Key": {}, "UpdateExpression": "ADD #c :v"}}
CHECK = {"ConditionCheck": {"TableName": "m", "Key": {}, "ConditionExpression": "x"}}


@pytest.mark.parametrize(
    ("operation", "params", "failed", "code", "writes"),
    [
        (
            "TransactWriteItems",
            {"TransactItems": [PUT, PUT, UPDATE, UPDATE, UPDATE, CHECK]},
            False,
            "",
            DynamoDBWrites(requests=1, transactions=1, counter_adds=3, puts=2, condition_checks=1),
        ),
        (
            "TransactWriteItems",
            {"TransactItems": [PUT, UPDATE]},
            True,
            "TransactionCanceledException",
            DynamoDBWrites(requests=1, cancelled_transactions=1),
        ),
        (
            "TransactWriteItems",
            {"TransactItems": [PUT]},
            True,
            "ValidationException",
            DynamoDBWrites(requests=1, failed_requests=1),
        ),
        ("UpdateItem", {}, False, "", DynamoDBWrites(requests=1, counter_adds=1)),
        ("PutItem", {}, False, "", DynamoDBWrites(requests=1, puts=1)),
        ("PutItem", {}, True, "ConditionalCheckFailedException", DynamoDBWrites(requests=1, failed_requests=1)),
        (
            "BatchWriteItem",
            {"RequestItems": {"t": [{"PutRequest": {}}, {"PutRequest": {}}]}},
            False,
            "",
            DynamoDBWrites(requests=1, puts=2),
        ),
        ("GetItem", {}, False, "", DynamoDBWrites()),
        ("Query", {}, False, "", DynamoDBWrites()),
    ],
)
def test_writes_of_each_call(
    operation: str, params: dict[str, Any], failed: bool, code: str, writes: DynamoDBWrites
) -> None:
    assert writes_of(operation, params, failed, code) == writes


def test_writes_add_and_subtract() -> None:
    one = DynamoDBWrites(requests=2, counter_adds=5, puts=1)
    two = DynamoDBWrites(requests=1, transactions=1, counter_adds=1)
    assert one + two - two == one
    assert (one + two).items_written == 7


@pytest.fixture
def aws(mocked_aws: None) -> None:
    """moto's mock (tests/conftest.py)."""


def test_meter_sees_the_writes_of_clients_created_after_install_only(aws: None) -> None:
    # GIVEN a table, and a client created before the meter is installed
    before = boto3.client("dynamodb")
    before.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    meter = WriteMeter()
    meter.install()
    try:
        # WHEN a client created afterwards (as the handler creates its own) writes, reads and fails a condition
        after = boto3.session.Session().client("dynamodb")
        after.put_item(TableName="t", Item={"pk": {"S": "a"}})
        after.update_item(
            TableName="t",
            Key={"pk": {"S": "a"}},
            UpdateExpression="ADD c :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
        after.get_item(TableName="t", Key={"pk": {"S": "a"}})
        with pytest.raises(after.exceptions.ConditionalCheckFailedException):
            after.put_item(TableName="t", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
        before.put_item(TableName="t", Item={"pk": {"S": "b"}})
    finally:
        meter.uninstall()
    # THEN it counted the new client's three write requests, two of which wrote, and nothing of the old client
    assert meter.total() == DynamoDBWrites(requests=3, counter_adds=1, puts=1, failed_requests=1)


def test_emf_metrics_are_summed_by_name_and_other_lines_ignored() -> None:
    def emf(values: dict[str, Any]) -> str:
        metrics = [{"Name": name, "Unit": "Count"} for name in values]
        return json.dumps({"_aws": {"CloudWatchMetrics": [{"Namespace": "Tally", "Metrics": metrics}]}, **values})

    lines = [
        '{"level":"INFO","message":"batch processed","EventsApplied":999}',
        emf({"EventsApplied": [250.0], "DuplicatesInBatch": 1.0}),
        "Traceback (most recent call last):",
        emf({"EventsApplied": [100.0, 50.0]}),
        '{"_aws": not json',
    ]
    assert emf_metrics(lines) == {"EventsApplied": 400.0, "DuplicatesInBatch": 1.0}
