"""The SQS dead-letter adapter on moto: bodies kept byte for byte, reasons as attributes, limits respected."""

from __future__ import annotations

import base64
from typing import Any

import boto3
import pytest

from tally.core.model import DeadLetter, RejectCode, Rejection, SourceRecord
from tally.dead_letter_sender import SqsDeadLetterQueue


@pytest.fixture
def sqs(mocked_aws: None) -> Any:
    return boto3.client("sqs")


def letter(record_id: str, body: str | bytes, group: str | None = None) -> DeadLetter:
    origin = {"source": "arn:aws:sqs:us-east-1:123456789012:src"}
    if group:
        origin["message_group_id"] = group
    return DeadLetter(SourceRecord(record_id, body, 0, origin), Rejection(RejectCode.MALFORMED_JSON, "bad"))


def drain(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get(
        "Messages", []
    ):
        messages.extend(batch)
    return messages


def test_many_letters_are_sent_in_batches_with_their_reasons(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    letters = [letter(f"r{i}", f'{{"broken": {i}') for i in range(23)]
    assert SqsDeadLetterQueue(sqs, url).send(letters) == frozenset()
    messages = drain(sqs, url)
    assert sorted(m["Body"] for m in messages) == sorted(str(x.record.body) for x in letters)
    for message in messages:
        attributes = message["MessageAttributes"]
        assert attributes["tally.error_code"]["StringValue"] == "malformed_json"
        assert attributes["tally.error_message"]["StringValue"] == "bad"
        assert attributes["tally.source"]["StringValue"].endswith(":src")
        assert "tally.body_encoding" not in attributes


@pytest.mark.parametrize(
    ("body", "raw"),
    [
        pytest.param("\ud800 lone", "\ud800 lone".encode("utf-8", "surrogatepass"), id="lone-surrogate-str"),
        pytest.param(b"\xff\xfe not utf-8", b"\xff\xfe not utf-8", id="binary"),
        pytest.param("nul \x00 char", b"nul \x00 char", id="char-sqs-refuses"),
    ],
)
def test_bodies_sqs_cannot_carry_as_text_are_base64_encoded(sqs: Any, body: str | bytes, raw: bytes) -> None:
    url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    assert SqsDeadLetterQueue(sqs, url).send([letter("r1", body)]) == frozenset()
    (message,) = drain(sqs, url)
    assert message["MessageAttributes"]["tally.body_encoding"]["StringValue"] == "base64"
    assert base64.b64decode(message["Body"]) == raw


def test_a_fifo_dead_letter_queue_gets_group_and_deduplication_ids(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    queue = SqsDeadLetterQueue(sqs, url)
    assert queue.send([letter("r1", "x", group="tenant-7"), letter("r2", "y")]) == frozenset()
    assert queue.send([letter("r1", "x", group="tenant-7")]) == frozenset()  # same letter again: deduplicated
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
    assert sorted(m["Attributes"]["MessageGroupId"] for m in messages) == ["tally-dead-letters", "tenant-7"]


def test_a_missing_queue_reports_every_letter_as_not_sent(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    letters = [letter(f"r{i}", "x") for i in range(12)]
    assert SqsDeadLetterQueue(sqs, url).send(letters) == frozenset(f"r{i}" for i in range(12))


def test_large_bodies_are_split_under_the_batch_size_limit(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    letters = [letter(f"r{i}", "x" * 100_000) for i in range(5)]
    calls: list[int] = []
    sqs.meta.events.register("before-call.sqs.SendMessageBatch", lambda params, **_: calls.append(1))
    assert SqsDeadLetterQueue(sqs, url).send(letters) == frozenset()
    assert len(calls) == 3  # 2 + 2 + 1 bodies of 100 kB under the 256 KiB batch limit
    assert len(drain(sqs, url)) == 5
