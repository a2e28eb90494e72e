"""Lambda's side of an event source mapping, as data: the events it builds and what a destination receives.

Pure functions, no I/O: the shapes of what the function receives (those of ``events/*.json`` and of AWS's
documented SQS and Kinesis events) and of the metadata record a Kinesis on-failure destination gets.
What the mapping DECIDES from the function's answer (delete, checkpoint, retry, bisect, give up) is
``tally_local.esm``'s; the drivers that call the services are ``tally_local.poller``, ``tally_local.chaos``
and ``tests.support.kinesis``. Must not: read an answer, decide a retry, call a service.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SQS_ATTRIBUTES: Final = ("ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp")
"""The system attributes Lambda puts in every SQS record (FIFO queues add their own)."""
FIFO_ATTRIBUTES: Final = ("SequenceNumber", "MessageGroupId", "MessageDeduplicationId")
LOCAL_ROLE_ARN: Final = "arn:aws:iam::123456789012:role/tally-local-function-role"


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """A Lambda SQS event for ``ReceiveMessage`` messages (received with all attributes)."""
    return {"Records": [sqs_record(message, queue_arn, region) for message in messages]}


def sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One record, as Lambda shapes it: camelCase keys, message attributes with their list fields."""
    attributes = message.get("Attributes", {})
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {name: attributes[name] for name in (*SQS_ATTRIBUTES, *FIFO_ATTRIBUTES) if name in attributes},
        "messageAttributes": {
            name: _message_attribute(value) for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    attribute: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    return attribute


def kinesis_event(records: Sequence[Mapping[str, Any]], stream_arn: str, shard_id: str, region: str) -> dict[str, Any]:
    """A Lambda Kinesis event for ``GetRecords`` records of one shard, in sequence order."""
    return {"Records": [kinesis_record(record, stream_arn, shard_id, region) for record in records]}


def kinesis_record(record: Mapping[str, Any], stream_arn: str, shard_id: str, region: str) -> dict[str, Any]:
    """One record: data base64-encoded, arrival time in epoch seconds with a millisecond fraction."""
    arrival: datetime = record["ApproximateArrivalTimestamp"]
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": record["PartitionKey"],
            "sequenceNumber": record["SequenceNumber"],
            "data": base64.b64encode(record["Data"]).decode("ascii"),
            "approximateArrivalTimestamp": round(arrival.timestamp(), 3),
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{shard_id}:{record['SequenceNumber']}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": LOCAL_ROLE_ARN,
        "awsRegion": region,
        "eventSourceARN": stream_arn,
    }


def on_failure_record(
    *,
    function_arn: str,
    condition: str,
    invoke_count: int,
    shard_id: str,
    stream_arn: str,
    records: Sequence[Mapping[str, Any]],
    function_error_kind: str | None,
    now: datetime,
) -> dict[str, Any]:
    """What Lambda sends a Kinesis event source's on-failure destination: metadata, never the data."""

    def iso(moment: datetime) -> str:
        return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    response_context: dict[str, Any] = {"statusCode": 200, "executedVersion": "$LATEST"}
    if function_error_kind is not None:
        response_context["functionError"] = function_error_kind
    return {
        "requestContext": {
            "requestId": f"local-{shard_id}-{records[0]['SequenceNumber']}",
            "functionArn": function_arn,
            "condition": condition,
            "approximateInvokeCount": invoke_count,
        },
        "responseContext": response_context,
        "version": "1.0",
        "timestamp": iso(now),
        "KinesisBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": records[0]["SequenceNumber"],
            "endSequenceNumber": records[-1]["SequenceNumber"],
            "approximateArrivalOfFirstRecord": iso(records[0]["ApproximateArrivalTimestamp"]),
            "approximateArrivalOfLastRecord": iso(records[-1]["ApproximateArrivalTimestamp"]),
            "batchSize": len(records),
            "streamArn": stream_arn,
        },
    }


def s3_on_failure_object(
    *,
    mapping_uuid: str,
    record: Mapping[str, Any],
    event_records: Sequence[Mapping[str, Any]],
    now: datetime,
    object_id: str,
) -> tuple[str, dict[str, Any]]:
    """The key and body of what Lambda writes to a Kinesis event source's S3 on-failure destination.

    AWS (https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html): for an S3
    destination Lambda sends the whole invocation record along with the metadata; the object is named
    ``aws/lambda/<ESM-UUID>/<shardID>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<Random UUID>``. The body is the
    metadata record of :func:`on_failure_record` plus ``payload``, the invocation's event
    (``{"Records": [...]}``, each record as the function received it: data base64-encoded). The layout of
    ``payload`` is the one LocalStack's emulation writes (``stream_poller.add_payload_to_dlq_event``); it
    was checked against the documentation, not against an AWS account.
    """
    shard_id = record["KinesisBatchInfo"]["shardId"]
    stamp = now.astimezone(UTC)
    key = f"aws/lambda/{mapping_uuid}/{shard_id}/{stamp:%Y/%m/%d}/{stamp:%Y-%m-%dT%H.%M.%S}-{object_id}"
    return key, {**record, "payload": {"Records": [dict(r) for r in event_records]}}
