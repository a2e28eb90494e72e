"""Event source pollers: what Lambda's event source mappings do for SQS and Kinesis, against local endpoints.

The I/O around ``tally_local.esm`` (which decides what happens to a batch after the function ran)
against moto's endpoints: receive, batch, invoke, delete, checkpoint, send to the on-failure destination.

``SqsPoller`` (several run concurrently, up to the mapping's ``MaximumConcurrency``):

- ``ReceiveMessage`` (10 at a time, all attributes; short polls, see ``_IDLE_QUEUE_POLL_S``) until
  the batch holds ``BatchSize`` messages, the ``MaximumBatchingWindowInSeconds`` since the first one
  has passed, or the 6 MB invocation payload limit is reached (counted on the event's JSON, as Lambda
  counts it; messages received beyond it start the next batch); with a window of 0, the first
  non-empty receive is the batch;
- invokes the function with a Lambda-format SQS event (``tally_local.kit.lambda_events``) and deletes what
  ``esm.settle_sqs`` says. The rest reappear after the queue's visibility timeout, and moto moves a
  message to the dead-letter queue after ``maxReceiveCount`` receives (the queue's RedrivePolicy).

``KinesisShardPoller`` (one per shard; a ``ParallelizationFactor`` above 1 runs as 1 here):
``GetShardIterator`` at the mapping's ``StartingPosition``, then ``GetRecords`` into batches of at
most ``BatchSize`` within the batching window, each delivered through ``esm.ShardBatch`` (checkpoint,
retry, bisection, give-up); a given-up range's metadata goes to the on-failure destination, as
Lambda sends it, and the shard moves on. Retries pause a short real time (0.2 s doubling, at most 2 s).

Must not: decide a batch's fate itself (that is ``esm``), or shape events (``lambda_events``).
Pollers never swallow what goes wrong: a service error is counted in ``SourceStats`` and retried after
a pause; anything unexpected ends the poller and is re-raised by ``EventSourceMappings.check``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.limits import SQS_BATCH_MAX_ENTRIES
from tally_local.esm import (
    REPORT_BATCH_ITEM_FAILURES,
    Decision,
    KinesisRetryPolicy,
    ShardBatch,
    invocation_outcome,
    records_within_payload,
    settle_sqs,
)
from tally_local.kit.lambda_events import kinesis_event, kinesis_record, on_failure_record, sqs_event, sqs_record
from tally_local.kit.writes import DynamoDBWrites

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mypy_boto3_kinesis.client import KinesisClient
    from mypy_boto3_sqs.client import SQSClient

    from tally_local.esm import BatchOutcome, GiveUp
    from tally_local.function import Invocation, LocalFunction
    from tally_local.template import KinesisEventSource, SqsEventSource

logger = logging.getLogger(__name__)

_IDLE_QUEUE_POLL_S: Final = 0.5
"""Pause after an empty receive. Lambda long-polls; the local moto server serves one request at a time,
where a waiting receive would hold up every other client, so the pollers short-poll and pause."""
_EMPTY_POLLS_BEFORE_PARKING: Final = 2
"""Empty receives in a row after which a poller other than a mapping's first parks (``SqsPollers``)."""
_PARKED_S: Final = 10.0
"""The longest a parked poller waits without a wake-up before it polls again (a safety net: every arrival wakes it)."""
_IDLE_SHARD_POLL_S: Final = 1.0
_ERROR_PAUSE_S: Final = 1.0
_RETRY_TIME_SCALE: Final = 0.2
"""A failing shard waits ``esm``'s retry timing at a fifth of real time, and at most ``_RETRY_PAUSE_MAX_S``: the
local stack is for seeing what happens in seconds (0.2 s doubling to 2 s), not for a shard's pace."""
_RETRY_PAUSE_MAX_S: Final = 2.0


