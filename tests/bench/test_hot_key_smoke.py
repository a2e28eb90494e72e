"""Keeps the hot-key bench alive: a tiny run must count exactly and account for its conflicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.hot_key import compare

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration


def test_hot_key_bench_counts_exactly_with_and_without_shards(dynamodb_local: DynamoDBLocal) -> None:
    plain, sharded = compare(dynamodb_local, events=600, consumers=3, shards=4)
    assert plain.counted == plain.events == 600
    assert sharded.counted == sharded.events == 600
    # every injected conflict cost a retried transaction: transactions = batches' commits + conflicts
    assert plain.transactions >= plain.batches + plain.conflicts
