"""What the event source mappings hand the function, and what the on-failure destination gets (pure).

How they read the answer and decide a batch's fate: tests/unit/test_esm.py."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from tally.sources import kinesis as kinesis_source
from tally.sources import sqs as sqs_source
from tally_local.kit.lambda_events import kinesis_event, on_failure_record, sqs_event
from tests.support.events import EVENTS_DIR

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:tally-EventsQueue"
STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/tally-EventStream"
ARRIVAL = datetime(2026, 11, 22, 3, 15, 0, 123000, tzinfo=UTC)


def received(message_id: str, body: str, attributes: dict[str, Any] | None = None) -> dict[str, Any]:
    """A message as ReceiveMessage returns it with AttributeNames/MessageAttributeNames=All."""
    message: dict[str, Any] = {
        "MessageId": message_id,
        "ReceiptHandle": f"handle-{message_id}",
        "MD5OfBody": "0" * 32,
        "Body": body,
        "Attributes": {
            "SenderId": "AIDAEXAMPLE",
            "SentTimestamp": "1795320000000",
            "ApproximateReceiveCount": "2",
            "ApproximateFirstReceiveTimestamp": "1795320000040",
        },
    }
    if attributes:
        message["MessageAttributes"] = attributes
    return message


def record(sequence_number: str, data: bytes, key: str = "k") -> dict[str, Any]:
    """A record as GetRecords returns it."""
    return {
        "SequenceNumber": sequence_number,
        "Data": data,
        "PartitionKey": key,
        "ApproximateArrivalTimestamp": ARRIVAL,
    }


def test_sqs_event_has_the_shape_of_the_sample_events_and_parses_back() -> None:
    # GIVEN two received messages, one with a message attribute
    messages = [
        received("m-1", '{"id":"a","key":"k","delta":1}'),
        received("m-2", "{}", {"tally.error_code": {"DataType": "String", "StringValue": "x"}}),
    ]
    # WHEN they become a Lambda event
    event = sqs_event(messages, QUEUE_ARN, "us-east-1")
    # THEN each record has exactly the keys of events/sqs-single.json's records
    sample = json.loads((EVENTS_DIR / "sqs-single.json").read_text())["Records"][0]
    assert [set(r) for r in event["Records"]] == [set(sample), set(sample)]
    assert set(event["Records"][0]["attributes"]) == set(sample["attributes"])
    assert event["Records"][1]["messageAttributes"] == {
        "tally.error_code": {"stringValue": "x", "stringListValues": [], "binaryListValues": [], "dataType": "String"}
    }
    # AND the handler's own parser reads ids, bodies and the send time from it
    records = sqs_source.records_from_event(event)
    assert [(r.record_id, r.body, r.received_ms) for r in records] == [
        ("m-1", '{"id":"a","key":"k","delta":1}', 1795320000000),
        ("m-2", "{}", 1795320000000),
    ]
    assert records[0].origin["source"] == QUEUE_ARN


def test_sqs_records_keep_their_queue_and_fifo_message_group() -> None:
    # GIVEN a FIFO batch with two message groups, and one record of a standard queue
    sample = json.loads((EVENTS_DIR / "sqs-single.json").read_text())["Records"][0]
    fifo_arn = "arn:aws:sqs:us-east-1:123456789012:tally-Events.fifo"
    records = []
    for index, (arn, group) in enumerate([(fifo_arn, "g1"), (fifo_arn, "g2"), (fifo_arn, "g1"), (QUEUE_ARN, None)]):
        attributes = {**sample["attributes"], "SentTimestamp": str(1795320000000 + index)}
        if group is not None:
            attributes["MessageGroupId"] = group
        records.append({**sample, "messageId": f"m-{index}", "eventSourceARN": arn, "attributes": attributes})
    # WHEN the handler's parser reads them
    parsed = sqs_source.records_from_event({"Records": records})
    # THEN each keeps its own queue, message group (for the DLQ's FIFO group) and send time
    assert [dict(r.origin) for r in parsed] == [
        {"source": fifo_arn, "message_group_id": "g1"},
        {"source": fifo_arn, "message_group_id": "g2"},
        {"source": fifo_arn, "message_group_id": "g1"},
        {"source": QUEUE_ARN},
    ]
    assert [r.received_ms for r in parsed] == [1795320000000 + index for index in range(4)]


def test_kinesis_event_has_the_shape_of_the_sample_events_and_parses_back() -> None:
    # GIVEN records with arbitrary bytes (not UTF-8 either)
    records = [
        record("49590338271490256608559692538361571095921575989136588898", b'{"id":"a"}'),
        record("7", b"\xff\x00"),
    ]
    # WHEN they become a Lambda event
    event = kinesis_event(records, STREAM_ARN, "shardId-000000000001", "us-east-1")
    # THEN each record has the keys of events/kinesis-single.json's records, data base64-encoded
    sample = json.loads((EVENTS_DIR / "kinesis-single.json").read_text())["Records"][0]
    assert [set(r) for r in event["Records"]] == [set(sample), set(sample)]
    assert [set(r["kinesis"]) for r in event["Records"]] == [set(sample["kinesis"])] * 2
    assert base64.b64decode(event["Records"][1]["kinesis"]["data"]) == b"\xff\x00"
    assert (
        event["Records"][0]["eventID"]
        == "shardId-000000000001:49590338271490256608559692538361571095921575989136588898"
    )
    # AND the Kinesis handler's parser gets the bytes, sequence numbers and arrival time in ms back
    parsed = kinesis_source.records_from_event(event)
    assert [(r.record_id, r.body, r.received_ms) for r in parsed] == [
        (records[0]["SequenceNumber"], b'{"id":"a"}', 1795317300123),
        ("7", b"\xff\x00", 1795317300123),
    ]


def test_on_failure_record_carries_metadata_only() -> None:
    # GIVEN a batch given up after its retries
    records = [record("5", b"secret-1"), record("9", b"secret-2")]
    # WHEN Lambda's on-failure record is built for it
    document = on_failure_record(
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:f",
        condition="RetryAttemptsExhausted",
        invoke_count=3,
        shard_id="shardId-000000000000",
        stream_arn=STREAM_ARN,
        records=records,
        function_error_kind="Unhandled",
        now=ARRIVAL,
    )
    # THEN it names the shard and the range, and never the data
    assert document["KinesisBatchInfo"] == {
        "shardId": "shardId-000000000000",
        "startSequenceNumber": "5",
        "endSequenceNumber": "9",
        "approximateArrivalOfFirstRecord": "2026-11-22T03:15:00.123Z",
        "approximateArrivalOfLastRecord": "2026-11-22T03:15:00.123Z",
        "batchSize": 2,
        "streamArn": STREAM_ARN,
    }
    assert document["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert document["responseContext"]["functionError"] == "Unhandled"
    assert "secret" not in json.dumps(document)
