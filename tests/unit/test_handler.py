"""The SQS handler end to end on moto, driven by the very files in ``events/``."""

from __future__ import annotations

import io
import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.errors import ConfigurationError
from tally.handlers import sqs as sqs_handler
from tally.reader.store_view import read_counters
from tally_local.context import LocalLambdaContext
from tests.support.events import load_event, sqs_event
from tests.support.moto_function import (
    MotoStack,
    moto_stack,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoStack]:
    with moto_stack(monkeypatch, sqs_handler, POWERTOOLS_METRICS_NAMESPACE="Tally") as stack:
        yield stack


def test_dead_letters_keep_the_original_body_and_say_why(stack: MotoStack) -> None:
    event = load_event("sqs-poison.json")
    sqs_handler.handler(event, LocalLambdaContext())
    bodies = {r["messageId"]: r["body"] for r in event["Records"]}
    for message in stack.dead_letters():
        attributes = message["MessageAttributes"]
        source_id = attributes["tally.source_record_id"]["StringValue"]
        assert message["Body"] == bodies[source_id]
        assert attributes["tally.error_message"]["StringValue"]
        assert attributes["tally.source"]["StringValue"] == event["Records"][0]["eventSourceARN"]


def test_poison_the_dead_letter_queue_cannot_take_is_reported_not_dropped(stack: MotoStack) -> None:
    stack.sqs.delete_queue(QueueUrl=stack.dlq_url)
    event = load_event("sqs-poison.json")
    response = sqs_handler.handler(event, LocalLambdaContext())
    poison_ids = [r["messageId"] for r in event["Records"][1:6]]
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(poison_ids)
    assert read_counters(stack.store, "stock:sku-1") == {"count": Decimal(8)}


def test_out_of_time_reports_every_record_for_redelivery(stack: MotoStack) -> None:
    event = load_event("sqs-single.json")
    response = sqs_handler.handler(event, LocalLambdaContext(remaining_ms=100))
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(
        r["messageId"] for r in event["Records"]
    )
    assert read_counters(stack.store, "page:/home") == {}


