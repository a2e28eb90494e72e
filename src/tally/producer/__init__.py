"""The producer side of tally: publish counter events to SQS or Kinesis, exactly once at the consumer.

Importable from any Python application with nothing but boto3 (no Powertools, no msgspec)::

    import boto3
    from decimal import Decimal
    from tally.producer import Event, SqsPublisher

    publisher = SqsPublisher(boto3.client("sqs"), queue_url)
    result = publisher.publish([
        Event.count("page:/home"),
        Event("shop:42", {"orders": 1, "revenue": Decimal("49.99")}, ts=1_790_000_000_000),
    ])
    if not result.ok:
        later = publisher.send(result.failed_messages)   # same ids: counted once however often sent

Every message gets its id once, before the first attempt, and keeps it on every retry and re-send;
events are packed many to a message by default, which is what makes the consumer's idempotency cheap.
"""

from tally.core.limits import WireLimits
from tally.producer.delivery import RetryPolicy
from tally.producer.event import Event
from tally.producer.kinesis import KinesisPublisher
from tally.producer.packing import NumberedIds, PackLimits, build_messages, new_message_id
from tally.producer.result import FailedMessage, PublishError, PublishResult
from tally.producer.sqs import SqsPublisher
from tally.producer.wire import OutgoingMessage, packed_message, single_message

__all__ = [
    "Event",
    "FailedMessage",
    "KinesisPublisher",
    "NumberedIds",
    "OutgoingMessage",
    "PackLimits",
    "PublishError",
    "PublishResult",
    "RetryPolicy",
    "SqsPublisher",
    "WireLimits",
    "build_messages",
    "new_message_id",
    "packed_message",
    "single_message",
]
