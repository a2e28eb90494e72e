"""Lambda's Kinesis event source mapping, for one shard, as a test double over a real (moto) shard's records.

A thin driver around ``tally_local.esm.ShardBatch``, the one emulation of the mapping's decisions that
the local pollers and the chaos run share: batches of at most ``batch_size`` records in sequence order,
the checkpoint at the LOWEST reported failure, bisection on a function error (``bisect``), and after
``max_retries`` the range given up (``given_up``: what the on-failure destination would hear of it).
A raised handler is a function error. An answer Lambda could not read fails the test instead of being
retried: in a test it is a handler bug. Must not: decide a batch's fate itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tally_local.esm import GiveUp, KinesisRetryPolicy, ShardBatch, function_error, read_response
from tally_local.kit.lambda_events import kinesis_event

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tally_local.esm import BatchOutcome, Record

    Handler = Callable[[dict[str, Any]], Any]

REGION = "us-east-1"


@dataclass
class ShardConsumer:
    """Drives ``handler`` over one shard's records the way the event source mapping would."""

    handler: Handler
    stream_arn: str
    shard_id: str
    batch_size: int = 100
    max_retries: int = 10
    bisect: bool = True
    invocations: list[list[str]] = field(default_factory=list)
    """Sequence numbers of every invocation's batch, in order."""
    given_up: list[GiveUp] = field(default_factory=list)

    def run(self, records: Sequence[Record]) -> None:
        policy = KinesisRetryPolicy(maximum_retry_attempts=self.max_retries, bisect_on_function_error=self.bisect)
        for start in range(0, len(records), self.batch_size):
            delivery = ShardBatch(records[start : start + self.batch_size], policy)
            while (part := delivery.next_part()) is not None:
                step = delivery.settle(self._invoke(part), datetime.now(UTC))
                if step.give_up is not None:
                    self.given_up.append(step.give_up)

    def _invoke(self, part: Sequence[Record]) -> BatchOutcome:
        ids = [str(record["SequenceNumber"]) for record in part]
        self.invocations.append(ids)
        event = kinesis_event(part, self.stream_arn, self.shard_id, REGION)
        try:
            response = self.handler(event)
        except Exception as exc:  # a function error, as Lambda sees it
            return function_error(ids, repr(exc))
        outcome = read_response(response, ids)
        assert not outcome.whole_batch, f"Lambda could not read the answer (it fails the whole batch): {outcome.reason}"
        return outcome