def test_missing_configuration_fails_the_invocation(stack: MotoStack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_COUNTERS_TABLE")
    sqs_handler.pipeline.cache_clear()
    with pytest.raises(ConfigurationError):
        sqs_handler.handler(load_event("sqs-single.json"), LocalLambdaContext())


SECRET = "s3cr3t-token-7f1e"


@pytest.mark.parametrize(
    "body",
    [
        f'{{"id":"e-1","key":"page:/a","delta":1,"note":"{SECRET}"}}',  # unknown field
        f'{{"id":"e-2","key":"page:/a","delta":"{SECRET}"}}',  # delta of the wrong type
        f'{{"id":"e-3","key":"page:/a","delta":1,"{SECRET}"',  # malformed JSON
        f'{{"id":"e-4","key":"page:/a","deltas":{{"{SECRET}":1}}}}',  # a valid event: counter name
        f'{{"events":[{{"id":"e-5","key":"page:/a","delta":1}},{{"id":"{SECRET}"}}]}}',  # packed, one bad
    ],
)
def test_logs_carry_no_event_body(stack: MotoStack, capfd: pytest.CaptureFixture[str], body: str) -> None:
    # GIVEN a batch whose body holds a value that must never reach the logs, at the most verbose level
    event = load_event("sqs-single.json")
    event["Records"] = [{**event["Records"][0], "body": body}]
    handler = sqs_handler.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    logs = io.StringIO()
    previous_stream, previous_level = handler.setStream(logs), sqs_handler.logger.log_level
    sqs_handler.logger.setLevel(logging.DEBUG)
    capfd.readouterr()
    try:
        # WHEN the handler processes it
        sqs_handler.handler(event, LocalLambdaContext())
    finally:
        handler.setStream(previous_stream)
        sqs_handler.logger.setLevel(previous_level)
    # THEN it logged (the batch's figures, a dead letter's code) but nothing from the body, and neither
    # did anything else on the process's output (the metrics)
    out, err = capfd.readouterr()
    assert "batch processed" in logs.getvalue()
    assert SECRET not in logs.getvalue() + out + err


def test_fifo_reports_every_record_after_the_first_failure(stack: MotoStack) -> None:
    # GIVEN a FIFO batch (eu, us-poison, eu, us) and a dead-letter queue that refuses the poison record
    stack.sqs.delete_queue(QueueUrl=stack.dlq_url)
    event = load_event("sqs-fifo.json")
    ids = [record["messageId"] for record in event["Records"]]
    # WHEN the handler runs
    response = sqs_handler.handler(event, LocalLambdaContext())
    # THEN, as AWS requires for FIFO queues, the failed record and every record after it are reported
    # (in batch order), so SQS hands them back in order; the good ones were applied and their redelivery
    # is a no-op
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == ids[1:]
    assert read_counters(stack.store, "orders:eu") == {"count": Decimal(3)}
    assert read_counters(stack.store, "orders:us") == {"count": Decimal(5)}


def test_a_standard_queue_reports_only_what_failed(stack: MotoStack) -> None:
    # GIVEN the same records from a standard queue (no .fifo ARN, no message groups)
    stack.sqs.delete_queue(QueueUrl=stack.dlq_url)
    event = load_event("sqs-fifo.json")
    for record in event["Records"]:
        record["eventSourceARN"] = record["eventSourceARN"].removesuffix(".fifo")
        for name in ("MessageGroupId", "SequenceNumber", "MessageDeduplicationId"):
            del record["attributes"][name]
    response = sqs_handler.handler(event, LocalLambdaContext())
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [event["Records"][1]["messageId"]]


def test_an_id_reused_with_other_content_is_dead_lettered_and_counted_in_a_metric(
    stack: MotoStack, capfd: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a batch with two contents under one id
    event = load_event("sqs-single.json")
    first = event["Records"][0]
    event["Records"] = [
        {**first, "messageId": "r-1", "body": '{"id":"e-1","key":"page:/a","delta":1}'},
        {**first, "messageId": "r-2", "body": '{"id":"e-1","key":"page:/a","delta":2}'},
    ]
    capfd.readouterr()
    # WHEN the handler processes it
    response = sqs_handler.handler(event, LocalLambdaContext())
    # THEN the second content is dead-lettered as id_conflict, the first counts, and the IdConflicts
    # metric says so
    assert response == {"batchItemFailures": []}
    assert read_counters(stack.store, "page:/a") == {"count": Decimal(1)}
    (letter,) = stack.dead_letters()
    assert letter["MessageAttributes"]["tally.error_code"]["StringValue"] == "id_conflict"
    assert letter["MessageAttributes"]["tally.source_record_id"]["StringValue"] == "r-2"
    metrics = [json.loads(line) for line in capfd.readouterr().out.splitlines() if '"_aws"' in line]
    assert [blob["IdConflicts"] for blob in metrics] == [[1.0]]


def test_a_sale_refused_at_its_floor_is_listed_then_redriven_after_a_restock_and_counted_once(
    stack: MotoStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN stock with a floor of 0 (CounterBounds), at 2, and a sale of 5 refused by it
    monkeypatch.setenv("TALLY_COUNTER_BOUNDS", "stock:*#stock>=0")
    sqs_handler.pipeline.cache_clear()
    source = stack.sqs.create_queue(QueueName="tally-events")["QueueUrl"]
    sale = json.dumps({"id": "sale-5", "key": "stock:sku-9", "deltas": {"stock": -5}})
    restock = json.dumps({"id": "restock-1", "key": "stock:sku-9", "deltas": {"stock": 10}})
    first = sqs_handler.handler(
        sqs_event([json.dumps({"id": "in", "key": "stock:sku-9", "deltas": {"stock": 2}}), sale]), LocalLambdaContext()
    )
    assert first == {"batchItemFailures": []}
    assert read_counters(stack.store, "stock:sku-9") == {"stock": Decimal(2)}
    # WHEN an operator lists the dead-letter queue
    listed = CliRunner().invoke(cli, ["dlq", "list"], catch_exceptions=False)
    # THEN the refusal says why, with the counter's value and the amount
    assert "below_floor" in listed.output
    as_json = CliRunner().invoke(cli, ["dlq", "list", "--json"], catch_exceptions=False).output
    assert "'stock:sku-9'/'stock': value 2, amount -5, floor 0" in as_json
    # WHEN the stock is restocked, the letter redriven to the source queue and delivered (twice: at least once)
    sqs_handler.handler(sqs_event([restock], first=10), LocalLambdaContext())
    redriven = CliRunner().invoke(cli, ["dlq", "redrive", "--to-queue", source], catch_exceptions=False)
    assert redriven.exit_code == 0, redriven.output
    (message,) = stack.sqs.receive_message(QueueUrl=source)["Messages"]
    for delivery in range(2):
        assert sqs_handler.handler(sqs_event([message["Body"]], first=20 + delivery), LocalLambdaContext()) == {
            "batchItemFailures": []
        }
    # THEN the sale counts once, and nothing is left in the dead-letter queue
    assert read_counters(stack.store, "stock:sku-9") == {"stock": Decimal(7)}
    assert stack.dead_letters() == []
