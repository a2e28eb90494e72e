"""The Kinesis source and handler end to end on moto, driven by the very files in ``events/``."""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tally.handlers import kinesis as kinesis_handler
from tally.reader.store_view import read_counters
from tally.sources.kinesis import failure_report, records_from_event
from tally_local.context import LocalLambdaContext
from tests.support.events import load_event
from tests.support.moto_function import (
    MotoStack,
    moto_stack,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/tally-EventStream"


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoStack]:
    with moto_stack(monkeypatch, kinesis_handler) as stack:
        yield stack


def _sequence_numbers(event: dict[str, Any]) -> list[str]:
    return [record["kinesis"]["sequenceNumber"] for record in event["Records"]]


def _failed(response: Any) -> list[str]:
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


def test_dead_letters_carry_the_full_record_payload(stack: MotoStack) -> None:
    # GIVEN poison records, one of them not even UTF-8
    event = load_event("kinesis-poison.json")
    payloads = {r["kinesis"]["sequenceNumber"]: base64.b64decode(r["kinesis"]["data"]) for r in event["Records"]}
    shards = {r["kinesis"]["sequenceNumber"]: r["eventID"].split(":")[0] for r in event["Records"]}
    # WHEN the handler runs
    assert kinesis_handler.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
    # THEN each dead letter holds the record's data byte for byte, where it came from, and why
    letters = stack.dead_letters()
    assert len(letters) == 4
    for message in letters:
        attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
        payload = payloads[attributes["tally.source_record_id"]]
        if attributes.get("tally.body_encoding") == "base64":
            assert base64.b64decode(message["Body"]) == payload
        else:
            assert message["Body"].encode("utf-8") == payload
        assert attributes["tally.source"] == STREAM_ARN
        # a sequence number is unique within its shard only: the letter names both
        assert attributes["tally.source_shard"] == shards[attributes["tally.source_record_id"]]
        assert attributes["tally.error_message"]
    assert sum(1 for m in letters if "tally.body_encoding" in m["MessageAttributes"]) == 2  # the two binary ones


def test_poison_the_dead_letter_queue_refuses_is_reported_lowest_first(stack: MotoStack) -> None:
    # GIVEN a dead-letter queue that no longer exists
    stack.sqs.delete_queue(QueueUrl=stack.dlq_url)
    event = load_event("kinesis-poison.json")
    # WHEN the handler runs
    response = kinesis_handler.handler(event, LocalLambdaContext())
    # THEN every poison record is reported (Lambda checkpoints at the lowest and redelivers from there) ...
    assert _failed(response) == _sequence_numbers(event)[1:5]
    # ... and the good records were applied anyway: their redelivery will be a no-op
    assert read_counters(stack.store, "inventory:sku-7") == {"count": Decimal(3)}


def test_out_of_time_reports_every_record(stack: MotoStack) -> None:
    event = load_event("kinesis-single.json")
    response = kinesis_handler.handler(event, LocalLambdaContext(remaining_ms=100))
    assert _failed(response) == _sequence_numbers(event)
    assert read_counters(stack.store, "clicks:/signup") == {}


def test_records_keep_sequence_number_bytes_arrival_and_origin() -> None:
    # GIVEN the packed sample WHEN its records are read
    event = load_event("kinesis-packed.json")
    records = records_from_event(event)
    # THEN each is identified by its sequence number, with the decoded bytes and the arrival time in ms
    first = event["Records"][0]["kinesis"]
    assert [r.record_id for r in records] == _sequence_numbers(event)
    assert records[0].body == base64.b64decode(first["data"])
    assert records[0].received_ms == 4_102_444_800_000
    assert records[1].received_ms == 4_102_444_800_001  # 4102444800.001 s: not truncated to ...000
    shard = event["Records"][0]["eventID"].split(":")[0]
    assert records[0].origin == {"source": STREAM_ARN, "partition_key": first["partitionKey"], "shard": shard}


@pytest.mark.parametrize(
    ("failed", "reported"),
    [
        ([], []),
        (["5"], ["5"]),
        (["10", "9"], ["9", "10"]),  # numeric order, not text order: Lambda checkpoints at the lowest NUMBER
        (
            ["49590338271490256608559692538361571095921575989137588898", "7", "7"],
            ["7", "49590338271490256608559692538361571095921575989137588898"],
        ),
    ],
)
def test_failure_report_orders_sequence_numbers_numerically(failed: list[str], reported: list[str]) -> None:
    assert failure_report(failed) == {"batchItemFailures": [{"itemIdentifier": s} for s in reported]}
