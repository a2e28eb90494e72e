"""Lambda's event source mappings, decided: ONE emulation of what happens to a batch after the function ran.

Owns every decision the mapping makes from an invocation's result, for the three drivers that move
records around it (one copy each had drifted apart from the others):

- ``tally_local.poller``: against moto's SQS and Kinesis endpoints (``make demo``, tests/integration/test_local_*);
- ``tally_local.chaos.sqs`` / ``.kinesis``: an in-process queue and stream on a virtual clock, with faults;
- ``tests.support.kinesis``: a test double over a moto shard's records.

What it decides (FACTS.md; AWS's "partial batch response", "bisect" and "on-failure destination" pages):

- how the function's answer reads (``read_response``, ``invocation_outcome``): an empty or missing
  ``batchItemFailures`` is success; an unreadable answer, or an id not in the batch, fails the WHOLE batch;
  a function error (raise, timeout, lost answer) fails the whole batch too, and only it may bisect;
- SQS (``settle_sqs``, ``SqsRedrive``): the receipts of records not reported failed are deleted, the rest
  come back after the visibility timeout, and a message already received ``maxReceiveCount`` times goes
  to the dead-letter queue on its next receive (SQS's redrive policy, which moto implements by itself);
- Kinesis (``ShardBatch``): the checkpoint moves to the LOWEST reported sequence number and everything
  from there is delivered again, records that succeeded included; a function error splits the batch in
  two when ``BisectBatchOnFunctionError`` is set, and "splitting a batch does not consume the retry
  quota" (AWS, "Retain discarded batch records for a Kinesis Data Streams event source"); after
  ``MaximumRetryAttempts`` retries, or once the oldest record is older than ``MaximumRecordAgeInSeconds``,
  the remaining records are given up (their range, never their data, to the on-failure destination);
- Kinesis's retry timing (``RetryCadence``, ``KinesisStep.retry_after_ms``): how long the mapping waits before
  it delivers a failing part again, one model for every driver.

It must not do I/O, read a clock (time is passed in), sleep or log: the drivers receive, invoke, delete, wait
(each on its own clock: virtual in the chaos run, scaled down in real time locally) and count;
``tally_local.kit.lambda_events`` shapes the events and the on-failure record.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tally.core.limits import LAMBDA_PAYLOAD_MAX_BYTES

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

REPORT_BATCH_ITEM_FAILURES: Final = "ReportBatchItemFailures"
RETRY_ATTEMPTS_EXHAUSTED: Final = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED: Final = "RecordAgeExceeded"

Record = Mapping[str, Any]
"""A Kinesis record as ``GetRecords`` returns it (``SequenceNumber``, ``ApproximateArrivalTimestamp``, ...)."""


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What the event source mapping makes of one invocation's answer."""

    failed: frozenset[str]
    """Record ids (SQS message ids, Kinesis sequence numbers) to deliver again."""
    whole_batch: bool
    """The whole batch failed: a function error or a response Lambda cannot read."""
    reason: str = ""
    errored: bool = False
    """A function error (raised, timed out, answer lost): the only failure ``BisectBatchOnFunctionError`` splits."""

    @property
    def ok(self) -> bool:
        return not self.failed


_EVENT_ENVELOPE_BYTES: Final = len('{"Records": []}')


def records_within_payload(record_bytes: Sequence[int], limit: int = LAMBDA_PAYLOAD_MAX_BYTES) -> int:
    """How many leading records, each of ``record_bytes`` as JSON in the event, fit one invocation's payload.

    Lambda cuts a batch at the 6 MB payload counting each record whole, as it delivers it (the body
    JSON-escaped inside the record's envelope, or base64 for Kinesis), plus the event's own envelope and
    the separators. At least one record: a record cannot exceed the limit (SQS and Kinesis cap messages
    far below it).
    """
    total = _EVENT_ENVELOPE_BYTES
    for count, size in enumerate(record_bytes):
        total += size + (2 if count else 0)  # ", " between records
        if total > limit:
            return max(1, count)
    return len(record_bytes)


def read_response(response: object, record_ids: Sequence[str]) -> BatchOutcome:
    """Read a partial batch response (``ReportBatchItemFailures``) for a batch of ``record_ids``."""
    everything = frozenset(record_ids)
    if response is None:
        return BatchOutcome(frozenset(), whole_batch=False)
    if not isinstance(response, dict):
        return BatchOutcome(everything, whole_batch=True, reason=f"response is not an object: {response!r:.80}")
    failures = response.get("batchItemFailures")
    if failures is None:
        return BatchOutcome(frozenset(), whole_batch=False)
    if not isinstance(failures, list):
        return BatchOutcome(everything, whole_batch=True, reason="batchItemFailures is not a list")
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or not identifier:
            return BatchOutcome(everything, whole_batch=True, reason=f"invalid itemIdentifier in {item!r:.80}")
        if identifier not in everything:
            return BatchOutcome(everything, whole_batch=True, reason=f"itemIdentifier {identifier!r} not in the batch")
        failed.add(identifier)
    return BatchOutcome(frozenset(failed), whole_batch=False)


