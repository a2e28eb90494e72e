"""Exactly-once counting from Kinesis: DynamoDB Local, a real Kinesis endpoint (moto's server), the
production publisher, source adapter and pipeline, and Lambda's event source mapping replayed on the
real shard records (tests/support/kinesis.py, over tally_local.esm): checkpoints, bisection, poison, producer re-sends.

Every test compares the counters with sums computed from the published events themselves.
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections import defaultdict
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.commit.applier import RetryPolicy
from tally.core.model import DeadLetter, RejectCode, Rejection
from tally.dead_letter_sender import SqsDeadLetterQueue
from tally.handlers import kinesis as kinesis_handler
from tally.producer import Event, KinesisPublisher, new_message_id
from tally.producer import RetryPolicy as PublishRetryPolicy
from tally.sources.kinesis import failure_report, records_from_event
from tally_local.context import LocalLambdaContext
from tally_local.kit.faults import BatchFaults, DynamoDBFaults
from tally_local.kit.lambda_events import kinesis_event
from tests.support.counts import nonzero, read_all
from tests.support.environment import MOTO_CREDENTIALS, set_environment
from tests.support.kinesis import ShardConsumer
from tests.support.moto_server import client, create_stream, drain_queue, read_stream, unique
from tests.support.pipeline import RecordingDeadLetterQueue, make_pipeline, make_store, plenty

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tally.pipeline import BatchPipeline, BatchResult
    from tally.store.dynamodb import DynamoDBCounterStore
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

Reference = dict[str, dict[str, Decimal]]


def workload(seed: int, count: int, keys: int, *, with_ids: float = 0.1) -> tuple[list[Event], Reference]:
    """Seeded events (int and 2-decimal deltas, some with their own id) and their exact sums."""
    rng = random.Random(seed)
    events: list[Event] = []
    expected: Reference = defaultdict(lambda: defaultdict(Decimal))
    for number in range(count):
        key = f"k{seed}-{min(int(rng.paretovariate(1.2)) - 1, keys - 1)}"  # skewed: a few hot keys
        deltas: dict[str, int | Decimal] = {"count": rng.randint(-2, 9)}
        if rng.random() < 0.5:
            deltas["amount"] = Decimal(rng.randint(-999, 99_999)).scaleb(-2)
        own_id = f"evt-{seed}-{number}" if rng.random() < with_ids else None
        events.append(Event(key, deltas, id=own_id))
        for name, value in deltas.items():
            expected[key][name] += value
    return events, {key: dict(counters) for key, counters in expected.items()}


class Stream:
    """A moto Kinesis stream: publish to it, read its shards, and consume them like Lambda would."""

    def __init__(self, endpoint: str, shards: int = 1) -> None:
        self.client = client("kinesis", endpoint)
        self.name, self.arn = create_stream(self.client, shards)

    def publisher(self, **options: Any) -> KinesisPublisher:
        policy = PublishRetryPolicy(max_attempts=5, base_delay_s=0.001, max_delay_s=0.01)
        return KinesisPublisher(self.client, stream_name=self.name, policy=policy, sleep=lambda _: None, **options)

    def shards(self) -> dict[str, list[dict[str, Any]]]:
        return read_stream(self.client, self.name)

    def publish_with_poison(self, events: Sequence[Event], after: int, poison: bytes) -> str:
        """``events`` one per record, with a ``poison`` record put after the first ``after``: its sequence number."""
        publisher = self.publisher(pack=False)
        assert publisher.publish(events[:after]).ok
        poison_seq = self.client.put_record(StreamName=self.name, Data=poison, PartitionKey="p")["SequenceNumber"]
        assert publisher.publish(events[after:]).ok
        return poison_seq

    def consume(self, handler: Callable[[dict[str, Any]], Any], **options: Any) -> list[ShardConsumer]:
        consumers = []
        for shard_id, records in self.shards().items():
            consumer = ShardConsumer(handler, self.arn, shard_id, **options)
            consumer.run(records)
            consumers.append(consumer)
        return consumers


class PipelineHandler:
    """``tally.handlers.kinesis.handler`` without Powertools: records in, the same failure report out."""

    def __init__(self, pipeline: BatchPipeline, remaining_ms: Callable[[], int] = plenty) -> None:
        self.pipeline = pipeline
        self.remaining_ms = remaining_ms
        self.results: list[BatchResult] = []

    def __call__(self, event: dict[str, Any]) -> Any:
        result = self.pipeline.process(records_from_event(event), time.time_ns() // 1_000_000, self.remaining_ms)
        self.results.append(result)
        return failure_report(result.failed_record_ids)


def consumed_with_first_transaction_throttled(
    stream: Stream, ddb_tables: DynamoDBTables
) -> tuple[ShardConsumer, PipelineHandler, DynamoDBCounterStore]:
    """The shard consumed in batches of 300 by a pipeline whose first transaction is throttled past the
    applier's patience (one attempt)."""
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, policy=RetryPolicy(base_delay_s=0.001, max_delay_s=0.01, max_attempts=1))
    handler = PipelineHandler(pipeline)
    faults.cancel("ThrottlingError", count=1)
    (consumer,) = stream.consume(handler, batch_size=300)
    return consumer, handler, store


