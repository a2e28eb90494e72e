"""Clients for the session's moto server, and helpers to read what landed in its queues and streams."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tally_local.kit.clients import local_client

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_sqs import SQSClient

REGION = "us-east-1"


def client(service: str, endpoint_url: str) -> Any:
    """A boto3 client on the moto server, with dummy credentials (nothing leaves the machine)."""
    return local_client(service, endpoint_url, region=REGION, access_key="testing", secret_key="testing")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def drain_queue(sqs: SQSClient, queue_url: str, attributes: list[str] | None = None) -> list[dict[str, Any]]:
    """Every message in the queue (received once, with a long visibility timeout so none comes back)."""
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=600,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=attributes or [],  # type: ignore[typeddict-item]
    ).get("Messages", []):
        messages.extend(batch)  # type: ignore[arg-type]
    return messages


def create_stream(kinesis: KinesisClient, shards: int = 1) -> tuple[str, str]:
    """A provisioned stream with ``shards`` shards: (name, ARN)."""
    name = unique("tally-stream")
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    arn = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    return name, arn


def read_stream(kinesis: KinesisClient, stream_name: str) -> dict[str, list[dict[str, Any]]]:
    """Shard id -> every record in the shard, oldest first (GetShardIterator TRIM_HORIZON + GetRecords)."""
    shards: dict[str, list[dict[str, Any]]] = {}
    for shard in kinesis.list_shards(StreamName=stream_name)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream_name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records: list[dict[str, Any]] = []
        while True:
            response = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            records.extend(response["Records"])  # type: ignore[arg-type]
            if not response["Records"] or "NextShardIterator" not in response:
                break
            iterator = response["NextShardIterator"]
        shards[shard["ShardId"]] = records
    return shards
