"""Running the chaos harness on the test session's DynamoDB Local and tables."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from bench.chaos.harness import PipelineFactory, Tables, run_chaos, wire_pipeline

from tally.runtime import CLIENT_CONFIG

if TYPE_CHECKING:
    from bench.chaos.config import ChaosConfig
    from bench.chaos.harness import ChaosResult

    from tally.local.dynamodb_local import DynamoDBLocal
    from tests.conftest import DynamoDBTables


def run_on(
    dynamodb_local: DynamoDBLocal,
    ddb_tables: DynamoDBTables,
    config: ChaosConfig,
    pipeline_factory: PipelineFactory = wire_pipeline,
) -> ChaosResult:
    """One chaos run of ``config`` on the session's tables, through ``pipeline_factory``'s wiring."""
    tables = Tables(ddb_tables.counters_table, ddb_tables.markers_table)
    client_factory = partial(dynamodb_local.client, CLIENT_CONFIG)
    return run_chaos(config, client_factory, tables, pipeline_factory=pipeline_factory)
