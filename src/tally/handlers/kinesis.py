"""The Kinesis entry point: ``tally.handlers.kinesis.handler`` (StreamCounterFunction in template.yaml).

As thin as the SQS handler, on the same pipeline: read the clock once, process the shard's batch, report.
The report differs only in meaning: Lambda checkpoints at the lowest failed sequence number and
redelivers everything after it, and the idempotency markers make the already-applied part a no-op.
Poison goes to the same dead-letter queue with its full payload, so it never blocks the shard; only
poison the dead-letter queue refused is reported, and the event source mapping's finite retries and
record age (with its on-failure destination) bound how long that can hold the shard. It catches nothing:
an unexpected error fails the invocation, which the event source mapping retries (bisecting the batch).
"""

from __future__ import annotations

import os
import time
from functools import cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics, Tracer

from tally.config import Settings
from tally.runtime import METRICS_NAMESPACE, build_pipeline, report
from tally.sources.kinesis import failure_report, records_from_event

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
    """Count a Kinesis batch; report the records from which the shard must be redelivered."""
    now_ms = time.time_ns() // 1_000_000
    result = pipeline().process(records_from_event(event), now_ms, context.get_remaining_time_in_millis)
    report(result, metrics, logger)
    return failure_report(result.failed_record_ids)
