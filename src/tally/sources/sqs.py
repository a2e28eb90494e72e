"""SQS event records -> ``SourceRecord``, through Powertools' SQS event data classes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes import SQSEvent

from tally.core.model import SourceRecord

if TYPE_CHECKING:
    from collections.abc import Mapping


def records_from_event(event: Mapping[str, Any]) -> list[SourceRecord]:
    """The records of a Lambda SQS event, in delivery order."""
    return [
        SourceRecord(
            record_id=record.message_id,
            body=record.body,
            received_ms=int(record.attributes.sent_timestamp),
            origin=_origin(record.event_source_arn, record.attributes.message_group_id),
        )
        for record in SQSEvent(dict(event)).records
    ]


def _origin(source_arn: str, message_group_id: str | None) -> dict[str, str]:
    origin = {"source": source_arn}
    if message_group_id:
        origin["message_group_id"] = message_group_id
    return origin
