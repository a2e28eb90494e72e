"""``tally dlq``'s logic on moto: listing leaves everything in place; a redrive sends each body back once."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from tally.core.model import DeadLetter, RejectCode, Rejection
from tally.dead_letter_sender import SqsDeadLetterQueue
from tally.ops import dead_letters
from tally.ops.dead_letters import Destination, Letter, list_failed_batches, list_letters, partition_key, redrive
from tally.sources.kinesis import records_from_event
from tally_local.kit.lambda_events import kinesis_event

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def aws(mocked_aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    # moto answers every message in one receive, and waits out a long poll on an empty queue in real time: the
    # last receive of each list and redrive cost these tests a second each (about 20 s of the module's 25)
    monkeypatch.setattr(dead_letters, "RECEIVE_WAIT_S", 0)
    return boto3.client("sqs"), boto3.client("kinesis")


def test_a_receive_long_polls_so_that_an_empty_answer_means_an_empty_queue() -> None:
    # GIVEN a client that records what it is asked
    asked: list[dict[str, Any]] = []

    class Recording:
        def receive_message(self, **request: Any) -> dict[str, Any]:
            asked.append(request)
            return {}

    # WHEN the dead-letter queue is read (the tests above short-poll moto instead)
    assert dead_letters.list_letters(Recording(), "https://sqs/dlq") == []  # type: ignore[arg-type]
    # THEN the receive waits a second for letters: a short poll may answer empty while some wait
    assert [request["WaitTimeSeconds"] for request in asked] == [1]


def attributes(**values: str) -> dict[str, Any]:
    return {f"tally.{name}": {"DataType": "String", "StringValue": value} for name, value in values.items()}


def queue(sqs: Any, name: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    return url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def bodies(sqs: Any, url: str) -> list[str]:
    time.sleep(0.01)  # moto makes a message visible strictly after its visibility time, to the millisecond
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])
    return sorted(message["Body"] for message in received)


def test_list_reads_every_kind_of_letter_and_leaves_them_all(aws: tuple[Any, Any]) -> None:
    sqs, _ = aws
    dlq, _ = queue(sqs, "dlq")
    # GIVEN poison (with a base64 body), a message SQS moved, and a Kinesis batch's on-failure record
    sqs.send_message(
        QueueUrl=dlq,
        MessageBody="not json",
        MessageAttributes=attributes(
            error_code="malformed_json",
            error_message="bad",
            source="arn:aws:sqs:us-east-1:123456789012:src",
            source_record_id="r-1",
        ),
    )
    sqs.send_message(
        QueueUrl=dlq,
        MessageBody=base64.b64encode(b"\xff").decode(),
        MessageAttributes=attributes(error_code="malformed_json", body_encoding="base64"),
    )
    sqs.send_message(QueueUrl=dlq, MessageBody='{"id":"m-1","key":"k","delta":1}')
    batch_info = {
        "shardId": "shardId-000000000000",
        "startSequenceNumber": "3",
        "endSequenceNumber": "9",
        "batchSize": 4,
        "streamArn": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
    }
    sqs.send_message(
        QueueUrl=dlq,
        MessageBody=json.dumps(
            {"requestContext": {"condition": "RetryAttemptsExhausted"}, "KinesisBatchInfo": batch_info}
        ),
    )
    # WHEN it is listed
    letters = list_letters(sqs, dlq)
    # THEN every message is there, each of its kind, with what it says
    assert sorted(letter.kind for letter in letters) == ["kinesis-batch", "message", "poison", "poison"]
    poison = next(letter for letter in letters if letter.source_record_id == "r-1")
    assert (poison.error_code, poison.error_message, poison.payload) == ("malformed_json", "bad", b"not json")
    assert next(letter for letter in letters if letter.body_encoding == "base64").payload == b"\xff"
    batch = next(letter for letter in letters if letter.kind == "kinesis-batch").kinesis_batch
    assert batch is not None
    assert (batch.shard_id, batch.start_sequence_number, batch.end_sequence_number, batch.size) == (
        "shardId-000000000000",
        "3",
        "9",
        4,
    )
    # AND all four are still in the queue, visible at once
    assert len(bodies(sqs, dlq)) == 4


def test_redrive_sends_each_body_to_its_source_and_deletes_it(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    source, source_arn = queue(sqs, "source")
    other, _ = queue(sqs, "other")
    kinesis.create_stream(StreamName="s", ShardCount=1)
    stream_arn = kinesis.describe_stream_summary(StreamName="s")["StreamDescriptionSummary"]["StreamARN"]
    # GIVEN poison from the queue, poison from the stream, and a message SQS moved (no tally attributes)
    sqs.send_message(
        QueueUrl=dlq,
        MessageBody='{"id":"a","key":"k","detla":1}',
        MessageAttributes=attributes(error_code="invalid_field", source=source_arn),
    )
    sqs.send_message(
        QueueUrl=dlq,
        MessageBody='{"id":"b","key":"kin","delta":"1"}',
        MessageAttributes=attributes(error_code="invalid_number", source=stream_arn),
    )
    sqs.send_message(QueueUrl=dlq, MessageBody='{"id":"c","key":"k","delta":1}')
    # WHEN the queue is redriven, with the stack's source queue for messages without a source
    result = redrive(sqs, dlq, kinesis=kinesis, default_queue_url=other)
    # THEN each body went, unchanged, where it came from, and the dead-letter queue is empty
    assert result.ok
    assert len(result.redriven) == 3
    assert bodies(sqs, source) == ['{"id":"a","key":"k","detla":1}']
    assert bodies(sqs, other) == ['{"id":"c","key":"k","delta":1}']
    shard = kinesis.list_shards(StreamName="s")["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    records = kinesis.get_records(ShardIterator=iterator)["Records"]
    assert [(r["Data"], r["PartitionKey"]) for r in records] == [(b'{"id":"b","key":"kin","delta":"1"}', "kin")]
    assert bodies(sqs, dlq) == []


def test_redrive_leaves_what_cannot_be_sent_and_says_why(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    target, target_arn = queue(sqs, "target")
    # GIVEN a body SQS cannot carry as text, from a queue, and a message with nowhere to go
    sqs.send_message(
        QueueUrl=dlq,
        MessageBody=base64.b64encode(b"\xff\xfe").decode(),
        MessageAttributes=attributes(error_code="malformed_json", body_encoding="base64", source=target_arn),
    )
    sqs.send_message(QueueUrl=dlq, MessageBody='{"id":"c","key":"k","delta":1}')
    # WHEN redriven with no default queue, then to an explicit queue
    first = redrive(sqs, dlq, kinesis=kinesis)
    # THEN nothing moved, each with its reason, and both are still in the dead-letter queue
    assert sorted(skipped.reason.split(":")[0] for skipped in first.skipped) == [
        "no destination",
        "the body is not text SQS can carry (tally.body_encoding=base64)",
    ]
    assert len(bodies(sqs, dlq)) == 2
    second = redrive(sqs, dlq, kinesis=kinesis, destination=Destination(queue_url=target))
    assert [letter.body for letter in second.redriven] == ['{"id":"c","key":"k","delta":1}']
    assert len(second.skipped) == 1


def test_redrive_replays_a_given_up_kinesis_batch_from_the_stream(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    kinesis.create_stream(StreamName="s", ShardCount=1)
    stream_arn = kinesis.describe_stream_summary(StreamName="s")["StreamDescriptionSummary"]["StreamARN"]
    put = [
        kinesis.put_record(StreamName="s", Data=f'{{"id":"e{i}","key":"k","delta":1}}'.encode(), PartitionKey=f"p{i}")
        for i in range(5)
    ]
    shard = put[0]["ShardId"]
    # GIVEN the on-failure record of records 1..3 (metadata only, as Lambda sends it)
    info = {
        "shardId": shard,
        "startSequenceNumber": put[1]["SequenceNumber"],
        "endSequenceNumber": put[3]["SequenceNumber"],
        "batchSize": 3,
        "streamArn": stream_arn,
    }
    sqs.send_message(
        QueueUrl=dlq,
        MessageBody=json.dumps({"requestContext": {"condition": "RecordAgeExceeded"}, "KinesisBatchInfo": info}),
    )
    # WHEN redriven
    result = redrive(sqs, dlq, kinesis=kinesis)
    # THEN exactly those three records were put again, data and partition keys unchanged
    assert result.ok
    assert result.replayed_records == 3
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    records = kinesis.get_records(ShardIterator=iterator)["Records"]
    assert [(r["Data"], r["PartitionKey"]) for r in records[5:]] == [
        (f'{{"id":"e{i}","key":"k","delta":1}}'.encode(), f"p{i}") for i in (1, 2, 3)
    ]


def test_a_letter_redriven_and_refused_again_is_not_redriven_twice(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    source, source_arn = queue(sqs, "source")
    sqs.send_message(
        QueueUrl=dlq, MessageBody="poison", MessageAttributes=attributes(error_code="malformed_json", source=source_arn)
    )
    refused: list[str] = []

    def consumer_refuses_it_again(letter: Letter) -> None:
        # as the function would: the re-sent message is dead-lettered again, naming its new message id
        (message,) = sqs.receive_message(QueueUrl=source)["Messages"]
        sqs.delete_message(QueueUrl=source, ReceiptHandle=message["ReceiptHandle"])
        sqs.send_message(
            QueueUrl=dlq,
            MessageBody=message["Body"],
            MessageAttributes=attributes(
                error_code="malformed_json", source=source_arn, source_record_id=message["MessageId"]
            ),
        )
        refused.append(letter.message_id)

    # WHEN the dead-letter queue is redriven while the consumer keeps refusing the body
    result = redrive(sqs, dlq, kinesis=kinesis, progress=consumer_refuses_it_again)
    # THEN it was redriven once, and its new dead letter is back in the queue, visible
    assert len(result.redriven) == 1
    assert len(refused) == 1
    assert [letter.body for letter in list_letters(sqs, dlq)] == ["poison"]


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        (b'{"id":"m","key":"page:/home","delta":1}', "page:/home"),
        (b'{"id":"pack-1","events":[]}', "pack-1"),
        (b"not json", "r-9"),
        (b'{"key":""}', "r-9"),
    ],
)
def test_partition_key_follows_the_producer_library(payload: bytes, key: str) -> None:
    letter = Letter("mid", "rh", payload.decode(), 0, 1, source_record_id="r-9")
    assert partition_key(payload, letter) == key


# --- given-up Kinesis batches kept whole in S3, and FIFO queues ------------------------------------------


def _given_up_in_s3(kinesis: Any, s3: Any, *, trim: bool) -> tuple[str, list[dict[str, Any]]]:
    """A stream with five records, the S3 object Lambda writes when it gives up on records 1..3 (the key and
    body AWS documents), and, with ``trim``, a stream that no longer holds them (a new, empty one of the
    same name: moto cannot trim a stream by its retention)."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from tally_local.kit.lambda_events import kinesis_event, on_failure_record, s3_on_failure_object  # noqa: PLC0415

    kinesis.create_stream(StreamName="s", ShardCount=1)
    stream_arn = kinesis.describe_stream_summary(StreamName="s")["StreamDescriptionSummary"]["StreamARN"]
    for i in range(5):
        kinesis.put_record(StreamName="s", Data=f'{{"id":"e{i}","key":"k","delta":1}}'.encode(), PartitionKey=f"p{i}")
    (shard,) = kinesis.list_shards(StreamName="s")["Shards"]
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
    given_up = kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"][1:4]
    now = datetime(2026, 11, 24, 10, 15, tzinfo=UTC)
    metadata = on_failure_record(
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:tally-StreamCounterFunction",
        condition="RetryAttemptsExhausted",
        invoke_count=11,
        shard_id=shard["ShardId"],
        stream_arn=stream_arn,
        records=given_up,
        function_error_kind="Unhandled",
        now=now,
    )
    event = kinesis_event(given_up, stream_arn, shard["ShardId"], "us-east-1")
    key, body = s3_on_failure_object(
        mapping_uuid="1f2e3d4c-0000-4000-8000-00000000abcd",
        record=metadata,
        event_records=event["Records"],
        now=now,
        object_id="9a8b7c6d-0000-4000-8000-000000000001",
    )
    s3.create_bucket(Bucket="failures")
    s3.put_object(Bucket="failures", Key=key, Body=json.dumps(body).encode())
    if trim:
        kinesis.delete_stream(StreamName="s")
        kinesis.create_stream(StreamName="s", ShardCount=1)
    return key, given_up