@dataclass
class SourceStats:
    """What one event source mapping did, summed over its pollers (thread-safe)."""

    invocations: int = 0
    records_delivered: int = 0
    """Records handed to the function, redeliveries included."""
    records_done: int = 0
    """Records deleted (SQS) or checkpointed past (Kinesis)."""
    records_reported_failed: int = 0
    function_errors: int = 0
    unreadable_responses: int = 0
    batches_given_up: int = 0
    """Kinesis batches whose metadata went to the on-failure destination."""
    service_errors: int = 0
    writes: DynamoDBWrites = field(default_factory=DynamoDBWrites)
    metrics: dict[str, float] = field(default_factory=dict)
    last_error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def invoked(self, invocation: Invocation, delivered: int, outcome: BatchOutcome) -> None:
        with self._lock:
            self.invocations += 1
            self.records_delivered += delivered
            self.writes = self.writes + invocation.writes
            for name, value in invocation.metrics.items():
                self.metrics[name] = self.metrics.get(name, 0.0) + value
            if invocation.error is not None:
                self.function_errors += 1
                self.last_error = invocation.error
            elif outcome.whole_batch:
                self.unreadable_responses += 1
                self.last_error = outcome.reason
            else:
                self.records_reported_failed += len(outcome.failed)

    def done(self, records: int) -> None:
        with self._lock:
            self.records_done += records

    def gave_up(self) -> None:
        with self._lock:
            self.batches_given_up += 1

    def service_error(self, error: Exception) -> None:
        with self._lock:
            self.service_errors += 1
            self.last_error = f"{type(error).__name__}: {error}"

    def metric(self, name: str) -> int:
        with self._lock:
            return round(self.metrics.get(name, 0.0))


class _Poller(threading.Thread, ABC):
    """A daemon thread that runs ``poll_once`` until stopped, keeping its failure for ``check``."""

    def __init__(self, name: str, stop: threading.Event, stats: SourceStats) -> None:
        super().__init__(name=name, daemon=True)
        self.stop_event = stop
        self.stats = stats
        self.failure: Exception | None = None
        self._busy = threading.Event()
        self._last_empty_poll: float | None = None
        self._deliveries = 0

    @property
    def deliveries(self) -> int:
        """How many polls delivered records so far (or may have: one that a service error ended), counted before
        the poller is idle again: a drain check that reads it on both sides of reading the queues sees any
        delivery made meanwhile, busy or done."""
        return self._deliveries

    def caught_up_since(self, moment: float) -> bool:
        """True if the poller holds no records and a poll that STARTED at or after ``moment``
        (``time.monotonic()``) found nothing: everything published before ``moment`` has been handled."""
        last = self._last_empty_poll
        return not self._busy.is_set() and last is not None and last >= moment

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                try:
                    worked = self.poll_once()
                except (BotoCoreError, ClientError) as exc:
                    # it may have delivered before the error (a failed delete): counted, for the drain check
                    self._deliveries += 1
                    self._busy.clear()
                    if self.stop_event.is_set():
                        return
                    logger.warning("%s: %s", self.name, exc)
                    self.stats.service_error(exc)
                    self.stop_event.wait(_ERROR_PAUSE_S)
                    continue
                if worked:
                    self._deliveries += 1
                self._busy.clear()
                if not worked:
                    self._last_empty_poll = started
        except Exception as exc:  # kept, and raised by EventSourceMappings.check in the main thread
            logger.exception("%s stopped", self.name)
            self.failure = exc

    def _set_busy(self) -> None:
        """A receive is in flight or records are in hand: not caught up until they are done (``run`` clears it
        after the poll)."""
        self._busy.set()

    def release(self) -> None:
        """Wake the poller if it waits on anything but the stop event (the mapping is stopping)."""

    @abstractmethod
    def poll_once(self) -> bool:
        """One round: True if it delivered records (it is not idle)."""


