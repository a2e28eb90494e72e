"""A standard SQS queue with a redrive policy, and Lambda's SQS event source polling it, in-process.

The I/O around ``tally_local.esm``, which decides (``settle_sqs``, ``SqsRedrive``) what is deleted, what
comes back after the visibility timeout (the template's mapping: 420 s for a 60 s function) and what
moves to the dead-letter queue after ``maxReceiveCount`` receives (without any reason attached). This
module only keeps the messages, their receive counts and visibility, and adds what the local stand-ins
cannot: a visibility timeout that expires while the message is still being processed (the
``visibility_expiry`` fault) makes it visible at once, so another consumer receives it concurrently;
and no order: receives take visible messages in random order. Must not: decide a batch's fate itself.

Waiting for a visibility timeout moves the virtual clock forward (see ``tally_local.chaos.clock``), once no
batch is in flight.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tally_local.chaos.dlq import Letter
from tally_local.esm import SqsRedrive, settle_sqs
from tally_local.kit.lambda_events import sqs_event

if TYPE_CHECKING:
    from tally_local.chaos.clock import VirtualClock
    from tally_local.chaos.dlq import DeadLetterStore
    from tally_local.chaos.faults import FaultLog
    from tally_local.chaos.invoke import Consumer
    from tally_local.chaos.ledger import Ledger
    from tally_local.chaos.workload import Workload

REGION: Final = "us-east-1"
QUEUE_ARN: Final = "arn:aws:sqs:us-east-1:123456789012:tally-chaos-events"
_IDLE_WAIT_S: Final = 0.01


@dataclass
class _Message:
    message_id: str
    body: str
    sent_ms: int
    receive_count: int = 0
    first_receive_ms: int = 0
    generation: int = 0
    in_flight: int = 0


class Queue:
    """The queue; thread-safe. ``receive`` returns None once it is empty and nothing is in flight."""

    def __init__(
        self,
        clock: VirtualClock,
        dead_letters: DeadLetterStore,
        log: FaultLog,
        *,
        visibility_ms: int,
        max_receive_count: int,
        expiry_rate: float,
        seed: int,
    ) -> None:
        self._clock = clock
        self._dead_letters = dead_letters
        self._log = log
        self._redrive = SqsRedrive(visibility_timeout_ms=visibility_ms, max_receive_count=max_receive_count)
        self._expiry_rate = expiry_rate
        self._rng = random.Random(f"{seed}:sqs")
        self._lock = threading.Lock()
        self._messages: dict[str, _Message] = {}
        self._visible: list[tuple[int, float, str, int]] = []  # (visible at, random tie-break, id, generation)
        self._in_flight = 0
        self._changed = threading.Condition(self._lock)
        """Notified when a message may have become receivable: sent, answered, or visible again at once."""
        self.halted = threading.Event()
        """Set on Ctrl-C: receives return None, so the pollers end."""

    def send(self, body: str) -> str:
        with self._lock:
            message_id = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            self._messages[message_id] = _Message(message_id, body, self._clock.now_ms())
            self._schedule(self._messages[message_id], self._clock.now_ms())
            self._changed.notify_all()
            return message_id

    def _schedule(self, message: _Message, visible_at_ms: int) -> None:
        message.generation += 1
        heapq.heappush(self._visible, (visible_at_ms, self._rng.random(), message.message_id, message.generation))

    def receive(self, max_messages: int) -> list[dict[str, Any]] | None:
        """Up to ``max_messages`` visible messages, shaped like ``ReceiveMessage``'s answer."""
        with self._lock:
            while True:
                if not self._messages or self.halted.is_set():
                    return None
                batch = self._take(max_messages)
                if batch:
                    self._in_flight += 1
                    return batch
                if self._in_flight == 0 and self._visible:
                    self._clock.advance_to(self._visible[0][0])  # wait out the visibility timeouts
                    continue
                # Other consumers hold the rest: their answers decide what comes back. Woken by an answer, a send
                # or an expiry; the timeout covers a jump of the shared clock made by another source's wait.
                self._changed.wait(_IDLE_WAIT_S)

    def _take(self, max_messages: int) -> list[dict[str, Any]]:
        now = self._clock.now_ms()
        batch: list[dict[str, Any]] = []
        expired: list[_Message] = []
        while self._visible and len(batch) < max_messages:
            visible_at, _, message_id, generation = self._visible[0]
            message = self._messages.get(message_id)
            if message is None or message.generation != generation:
                heapq.heappop(self._visible)
                continue
            if visible_at > now:
                break
            heapq.heappop(self._visible)
            if self._redrive.moves_to_dead_letters(message.receive_count):
                del self._messages[message_id]
                self._dead_letters.add(Letter(message.body, None, QUEUE_ARN))
                self._log.add("delivery.sqs_moved_to_dlq")
                continue
            message.receive_count += 1
            message.first_receive_ms = message.first_receive_ms or now
            if message.in_flight:
                self._log.add("redelivery.sqs_concurrent_with_another_consumer")
            message.in_flight += 1
            if message.receive_count > 1:
                self._log.add("redelivery.sqs_receive_again")
            if self._rng.random() < self._expiry_rate:
                self._log.add("delivery.visibility_expiry")
                expired.append(message)
            else:
                self._schedule(message, self._redrive.visible_again_ms(now))
            batch.append(self._shape(message))
        for message in expired:
            self._schedule(message, now)  # visible again while this consumer still works on it
        if expired:
            self._changed.notify_all()
        return batch

    def _shape(self, message: _Message) -> dict[str, Any]:
        return {
            "MessageId": message.message_id,
            "ReceiptHandle": f"{message.message_id}#{message.generation}",
            "Body": message.body,
            "MD5OfBody": hashlib.md5(message.body.encode("utf-8", "surrogatepass")).hexdigest(),
            "Attributes": {
                "ApproximateReceiveCount": str(message.receive_count),
                "SentTimestamp": str(message.sent_ms),
                "SenderId": "AIDACHAOS",
                "ApproximateFirstReceiveTimestamp": str(message.first_receive_ms),
            },
        }

    def settle(self, batch: list[dict[str, Any]], done: frozenset[str] | set[str]) -> None:
        """The event source's answer: delete the ``done`` message ids; the rest wait for their timeout."""
        with self._lock:
            self._in_flight -= 1
            for entry in batch:
                message = self._messages.get(entry["MessageId"])
                if message is None:
                    continue  # deleted meanwhile by the other consumer of a visibility expiry
                message.in_flight -= 1
                if entry["MessageId"] in done:
                    del self._messages[entry["MessageId"]]
            self._changed.notify_all()


def consume(queue: Queue, consumer: Consumer, workload: Workload, ledger: Ledger, batch_size: int) -> None:
    """One poller of the SQS event source, until the queue is empty."""
    while (batch := queue.receive(batch_size)) is not None:
        ids = [entry["MessageId"] for entry in batch]
        messages = {entry["MessageId"]: workload.by_body.get(entry["Body"]) for entry in batch}
        ledger.attempt(message for message in messages.values() if message is not None)
        outcome = consumer.invoke_sqs(sqs_event(batch, QUEUE_ARN, REGION), ids)
        done = settle_sqs(outcome, ids).delete
        ledger.acknowledge(m for mid, m in messages.items() if m is not None and mid in done)
        queue.settle(batch, done)