def function_error(record_ids: Sequence[str], error: str) -> BatchOutcome:
    """The outcome of an invocation that raised (or timed out, or whose answer was lost): the whole batch failed."""
    return BatchOutcome(frozenset(record_ids), whole_batch=True, reason=error, errored=True)


def invocation_outcome(
    *, error: str | None, response: object, record_ids: Sequence[str], report_batch_item_failures: bool = True
) -> BatchOutcome:
    """The outcome of an invocation that ended with ``error`` (None: it returned ``response``).

    Without ``ReportBatchItemFailures`` in the mapping's ``FunctionResponseTypes`` Lambda ignores the answer.
    """
    if error is not None:
        return function_error(record_ids, error)
    if not report_batch_item_failures:
        return BatchOutcome(frozenset(), whole_batch=False)
    return read_response(response, record_ids)


# ------------------------------------------------------------------------------------------------- SQS
@dataclass(frozen=True, slots=True)
class SqsSettlement:
    """What the SQS event source does with a received batch once the function answered."""

    delete: frozenset[str]
    """Message ids whose receipts are deleted: done for good."""
    returning: frozenset[str]
    """Message ids left in flight: visible again when their visibility timeout ends."""


def settle_sqs(outcome: BatchOutcome, message_ids: Sequence[str]) -> SqsSettlement:
    """Delete exactly what was not reported failed (nothing after a function error or an unreadable answer)."""
    ids = frozenset(message_ids)
    return SqsSettlement(delete=ids - outcome.failed, returning=ids & outcome.failed)


@dataclass(frozen=True, slots=True)
class SqsRedrive:
    """The queue's side: its visibility timeout and redrive policy (what moto does for the local driver)."""

    visibility_timeout_ms: int
    max_receive_count: int

    def moves_to_dead_letters(self, receive_count: int) -> bool:
        """A message received ``maxReceiveCount`` times goes to the dead-letter queue on its next receive."""
        return receive_count >= self.max_receive_count

    def visible_again_ms(self, received_ms: int) -> int:
        """When a message received at ``received_ms`` and not deleted can be received again."""
        return received_ms + self.visibility_timeout_ms


# --------------------------------------------------------------------------------------------- Kinesis
KINESIS_POLL_INTERVAL_MS: Final = 1_000
"""Lambda polls each shard at a base rate of once per second (AWS, "Using Lambda with Kinesis")."""
KINESIS_MAX_RETRY_DELAY_MS: Final = 60_000


class RetryCadence(enum.Enum):
    """How soon the mapping delivers a failing part of a batch again.

    AWS documents no backoff between the retries of a failing stream batch: the Kinesis, event source mapping
    and on-failure destination pages and the ``CreateEventSourceMapping`` reference say only that Lambda retries
    until the retries or the record's age run out (checked 2026-12); they do document that Lambda polls each
    shard at a base rate of once per second. So two models: ``EVERY_POLL``, the fastest cadence that allows (the
    harshest for a retry count: a lease of 120 s spends 120 retries), and ``BACKOFF``, an assumption (the first
    retry at the next poll, the wait doubling with each failure in a row, at most a minute: 6 or 7 retries in
    such a lease). Nothing tally promises may lean on the second: with the template's defaults only the
    record's age, wall time that no cadence changes, bounds a give-up (``tests/template/test_liveness.py``
    checks crashes in a row at every poll).
    """

    EVERY_POLL = "every poll"
    BACKOFF = "backoff"


def kinesis_retry_delay_ms(failures: int, cadence: RetryCadence = RetryCadence.BACKOFF) -> int:
    """How long the mapping waits before it delivers a failing part again, after ``failures`` failed invocations
    of the batch in a row (1 or more), under ``cadence``."""
    if cadence is RetryCadence.EVERY_POLL:
        return KINESIS_POLL_INTERVAL_MS
    doubled: int = KINESIS_POLL_INTERVAL_MS << max(0, min(failures - 1, 6))
    return min(KINESIS_MAX_RETRY_DELAY_MS, doubled)


@dataclass(frozen=True, slots=True)
class KinesisRetryPolicy:
    """The mapping's error handling (``-1``: unlimited, the AWS default), and the retry cadence modelled."""

    maximum_retry_attempts: int = -1
    maximum_record_age_s: int = -1
    bisect_on_function_error: bool = False
    cadence: RetryCadence = RetryCadence.BACKOFF


