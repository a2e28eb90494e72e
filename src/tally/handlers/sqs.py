"""The SQS entry point: ``tally.handlers.sqs.handler`` (see template.yaml).

It reads the clock once, hands the records to the pipeline built at cold start, and turns the result
into a partial batch response. It catches nothing: an unexpected error fails the whole batch so SQS
redelivers it, and the idempotency markers make that redelivery safe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# logger, metrics, tracer and pipeline are re-exported: tests clear the pipeline and read the logs through them.
from tally.handlers.counting import count, entry_point, logger, metrics, pipeline, tracer
from tally.sources.sqs import failure_report, records_from_event

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["handler", "logger", "metrics", "pipeline", "tracer"]


@entry_point
def handler(event: Mapping[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Count an SQS batch; report the records that must be redelivered (on a FIFO queue, all after the first)."""
    records = records_from_event(event)
    return failure_report(records, count(records, context).failed_record_ids)
