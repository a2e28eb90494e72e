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

from typing import TYPE_CHECKING, Any

# logger, metrics, tracer and pipeline are re-exported: tests clear the pipeline and read the logs through them.
from tally.handlers.counting import count, entry_point, logger, metrics, pipeline, tracer
from tally.sources.kinesis import failure_report, records_from_event

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["handler", "logger", "metrics", "pipeline", "tracer"]


@entry_point
def handler(event: Mapping[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """Count a Kinesis batch; report the records from which the shard must be redelivered."""
    return failure_report(count(records_from_event(event), context).failed_record_ids)
