"""The tests' DynamoDB tables: fresh ones built from template.yaml's schemas on the session's DynamoDB Local, and
reading a whole table back (the product reads items by key; a test wants to see everything)."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tally_local.template import load_template, table_definitions

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb.client import DynamoDBClient

    from tally_local.dynamodb_local import DynamoDBLocal
    from tally_local.template import TableDefinition

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "template.yaml"
COUNTERS_LOGICAL_ID = "CountersTable"
MARKERS_LOGICAL_ID = "MarkersTable"


@dataclass(frozen=True)
class DynamoDBTables:
    """Counters and markers tables of one test (or of one run of a test that runs several) on DynamoDB Local."""

    client: DynamoDBClient
    counters_table: str
    markers_table: str
    endpoint_url: str


@cache
def template_tables() -> dict[str, TableDefinition]:
    """template.yaml's table definitions by logical id."""
    return table_definitions(load_template(TEMPLATE_PATH))


def create_table(client: DynamoDBClient, definition: TableDefinition, name: str) -> None:
    # TTL off: DynamoDB Local deletes expired items within seconds, AWS within days. The tests model TTL by
    # sweeping when they choose (tally_local.chaos.ttl); DynamoDB Local's sweep, racing them, once deleted a
    # journal header the chaos run had just written in the past and was about to sweep itself.
    definition.create(client, name, ttl=False)


@contextlib.contextmanager
def fresh_tables(dynamodb_local: DynamoDBLocal) -> Iterator[DynamoDBTables]:
    """New, uniquely named, empty counters and markers tables (schemas from template.yaml), deleted on leaving."""
    client = dynamodb_local.client()
    suffix = uuid.uuid4().hex[:12]
    definitions = template_tables()
    names = {
        COUNTERS_LOGICAL_ID: f"tally-test-counters-{suffix}",
        MARKERS_LOGICAL_ID: f"tally-test-markers-{suffix}",
    }
    try:
        for logical_id, name in names.items():
            create_table(client, definitions[logical_id], name)
        yield DynamoDBTables(
            client=client,
            counters_table=names[COUNTERS_LOGICAL_ID],
            markers_table=names[MARKERS_LOGICAL_ID],
            endpoint_url=dynamodb_local.endpoint_url,
        )
    finally:
        for name in names.values():
            with contextlib.suppress(client.exceptions.ResourceNotFoundException):
                client.delete_table(TableName=name)


def scan_all(client: DynamoDBClient, table: str) -> list[dict[str, Any]]:
    """Every item of ``table``, strongly consistent, page after page."""
    pages = client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]
