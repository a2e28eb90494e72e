"""The SQS entry point: ``tally.handlers.sqs.handler`` (see template.yaml).

It reads the clock once, hands the records to the pipeline built at cold start, and turns the result
into a partial batch response. It catches nothing: an unexpected error fails the whole batch so SQS
redelivers it, and the idempotency markers make that redelivery safe.
"""

from __future__ import annotations

import os
import time
from functools import cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics, Tracer

from tally.config import Settings
from tally.runtime import METRICS_NAMESPACE, build_pipeline, report
from tally.sources.sqs import failure_report, records_from_event

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from tally.pipeline import BatchPipeline

logger = Logger(service="tally")
metrics = Metrics(namespace=METRICS_NAMESPACE, service="tally")
tracer = Tracer(service="tally")


@cache
def pipeline() -> BatchPipeline:
    """Built on the first invocation of a container, then reused (``cache_clear`` in tests)."""
    return build_pipeline(Settings.from_env(os.environ))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: Mapping[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Count an SQS batch; report the records that must be redelivered (on a FIFO queue, all after the first)."""
    now_ms = time.time_ns() // 1_000_000
    records = records_from_event(event)
    result = pipeline().process(records, now_ms, context.get_remaining_time_in_millis)
    report(result, metrics, logger)
    return failure_report(records, result.failed_record_ids)
