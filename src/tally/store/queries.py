"""Kept for ``tally.local.demo``, which cross-checks every key against the whole table: the scan behind
``tally top`` now lives in the one read path, ``tally.reader`` (``CounterReader.all_time_totals``).

New code uses ``tally.reader`` directly; this module goes once the demo does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tally.reader.dynamodb import CounterReader

if TYPE_CHECKING:
    from decimal import Decimal

    from mypy_boto3_dynamodb.client import DynamoDBClient


def all_time_totals(client: DynamoDBClient, counters_table: str) -> dict[str, dict[str, Decimal]]:
    """Key -> counter -> all-time value, shards summed into their key (``CounterReader.all_time_totals``)."""
    return CounterReader(counters_table, client=client).all_time_totals()
