"""Lambda's Kinesis event source mapping, for one shard, as a test double; and Lambda-format events.

``ShardConsumer`` replays the documented behaviour (FACTS.md, AWS "partial batch response" and
"bisect" docs) on the records of a real (moto) shard:

- batches of at most ``batch_size`` records, in sequence order, from the checkpoint;
- an empty failure report checkpoints past the batch;
- a partial failure report checkpoints at the LOWEST reported sequence number; the records from there
  to the end of the batch are retried (records after it that did succeed are delivered again);
- a function error retries the batch, bisected into two halves, each retried on its own;
- after ``max_retries`` retries the records still failing are given up: their range goes to the
  on-failure destination (metadata only, as Lambda sends it) and the shard moves on.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

Handler = Callable[[dict[str, Any]], Any]


def lambda_event(records: Sequence[dict[str, Any]], stream_arn: str, shard_id: str) -> dict[str, Any]:
    """A Lambda Kinesis event for GetRecords records, shaped like the files in ``events/``."""
    return {
        "Records": [
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": record["PartitionKey"],
                    "sequenceNumber": record["SequenceNumber"],
                    "data": base64.b64encode(record["Data"]).decode("ascii"),
                    "approximateArrivalTimestamp": record["ApproximateArrivalTimestamp"].timestamp(),
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": f"{shard_id}:{record['SequenceNumber']}",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/tally-test",
                "awsRegion": "us-east-1",
                "eventSourceARN": stream_arn,
            }
            for record in records
        ]
    }


@dataclass(frozen=True)
class GivenUp:
    """What the on-failure destination receives: the shard and the sequence range, not the data."""

    shard_id: str
    first_sequence_number: str
    last_sequence_number: str
    size: int


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
    given_up: list[GivenUp] = field(default_factory=list)

    def run(self, records: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(records), self.batch_size):
            self._deliver(list(records[start : start + self.batch_size]), self.max_retries)

    def _deliver(self, batch: list[dict[str, Any]], retries_left: int) -> None:
        self.invocations.append([record["SequenceNumber"] for record in batch])
        try:
            response = self.handler(lambda_event(batch, self.stream_arn, self.shard_id))
        except Exception:  # a function error, as Lambda sees it
            if retries_left == 0:
                self._give_up(batch)
            elif self.bisect and len(batch) > 1:
                middle = len(batch) // 2
                self._deliver(batch[:middle], retries_left - 1)
                self._deliver(batch[middle:], retries_left - 1)
            else:
                self._deliver(batch, retries_left - 1)
            return
        failed = [item["itemIdentifier"] for item in (response or {}).get("batchItemFailures") or []]
        if not failed:
            return
        positions = {record["SequenceNumber"]: index for index, record in enumerate(batch)}
        unknown = set(failed) - set(positions)
        assert not unknown, f"reported sequence numbers not in the batch (Lambda fails the whole batch): {unknown}"
        checkpoint = positions[min(failed, key=int)]
        if retries_left == 0:
            self._give_up(batch[checkpoint:])
            return
        self._deliver(batch[checkpoint:], retries_left - 1)

    def _give_up(self, records: list[dict[str, Any]]) -> None:
        first, last = records[0]["SequenceNumber"], records[-1]["SequenceNumber"]
        self.given_up.append(GivenUp(self.shard_id, first, last, len(records)))
