"""The local event source pollers behave as Lambda's event source mappings document it.

The handlers are the real ones wrapped to fail on cue (``tests.support.local_handlers``), run in the
local runtime's execution environments; each invocation's record ids are logged to a file the test reads.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest

from tally.producer import Event, KinesisPublisher, SqsPublisher
from tests.support.local_handlers import INVOCATIONS, MARKER
from tests.support.local_stack import pollers, running_stack, tally_json, tally_lines

if TYPE_CHECKING:
    from pathlib import Path

    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

HANDLERS = "tests.support.local_handlers"
DRAIN_S = 120


def invocations(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_sqs_deletes_what_succeeded_and_sqs_moves_the_failing_message_after_max_receive_count(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "invocations.jsonl"
    parameters = {"Source": "SQS", "MaximumConcurrency": "2", "MaxReceiveCount": "5", "BatchingWindowSeconds": "0"}
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, parameters) as stack:
        assert stack.queue_url is not None
        sqs = stack.client("sqs")
        environment = {MARKER: "fail-me", INVOCATIONS: str(log)}
        handlers = {"CounterFunction": f"{HANDLERS}.sqs_reports_marked_records_failed"}
        with pollers(stack, tmp_path, environment=environment, handlers=handlers) as mappings:
            # GIVEN eight good single-event messages, counted and deleted
            publisher = SqsPublisher(sqs, stack.queue_url, pack=False)
            assert publisher.publish([Event.count("poll:good") for _ in range(8)]).ok
            mappings.wait_until_drained(DRAIN_S)
            good = [message_id for batch in invocations(log) for message_id in batch]
            assert len(good) == len(set(good)) == 8
            assert tally_json("get", "poll:good", "--json") == {"count": 8}
            # WHEN a message the function always reports failed arrives, on a queue whose visibility
            # timeout is 1 s (the template's would make this test wait minutes)
            # (the pollers short-poll: no receive waits on the queue holding the old timeout, and the message below is
            # sent after the change, so every receive of it takes the new one)
            sqs.set_queue_attributes(QueueUrl=stack.queue_url, Attributes={"VisibilityTimeout": "1"})
            bad = '{"id":"bad-1","key":"poll:bad","delta":1,"fail-me":1}'
            bad_id = sqs.send_message(QueueUrl=stack.queue_url, MessageBody=bad)["MessageId"]
            mappings.wait_until_drained(DRAIN_S)
        # THEN it was delivered MaxReceiveCount times, then SQS moved it to the dead-letter queue
        delivered = [message_id for batch in invocations(log) for message_id in batch]
        assert delivered.count(bad_id) == 5
        assert len(delivered) == 8 + 5
        # (SQS moves a message to the dead-letter queue as a receive finds it past the count; a queue found
        # drained an instant before that move is done may show the letter a moment later, on AWS as on moto)
        deadline = time.monotonic() + DRAIN_S
        while not (letters := tally_lines("dlq", "list", "--json")) and time.monotonic() < deadline:
            time.sleep(0.2)
        (letter,) = letters
        assert (letter["kind"], letter["message_id"], letter["body"]) == ("message", bad_id, bad)
        assert mappings.stats["EventsQueueBatch"].records_reported_failed == 5


def test_kinesis_restarts_from_the_lowest_reported_failure_and_counts_once(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "invocations.jsonl"
    parameters = {"Source": "Kinesis", "StreamMode": "PROVISIONED", "ShardCount": "1", "StreamBatchSize": "10"}
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, parameters) as stack:
        assert stack.stream_name is not None
        kinesis = stack.client("kinesis")
        # GIVEN ten records on one shard; the function counts the fourth but reports it failed the first time
        publisher = KinesisPublisher(kinesis, stream_name=stack.stream_name, pack=False)
        events = [Event.count("ckpt:marked" if index == 3 else "ckpt:k") for index in range(10)]
        assert publisher.publish(events).ok
        environment = {MARKER: "ckpt:marked", INVOCATIONS: str(log)}
        handlers = {"StreamCounterFunction": f"{HANDLERS}.kinesis_fails_marked_record_once"}
        # WHEN the shard poller runs
        with pollers(stack, tmp_path, environment=environment, handlers=handlers) as mappings:
            mappings.wait_until_drained(DRAIN_S)
        # THEN the second invocation started at the failed record and held every record after it
        first, second, *rest = invocations(log)
        assert len(first) == 10
        assert second == first[3:]
        assert rest == []
        # AND the re-delivered records, all applied the first time, were not counted again
        assert tally_json("get", "ckpt:k", "--json") == {"count": 9}
        assert tally_json("get", "ckpt:marked", "--json") == {"count": 1}
        assert mappings.stats["EventStreamBatch"].metric("DuplicatesAlreadyApplied") == 7


def test_kinesis_bisects_a_crashing_batch_and_gives_up_only_the_culprit(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = tmp_path / "invocations.jsonl"
    parameters = {
        "Source": "Kinesis",
        "StreamMode": "PROVISIONED",
        "ShardCount": "1",
        "StreamBatchSize": "8",
        "StreamMaximumRetryAttempts": "2",
    }
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, parameters) as stack:
        assert stack.stream_name is not None
        kinesis = stack.client("kinesis")
        # GIVEN eight records, the sixth of which crashes the function (a function error, not poison)
        bodies = [f'{{"id":"b-{i}","key":"bisect:k","delta":1}}' for i in range(8)]
        bodies[5] = '{"id":"b-5","key":"bisect:k","delta":1,"crash":1}'
        sequence_numbers = [
            kinesis.put_record(StreamName=stack.stream_name, Data=body.encode(), PartitionKey="p")["SequenceNumber"]
            for body in bodies
        ]
        environment = {MARKER: '"crash"', INVOCATIONS: str(log)}
        handlers = {"StreamCounterFunction": f"{HANDLERS}.kinesis_crashes_on_marked_record"}
        # WHEN the shard poller runs (BisectBatchOnFunctionError, two retries)
        with pollers(stack, tmp_path, environment=environment, handlers=handlers) as mappings:
            mappings.wait_until_drained(DRAIN_S)
        # THEN the batch was halved until the culprit was alone, retried twice more, and given up
        s, culprit = sequence_numbers, sequence_numbers[5]
        assert invocations(log) == [s, s[:4], s[4:], s[4:6], s[4:5], [culprit], [culprit], [culprit], s[6:]]
        # AND the seven others were counted, exactly once
        assert tally_json("get", "bisect:k", "--json") == {"count": 7}
        # AND the dead-letter queue holds the batch's metadata (never its data), as Lambda sends it
        (letter,) = tally_lines("dlq", "list", "--json")
        assert letter["kind"] == "kinesis-batch"
        batch = letter["kinesis_batch"]
        assert (batch["start_sequence_number"], batch["end_sequence_number"], batch["size"]) == (culprit, culprit, 1)
        assert batch["condition"] == "RetryAttemptsExhausted"
        assert mappings.stats["EventStreamBatch"].batches_given_up == 1


def test_sqs_batches_are_cut_at_lambdas_6_mb_payload(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN the template's batch size of 10,000, two pollers, and 60 packed messages of about 247 KB (14.8 MB
    # in all: more than 6 MB for each poller)
    log = tmp_path / "invocations.jsonl"
    parameters = {"Source": "SQS", "MaximumConcurrency": "2", "BatchSize": "10000", "BatchingWindowSeconds": "2"}
    event = '{"key":"poll:big","delta":1}'
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, parameters) as stack:
        assert stack.queue_url is not None
        sqs = stack.client("sqs")
        sizes = {}
        for index in range(60):
            body = f'{{"id":"big-{index}","events":[' + ",".join([event] * 8_500) + "]}"
            sizes[sqs.send_message(QueueUrl=stack.queue_url, MessageBody=body)["MessageId"]] = len(body)
        environment = {MARKER: "never-present", INVOCATIONS: str(log)}
        handlers = {"CounterFunction": f"{HANDLERS}.sqs_reports_marked_records_failed"}
        # WHEN the pollers deliver them
        with pollers(stack, tmp_path, environment=environment, handlers=handlers) as mappings:
            mappings.wait_until_drained(DRAIN_S)
    # THEN no invocation carried more than Lambda's 6 MB (the bodies alone, a lower bound of the event's
    # JSON): each poller's batch was cut at least once, and every message was counted once
    batches = invocations(log)
    assert all(sum(sizes[message_id] for message_id in batch) <= 6 * 1024 * 1024 for batch in batches)
    assert len(batches) >= 3
    delivered = [message_id for batch in batches for message_id in batch]
    assert sorted(delivered) == sorted(sizes)
    assert tally_json("get", "poll:big", "--json") == {"count": 60 * 8_500}
