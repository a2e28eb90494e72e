"""``bench.audit`` at a tiny size (seconds): ``tally audit`` finds the table exact against the archive the benchmark
builds, copies included; the naive recount, which counts the copies again, does not."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import pytest
from bench.audit import PARAMETERS, run

from tally_local.stack import LocalStack

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration


def test_the_audit_benchmark_is_exact_at_a_tiny_size(dynamodb_local: DynamoDBLocal, moto_endpoint: str) -> None:
    args = argparse.Namespace(events=2_000, keys=20, per_object=250, hours=2, copies=0.05, seed=1)
    with LocalStack(PARAMETERS, dynamodb_endpoint=dynamodb_local.endpoint_url, aws_endpoint=moto_endpoint) as stack:
        one, default, naive = run(args, stack)
    for audit in (one, default):
        assert audit["exact"], audit
        assert audit["values"] > 20  # all-time values and their hour and day windows
        assert audit["cpu_seconds"] > 0
    assert naive["matches"] is False  # the copies, counted again
