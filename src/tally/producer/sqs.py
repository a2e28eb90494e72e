"""``SqsPublisher``: counter events to an SQS queue (standard or FIFO) with ``SendMessageBatch``.

Batches hold at most 10 entries and 256 KiB of bodies (a larger message, on a queue that allows it,
goes alone). Only the entries SQS reports failed are retried: those it blames on itself; an entry with
``SenderFault`` (too large, invalid) would fail again and is reported at once.

FIFO queues: ``MessageDeduplicationId`` is the message id, so SQS itself drops a producer retry within
its 5-minute window (the consumer's markers cover every later one), and ``MessageGroupId`` is the counter
key of a single-event message or the id of a packed one: counting needs no ordering, so groups only
spread the load, and a hot key stays in one group as it would in one Kinesis shard.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.batching import group
from tally.core.limits import SQS_BATCH_MAX_BYTES, SQS_BATCH_MAX_ENTRIES
from tally.producer.delivery import EntryFailure, RetryPolicy, call_failures
from tally.producer.packing import DEFAULT_MAX_KEYS_PER_MESSAGE
from tally.producer.publisher import Publisher, accepted_or_digest, routing_key

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Iterator, Sequence

    from mypy_boto3_sqs.client import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

    from tally.core.views import CounterViews
    from tally.producer.wire import OutgoingMessage

DEFAULT_MAX_MESSAGE_BYTES: Final = 256 * 1024
"""A queue's default ``MaximumMessageSize``; pass the queue's own value if it differs."""
_FIFO_TOKEN: Final = re.compile(r"[!-~]{1,128}")  # SQS: 1-128 printable ASCII characters


def fifo_token(value: str) -> str:
    """``value`` if SQS accepts it as a group or deduplication id, else its SHA-256 (64 hex digits)."""
    return accepted_or_digest(value, _FIFO_TOKEN.fullmatch)


class SqsPublisher(Publisher):
    """Publishes counter events to one queue; a FIFO queue is recognised by its ``.fifo`` URL."""

    def __init__(
        self,
        client: SQSClient,
        queue_url: str,
        *,
        pack: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_keys_per_message: int = DEFAULT_MAX_KEYS_PER_MESSAGE,
        minute_windows: bool = False,
        views: CounterViews | str = "",
        policy: RetryPolicy | None = None,
        group_id: Callable[[OutgoingMessage], str] = routing_key,
        new_id: Callable[[], str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.queue_url = queue_url
        self.fifo = queue_url.endswith(".fifo")
        super().__init__(
            pack=pack,
            max_message_bytes=max_message_bytes,
            max_keys_per_message=max_keys_per_message,
            minute_windows=minute_windows,
            views=views,
            policy=policy,
            new_id=new_id,
            sleep=sleep,
            rng=rng,
        )
        self._client = client
        self._group_id = group_id

    # --- BatchChannel ------------------------------------------------------------------------------

    def batches(self, messages: Sequence[OutgoingMessage]) -> Iterator[Sequence[OutgoingMessage]]:
        return group(messages, SQS_BATCH_MAX_ENTRIES, SQS_BATCH_MAX_BYTES, lambda message: message.size)

    def send_batch(self, batch: Sequence[OutgoingMessage]) -> list[EntryFailure]:
        entries = [self._entry(str(index), message) for index, message in enumerate(batch)]
        try:
            response = self._client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except (ClientError, BotoCoreError) as exc:
            return call_failures(exc, len(batch))
        return [
            EntryFailure(
                index=int(failure["Id"]),
                code=failure.get("Code", "Failed"),
                reason=failure.get("Message", ""),
                retryable=not failure.get("SenderFault", False),
            )
            for failure in response.get("Failed", [])
        ]

    def _entry(self, entry_id: str, message: OutgoingMessage) -> SendMessageBatchRequestEntryTypeDef:
        entry: SendMessageBatchRequestEntryTypeDef = {"Id": entry_id, "MessageBody": message.body.decode("utf-8")}
        if self.fifo:
            entry["MessageGroupId"] = fifo_token(self._group_id(message))
            entry["MessageDeduplicationId"] = fifo_token(message.message_id)
        return entry
