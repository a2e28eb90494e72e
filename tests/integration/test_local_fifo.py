"""The local stack deployed with ``QueueType=FIFO``: a FIFO source queue and a FIFO dead-letter
queue built from template.yaml, the producer library's FIFO messages, the pollers and the real handler,
then ``tally dlq list`` / ``tally dlq redrive`` through the FIFO queues: nothing counts twice, and the
poison comes back with its reasons. The redrive to a FIFO queue must carry a
``MessageGroupId`` (SQS refuses a message without one: every letter would stay in the dead-letter queue).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

from tally_local.template import queue_definitions
from tests.integration.test_local_end_to_end import DRAIN_S, POISON, assert_counts, planned, redrive_changes_nothing
from tests.support.local_stack import pollers, running_stack, tally_lines

if TYPE_CHECKING:
    from pathlib import Path

    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

FIFO = {"Source": "SQS", "QueueType": "FIFO", "BatchSize": "10", "BatchingWindowSeconds": "0"}


def test_a_fifo_stack_counts_exactly_and_its_dead_letters_redrive_through_fifo_queues(
    dynamodb_local: DynamoDBLocal, serial_moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tally.producer import SqsPublisher  # noqa: PLC0415

    messages, expected = planned(300, seed=17)
    with running_stack(dynamodb_local, serial_moto_endpoint, monkeypatch, FIFO) as stack:
        # GIVEN the template's FIFO deployment: both queues FIFO
        assert stack.queue_url is not None
        assert stack.queue_url.endswith(".fifo")
        assert stack.dead_letter_queue_url.endswith(".fifo")
        assert {q.logical_id for q in queue_definitions(stack.template).values() if q.fifo} == {
            "EventsQueue",
            "EventsDeadLetterQueue",
        }
        sqs = stack.client("sqs")
        with pollers(stack, tmp_path) as mappings:
            # WHEN the producer library publishes (message groups and deduplication ids of its own), re-sends
            # some messages with their ids, and poison arrives in a group of its own
            publisher = SqsPublisher(sqs, stack.queue_url)
            assert publisher.send(messages).ok
            assert publisher.send(random.Random(3).sample(messages, 5)).ok
            for index, body in enumerate(POISON):
                sqs.send_message(
                    QueueUrl=stack.queue_url,
                    MessageBody=body,
                    MessageGroupId="poison",
                    MessageDeduplicationId=f"poison-{index}",
                )
            mappings.wait_until_drained(DRAIN_S)
            # THEN every key is exact and the poison is in the FIFO dead-letter queue with its reasons
            assert_counts(expected)
            stats = mappings.stats["EventsQueueBatch"]
            assert stats.metric("EventsApplied") == 300
            assert stats.function_errors == 0
            letters = tally_lines("dlq", "list", "--json")
            assert sorted(letter["error_code"] for letter in letters) == sorted(POISON.values())
            # AND a redrive through the FIFO queues changes no count and brings the poison back with its reasons
            redrive_changes_nothing(stack, mappings, expected)
