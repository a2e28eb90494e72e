"""What the two counting entry points (``tally.handlers.sqs``, ``tally.handlers.kinesis``) share.

Powertools' logger, metrics and tracer, the pipeline built on a container's first invocation, and the one
step of a batch: read the clock once, process the records against the invocation's remaining time, and
report the batch's figures. Each entry point keeps only what its source differs in: how records are read
from the event and how a failure is reported back (``tally.sources.sqs``, ``tally.sources.kinesis``).
"""

from __future__ import annotations

import os
import time
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer

from tally.config import Settings
from tally.runtime import METRICS_NAMESPACE, build_pipeline, report

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from aws_lambda_powertools.utilities.typing import LambdaContext

    from tally.core.model import SourceRecord
    from tally.pipeline import BatchPipeline, BatchResult

Response = TypeVar("Response")

logger = Logger(service="tally")
metrics = Metrics(namespace=METRICS_NAMESPACE, service="tally")
tracer = Tracer(service="tally")


@cache
def pipeline() -> BatchPipeline:
    """Built on the first invocation of a container, then reused (``cache_clear`` in tests)."""
    return build_pipeline(Settings.from_env(os.environ))


def entry_point(
    handler: Callable[[Mapping[str, Any], LambdaContext], Response],
) -> Callable[[Mapping[str, Any], LambdaContext], Response]:
    """``handler`` with the invocation's context in the logs, its trace, and its metrics flushed when it returns."""
    measured = metrics.log_metrics(handler)
    traced = tracer.capture_lambda_handler(measured, capture_response=False)
    return logger.inject_lambda_context(traced, clear_state=True)


def count(records: Sequence[SourceRecord], context: LambdaContext) -> BatchResult:
    """Process one batch's records on the container's pipeline, and report its figures."""
    now_ms = time.time_ns() // 1_000_000
    result = pipeline().process(records, now_ms, context.get_remaining_time_in_millis)
    report(result, metrics, logger)
    return result
