"""On DynamoDB Local: the request limits the tests and the chaos run watch for (``tally_local.kit.limits``).

Each request below breaks one of DynamoDB's published limits: ``RequestLimits`` names it, and DynamoDB Local
refuses it (worded as DynamoDB Local words it; AWS's wording differs for some: docs/aws-fidelity.md). A request
within every limit is named by nothing. So the property tests and the chaos run, which assert that no request of
tally's broke a limit, check what DynamoDB enforces, not a rule of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from tally_local.kit.limits import RequestLimits

if TYPE_CHECKING:
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration


def add(table: str, key: str = "k", *, value: str = "1", condition: str | None = None, sort: str = "all") -> Any:
    update: dict[str, Any] = {
        "TableName": table,
        "Key": {"pk": {"S": key}, "sk": {"S": sort}},
        "UpdateExpression": "ADD #c :v",
        "ExpressionAttributeNames": {"#c": "c#n"},
        "ExpressionAttributeValues": {":v": {"N": value}},
    }
    if condition is not None:
        update["ConditionExpression"] = condition
    return {"Update": update}


CASES: list[Any] = [
    pytest.param(
        lambda t: [add(t, f"k{n}") for n in range(101)],
        "101 actions",
        "Member must have length less than or equal to 100",
        id="101-actions",
    ),
    pytest.param(
        lambda t: [add(t), add(t)],
        "two actions on one item",
        "Transaction request cannot include multiple operations on one item",
        id="one-item-twice",
    ),
    pytest.param(
        lambda t: [add(t, value="1" + "0" * 37 + "1")],
        "39 significant digits",
        "DynamoDB only supports precision up to 38 digits",
        id="39-digits",
    ),
    pytest.param(
        lambda t: [add(t, value="1E+126")],
        "out of DynamoDB's range",
        "Number overflow",
        id="magnitude",
    ),
    pytest.param(
        lambda t: [add(t, condition=" OR ".join(["#c < :v"] * 151))],
        "301 operators",
        "The expression contains too many operators",
        id="301-operators",
    ),
    pytest.param(
        lambda t: [add(t, condition="#c < :v" + " " * 4100)],
        "ConditionExpression of",
        "Expression size has exceeded the maximum allowed size",
        id="4-kb-expression",
    ),
    pytest.param(
        lambda t: [add(t, "x" * 2049)], "of 2049 bytes", "Hash primary key values must be under 2048 bytes", id="key"
    ),
    pytest.param(
        lambda t: [add(t, sort="y" * 1025)],
        "of 1025 bytes",
        "range primary key values must be under 1024 bytes",
        id="sort-key",
    ),
    pytest.param(
        lambda t: [
            {"Put": {"TableName": t, "Item": {"pk": {"S": "b"}, "sk": {"S": "all"}, "d": {"S": "a" * 409_600}}}}
        ],
        "an item of",
        "Item size has exceeded the maximum allowed size",
        id="400-kb-item",
    ),
]


@pytest.mark.parametrize(("actions", "named", "local_says"), CASES)
def test_a_request_over_a_limit_is_named_and_refused(
    ddb_tables: DynamoDBTables, actions: Any, named: str, local_says: str
) -> None:
    # GIVEN a client watched for DynamoDB's limits
    limits = RequestLimits(ddb_tables.client)
    # WHEN it sends a transaction over one of them
    with pytest.raises(ClientError) as refused:
        ddb_tables.client.transact_write_items(TransactItems=actions(ddb_tables.counters_table))
    # THEN the watch names the limit, and DynamoDB Local refuses the request (in its own words)
    assert len(limits.violations) == 1, limits.violations
    assert named in limits.violations[0]
    error = refused.value.response
    assert local_says in str(error["Error"].get("Message", "")) + str(error.get("CancellationReasons", ""))


def test_a_request_within_every_limit_is_named_by_nothing(ddb_tables: DynamoDBTables) -> None:
    limits = RequestLimits(ddb_tables.client)
    table = ddb_tables.counters_table
    edge = "9.9999999999999999999999999999999999999E+125"
    ddb_tables.client.transact_write_items(
        TransactItems=[add(table, f"k{n}", value="1") for n in range(99)]
        + [
            add(
                table, "x" * 2048, value=edge, condition="attribute_not_exists(#c) OR " + " OR ".join(["#c < :v"] * 149)
            )
        ]
    )
    assert (limits.violations, limits.requests) == ([], 1)
