"""What SQS bills for carrying messages from producers to the batching Lambda (no I/O).

SQS bills requests, each 64 KB chunk of a request's payload as one (https://aws.amazon.com/sqs/pricing/; price in
``tally.cost.model.Prices``); data moved within a region is free. A message costs three kinds of request:

- **send**: the producer library's ``SendMessageBatch``, at most 10 entries and 256 KiB of bodies each (the same
  grouping, ``tally.core.batching.group``), billed per 64 KB of the batch's bodies;
- **receive**: Lambda's pollers take up to 10 messages a ``ReceiveMessage``; counted here at 10 a call, billed per
  64 KB of their bodies. Pollers also receive nothing while the queue is empty (long polls of up to 20 s): that
  is paid per queue and hour, not per message, and is left out;
- **delete**: Lambda deletes what a batch applied with ``DeleteMessageBatch``, 10 a call (receipt handles only:
  one request each).

A retry, a redelivery or a re-send costs its requests again; these are the requests of one clean delivery.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tally.core.batching import group
from tally.core.limits import SQS_BATCH_MAX_BYTES, SQS_BATCH_MAX_ENTRIES

if TYPE_CHECKING:
    from collections.abc import Sequence

BILLED_CHUNK_BYTES: Final = 64 * 1024
"""Each 64 KB chunk of a request's payload is billed as one request."""
RECEIVE_MAX_MESSAGES: Final = 10
"""``ReceiveMessage`` returns at most 10 messages."""


def billed_requests(payload_bytes: int) -> int:
    """The requests one call is billed as: one per started 64 KB of its payload, at least one."""
    return max(1, math.ceil(payload_bytes / BILLED_CHUNK_BYTES))


@dataclass(frozen=True, slots=True)
class SqsRequests:
    """The billed requests that carry a sequence of messages once."""

    send: int
    receive: int
    delete: int

    @property
    def total(self) -> int:
        return self.send + self.receive + self.delete


def carried(body_bytes: Sequence[int]) -> SqsRequests:
    """The requests that carry messages of these body sizes (in the order they are published) once."""
    sends = group(body_bytes, SQS_BATCH_MAX_ENTRIES, SQS_BATCH_MAX_BYTES, lambda size: size)
    receives = [
        body_bytes[start : start + RECEIVE_MAX_MESSAGES] for start in range(0, len(body_bytes), RECEIVE_MAX_MESSAGES)
    ]
    return SqsRequests(
        send=sum(billed_requests(sum(batch)) for batch in sends),
        receive=sum(billed_requests(sum(batch)) for batch in receives),
        delete=math.ceil(len(body_bytes) / RECEIVE_MAX_MESSAGES),
    )