def counted(store: DynamoDBCounterStore, expected: Reference) -> Reference:
    return read_all(store, expected)


def test_published_events_count_exactly_through_the_real_handler(
    ddb_tables: DynamoDBTables, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a two-shard stream holding packed and single events, poison records among them
    stream = Stream(moto_endpoint, shards=2)
    events, expected = workload(seed=1, count=1_500, keys=60)
    assert stream.publisher().publish(events[:700]).ok
    poison = [b'{"id":"p-1","key":"k","delta":"1"}', b"\xff\x00 not tally", b'{"id":"p-2","key":"k","detla":1}']
    for data in poison:
        stream.client.put_record(StreamName=stream.name, Data=data, PartitionKey="poison")
    assert stream.publisher(pack=False).publish(events[700:]).ok
    # ... and the production handler configured as in the template, on local endpoints
    sqs = client("sqs", moto_endpoint)
    dlq_url = sqs.create_queue(QueueName=unique("tally-dlq"))["QueueUrl"]
    variables = {
        **MOTO_CREDENTIALS,
        "AWS_ENDPOINT_URL_DYNAMODB": ddb_tables.endpoint_url,
        "AWS_ENDPOINT_URL_SQS": moto_endpoint,
        "TALLY_COUNTERS_TABLE": ddb_tables.counters_table,
        "TALLY_MARKERS_TABLE": ddb_tables.markers_table,
        "TALLY_DLQ_URL": dlq_url,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }
    set_environment(monkeypatch, variables)
    kinesis_handler.pipeline.cache_clear()
    try:

        def handler(event: dict[str, Any]) -> Any:
            return kinesis_handler.handler(event, LocalLambdaContext())

        # WHEN Lambda consumes every shard, and a second mapping (a redeploy) reads them all again
        first = stream.consume(handler, batch_size=250)
        second = stream.consume(handler, batch_size=250)
    finally:
        kinesis_handler.pipeline.cache_clear()
    # THEN no shard was held up, every counter is exact, and each poison record is dead-lettered with
    # its full payload, once per delivery
    assert all(len(c.invocations) == -(-sum(map(len, c.invocations)) // 250) for c in first + second)
    assert all(c.given_up == [] for c in first + second)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    assert counted(store, expected) == nonzero(expected)
    letters = drain_queue(sqs, dlq_url)
    payloads = sorted(
        base64.b64decode(m["Body"]) if "tally.body_encoding" in m["MessageAttributes"] else m["Body"].encode()
        for m in letters
    )
    assert payloads == sorted(poison * 2)
    assert {m["MessageAttributes"]["tally.source"]["StringValue"] for m in letters} == {stream.arn}


def test_redelivery_from_the_lowest_failed_record_counts_once(ddb_tables: DynamoDBTables, moto_endpoint: str) -> None:
    # GIVEN a shard of 300 single events over many keys (several transactions per batch), and a store
    # whose first transaction is throttled past the applier's patience
    stream = Stream(moto_endpoint)
    events, expected = workload(seed=2, count=300, keys=400, with_ids=0)
    # Random ids: numbered ones (the library's default) would join the 300 messages into one unit through
    # their shared block markers (tally.core.plan), and one throttled transaction would fail them all.
    assert stream.publisher(pack=False, new_id=new_message_id).publish(events).ok
    # WHEN Lambda consumes the shard
    consumer, handler, store = consumed_with_first_transaction_throttled(stream, ddb_tables)
    # THEN the first invocation reported failures, the retry restarted at the lowest of them and
    # carried records that had been applied (their markers made them no-ops), and counts are exact
    first, retry = handler.results[0], handler.results[1]
    assert first.failed_record_ids
    lowest = min(first.failed_record_ids, key=int)
    assert consumer.invocations[1][0] == lowest
    assert len(consumer.invocations[1]) > len(first.failed_record_ids)
    assert retry.figures["DuplicatesAlreadyApplied"] > 0
    assert retry.failed_record_ids == ()
    assert counted(store, expected) == nonzero(expected)


def test_numbered_messages_throttled_as_one_unit_are_all_retried_and_count_once(
    ddb_tables: DynamoDBTables, moto_endpoint: str
) -> None:
    # GIVEN a shard of 300 numbered single events (the library's default ids: one unit through their block
    # markers), and a store whose first transaction is throttled past the applier's patience
    stream = Stream(moto_endpoint)
    events, expected = workload(seed=2, count=300, keys=400, with_ids=0)
    assert stream.publisher(pack=False).publish(events).ok
    # WHEN Lambda consumes the shard
    consumer, handler, store = consumed_with_first_transaction_throttled(stream, ddb_tables)
    # THEN the whole batch came back from its first record, and was counted once
    first, retry = handler.results[0], handler.results[1]
    assert len(first.failed_record_ids) == 300
    assert consumer.invocations[1] == consumer.invocations[0]
    assert (retry.failed_record_ids, retry.figures["MessagesApplied"]) == ((), 300)
    assert counted(store, expected) == nonzero(expected)


def test_a_crash_after_commit_is_bisected_and_both_halves_count_nothing_twice(
    ddb_tables: DynamoDBTables, moto_endpoint: str
) -> None:
    # GIVEN a function that commits its batch, then crashes, on its first two invocations
    stream = Stream(moto_endpoint)
    events, expected = workload(seed=3, count=400, keys=30)
    assert stream.publisher(pack=False).publish(events).ok
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    inner = PipelineHandler(pipeline)
    crashes = [2]

    def crashing(event: dict[str, Any]) -> Any:
        response = inner(event)
        if crashes[0]:
            crashes[0] -= 1
            raise RuntimeError("crashed after the transactions committed")
        return response

    # WHEN Lambda consumes the shard, bisecting on function errors
    (consumer,) = stream.consume(crashing, batch_size=400)
    # THEN the batch was split in halves and the first half again, every retry found the work done
    assert [len(batch) for batch in consumer.invocations] == [400, 200, 100, 100, 200]
    assert inner.results[0].figures["MessagesApplied"] > 0
    assert all(result.figures["MessagesApplied"] == 0 for result in inner.results[1:])
    assert counted(store, expected) == nonzero(expected)


def test_poison_never_blocks_the_shard(ddb_tables: DynamoDBTables, moto_endpoint: str) -> None:
    # GIVEN poison interleaved with good records in one shard
    stream = Stream(moto_endpoint)
    events, expected = workload(seed=4, count=200, keys=20, with_ids=0)
    publisher = stream.publisher(pack=False)
    bad = [b"{", b'{"id":"x","key":"k","delta":true}', b'{"id":"","key":"k","delta":1}']
    for position, chunk in enumerate(range(0, 200, 50)):
        assert publisher.publish(events[chunk : chunk + 50]).ok
        stream.client.put_record(StreamName=stream.name, Data=bad[position % 3], PartitionKey="p")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    # WHEN Lambda consumes it
    (consumer,) = stream.consume(PipelineHandler(pipeline), batch_size=64)
    # THEN each batch was delivered once: the poison went to the dead-letter queue, not into a report
    assert [len(batch) for batch in consumer.invocations] == [64, 64, 64, 12]
    assert sorted(dlq.codes().values()) == sorted(["malformed_json", "invalid_number", "missing_id", "malformed_json"])
    assert counted(store, expected) == nonzero(expected)


def test_poison_the_dead_letter_queue_refuses_holds_the_shard_until_it_is_taken(
    ddb_tables: DynamoDBTables, moto_endpoint: str
) -> None:
    # GIVEN a poison record in the middle of a shard, and a dead-letter queue that refuses it twice
    stream = Stream(moto_endpoint)
    events, expected = workload(seed=5, count=120, keys=15, with_ids=0)
    poison_seq = stream.publish_with_poison(events, 60, b"not json")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    refusing = RefusingTwice(poison_seq)
    pipeline, _ = make_pipeline(store, dead_letters=refusing)
    handler = PipelineHandler(pipeline)
    # WHEN Lambda consumes the shard
    (consumer,) = stream.consume(handler, batch_size=121)
    # THEN the poison was reported (never dropped), the shard was redelivered from it until the
    # dead-letter queue took it, and the good records after it, applied at once, counted once
    assert [batch[0] for batch in consumer.invocations] == [consumer.invocations[0][0], poison_seq, poison_seq]
    assert [r.failed_record_ids for r in handler.results] == [(poison_seq,), (poison_seq,), ()]
    assert [r.figures["MessagesApplied"] for r in handler.results] == [120, 0, 0]
    assert list(refusing.codes().values()) == ["malformed_json"]
    assert consumer.given_up == []
    assert counted(store, expected) == nonzero(expected)


def test_when_retries_run_out_the_range_goes_to_the_on_failure_destination_and_the_shard_moves_on(
    ddb_tables: DynamoDBTables, moto_endpoint: str
) -> None:
    # GIVEN a poison record the dead-letter queue refuses for good, followed by more batches
    stream = Stream(moto_endpoint)
    events, expected = workload(seed=6, count=90, keys=10, with_ids=0)
    poison_seq = stream.publish_with_poison(events, 20, b"[1, 2")
    records = stream.shards()["shardId-000000000000"]
    assert records[20]["SequenceNumber"] == poison_seq
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, dead_letters=RecordingDeadLetterQueue(refuse={poison_seq}))
    # WHEN Lambda consumes the shard with 3 retries
    (consumer,) = stream.consume(PipelineHandler(pipeline), batch_size=30, max_retries=3)
    # THEN after the retries the poison's range (metadata only) went to the on-failure destination, the
    # shard moved on, and every good record, applied on the first delivery, counts exactly once
    assert [(g.first_sequence_number, g.last_sequence_number) for g in consumer.given_up] == [
        (poison_seq, records[29]["SequenceNumber"])
    ]
    assert len(consumer.invocations) == 1 + 3 + 3  # the batch, 3 retries, then the next 60 records in 2 batches
    assert counted(store, expected) == nonzero(expected)


def test_producer_resends_get_new_sequence_numbers_and_still_count_once(
    ddb_tables: DynamoDBTables, moto_endpoint: str
) -> None:
    # GIVEN a producer whose first PutRecords response is lost and whose second has throttled records
    stream = Stream(moto_endpoint)
    events, expected = workload(seed=7, count=2_000, keys=50)
    faults = BatchFaults(stream.client)
    faults.lose_responses(1)
    faults.fail_entries(0, 2, 4)
    publisher = stream.publisher(max_message_bytes=8_192)
    result = publisher.publish(events)
    assert result.ok
    assert result.retried > 0
    # ... and the application later re-publishes a few messages from its own log, unchanged
    for record in faults.sent[0][:3]:
        stream.client.put_record(StreamName=stream.name, Data=record["Data"], PartitionKey="replay")
    records = [record for shard in stream.shards().values() for record in shard]
    ids = [json.loads(record["Data"])["id"] for record in records]
    assert len(ids) > len(set(ids))  # duplicates in the stream: same ids, new sequence numbers
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    # WHEN Lambda consumes the stream
    stream.consume(PipelineHandler(pipeline), batch_size=40)
    # THEN every event counts exactly once
    assert dlq.letters == []
    assert counted(store, expected) == nonzero(expected)


class RefusingTwice(RecordingDeadLetterQueue):
    """A dead-letter queue that refuses one record on its first two deliveries, then takes it."""

    def __init__(self, record_id: str) -> None:
        super().__init__()
        self._record_id = record_id
        self._refusals = 2

    def send(self, letters: Sequence[Any]) -> frozenset[str]:
        if self._refusals and any(letter.record.record_id == self._record_id for letter in letters):
            self._refusals -= 1
            self.refuse = {self._record_id}
        else:
            self.refuse = set()
        return super().send(letters)


def test_the_real_dead_letter_adapter_keeps_binary_kinesis_data(moto_endpoint: str) -> None:
    # A Kinesis record's data may be any bytes; its dead letter must give back exactly those bytes.
    sqs = client("sqs", moto_endpoint)
    url = sqs.create_queue(QueueName=unique("dlq"))["QueueUrl"]
    stream = Stream(moto_endpoint)
    stream.client.put_record(StreamName=stream.name, Data=bytes(range(256)), PartitionKey="p")
    (records,) = stream.shards().values()
    (record,) = records_from_event(kinesis_event(records, stream.arn, "shardId-000000000000", "us-east-1"))
    letter = DeadLetter(record, Rejection(RejectCode.MALFORMED_JSON, "bad"))
    assert SqsDeadLetterQueue(sqs, url).send([letter]) == frozenset()
    (message,) = drain_queue(sqs, url)
    assert base64.b64decode(message["Body"]) == bytes(range(256))
