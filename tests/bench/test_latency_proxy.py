"""``tally_local.latency_proxy``: a real proxy in front of DynamoDB Local that answers after AWS-like latencies.

No duration is asserted against the wall clock (the machine is shared): what the proxy itself recorded is.
It must forward (the item lands in DynamoDB Local), name the operation and its items, never answer before
the modeled latency, and serve concurrent requests concurrently (DynamoDB Local serialises transactions;
AWS does not).
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

import pytest

from tally.cost.model import RequestLatencies
from tally_local.dynamodb_local import DynamoDBLocal, _make_client
from tally_local.latency_proxy import LatencyProxy, item_count, operation_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient


def test_published_points_are_reproduced() -> None:
    """The lines through DeBrie's p50 figures (ms) pass through them; 100 actions is the extrapolation."""
    latencies = RequestLatencies()
    assert latencies.of("PutItem", 1) == pytest.approx(7.55)
    assert latencies.of("GetItem", 1) == pytest.approx(7.55)
    assert latencies.of("BatchWriteItem", 5) == pytest.approx(8.14)
    assert latencies.of("BatchWriteItem", 25) == pytest.approx(10.2)
    assert latencies.of("TransactWriteItems", 5) == pytest.approx(25.3)
    assert latencies.of("TransactWriteItems", 25) == pytest.approx(32.1)
    assert latencies.of("TransactWriteItems", 100) == pytest.approx(57.6)
    assert latencies.of("BatchGetItem", 100) == pytest.approx(latencies.of("BatchWriteItem", 100))


def test_operations_and_items_are_read_from_the_request() -> None:
    assert operation_of("DynamoDB_20120810.TransactWriteItems") == "TransactWriteItems"
    assert operation_of(None) == "unknown"
    transaction = b'{"TransactItems": [{"Put": {}}, {"Update": {}}, {"ConditionCheck": {}}]}'
    assert item_count("TransactWriteItems", transaction) == 3
    batch_get = b'{"RequestItems": {"a": {"Keys": [{}, {}]}, "b": {"Keys": [{}]}}}'
    assert item_count("BatchGetItem", batch_get) == 3
    batch_write = b'{"RequestItems": {"a": [{"PutRequest": {}}, {"PutRequest": {}}]}}'
    assert item_count("BatchWriteItem", batch_write) == 2
    assert item_count("GetItem", b'{"Key": {}}') == 1
    assert item_count("TransactWriteItems", b"not json") == 1


@pytest.fixture
def table(dynamodb_local: DynamoDBLocal) -> Iterator[str]:
    name = f"proxy-{uuid.uuid4().hex[:8]}"
    admin = dynamodb_local.client()
    admin.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield name
    admin.delete_table(TableName=name)


def _client(proxy: LatencyProxy) -> DynamoDBClient:
    return _make_client(proxy.endpoint_url, None)


@pytest.mark.integration
def test_requests_are_forwarded_and_answered_no_sooner_than_modeled(dynamodb_local: DynamoDBLocal, table: str) -> None:
    with LatencyProxy(dynamodb_local.endpoint_url) as proxy:
        client = _client(proxy)
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": {"id": {"S": f"k{i}"}}}} for i in range(100)]
        )
        client.get_item(TableName=table, Key={"id": {"S": "k7"}})
        seen = proxy.requests()
    # forwarded: DynamoDB Local itself holds the items
    assert dynamodb_local.client().get_item(TableName=table, Key={"id": {"S": "k99"}}).get("Item") is not None
    assert [(request.operation, request.items, request.status) for request in seen] == [
        ("TransactWriteItems", 100, 200),
        ("GetItem", 1, 200),
    ]
    for request in seen:
        assert request.modeled_s == pytest.approx(RequestLatencies().of(request.operation, request.items) / 1000)
        assert request.answered_s - request.arrived_s >= request.modeled_s
        assert request.upstream_s <= request.answered_s - request.arrived_s


@pytest.mark.integration
def test_concurrent_requests_overlap(dynamodb_local: DynamoDBLocal, table: str) -> None:
    """Two requests sent together are both in the proxy at once (a single-threaded proxy would queue them)."""
    barrier = threading.Barrier(2)
    with LatencyProxy(dynamodb_local.endpoint_url, scale=40) as proxy:  # GetItem: 302 ms

        def get(key: str) -> None:
            client = _client(proxy)
            barrier.wait()
            client.get_item(TableName=table, Key={"id": {"S": key}})

        threads = [threading.Thread(target=get, args=(key,)) for key in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        first, second = sorted(proxy.requests(), key=lambda request: request.arrived_s)
    assert second.arrived_s < first.answered_s
