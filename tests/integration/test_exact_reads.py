"""Reads that add stored counters (hot-key shards, series, ``tally top``) keep every digit DynamoDB keeps.

Sums taken in Python's default decimal context (28 digits) would read a hot key whose shards add up to
a 38-digit value back rounded, while the writes keep all 38.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from tally.core.sharding import MAX_SHARDS, parse_hot_keys
from tally.core.windows import HOUR_MS, parse_window_spec
from tally.reader import CounterReader, largest
from tally.reader.store_view import read_counters, read_series
from tests.support.pipeline import make_store

if TYPE_CHECKING:
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

DAY0 = 4_102_444_800_000  # 2100-01-01T00:00Z
SHARD_VALUE = "5555555555555555555555555555555555555.5"
"""38 significant digits; sixteen of them add up to 88888888888888888888888888888888888888 (38 digits)."""
SUM_OF_16 = Decimal("88888888888888888888888888888888888888")
FRACTION = "0.1000000000000000000000000000000000001"
"""37 significant digits after the point: sixteen of them are 1.6000000000000000000000000000000000016."""


def _write_shards(tables: DynamoDBTables, key: str, sort_key: str) -> None:
    for shard in range(MAX_SHARDS):
        partition = key if shard == 0 else f"{key}\x1f{shard}"
        tables.client.put_item(
            TableName=tables.counters_table,
            Item={
                "pk": {"S": partition},
                "sk": {"S": sort_key},
                "c#big": {"N": SHARD_VALUE},
                "c#small": {"N": FRACTION},
            },
        )


def test_reading_a_hot_key_sums_its_shards_to_38_digits(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a hot key whose 16 shards (stored exactly by DynamoDB) add up to 38 significant digits
    hot = parse_hot_keys("hot:*=16")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    _write_shards(ddb_tables, "hot:a", "all")
    hour = parse_window_spec("hour", "hour=90").unit("hour")
    _write_shards(ddb_tables, "hot:a", hour.window_id(DAY0))
    expected = {"big": SUM_OF_16, "small": Decimal("1.6000000000000000000000000000000000016")}
    # WHEN it is read (tally get, a series) THEN nothing is rounded
    assert read_counters(store, "hot:a", hot) == expected
    assert read_series(store, "hot:a", hour, DAY0, DAY0 + HOUR_MS, hot_keys=hot) == [
        (DAY0, expected),
        (DAY0 + HOUR_MS, {}),
    ]


def test_tally_top_sums_shards_to_38_digits(ddb_tables: DynamoDBTables) -> None:
    # GIVEN the same 16 shards
    _write_shards(ddb_tables, "hot:b", "all")
    # WHEN tally top's scan adds them up
    totals = CounterReader(ddb_tables.counters_table, client=ddb_tables.client).all_time_totals()
    # THEN the totals, and the ranking built on them, keep all 38 digits
    assert totals["hot:b"]["big"] == SUM_OF_16
    assert totals["hot:b"]["small"] == Decimal("1.6000000000000000000000000000000000016")
    assert largest(totals, 1)[0].value == SUM_OF_16
