"""DynamoDB's TTL, which DynamoDB Local does not run: delete the items whose expiry has passed.

On AWS, an item whose TTL attribute (epoch seconds) is before now is deleted by a background sweep,
typically within 2 days; until then it stays readable and writable, and an item updated to a later expiry
before the sweep reaches it is kept. ``sweep_expired`` is that sweep at one instant: every item of the table
whose TTL attribute is before ``now_s`` is deleted, each on the condition that it is still expired (a write
that moved its expiry meanwhile keeps it). Items without the attribute are never deleted. The tests and the
chaos run call it when their clock has passed an expiry, as the one way DynamoDB Local ever loses an item.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

EXPIRES_AT: Final = "expires_at"
"""The TTL attribute of both tally tables (template.yaml ``TimeToLiveSpecification``)."""


def sweep_expired(client: DynamoDBClient, table: str, now_s: int, attribute: str = EXPIRES_AT) -> int:
    """Delete every item of ``table`` whose ``attribute`` is a Number before ``now_s``; how many were deleted."""
    key_names = [key["AttributeName"] for key in client.describe_table(TableName=table)["Table"]["KeySchema"]]
    condition = "#ttl < :now"
    names = {"#ttl": attribute}
    values: dict[str, Any] = {":now": {"N": str(now_s)}}
    deleted = 0
    for page in client.get_paginator("scan").paginate(
        TableName=table,
        FilterExpression=condition,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
        ConsistentRead=True,
    ):
        for item in page.get("Items", []):
            try:
                client.delete_item(
                    TableName=table,
                    Key={name: item[name] for name in key_names},
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
            except client.exceptions.ConditionalCheckFailedException:
                continue  # written to a later expiry since the scan: TTL keeps it too
            deleted += 1
    return deleted