class Decision(enum.Enum):
    """What the mapping does after one invocation of part of a batch."""

    DONE = "done"
    """Every record of the part succeeded: the checkpoint moves past it."""
    RETRY = "retry"
    """Deliver again from the checkpoint (the lowest reported failure, or the part's start)."""
    BISECT = "bisect"
    """A function error: deliver the records from the checkpoint as two halves (no retry consumed)."""
    GIVE_UP = "give_up"
    """Retries or record age exhausted: the records from the checkpoint go to the on-failure destination."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """A range given up: what the on-failure destination hears about (metadata, never the data)."""

    records: tuple[Record, ...]
    condition: str
    """``RetryAttemptsExhausted`` or ``RecordAgeExceeded``."""
    invoke_count: int
    """Invocations of these records (``approximateInvokeCount``)."""

    @property
    def first_sequence_number(self) -> str:
        return str(self.records[0]["SequenceNumber"])

    @property
    def last_sequence_number(self) -> str:
        return str(self.records[-1]["SequenceNumber"])


@dataclass(frozen=True, slots=True)
class KinesisStep:
    """The mapping's decision after one invocation, for the driver to act on."""

    decision: Decision
    checkpointed: int
    """Records of the invoked part now behind the checkpoint (the given-up ones included)."""
    redelivered: int
    """Records that will be delivered again (0 for DONE and GIVE_UP)."""
    failures: int
    """Failed invocations in a row in this batch, this one included (0 after a success)."""
    give_up: GiveUp | None = None
    retry_after_ms: int = 0
    """How long the mapping waits before the next delivery of this batch (``kinesis_retry_delay_ms``): 0 after a
    success or a give-up, when it moves on at once."""


@dataclass(frozen=True, slots=True)
class _Part:
    records: tuple[Record, ...]
    retries: int
    """Retries these records have used (a split passes its parent's count on: it consumes none)."""


class ShardBatch:
    """One batch of one shard, from its first delivery until every record is checkpointed or given up.

    The driver loops: ``part = next_part()`` (None: done), invoke the function with it, then
    ``settle(outcome, now)`` and act on the returned step (count, wait, send the give-up's metadata).
    """

    def __init__(self, records: Sequence[Record], policy: KinesisRetryPolicy) -> None:
        self._policy = policy
        self._work: deque[_Part] = deque([_Part(tuple(records), 0)] if records else [])
        self._failures = 0

    def next_part(self) -> tuple[Record, ...] | None:
        """The records to deliver next, in sequence order; None once the batch is through."""
        return self._work[0].records if self._work else None

    def settle(self, outcome: BatchOutcome, now: datetime) -> KinesisStep:
        """Decide from ``outcome`` (of the part ``next_part`` gave) what happens next; ``now``: for record age."""
        part = self._work.popleft()
        if outcome.ok:
            self._failures = 0
            return KinesisStep(Decision.DONE, len(part.records), 0, 0)
        self._failures += 1
        checkpoint = _checkpoint(outcome, part.records)
        remaining = part.records[checkpoint:]
        policy = self._policy
        split = outcome.errored and policy.bisect_on_function_error and len(remaining) > 1
        condition = None
        if not split and 0 <= policy.maximum_retry_attempts <= part.retries:
            condition = RETRY_ATTEMPTS_EXHAUSTED
        elif policy.maximum_record_age_s >= 0:
            oldest: datetime = remaining[0]["ApproximateArrivalTimestamp"]
            if (now - oldest).total_seconds() > policy.maximum_record_age_s:
                condition = RECORD_AGE_EXCEEDED
        if condition is not None:
            failures, self._failures = self._failures, 0
            give_up = GiveUp(remaining, condition, part.retries + 1)
            return KinesisStep(Decision.GIVE_UP, len(part.records), 0, failures, give_up)
        wait_ms = kinesis_retry_delay_ms(self._failures, policy.cadence)
        if split:
            middle = len(remaining) // 2
            self._work.extendleft([_Part(remaining[middle:], part.retries), _Part(remaining[:middle], part.retries)])
            return KinesisStep(Decision.BISECT, checkpoint, len(remaining), self._failures, retry_after_ms=wait_ms)
        self._work.appendleft(_Part(remaining, part.retries + 1))
        return KinesisStep(Decision.RETRY, checkpoint, len(remaining), self._failures, retry_after_ms=wait_ms)


def _checkpoint(outcome: BatchOutcome, records: Sequence[Record]) -> int:
    """Index of the LOWEST reported sequence number (compared as integers); 0 after a whole-batch failure."""
    if outcome.whole_batch:
        return 0
    lowest = min(outcome.failed, key=int)
    return next(index for index, record in enumerate(records) if record["SequenceNumber"] == lowest)
