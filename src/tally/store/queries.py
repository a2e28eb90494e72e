"""Operator queries over the whole counters table: every key's all-time counters, and the largest ones.

These read the table with a ``Scan`` (paginated, strongly consistent), which the Lambda function is not
allowed to do and never needs: they serve ``tally top`` and the demo's cross-checks, run by an
operator. A Scan reads every item, window items included (they are filtered out after the read, so
they still cost read units): on a large table this is a slow, whole-table read, by design rare.

Hot keys are written to shard items whose partition key is ``<key>\\x1f<n>``; their counters are summed
into the key here, as ``read_counters`` does, so a sharded key is one row with its true total.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.items import SHARD_SEPARATOR
from tally.core.numbers import EXACT
from tally.store.schema import ALL_TIME, PARTITION_KEY, SORT_KEY, counters_from_item, translate

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from mypy_boto3_dynamodb.client import DynamoDBClient

_ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class CounterValue:
    """One named counter of one key."""

    key: str
    counter: str
    value: Decimal


def key_of_partition(partition_key: str) -> str:
    """The counter key of an all-time item's partition key (a shard item's ``<key>\\x1f<n>`` -> ``<key>``)."""
    return partition_key.split(SHARD_SEPARATOR, 1)[0]


def scan_all_time(client: DynamoDBClient, counters_table: str) -> Iterator[Mapping[str, Any]]:
    """Every all-time item of the counters table (shard items included), page by page."""
    paginator = client.get_paginator("scan")
    pages = paginator.paginate(
        TableName=counters_table,
        FilterExpression="#sk = :all",
        ExpressionAttributeNames={"#sk": SORT_KEY},
        ExpressionAttributeValues={":all": {"S": ALL_TIME}},
        ConsistentRead=True,
    )
    try:
        for page in pages:
            yield from page.get("Items", [])
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc) from exc


def all_time_totals(client: DynamoDBClient, counters_table: str) -> dict[str, dict[str, Decimal]]:
    """Key -> counter -> all-time value, shards summed into their key (exactly: see ``EXACT``)."""
    totals: dict[str, dict[str, Decimal]] = {}
    for item in scan_all_time(client, counters_table):
        counters = totals.setdefault(key_of_partition(item[PARTITION_KEY]["S"]), {})
        for name, value in counters_from_item(item).items():
            counters[name] = EXACT.add(counters.get(name, _ZERO), value)
    return totals


def largest(totals: Mapping[str, Mapping[str, Decimal]], n: int, counter: str | None = None) -> list[CounterValue]:
    """The ``n`` largest counters (of one name, if given), largest first; ties in key order."""
    values = [
        CounterValue(key, name, value)
        for key, counters in totals.items()
        for name, value in counters.items()
        if counter is None or name == counter
    ]
    values.sort(key=lambda item: (-item.value, item.key, item.counter))
    return values[:n]
