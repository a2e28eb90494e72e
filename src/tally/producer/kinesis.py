"""``KinesisPublisher``: counter events to a Kinesis data stream with ``PutRecords``.

A call holds at most 500 records and 5 MiB, a record at most 1 MiB (data and partition key together).
``PutRecords`` is not atomic: each record succeeds or fails on its own (``ProvisionedThroughputExceeded``
on a hot shard, ``InternalFailure``), and only the failed ones are sent again, with backoff. A retried
record gets a new sequence number; the consumer recognises it by the message id inside the data.

Partition key: the counter key for a single-event message, so one key's events stay on one shard; the
message id for a packed message, which spreads packs evenly over the shards. Keys longer than Kinesis's
256 characters are replaced by their SHA-256, which keeps the same key on the same shard.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.batching import group
from tally.core.limits import (
    KINESIS_PARTITION_KEY_MAX_CHARS,
    KINESIS_PUT_MAX_BYTES,
    KINESIS_PUT_MAX_RECORDS,
    KINESIS_RECORD_MAX_BYTES,
)
from tally.producer.delivery import EntryFailure, RetryPolicy, call_failures
from tally.producer.packing import DEFAULT_MAX_KEYS_PER_MESSAGE
from tally.producer.publisher import Publisher, accepted_or_digest, routing_key

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Iterator, Sequence

    from mypy_boto3_kinesis.client import KinesisClient
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

    from tally.core.views import CounterViews
    from tally.producer.wire import OutgoingMessage

DEFAULT_MAX_MESSAGE_BYTES: Final = KINESIS_RECORD_MAX_BYTES - 4 * KINESIS_PARTITION_KEY_MAX_CHARS
"""The largest packed message: a record's 1 MiB less room for any partition key (256 characters of UTF-8)."""


def bounded_partition_key(value: str) -> str:
    """``value`` if Kinesis accepts it as a partition key (1-256 characters), else its SHA-256."""
    return accepted_or_digest(value, lambda key: 0 < len(key) <= KINESIS_PARTITION_KEY_MAX_CHARS)


class KinesisPublisher(Publisher):
    """Publishes counter events to one stream, named by ``stream_name`` or ``stream_arn``."""

    def __init__(
        self,
        client: KinesisClient,
        *,
        stream_name: str | None = None,
        stream_arn: str | None = None,
        pack: bool = True,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_keys_per_message: int = DEFAULT_MAX_KEYS_PER_MESSAGE,
        minute_windows: bool = False,
        views: CounterViews | str = "",
        policy: RetryPolicy | None = None,
        partition_key: Callable[[OutgoingMessage], str] = routing_key,
        new_id: Callable[[], str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if (stream_name is None) == (stream_arn is None):
            raise ValueError("give exactly one of stream_name and stream_arn")
        if max_message_bytes > DEFAULT_MAX_MESSAGE_BYTES:
            raise ValueError(
                f"max_message_bytes above {DEFAULT_MAX_MESSAGE_BYTES} would not fit a record with its partition key"
            )
        self.stream_name = stream_name
        self.stream_arn = stream_arn
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
        self._partition_key = partition_key

    # --- BatchChannel ------------------------------------------------------------------------------

    def batches(self, messages: Sequence[OutgoingMessage]) -> Iterator[Sequence[OutgoingMessage]]:
        return group(messages, KINESIS_PUT_MAX_RECORDS, KINESIS_PUT_MAX_BYTES, self._record_bytes)

    def send_batch(self, batch: Sequence[OutgoingMessage]) -> list[EntryFailure]:
        records: list[PutRecordsRequestEntryTypeDef] = [
            {"Data": message.body, "PartitionKey": self._key(message)} for message in batch
        ]
        try:
            if self.stream_arn is not None:
                response = self._client.put_records(Records=records, StreamARN=self.stream_arn)
            else:
                response = self._client.put_records(Records=records, StreamName=self.stream_name or "")
        except (ClientError, BotoCoreError) as exc:
            return call_failures(exc, len(batch))
        if not response.get("FailedRecordCount"):
            return []
        # Results come back in request order; a failed one has an ErrorCode. Both documented codes
        # (ProvisionedThroughputExceededException, InternalFailure) are transient.
        return [
            EntryFailure(index, outcome["ErrorCode"], outcome.get("ErrorMessage", ""), retryable=True)
            for index, outcome in enumerate(response["Records"])
            if outcome.get("ErrorCode")
        ]

    def _key(self, message: OutgoingMessage) -> str:
        return bounded_partition_key(self._partition_key(message))

    def _record_bytes(self, message: OutgoingMessage) -> int:
        return message.size + len(self._key(message).encode("utf-8"))
