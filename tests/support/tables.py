"""Reading a whole table back in tests (the product reads items by key; a test wants to see everything)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient


def scan_all(client: DynamoDBClient, table: str) -> list[dict[str, Any]]:
    """Every item of ``table``, strongly consistent, page after page."""
    pages = client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]
