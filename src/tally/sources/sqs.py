"""SQS event records -> ``SourceRecord``, through Powertools' SQS event data classes; the partial failure report.

FIFO queues have their own reporting rule (``failure_report``): Lambda's documentation says a function
reading a FIFO queue "should stop processing messages after the first failure and return all failed and
unprocessed messages in batchItemFailures", to keep the queue's order; Powertools'
``SqsFifoPartialProcessor`` does the same by default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from aws_lambda_powertools.utilities.data_classes import SQSEvent

from tally.core.model import SourceRecord

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse

FIFO_SUFFIX: Final = ".fifo"


def records_from_event(event: Mapping[str, Any]) -> list[SourceRecord]:
    """The records of a Lambda SQS event, in delivery order.

    The record's ``attributes`` are read from its raw mapping: ``record.attributes`` builds a new
    ``SQSRecordAttributes`` wrapper on every access, which made this function twice as slow (10,000
    records: 15.7 ms with the wrapper, 8.6 ms without, best of 15 on this machine). Records of one queue
    (and one message group) share one read-only ``origin`` mapping.
    """
    origins: dict[tuple[str, str | None], Mapping[str, str]] = {}
    records: list[SourceRecord] = []
    for record in SQSEvent(dict(event)).records:
        attributes = record.raw_event["attributes"]
        place = (record.event_source_arn, attributes.get("MessageGroupId"))
        origin = origins.get(place)
        if origin is None:
            origin = origins[place] = _origin(*place)
        records.append(
            SourceRecord(
                record_id=record.message_id,
                body=record.body,
                received_ms=int(attributes["SentTimestamp"]),
                origin=origin,
            )
        )
    return records


def _origin(source_arn: str, message_group_id: str | None) -> dict[str, str]:
    origin = {"source": source_arn}
    if message_group_id:
        origin["message_group_id"] = message_group_id
    return origin


def is_fifo(record: SourceRecord) -> bool:
    """Whether the record came from a FIFO queue (its ARN ends in ``.fifo``; it belongs to a message group)."""
    return record.origin.get("source", "").endswith(FIFO_SUFFIX) or "message_group_id" in record.origin


def failure_report(records: Sequence[SourceRecord], failed_record_ids: Iterable[str]) -> PartialItemFailureResponse:
    """The partial batch response for an SQS batch, in batch order.

    A standard queue: exactly the failed records. A FIFO queue: the first failed record and **every record
    after it in the batch**, whatever its group and whether it was applied, as AWS requires. The pipeline
    has already applied the later ones (it writes the batch as a whole), so their redelivery is dropped by
    their markers: the counts are exact either way, and SQS hands the rest of each group back in order.
    A poison record after the first failure may so be dead-lettered twice (once per delivery, each with
    its reason), which costs nothing but a duplicate dead letter.
    """
    failed = set(failed_record_ids)
    if any(is_fifo(record) for record in records):
        first = next((index for index, record in enumerate(records) if record.record_id in failed), len(records))
        reported = [record.record_id for record in records[first:]]
    else:
        reported = [record.record_id for record in records if record.record_id in failed]
    return {"batchItemFailures": [{"itemIdentifier": record_id} for record_id in reported]}
