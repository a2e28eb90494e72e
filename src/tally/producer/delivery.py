"""The delivery loop shared by the SQS and Kinesis publishers: batch, send, retry only what failed.

Each service reports per-entry outcomes of a batch call, so after an attempt only the entries that
failed for a transient reason are sent again, after a backoff with full jitter (a random wait between
zero and an exponentially growing cap, so many producers throttled together do not retry in lockstep).
Entries keep their message, and so their id and body, across attempts. A whole-call failure (throttled,
connection lost, response timed out) fails every entry of that call; if the call did reach the service
before the response was lost, the retry writes duplicates, which the consumer's markers absorb.

This is written out rather than taken from a retry library because the producer depends on boto3 only,
and because the unit retried is a shrinking subset of entries, not a function call.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from tally.producer.result import FailedMessage, PublishResult

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from tally.producer.wire import OutgoingMessage

_RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "KMSThrottlingException",
        "InternalFailure",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry entries that failed for a transient reason."""

    max_attempts: int = 8
    base_delay_s: float = 0.05
    max_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(f"invalid retry policy: {self}")

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        """Full jitter: uniform in [0, min(max_delay, base * 2**(attempt-1))]."""
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


@dataclass(frozen=True, slots=True)
class EntryFailure:
    """One entry of a batch call that the service did not accept."""

    index: int
    """Position of the entry in the batch that was sent."""
    code: str
    reason: str
    retryable: bool


class BatchChannel(Protocol):
    """What a service adapter provides: how to group messages into calls, and one call."""

    def batches(self, messages: Sequence[OutgoingMessage]) -> Iterator[Sequence[OutgoingMessage]]: ...

    def send_batch(self, batch: Sequence[OutgoingMessage]) -> list[EntryFailure]:
        """Send one batch; return the entries that failed (a whole-call failure fails them all)."""
        ...


@dataclass
class Delivery:
    """Runs messages through a channel under a retry policy (``sleep`` and ``rng`` injectable for tests)."""

    channel: BatchChannel
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def run(self, messages: Sequence[OutgoingMessage]) -> PublishResult:
        pending = list(messages)
        sent_messages = sent_events = sent_bytes = retried = calls = 0
        failed: list[FailedMessage] = []
        for attempt in range(1, self.policy.max_attempts + 1):
            again: list[tuple[OutgoingMessage, EntryFailure]] = []
            for batch in self.channel.batches(pending):
                calls += 1
                failures = {failure.index: failure for failure in self.channel.send_batch(batch)}
                for index, message in enumerate(batch):
                    failure = failures.get(index)
                    if failure is None:
                        sent_messages += 1
                        sent_events += len(message.events)
                        sent_bytes += message.size
                    elif failure.retryable and attempt < self.policy.max_attempts:
                        again.append((message, failure))
                    else:
                        failed.append(FailedMessage(message, failure.code, failure.reason, attempt))
            if not again:
                break
            retried += len(again)
            self.sleep(self.policy.delay_s(attempt, self.rng))
            pending = [message for message, _ in again]
        return PublishResult(sent_messages, sent_events, sent_bytes, retried, calls, tuple(failed))


def call_failures(exc: ClientError | BotoCoreError, entries: int) -> list[EntryFailure]:
    """Every entry of a batch call of ``entries`` entries that raised ``exc``: failed with the call's code.

    Throttling, server errors and lost connections or responses are transient; anything else (access
    denied, a missing queue or stream, invalid parameters, no credentials) would fail again the same way.
    """
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "ClientError"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        reason, retryable = str(error.get("Message", exc)), code in _RETRYABLE_CODES or status >= 500
    else:
        code, reason = type(exc).__name__, str(exc)
        retryable = isinstance(exc, BotoConnectionError | HTTPClientError)
    return [EntryFailure(index, code, reason, retryable) for index in range(entries)]
