"""``tally top``'s query: all-time items only, shards summed into their key, the largest first."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from tally.local.template import load_template, table_definitions
from tally.store.queries import CounterValue, all_time_totals, key_of_partition, largest

if TYPE_CHECKING:
    from collections.abc import Iterator

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@pytest.mark.parametrize(
    ("partition", "key"),
    [("page:/home", "page:/home"), ("page:/home\x1f3", "page:/home"), ("a\x1f12", "a"), ("", "")],
)
def test_shard_items_belong_to_their_key(partition: str, key: str) -> None:
    assert key_of_partition(partition) == key


TOTALS = {
    "a": {"count": Decimal(5), "revenue": Decimal("99.5")},
    "b": {"count": Decimal(7)},
    "c": {"count": Decimal(5), "revenue": Decimal("0.1")},
}


@pytest.mark.parametrize(
    ("n", "counter", "expected"),
    [
        (2, "count", [("b", "count", "7"), ("a", "count", "5")]),
        (10, "revenue", [("a", "revenue", "99.5"), ("c", "revenue", "0.1")]),
        (3, None, [("a", "revenue", "99.5"), ("b", "count", "7"), ("a", "count", "5")]),
        (5, "nothing", []),
    ],
)
def test_largest_counters_first_ties_in_key_order(
    n: int, counter: str | None, expected: list[tuple[str, str, str]]
) -> None:
    assert largest(TOTALS, n, counter) == [CounterValue(k, c, Decimal(v)) for k, c, v in expected]


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB", raising=False)
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(**table_definitions(load_template(TEMPLATE))["CountersTable"].create_table_kwargs("c"))
        yield client


def put(client: Any, pk: str, sk: str, **counters: str) -> None:
    item = {"pk": {"S": pk}, "sk": {"S": sk}} | {f"c#{name}": {"N": value} for name, value in counters.items()}
    client.put_item(TableName="c", Item=item)


def test_all_time_totals_sum_shards_and_skip_windows(dynamodb: Any) -> None:
    # GIVEN a plain key, a hot key written to its base item and two shards, and window items
    put(dynamodb, "plain", "all", count="3", revenue="0.30")
    put(dynamodb, "plain", "h#2026-11-22T03:00Z", count="3")
    put(dynamodb, "hot", "all", count="1")
    put(dynamodb, "hot\x1f2", "all", count="10")
    put(dynamodb, "hot\x1f7", "all", count="100", revenue="1")
    put(dynamodb, "hot\x1f7", "d#2026-11-22", count="100")
    # WHEN the table is read for tally top
    totals = all_time_totals(dynamodb, "c")
    # THEN each key appears once, with its shards summed and no window counted
    assert totals == {
        "plain": {"count": Decimal(3), "revenue": Decimal("0.30")},
        "hot": {"count": Decimal(111), "revenue": Decimal(1)},
    }