def _stream_data(kinesis: Any) -> list[tuple[bytes, str]]:
    (shard,) = kinesis.list_shards(StreamName="s")["Shards"]
    iterator = kinesis.get_shard_iterator(StreamName="s", ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
    return [
        (r["Data"], r["PartitionKey"]) for r in kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    ]


def test_redrive_replays_a_given_up_batch_from_the_s3_destination_after_the_stream_lost_it(
    aws: tuple[Any, Any],
) -> None:
    sqs, kinesis = aws
    s3 = boto3.client("s3")
    dlq, _ = queue(sqs, "dlq")
    # GIVEN a batch Lambda gave up on, whole in the S3 failure bucket, and a stream that no longer has it
    key, given_up = _given_up_in_s3(kinesis, s3, trim=True)
    assert _stream_data(kinesis) == []
    # WHEN the dead letters are redriven with the failure bucket
    result = redrive(sqs, dlq, kinesis=kinesis, s3=s3, failure_bucket="failures")
    # THEN the three records are back in their stream, data and partition keys unchanged, in order
    assert result.ok, result
    assert result.replayed_records == 3
    assert result.replayed_objects == (key,)
    assert _stream_data(kinesis) == [(r["Data"], r["PartitionKey"]) for r in given_up]
    # AND the object is deleted once its records were accepted, so a second redrive replays nothing
    assert s3.list_objects_v2(Bucket="failures").get("KeyCount") == 0
    assert redrive(sqs, dlq, kinesis=kinesis, s3=s3, failure_bucket="failures").replayed_records == 0


def test_list_shows_the_given_up_batches_of_the_s3_destination(aws: tuple[Any, Any]) -> None:
    _, kinesis = aws
    s3 = boto3.client("s3")
    key, given_up = _given_up_in_s3(kinesis, s3, trim=False)
    (stored,) = list_failed_batches(s3, "failures")
    assert stored.key == key
    assert stored.batch.condition == "RetryAttemptsExhausted"
    assert (stored.batch.start_sequence_number, stored.batch.end_sequence_number, stored.batch.size) == (
        given_up[0]["SequenceNumber"],
        given_up[-1]["SequenceNumber"],
        3,
    )
    assert [r.data for r in stored.records] == [r["Data"] for r in given_up]


def test_an_s3_object_that_is_not_a_lambda_invocation_record_stays_and_says_why(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    s3 = boto3.client("s3")
    dlq, _ = queue(sqs, "dlq")
    s3.create_bucket(Bucket="failures")
    s3.put_object(Bucket="failures", Key="aws/lambda/u/shardId-000000000000/2026/11/24/x", Body=b"{}")
    result = redrive(sqs, dlq, kinesis=kinesis, s3=s3, failure_bucket="failures")
    assert not result.ok
    ((key, reason),) = result.skipped_objects
    assert key.endswith("/x")
    assert "payload" in reason
    assert s3.list_objects_v2(Bucket="failures")["KeyCount"] == 1


def test_redrive_to_a_fifo_queue_gives_each_message_its_group_and_a_deduplication_id(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    # GIVEN a FIFO source queue and its FIFO dead-letter queue holding a message SQS moved there
    dlq = sqs.create_queue(QueueName="dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    source = sqs.create_queue(QueueName="source.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    body = '{"id":"m-1","key":"page:/home","delta":1}'
    sqs.send_message(QueueUrl=dlq, MessageBody=body, MessageGroupId="page:/home", MessageDeduplicationId="m-1")
    # WHEN redriven to the source queue
    result = redrive(sqs, dlq, kinesis=kinesis, default_queue_url=source)
    # THEN it is back in the source queue, in its own message group
    assert result.ok, result.skipped
    (message,) = sqs.receive_message(QueueUrl=source, AttributeNames=["All"])["Messages"]
    assert message["Body"] == body
    assert message["Attributes"]["MessageGroupId"] == "page:/home"


# --- a dry run says exactly what the real run does ----------------------------------------------------------


def _poison_letters(sqs: Any, dlq: str, source_arn: str, count: int) -> None:
    for index in range(count):
        sqs.send_message(
            QueueUrl=dlq,
            MessageBody=f'{{"id":"p{index}","key":"k","detla":1}}',
            MessageAttributes=attributes(error_code="invalid_field", source=source_arn, source_record_id=f"r-{index}"),
        )


def test_a_dry_run_reports_every_letter_the_real_run_redrives(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    source, source_arn = queue(sqs, "source")
    # GIVEN 25 letters: more than one receive (10) can return
    _poison_letters(sqs, dlq, source_arn, 25)
    # WHEN the dead-letter queue is redriven dry, then for real
    dry = redrive(sqs, dlq, kinesis=kinesis, dry_run=True)
    # THEN the dry run names all 25, sends and deletes nothing, and leaves every letter visible
    assert dry.dry_run
    assert len(dry.redriven) == 25
    assert bodies(sqs, source) == []
    assert len(list_letters(sqs, dlq)) == 25
    real = redrive(sqs, dlq, kinesis=kinesis)
    # AND the real run redrives exactly the letters the dry run named
    assert sorted(letter.body for letter in real.redriven) == sorted(letter.body for letter in dry.redriven)
    assert list_letters(sqs, dlq) == []


def test_a_dry_run_counts_every_letter_it_leaves_alone(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    _, source_arn = queue(sqs, "source")
    # GIVEN 25 letters of one reason and 15 of another
    _poison_letters(sqs, dlq, source_arn, 25)
    for index in range(15):
        sqs.send_message(
            QueueUrl=dlq,
            MessageBody="not json",
            MessageAttributes=attributes(error_code="malformed_json", source=source_arn, source_record_id=f"m-{index}"),
        )
    # WHEN a dry run is aimed at one reason
    dry = redrive(sqs, dlq, kinesis=kinesis, dry_run=True, reasons=frozenset({"malformed_json"}))
    # THEN it names the 15 and counts the 25 it would leave
    assert (len(dry.redriven), dry.not_aimed) == (15, 25)
    assert len(list_letters(sqs, dlq)) == 40


def test_a_redrive_tries_every_letter_when_the_first_ones_cannot_be_sent(aws: tuple[Any, Any]) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    # GIVEN 25 messages SQS moved (no tally.source) and no default queue to send them to
    for index in range(25):
        sqs.send_message(QueueUrl=dlq, MessageBody=f'{{"id":"c{index}","key":"k","delta":1}}')
    # WHEN redriven
    result = redrive(sqs, dlq, kinesis=kinesis)
    # THEN each of the 25 is reported left, with its reason, and stays in the queue
    assert len(result.skipped) == 25
    assert {skipped.reason for skipped in result.skipped} == {"no destination: give a queue or a stream to redrive to"}
    assert len(list_letters(sqs, dlq)) == 25


# --- a Kinesis sequence number is unique within its shard only ----------------------------------------------


def _shard_of(kinesis: Any, stream: str, partition_key_: str) -> str:
    """The shard Kinesis puts a record of this partition key into: MD5 of the key within a shard's hash range."""
    point = int(hashlib.md5(partition_key_.encode()).hexdigest(), 16)
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        low, high = shard["HashKeyRange"]["StartingHashKey"], shard["HashKeyRange"]["EndingHashKey"]
        if int(low) <= point <= int(high):
            return str(shard["ShardId"])
    raise AssertionError(f"no shard holds {partition_key_!r}")


def _dead_letter_of(aws: tuple[Any, Any], dlq: str, *, stream_arn: str, shard: str, sequence_number: str) -> None:
    """What the function dead-letters for this record: its Lambda event through the real source and adapter."""
    sqs, kinesis = aws
    iterator = kinesis.get_shard_iterator(
        StreamName=stream_arn.rsplit("/", 1)[-1],
        ShardId=shard,
        ShardIteratorType="AT_SEQUENCE_NUMBER",
        StartingSequenceNumber=sequence_number,
    )["ShardIterator"]
    record = kinesis.get_records(ShardIterator=iterator, Limit=1)["Records"][0]
    (source_record,) = records_from_event(kinesis_event([record], stream_arn, shard, "us-east-1"))
    letter = DeadLetter(source_record, Rejection(RejectCode.INVALID_FIELD, "unknown field 'detla'"))
    assert SqsDeadLetterQueue(sqs, dlq).send([letter]) == frozenset()


def test_a_letter_is_not_taken_for_one_the_redrive_sent_because_its_sequence_number_recurs_in_another_shard(
    aws: tuple[Any, Any],
) -> None:
    sqs, kinesis = aws
    dlq, _ = queue(sqs, "dlq")
    kinesis.create_stream(StreamName="s", ShardCount=2)
    stream_arn = kinesis.describe_stream_summary(StreamName="s")["StreamDescriptionSummary"]["StreamARN"]
    keys = [f"k{index}" for index in range(50)]
    key_a = next(key for key in keys if _shard_of(kinesis, "s", key) == "shardId-000000000000")
    key_b = next(key for key in keys if _shard_of(kinesis, "s", key) == "shardId-000000000001")
    # GIVEN shard A's last record (3 of 3) and shard B's 4th (of 5) dead-lettered by the function, in that order
    puts = {}
    for key, count in ((key_a, 3), (key_b, 5)):
        for index in range(count):
            body = f'{{"id":"{key}-{index}","key":"{key}","detla":1}}'
            puts[key, index] = kinesis.put_record(StreamName="s", Data=body.encode(), PartitionKey=key)
    assert puts[key_a, 2]["SequenceNumber"] == "3"  # moto numbers each shard's records from 1
    for put in (puts[key_a, 2], puts[key_b, 3]):
        _dead_letter_of(aws, dlq, stream_arn=stream_arn, shard=put["ShardId"], sequence_number=put["SequenceNumber"])
    returned: list[str] = []
    shards = {key: _shard_of(kinesis, "s", key) for key in (key_a, key_b)}  # read before: the redrive calls below

    def consumer_refuses_it_again(letter: Letter) -> None:
        # the record the redrive just put (the last of its shard) is dead-lettered again, as the function would
        shard = shards[key_a if key_a in letter.body else key_b]
        newest = max(
            int(record["SequenceNumber"])
            for record in kinesis.get_records(
                ShardIterator=kinesis.get_shard_iterator(
                    StreamName="s", ShardId=shard, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
            )["Records"]
        )
        _dead_letter_of(aws, dlq, stream_arn=stream_arn, shard=shard, sequence_number=str(newest))
        returned.append(letter.body)

    # WHEN redriven: A's record goes back to shard A, as its 4th record, the sequence number B's letter names
    result = redrive(sqs, dlq, kinesis=kinesis, progress=consumer_refuses_it_again)
    # THEN both letters were redriven, each once, and their new dead letters are what the queue holds
    assert sorted(letter.body for letter in result.redriven) == sorted(
        f'{{"id":"{key}","key":"{key.split("-")[0]}","detla":1}}' for key in (f"{key_a}-2", f"{key_b}-3")
    )
    assert len(returned) == 2
    assert len(list_letters(sqs, dlq)) == 2
