"""What a publish call did: how much was sent, how much had to be retried, and what failed (with why).

A failed message keeps its ``OutgoingMessage`` (id, events and exact body), so the caller can send it
again later with ``publisher.send(result.failed_messages)``: same id, same composition, so the consumer
counts it once however many times it arrives. Nothing is ever dropped without appearing here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tally.errors import TallyError

if TYPE_CHECKING:
    from tally.producer.wire import OutgoingMessage


class PublishError(TallyError):
    """A producer could not hand some messages to SQS or Kinesis; ``result`` says which, and why.

    Raised only on request (``PublishResult.raise_for_failures``): publishing itself reports failures in
    its result, so that a partial success is never hidden behind an exception. It lives here, beside the
    result it carries, so that ``tally.errors`` stays below every module.
    """

    def __init__(self, detail: str, result: PublishResult) -> None:
        super().__init__(detail)
        self.result = result


@dataclass(frozen=True, slots=True)
class FailedMessage:
    """A message the service did not accept: the last error code and message, and how often it was tried."""

    message: OutgoingMessage
    code: str
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class PublishResult:
    """The outcome of publishing; results of several calls add up with ``+``."""

    sent_messages: int = 0
    sent_events: int = 0
    sent_bytes: int = 0
    retried: int = 0
    """Entries sent again after an attempt failed (each re-send of each entry counts once)."""
    calls: int = 0
    """API calls made (``SendMessageBatch`` / ``PutRecords``), retries included."""
    failed: tuple[FailedMessage, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def failed_messages(self) -> tuple[OutgoingMessage, ...]:
        """The messages to send again (unchanged: same ids) once the cause is fixed."""
        return tuple(failure.message for failure in self.failed)

    @property
    def failed_events(self) -> int:
        return sum(len(failure.message.events) for failure in self.failed)

    def __add__(self, other: PublishResult) -> PublishResult:
        return PublishResult(
            sent_messages=self.sent_messages + other.sent_messages,
            sent_events=self.sent_events + other.sent_events,
            sent_bytes=self.sent_bytes + other.sent_bytes,
            retried=self.retried + other.retried,
            calls=self.calls + other.calls,
            failed=self.failed + other.failed,
        )

    def raise_for_failures(self) -> None:
        """Raise ``PublishError`` (carrying this result) if any message failed; for callers that prefer it."""
        if self.failed:
            first = self.failed[0]
            raise PublishError(
                f"{len(self.failed)} message(s) with {self.failed_events} event(s) not accepted; "
                f"first: {first.code}: {first.reason}",
                self,
            )
