"""Wiring for the Lambda handlers: build clients and adapters once, and report a batch's figures.

Handlers call ``build_pipeline`` once per cold start (through a cached factory), so every invocation of
a warm container reuses the same boto3 clients and connection pools. boto3 honours ``AWS_ENDPOINT_URL``
(and ``AWS_ENDPOINT_URL_DYNAMODB`` / ``_SQS``), which is how local runs point at local endpoints.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import boto3
from aws_lambda_powertools.metrics import MetricUnit

from tally.archive_writer import S3ArchiveWriter
from tally.client_config import CLIENT_CONFIG as CLIENT_CONFIG  # noqa: PLC0414 - re-exported for bench/, tests
from tally.commit.applier import Applier
from tally.core.limits import WIRE_LIMITS
from tally.core.write_planner import plan_write
from tally.dead_letter_sender import SqsDeadLetterQueue
from tally.errors import ConfigurationError
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.post_commit import post_commit_steps
from tally.store.distinct import DynamoDBDistinctStore
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.expressions import counter_limit_for
from tally.store.gauges import DynamoDBGaugeStore
from tally.store.journal import DynamoDBJournal
from tally.store.windows import DynamoDBWindowMover

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger, Metrics
    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.config import Settings
    from tally.core.write_planner import WritePlanner
    from tally.pipeline import BatchResult, DeadLetterQueue
    from tally.post_commit import ArchiveWriter

METRICS_NAMESPACE = "Tally"
"""The CloudWatch namespace of tally's metrics (set in code so every handler and test agrees)."""


def build_pipeline(settings: Settings) -> BatchPipeline:
    """The production pipeline: DynamoDB store, SQS dead-letter queue, default limits."""
    if settings.dlq_url is None:
        raise ConfigurationError("the Lambda function needs a dead-letter queue URL")
    session = boto3.session.Session()
    dead_letters = SqsDeadLetterQueue(session.client("sqs", config=CLIENT_CONFIG), settings.dlq_url)
    archive = (
        S3ArchiveWriter(session.client("s3", config=CLIENT_CONFIG), settings.archive_bucket)
        if settings.archive_bucket
        else None
    )
    return wire_pipeline(session.client("dynamodb", config=CLIENT_CONFIG), dead_letters, settings, archive=archive)


def wire_pipeline(
    dynamodb: DynamoDBClient,
    dead_letters: DeadLetterQueue,
    settings: Settings,
    *,
    archive: ArchiveWriter | None = None,
    write_planner: WritePlanner = plan_write,
    fenced: bool | None = None,
) -> BatchPipeline:
    """The pipeline on the given DynamoDB client, dead-letter port and archive writer (None: the archive off), as
    the handlers run it; ``write_planner`` decides each direct transaction's write (the chaos run's broken
    variants pass another); ``fenced`` applies journal batches by fenced single-item writes (``tally.core.fence``;
    None: as ``settings.fenced_apply`` says, which the handlers take from ``TALLY_FENCED_APPLY``; the benchmarks
    and the chaos run choose it explicitly).

    Split from ``build_pipeline`` so that the benchmarks measure this very wiring on their own client.
    """
    ttl_s = settings.marker_ttl_seconds
    declared = settings.declarations
    windows = declared.windows
    if declared.thresholds.rules and not settings.notifications_table:
        raise ConfigurationError("declared thresholds need a notifications table, where crossings are recorded")
    store = DynamoDBCounterStore(
        dynamodb,
        settings.counters_table,
        settings.markers_table,
        ttl_s,
        notifications_table=settings.notifications_table,
    )
    journal = DynamoDBJournal(
        dynamodb,
        settings.counters_table,
        settings.markers_table,
        ttl_s,
        declared.defaults,
        notifications_table=settings.notifications_table,
    )
    applier = Applier(
        store,
        journal,
        counter_limit=counter_limit_for(declared.defaults),
        declarations=declared,
        write_planner=write_planner,
        write_concurrency=settings.write_concurrency,
        fenced=settings.fenced_apply if fenced is None else fenced,
    )
    return BatchPipeline(
        applier,
        dead_letters,
        PipelineSettings(limits=WIRE_LIMITS, dedup_horizon_ms=ttl_s * 1000, declarations=declared),
        steps=post_commit_steps(
            windows,
            gauges=DynamoDBGaugeStore(dynamodb, settings.counters_table),
            distinct=DynamoDBDistinctStore(dynamodb, settings.counters_table, declared.hot_keys),
            mover=DynamoDBWindowMover(
                dynamodb,
                settings.counters_table,
                windows,
                thresholds=declared.thresholds,
                # A move is a write the key item gets anyway: it takes the marks the fenced apply may prune.
                marks_due=applier.prunable_marks if applier.epochs is not None else None,
            )
            if any(unit.on_key_item for unit in windows.units)
            else None,
            archive=archive,
            archive_prefix=settings.archive_prefix,
        ),
    )


def report(result: BatchResult, metrics: Metrics, logger: Logger) -> None:
    """Emit the batch's metrics and one summary log line; dead letters are logged by code, never by body."""
    figures = result.figures
    for name, value in figures.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    if figures.get("RefusedChunks"):
        logger.error("committed increments refused by DynamoDB (Number range); see the journal's applied-records")
    for stall in result.stalls:
        # A stall says why: the record comes back after the source's delay (SQS visibility timeout,
        # Kinesis retry), which docs/journal.md ("Liveness") and the template make outlast the lease.
        logger.warning(
            "record held back by a live journal batch; redelivered later",
            record_id=stall.record_id,
            batch_id=stall.batch_id,
            lease_until_ms=stall.lease_until_ms,
            lease_until=datetime.fromtimestamp(stall.lease_until_ms / 1000, UTC).isoformat(timespec="milliseconds"),
        )
    for letter in result.dead_letters:
        logger.warning(
            "record dead-lettered",
            record_id=letter.record.record_id,
            error_code=str(letter.rejection.code),
            error_message=letter.rejection.detail[:300],
        )
    logger.info("batch processed", extra=dict(figures))
