"""Kinesis Data Streams event records -> ``SourceRecord``, and the partial failure report Kinesis expects.

A Kinesis record's identity at the source is its sequence number, which is what Lambda's partial batch
response names. It is NOT the unit of idempotency: a producer that retries ``PutRecords`` writes a new
record with a new sequence number, so tally deduplicates on the producer's ``id`` inside the data, as
for SQS. The data arrives base64-encoded in the event and is handed on as the decoded bytes, unchanged,
so a dead letter keeps the record's full payload (Kinesis on-failure destinations carry only metadata).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes import KinesisStreamEvent

from tally.core.model import SourceRecord

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord


def records_from_event(event: Mapping[str, Any]) -> list[SourceRecord]:
    """The records of a Lambda Kinesis event (one shard), in delivery order (ascending sequence number)."""
    return [_source_record(record) for record in KinesisStreamEvent(dict(event)).records]


def failure_report(failed_sequence_numbers: Iterable[str]) -> PartialItemFailureResponse:
    """The partial batch response for a Kinesis batch.

    Lambda checkpoints at the LOWEST reported sequence number and redelivers every record after it,
    including records that were applied in this invocation: their markers make that redelivery a no-op.
    Every failed record is reported (not just the lowest) so the response also reads as a log of what
    failed; they are ordered by sequence number, which compares as an integer, not as text.
    """
    ordered = sorted(set(failed_sequence_numbers), key=int)
    return {"batchItemFailures": [{"itemIdentifier": sequence_number} for sequence_number in ordered]}


def _source_record(record: KinesisStreamRecord) -> SourceRecord:
    payload = record.kinesis
    return SourceRecord(
        record_id=payload.sequence_number,
        body=payload.data_as_bytes(),
        # Epoch seconds with a millisecond fraction; rounded, because the float product can land a hair below.
        received_ms=round(payload.approximate_arrival_timestamp * 1000),
        origin={"source": record.event_source_arn, "partition_key": payload.partition_key, **_shard(record.event_id)},
    )


def _shard(event_id: str) -> dict[str, str]:
    """The record's shard, from Lambda's ``eventID`` (``shardId-000000000000:<sequence number>``): a sequence
    number is unique within its shard only, so a dead letter names both."""
    shard, separator, _ = event_id.rpartition(":")
    return {"shard": shard} if separator and shard else {}