class SqsPollers:
    """What a mapping's SQS pollers share: while the first of them finds the queue empty, the others park after
    two empty receives of their own, until a receive (anyone's) brings messages, which wakes them all.

    Idle, a stack's five pollers sent ten receives a second between them, about a tenth of a core with moto's server
    answering them (the idle stack of ``tally-local``, 30 s measured: its Python process 2.63 s of CPU, DynamoDB
    Local's JVM about 0.5 s); parked, the first alone polls (two a second), and the Python process took 0.78 s.
    While anything arrives each poller polls as before, so the pollers' concurrency under load is
    unchanged. A message published to an idle queue waits for the first poller's next receive: 0.25 s on average,
    against 0.1 s with five pollers, before the batching window (1 s locally) that follows it anyway."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._arrivals = 0
        self._first_found_nothing = False

    @property
    def arrivals(self) -> int:
        """How many receives brought messages so far (a parked poller wakes when it changes)."""
        with self._condition:
            return self._arrivals

    def arrived(self) -> None:
        """A receive brought messages: every parked poller polls again."""
        with self._condition:
            self._arrivals += 1
            self._first_found_nothing = False
            self._condition.notify_all()

    def first_found_nothing(self) -> None:
        with self._condition:
            self._first_found_nothing = True

    def park(self, arrivals_seen: int, stop: threading.Event) -> bool:
        """Wait while the first poller finds nothing and no receive has brought messages since ``arrivals_seen``
        (at most ``_PARKED_S``); False, at once, when the first poller is not idle."""
        with self._condition:
            if not self._first_found_nothing:
                return False
            self._condition.wait_for(
                lambda: self._arrivals != arrivals_seen or stop.is_set() or not self._first_found_nothing,
                timeout=_PARKED_S,
            )
            return True

    def release(self) -> None:
        """Wake every parked poller (the mapping is stopping)."""
        with self._condition:
            self._condition.notify_all()


class SqsPoller(_Poller):
    """One of the SQS event source mapping's pollers; the first of them (``first``) never parks."""

    def __init__(
        self,
        name: str,
        *,
        sqs: SQSClient,
        queue_url: str,
        queue_arn: str,
        source: SqsEventSource,
        function: LocalFunction,
        stats: SourceStats,
        stop: threading.Event,
        region: str,
        group: SqsPollers | None = None,
        first: bool = True,
    ) -> None:
        super().__init__(name, stop, stats)
        self._group = group if group is not None else SqsPollers()
        self._first = first
        self._empty_polls = 0
        self._parked = False
        self._sqs = sqs
        self._queue_url = queue_url
        self._queue_arn = queue_arn
        self._source = source
        self._function = function
        self._region = region
        self._carried: list[dict[str, Any]] = []
        """Messages received beyond the 6 MB payload: the first of the next batch."""

    def caught_up_since(self, moment: float) -> bool:
        """Also true of a parked poller: it parked after an empty receive, holding nothing, and every receive that
        brings messages (the first poller's, which keeps polling) wakes it before its records are in hand."""
        return (self._parked and not self._busy.is_set()) or super().caught_up_since(moment)

    def release(self) -> None:
        self._group.release()

    def poll_once(self) -> bool:
        arrivals_seen = self._group.arrivals
        messages = self._receive_batch()
        if not messages:
            self._idle(arrivals_seen)
            return False
        self._empty_polls = 0
        self._group.arrived()
        self._set_busy()
        ids = [message["MessageId"] for message in messages]
        invocation = self._function.invoke(sqs_event(messages, self._queue_arn, self._region))
        outcome = _outcome(invocation, ids, self._source.function_response_types)
        self.stats.invoked(invocation, len(messages), outcome)
        if outcome.whole_batch:
            logger.warning("%s: batch of %d failed: %s", self.name, len(ids), invocation.error or outcome.reason)
        settlement = settle_sqs(outcome, ids)
        self._delete_done([message for message in messages if message["MessageId"] in settlement.delete])
        return True

    def _idle(self, arrivals_seen: int) -> None:
        self._empty_polls += 1
        if self._first:
            self._group.first_found_nothing()
        elif self._empty_polls >= _EMPTY_POLLS_BEFORE_PARKING:
            self._parked = True
            try:
                if self._group.park(arrivals_seen, self.stop_event):
                    return
            finally:
                self._parked = False
        self.stop_event.wait(_IDLE_QUEUE_POLL_S)

    def _receive_batch(self) -> list[dict[str, Any]]:
        messages, self._carried = self._carried, []
        deadline: float | None = None
        # Busy before the request is sent, not once messages are back: a receive in flight takes a message out of
        # sight, and a drain check reading the queue meanwhile would find it neither visible nor seen in hand.
        self._set_busy()
        while not self.stop_event.is_set():
            # The first message opens the batching window; the batch fills until it closes.
            received = self._sqs.receive_message(
                QueueUrl=self._queue_url,
                MaxNumberOfMessages=min(SQS_BATCH_MAX_ENTRIES, self._source.batch_size - len(messages)),
                WaitTimeSeconds=0,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            messages.extend(received)  # type: ignore[arg-type]
            if not messages:
                self._busy.clear()
                return []
            if deadline is None:
                deadline = time.monotonic() + self._source.maximum_batching_window_seconds
            fits = records_within_payload([self._record_bytes(message) for message in messages])
            if fits < len(messages):
                # Over Lambda's 6 MB: what does not fit waits for the next batch (still in flight, as on AWS).
                messages, self._carried = messages[:fits], messages[fits:]
                break
            now = time.monotonic()
            if len(messages) >= self._source.batch_size or now >= deadline:
                break
            if not received:
                self.stop_event.wait(min(0.1, deadline - now))
        return messages

    def _record_bytes(self, message: dict[str, Any]) -> int:
        return len(json.dumps(sqs_record(message, self._queue_arn, self._region)).encode("utf-8"))

    def _delete_done(self, messages: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(messages), SQS_BATCH_MAX_ENTRIES):
            chunk = messages[start : start + SQS_BATCH_MAX_ENTRIES]
            response = self._sqs.delete_message_batch(
                QueueUrl=self._queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": message["ReceiptHandle"]} for i, message in enumerate(chunk)],
            )
            self.stats.done(len(response.get("Successful", [])))
            for failure in response.get("Failed", []):
                # A receipt that expired (the message became visible again): it will be delivered again.
                self.stats.service_error(RuntimeError(f"DeleteMessage {failure.get('Code')}: {failure.get('Message')}"))


class KinesisShardPoller(_Poller):
    """The Kinesis event source mapping's poller of one shard."""

    def __init__(
        self,
        name: str,
        *,
        kinesis: KinesisClient,
        sqs: SQSClient,
        stream_name: str,
        stream_arn: str,
        shard_id: str,
        source: KinesisEventSource,
        function: LocalFunction,
        on_failure_queue_url: str | None,
        stats: SourceStats,
        stop: threading.Event,
        region: str,
    ) -> None:
        super().__init__(name, stop, stats)
        self._kinesis = kinesis
        self._sqs = sqs
        self._stream_name = stream_name
        self._stream_arn = stream_arn
        self._shard_id = shard_id
        self._source = source
        self._function = function
        self._on_failure_queue_url = on_failure_queue_url
        self._region = region
        self._policy = KinesisRetryPolicy(
            maximum_retry_attempts=source.maximum_retry_attempts,
            maximum_record_age_s=source.maximum_record_age_seconds,
            bisect_on_function_error=source.bisect_batch_on_function_error,
        )
        self._iterator: str | None = None
        self._buffer: deque[dict[str, Any]] = deque()
        self._caught_up = False
        self.shard_closed = False

    def caught_up_since(self, moment: float) -> bool:
        """Also at the shard's tip (``MillisBehindLatest`` 0) with no records buffered."""
        return self._caught_up and not self._buffer and super().caught_up_since(moment)

    def poll_once(self) -> bool:
        batch = self._next_batch()
        if not batch:
            self.stop_event.wait(_IDLE_SHARD_POLL_S)  # Lambda polls an idle shard about once a second
            return False
        self._set_busy()
        self._deliver(batch)
        return True

    def _next_batch(self) -> list[dict[str, Any]]:
        deadline: float | None = None
        while len(self._buffer) < self._source.batch_size and not self.stop_event.is_set() and not self.shard_closed:
            fetched = self._get_records(self._source.batch_size - len(self._buffer))
            if not self._buffer:
                return []
            if deadline is None:
                deadline = time.monotonic() + self._source.maximum_batching_window_seconds
            now = time.monotonic()
            if now >= deadline:
                break
            if not fetched:
                self.stop_event.wait(min(0.2, deadline - now))
        candidates = [self._buffer[index] for index in range(min(self._source.batch_size, len(self._buffer)))]
        sizes = [
            len(json.dumps(kinesis_record(record, self._stream_arn, self._shard_id, self._region)).encode("utf-8"))
            for record in candidates
        ]
        return [self._buffer.popleft() for _ in range(records_within_payload(sizes))] if candidates else []

    def _get_records(self, limit: int) -> int:
        if self._iterator is None:
            self._iterator = self._kinesis.get_shard_iterator(
                StreamName=self._stream_name,
                ShardId=self._shard_id,
                ShardIteratorType=self._source.starting_position,  # type: ignore[arg-type]
            )["ShardIterator"]
        response = self._kinesis.get_records(ShardIterator=self._iterator, Limit=limit)
        records = response["Records"]
        self._buffer.extend(records)  # type: ignore[arg-type]
        next_iterator = response.get("NextShardIterator", "")
        if not next_iterator:  # the shard was closed (split or merged) and read to its end
            self.shard_closed = True
        else:
            self._iterator = next_iterator
        self._caught_up = not records and response.get("MillisBehindLatest", 0) == 0
        return len(records)

    def _deliver(self, batch: list[dict[str, Any]]) -> None:
        """Deliver until every record is checkpointed or given up (``esm.ShardBatch`` decides how)."""
        delivery = ShardBatch(batch, self._policy)
        while (part := delivery.next_part()) is not None:
            sequence_numbers = [record["SequenceNumber"] for record in part]
            invocation = self._function.invoke(kinesis_event(part, self._stream_arn, self._shard_id, self._region))
            outcome = _outcome(invocation, sequence_numbers, self._source.function_response_types)
            self.stats.invoked(invocation, len(part), outcome)
            step = delivery.settle(outcome, datetime.now(UTC))
            self.stats.done(step.checkpointed)
            if step.give_up is not None:
                self._give_up(step.give_up, invocation)
            elif step.decision is not Decision.DONE and self.stop_event.wait(
                min(step.retry_after_ms / 1000 * _RETRY_TIME_SCALE, _RETRY_PAUSE_MAX_S)
            ):
                # Stopping mid-retry: what is not checkpointed would be read again from the checkpoint.
                return

    def _give_up(self, give_up: GiveUp, invocation: Invocation) -> None:
        self.stats.gave_up()
        logger.warning(
            "%s: gave up %d records from %s (%s)",
            self.name,
            len(give_up.records),
            give_up.first_sequence_number,
            give_up.condition,
        )
        if self._on_failure_queue_url is None:
            return
        document = on_failure_record(
            function_arn=self._function.arn,
            condition=give_up.condition,
            invoke_count=give_up.invoke_count,
            shard_id=self._shard_id,
            stream_arn=self._stream_arn,
            records=give_up.records,
            function_error_kind="Unhandled" if invocation.error is not None else None,
            now=datetime.now(UTC),
        )
        self._sqs.send_message(QueueUrl=self._on_failure_queue_url, MessageBody=json.dumps(document))


def _outcome(invocation: Invocation, record_ids: Sequence[str], response_types: Sequence[str]) -> BatchOutcome:
    return invocation_outcome(
        error=invocation.error,
        response=invocation.response,
        record_ids=record_ids,
        report_batch_item_failures=REPORT_BATCH_ITEM_FAILURES in response_types,
    )
