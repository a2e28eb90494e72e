"""Create and delete the peers' tables on DynamoDB Local (control plane, through the unmetered client)."""

from __future__ import annotations

import contextlib
from functools import cache
from typing import TYPE_CHECKING, Literal

from bench.deployment import TEMPLATE
from tally_local.template import load_template, table_definitions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.template import TableDefinition


def create_table(
    admin: DynamoDBClient, name: str, keys: Sequence[tuple[str, Literal["S", "N", "B"]]], ttl_attribute: str | None
) -> None:
    """An on-demand table with ``keys`` (attribute name, type; partition key first) and an optional TTL."""
    admin.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": attribute, "KeyType": "HASH" if index == 0 else "RANGE"}
            for index, (attribute, _) in enumerate(keys)
        ],
        AttributeDefinitions=[{"AttributeName": attribute, "AttributeType": kind} for attribute, kind in keys],
        BillingMode="PAY_PER_REQUEST",
    )
    admin.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    if ttl_attribute is not None:
        admin.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"AttributeName": ttl_attribute, "Enabled": True}
        )


@cache
def template_definitions() -> dict[str, TableDefinition]:
    """The tables ``template.yaml`` declares, by logical id."""
    return table_definitions(load_template(TEMPLATE))


def tally_tables(admin: DynamoDBClient, tag: str, suffix: str, *logical_ids: str) -> list[str]:
    """New tables as ``template.yaml`` declares ``logical_ids`` (by default the counters and the markers table),
    named ``bench-<tag>-<counters|markers|...>-<suffix>``: their names."""
    names = []
    for logical_id in logical_ids or ("CountersTable", "MarkersTable"):
        names.append(f"bench-{tag}-{logical_id.removesuffix('Table').lower()}-{suffix}")
        template_definitions()[logical_id].create(admin, names[-1])
    return names


def drop_tables(admin: DynamoDBClient, names: Sequence[str]) -> None:
    for name in names:
        with contextlib.suppress(admin.exceptions.ResourceNotFoundException):
            admin.delete_table(TableName=name)
