"""End to end through the local stack: publish -> pollers -> real handler -> DynamoDB Local -> ``tally``.

Producers use the producer library against the moto server; the event source pollers drive the real
handlers in their own execution environments (processes), several at once; every count is read back
with ``tally get`` / ``tally top`` and compared with totals computed when the events were generated.
Then the dead-letter queue is listed and redriven with ``tally dlq``: nothing may count twice.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

import pytest

from tally.audit.objects import read_archive
from tally.audit.recount import recount
from tally.cli.synthetic import generate
from tally.config import DEFAULT_ARCHIVE_PREFIX
from tally.producer import KinesisPublisher, NumberedIds, PackLimits, SqsPublisher, build_messages, new_message_id
from tests.support.local_stack import pollers, running_stack, tally, tally_json, tally_lines

if TYPE_CHECKING:
    from decimal import Decimal
    from pathlib import Path

    from tally.producer.wire import OutgoingMessage
    from tally_local.dynamodb_local import DynamoDBLocal
    from tally_local.resources import LocalResources

pytestmark = pytest.mark.integration

POISON = {
    "not json": "malformed_json",
    '{"id":"p-1","key":"e2e:x","delta":"1"}': "invalid_number",
    '{"id":"p-2","key":"e2e:x","detla":1}': "invalid_field",
}
DRAIN_S = 180


def planned(events: int, seed: int) -> tuple[list[OutgoingMessage], dict[str, dict[str, Decimal]]]:
    """Messages (a few single, numbered as the library numbers them, the rest packed under random ids) and
    the exact totals they must add up to."""
    load = generate(events, 12, seed=seed, now_ms=time.time_ns() // 1_000_000, prefix="e2e:")
    singles = build_messages(load.events[:20], None, NumberedIds())  # block markers
    packed = build_messages(load.events[20:], PackLimits(max_bytes=64 * 1024, max_events=40), new_message_id)
    return singles + packed, load.totals


def assert_counts(expected: dict[str, dict[str, Decimal]]) -> None:
    """Every key through ``tally top`` (one scan), the largest also through ``tally get``."""
    counted: dict[str, dict[str, Decimal]] = {}
    for row in tally_json("top", "1000", "--json"):
        counted.setdefault(row["key"], {})[row["counter"]] = row["value"]
    assert counted == expected
    largest = max(expected, key=lambda key: (expected[key]["count"], key))
    assert tally_json("get", largest, "--json") == expected[largest]
    (top,) = tally_json("top", "1", "--counter", "count", "--json")
    assert (top["key"], top["value"]) == (largest, expected[largest]["count"])


def assert_archive_recounts(resources: LocalResources, expected: dict[str, dict[str, Decimal]]) -> None:
    """The archive in the local stack's bucket recounts every key exactly."""
    assert resources.archive_bucket is not None
    result = recount(read_archive(resources.client("s3"), resources.archive_bucket, DEFAULT_ARCHIVE_PREFIX))
    assert {key: dict(values) for key, values in result.counters.items()} == expected


def redrive_changes_nothing(resources: LocalResources, mappings: Any, expected: dict[str, dict[str, Decimal]]) -> None:
    """Copies of counted messages plus the poison: redriven, nothing counted twice, the poison back."""
    letters = tally_lines("dlq", "list", "--json")
    assert sorted(letter["error_code"] for letter in letters if letter["kind"] == "poison") == sorted(POISON.values())
    tally("dlq", "redrive")
    mappings.wait_until_drained(DRAIN_S)
    assert_counts(expected)
    again = tally_lines("dlq", "list", "--json")
    assert sorted(letter["error_code"] for letter in again) == sorted(POISON.values())
    assert {letter["message_id"] for letter in again}.isdisjoint({letter["message_id"] for letter in letters})


def test_sqs_end_to_end_with_concurrent_pollers_and_a_redrive(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    messages, expected = planned(600, seed=7)
    with running_stack(
        dynamodb_local, serial_moto_endpoint, monkeypatch, {"Source": "SQS", "MaximumConcurrency": "3"}
    ) as stack:
        assert stack.queue_url is not None
        sqs = stack.client("sqs")
        with pollers(stack, tmp_path) as mappings:
            # GIVEN three pollers sharing the queue
            assert len(mappings.pollers) == 3
            # WHEN producers publish, send poison, and re-send some messages with the same ids once those are
            # counted: a copy met while its original's journal batch is still open is held by that batch's lease
            # and comes back one visibility timeout later (420 s, as on AWS), which no drain here waits for;
            # re-sends during processing are the chaos run's
            publisher = SqsPublisher(sqs, stack.queue_url)
            assert publisher.send(messages).ok
            for body in POISON:
                sqs.send_message(QueueUrl=stack.queue_url, MessageBody=body)
            mappings.wait_until_drained(DRAIN_S)
            assert publisher.send(random.Random(1).sample(messages, 5)).ok
            mappings.wait_until_drained(DRAIN_S)
            # THEN every key is exact, through tally get and tally top
            assert_counts(expected)
            stats = mappings.stats["EventsQueueBatch"]
            assert stats.metric("EventsApplied") == 600
            assert stats.metric("DuplicatesInBatch") + stats.metric("DuplicatesAlreadyApplied") >= 5
            assert stats.metric("PoisonRecords") == len(POISON)
            assert stats.function_errors == 0
            assert stats.writes.transactions > 0
            # AND the functions archived every counted message to the stack's bucket on moto's S3
            assert_archive_recounts(stack, expected)
            # AND a redrive of the dead-letter queue (with copies of counted messages) changes nothing
            for message in messages[:3]:
                sqs.send_message(QueueUrl=stack.dead_letter_queue_url, MessageBody=message.body.decode())
            copies = tally_lines("dlq", "list", "--json")
            assert sum(letter["kind"] == "message" for letter in copies) == 3
            duplicates = stats.metric("DuplicatesAlreadyApplied")
            redrive_changes_nothing(stack, mappings, expected)
            assert stats.metric("DuplicatesAlreadyApplied") == duplicates + 3


def test_kinesis_end_to_end_with_a_poller_per_shard_and_a_redrive(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    messages, expected = planned(600, seed=8)
    parameters = {"Source": "Kinesis", "StreamMode": "PROVISIONED", "ShardCount": "2"}
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, parameters) as stack:
        assert stack.stream_name is not None
        kinesis = stack.client("kinesis")
        with pollers(stack, tmp_path) as mappings:
            # GIVEN one poller per shard
            assert sorted(poller.name for poller in mappings.pollers) == [
                "EventStreamBatch-shardId-000000000000",
                "EventStreamBatch-shardId-000000000001",
            ]
            # WHEN producers publish (keys spread over both shards), re-send some, and put poison
            publisher = KinesisPublisher(kinesis, stream_name=stack.stream_name)
            assert publisher.send(messages).ok
            assert publisher.send(random.Random(2).sample(messages, 5)).ok
            for index, body in enumerate(POISON):
                kinesis.put_record(StreamName=stack.stream_name, Data=body.encode(), PartitionKey=f"poison-{index}")
            mappings.wait_until_drained(DRAIN_S)
            # THEN every key is exact
            assert_counts(expected)
            stats = mappings.stats["EventStreamBatch"]
            assert stats.metric("EventsApplied") == 600
            assert stats.metric("PoisonRecords") == len(POISON)
            assert stats.function_errors == 0
            # AND both shards were read to their tips
            assert all(poller.caught_up_since(0) for poller in mappings.pollers)
            # AND redriving the poison (back into the stream, from tally.source) changes nothing
            redrive_changes_nothing(stack, mappings, expected)
