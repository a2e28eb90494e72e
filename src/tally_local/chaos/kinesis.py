"""A Kinesis stream and Lambda's Kinesis event source mapping (one consumer per shard), in-process.

The I/O around ``tally_local.esm.ShardBatch``, which decides checkpoints, retries, bisection and
give-ups exactly as the local pollers' and the tests' drivers do. This module keeps the records, routes
them to a shard by the MD5 of their partition key, delivers them in sequence order in batches of at most
``batch_size``, and adds what only the chaos run does:

- retries wait ``esm``'s retry timing (``KinesisStep.retry_after_ms``) on the virtual clock;
- a given-up range is kept as the on-failure destination's record of it; the operator replays it from
  the stream (the run does, after the main pass: the Kinesis counterpart of a DLQ redrive);
- a ``kinesis_rewind`` fault restarts a shard from an older checkpoint (a lease that moved to another
  worker before the last checkpoint was written): already-applied records come again.

Must not: decide a batch's fate itself (that is ``esm``).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from tally_local.esm import Decision, KinesisRetryPolicy, Record, RetryCadence, ShardBatch
from tally_local.kit.lambda_events import kinesis_event

if TYPE_CHECKING:
    import random
    from collections.abc import Sequence

    from tally_local.chaos.clock import VirtualClock
    from tally_local.chaos.invoke import Consumer
    from tally_local.chaos.ledger import Ledger
    from tally_local.chaos.workload import Workload

REGION: Final = "us-east-1"
STREAM_ARN: Final = "arn:aws:kinesis:us-east-1:123456789012:stream/tally-chaos-events"
_FIRST_SEQUENCE: Final = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898


@dataclass
class Shard:
    shard_id: str
    records: list[dict[str, Any]] = field(default_factory=list)
    given_up: list[list[Record]] = field(default_factory=list)
    ever_given_up: set[str] = field(default_factory=set)
    """Bodies of every record given up at least once: replayed later, out of the shard's order."""


class Stream:
    """The shards and their records (published before the consumers start)."""

    def __init__(self, shards: int, clock: VirtualClock) -> None:
        self.shards = [Shard(f"shardId-{index:012d}") for index in range(shards)]
        self._clock = clock
        self._published = 0

    def put(self, data: bytes, partition_key: str) -> None:
        digest = int.from_bytes(hashlib.md5(partition_key.encode()).digest(), "big")
        shard = self.shards[digest * len(self.shards) >> 128]
        self._published += 1
        shard.records.append(
            {
                "SequenceNumber": str(_FIRST_SEQUENCE + self._published * 1_000_003),
                "PartitionKey": partition_key,
                "Data": data,
                "ApproximateArrivalTimestamp": datetime.fromtimestamp(self._clock.now_ms() / 1000, UTC),
            }
        )


@dataclass
class ShardConsumer:
    """Lambda's event source mapping for one shard (ParallelizationFactor 1)."""

    shard: Shard
    consumer: Consumer
    workload: Workload
    ledger: Ledger
    clock: VirtualClock
    batch_size: int
    max_retries: int
    rewind_rate: float
    rng: random.Random
    max_record_age_s: int = -1
    """``MaximumRecordAgeInSeconds`` (-1: none)."""
    cadence: RetryCadence = RetryCadence.BACKOFF
    halted: threading.Event = field(default_factory=threading.Event)
    """Set on Ctrl-C: the consumer stops after its current invocation."""

    def run(self) -> None:
        position = 0
        records = self.shard.records
        while position < len(records) and not self.halted.is_set():
            batch = records[position : position + self.batch_size]
            self.deliver(batch)
            position += len(batch)
            if position < len(records) and self.rng.random() < self.rewind_rate:
                back = self.rng.randint(1, min(position, 2 * self.batch_size))
                self.consumer.log.add("delivery.kinesis_rewind")
                self.consumer.log.add("redelivery.kinesis_rewound_records", back)
                position -= back

    def replay_given_up(self) -> None:
        """The operator's replay of every range sent to the on-failure destination."""
        ranges, self.shard.given_up = self.shard.given_up, []
        for records in ranges:
            self.consumer.log.add("redelivery.kinesis_replayed_records", len(records))
            self.deliver(records)

    def deliver(self, batch: Sequence[Record]) -> None:
        """Deliver ``batch`` until every record is checkpointed or given up (``esm.ShardBatch`` decides)."""
        policy = KinesisRetryPolicy(
            maximum_retry_attempts=self.max_retries,
            maximum_record_age_s=self.max_record_age_s,
            bisect_on_function_error=True,
            cadence=self.cadence,
        )
        delivery = ShardBatch(batch, policy)
        while (records := delivery.next_part()) is not None and not self.halted.is_set():
            ids = [record["SequenceNumber"] for record in records]
            messages = [
                self.workload.by_body.get(record["Data"].decode("utf-8", "surrogateescape")) for record in records
            ]
            self.ledger.attempt(message for message in messages if message is not None)
            outcome = self.consumer.invoke_kinesis(kinesis_event(records, STREAM_ARN, self.shard.shard_id, REGION), ids)
            step = delivery.settle(outcome, datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC))
            self.ledger.acknowledge(
                message
                for message, rid in zip(messages, ids, strict=True)
                if message is not None and rid not in outcome.failed
            )
            if step.decision is Decision.DONE:
                continue
            self.clock.wait(step.retry_after_ms)
            if step.give_up is not None:
                self.consumer.log.add("delivery.kinesis_given_up_records", len(step.give_up.records))
                if self.consumer.trail is not None:
                    for record in step.give_up.records:
                        body = record["Data"].decode("utf-8", "surrogateescape")
                        self.consumer.trail.note(body, f"{self.clock.now_ms()} given up by the shard's consumer")
                self.shard.given_up.append(list(step.give_up.records))
                self.shard.ever_given_up.update(
                    record["Data"].decode("utf-8", "surrogateescape") for record in step.give_up.records
                )
                continue
            if step.decision is Decision.BISECT:
                self.consumer.log.add("redelivery.kinesis_bisected_batches")
            elif not outcome.whole_batch:
                self.consumer.log.add("redelivery.kinesis_from_checkpoint")
            self.consumer.log.add("redelivery.kinesis_records", step.redelivered)
