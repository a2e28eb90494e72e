"""A FIFO source queue end to end: moto's FIFO queue, the real SQS handler, and Lambda's FIFO
event source emulated here (at most 10 messages a batch; only what the function did not report is
deleted; what it reported comes back). Observed: every message group is delivered in its order, the
partial-batch rule of FIFO queues (the first failure and everything after it reported), and exact counts
when the records reported after the failure, already applied, come back.

The emulation is this test's own, not ``tally_local.poller`` (standard queues only): moto holds a group
back while one of its messages is in flight, as SQS does, which is what the loop below relies on.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tally.handlers import sqs as sqs_handler
from tally.reader.store_view import read_counters
from tally_local.context import LocalLambdaContext
from tally_local.kit.lambda_events import sqs_event
from tests.unit.test_handler import stack  # noqa: F401 (the moto stack fixture)

if TYPE_CHECKING:
    import pytest

    from tests.unit.test_handler import MotoStack

REGION = "us-east-1"


def _deliver(mt: MotoStack, queue_url: str, queue_arn: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One invocation as Lambda's FIFO mapping makes it: up to 10 messages, the function's answer applied
    (succeeded ones deleted, reported ones visible again at once, as after their visibility timeout)."""
    messages = mt.sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=60,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    ).get("Messages", [])
    if not messages:
        return [], []
    response = sqs_handler.handler(sqs_event(messages, queue_arn, REGION), LocalLambdaContext())
    failed = [failure["itemIdentifier"] for failure in response["batchItemFailures"]]
    for message in messages:
        if message["MessageId"] in failed:
            mt.sqs.change_message_visibility(
                QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        else:
            mt.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    return messages, failed


def test_a_fifo_queue_keeps_each_groups_order_and_counts_exactly_once_across_a_partial_failure(
    stack: MotoStack,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mt = stack
    # The template's FIFO deployment: the dead-letter queue is FIFO too (TALLY_DLQ_URL)
    dlq_url = mt.sqs.create_queue(QueueName="tally-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    monkeypatch.setenv("TALLY_DLQ_URL", dlq_url)
    sqs_handler.pipeline.cache_clear()
    # GIVEN a FIFO queue holding two message groups, a poison message in the middle of group eu, and a FIFO
    # dead-letter queue that is down for the first invocation
    queue_url = mt.sqs.create_queue(QueueName="events.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    queue_arn = mt.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    mt.sqs.delete_queue(QueueUrl=dlq_url)
    sent: list[tuple[str, str]] = []  # (group, body) in send order
    for index, group in enumerate(["eu", "us", "eu", "eu", "us", "eu", "us"]):
        body = json.dumps({"id": f"m-{index}", "key": f"orders:{group}", "delta": 1})
        if index == 3:
            body = '{"id": "m-3", "key": "orders:eu", "detla": 1}'  # poison (a misspelled field)
        mt.sqs.send_message(
            QueueUrl=queue_url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=f"m-{index}"
        )
        sent.append((group, body))
    # WHEN Lambda's FIFO mapping delivers them: first while the dead-letter queue is down
    first, failed = _deliver(mt, queue_url, queue_arn)
    # THEN the poison (not dead-lettered) and every record after it in the batch are reported, in batch order
    poison = next(i for i, m in enumerate(first) if "detla" in m["Body"])
    assert failed == [m["MessageId"] for m in first[poison:]]
    assert len(first) == 7
    # AND once the dead-letter queue is back, the reported records come back and are settled
    assert mt.sqs.create_queue(QueueName="tally-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"] == dlq_url
    delivered = [first]
    for _ in range(10):
        messages, failed = _deliver(mt, queue_url, queue_arn)
        if not messages:
            break
        assert failed == []
        delivered.append(messages)
    # THEN each group was delivered in its send order in every invocation (a redelivery resumes where the
    # failure was, never before an earlier message of the group)
    for messages in delivered:
        for group in ("eu", "us"):
            bodies = [m["Body"] for m in messages if m["Attributes"]["MessageGroupId"] == group]
            order = [body for g, body in sent if g == group]
            assert bodies == order[order.index(bodies[0]) :][: len(bodies)] if bodies else True
    # AND every good message counted exactly once (those applied before the failure and delivered again
    # were dropped by their markers), the queue is empty
    assert read_counters(mt.store, "orders:eu") == {"count": Decimal(3)}
    assert read_counters(mt.store, "orders:us") == {"count": Decimal(3)}
    assert mt.sqs.receive_message(QueueUrl=queue_url).get("Messages", []) == []
    # AND the poison is in the FIFO dead-letter queue, with its reason, in its own message group
    (letter,) = mt.sqs.receive_message(
        QueueUrl=dlq_url, MessageAttributeNames=["All"], AttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    assert letter["MessageAttributes"]["tally.error_code"]["StringValue"] == "invalid_field"
    assert letter["Attributes"]["MessageGroupId"] == "eu"
