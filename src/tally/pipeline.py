"""One batch, end to end: source records -> messages -> aggregate -> write plan -> store -> post-commit steps.

The pipeline is the only place that knows how those steps connect, and the only place that maps
message-level outcomes back to source records, which is what the source's partial-failure report needs:

- a record is *failed* (reported to the source for redelivery) when its message could not be applied
  this time (time ran out under throttling), when a post-commit step's write for it may succeed later
  (``tally.post_commit``), or when it is poison and the dead-letter queue refused it;
- every other record is done: applied now, applied before, a duplicate of a message in this batch
  (it shares the fate of the first record with its id), or poison safely in the dead-letter queue (which
  includes a counted message whose post-commit write DynamoDB refuses for good: its letter says why).

Nothing here catches an unexpected exception: it propagates and fails the whole batch, which the source
redelivers, rather than being turned into an empty failure list that would delete unprocessed records.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tally.core.aggregate import aggregate_batch, copy_conflict, deduplicate
from tally.core.declarations import NO_DECLARATIONS, Declarations
from tally.core.decode import decode_message
from tally.core.model import DeadLetter, Message, RejectCode, Rejection
from tally.post_commit import BESIDE_LANDING, SettledBatch, attempt_within, post_commit_steps

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tally.commit.fates import ApplyOutcome
    from tally.commit.retrying import RetryPolicy
    from tally.core.aggregate import BatchTotals, Deduplicated, MessageTotals
    from tally.core.limits import WireLimits
    from tally.core.model import SourceRecord
    from tally.post_commit import PostCommitStep, StepResult


class ApplyPort(Protocol):
    """Commits a batch's distinct messages, each exactly once (``tally.commit.applier.Applier``)."""

    @property
    def policy(self) -> RetryPolicy:
        """The commit's retry policy: the post-commit steps send under it too (``tally.post_commit.attempt_within``)."""
        ...

    @property
    def sleep(self) -> Callable[[float], None]:
        """How its retries wait (the post-commit steps' wait the same way)."""
        ...

    def commit(self, messages: Sequence[MessageTotals], now_ms: int, remaining_ms: Callable[[], int]) -> CommitPort:
        """Give every message one fate, but land the last FENCED batch's item writes only when asked
        (``CommitPort.land``); ``remaining_ms`` reports the invocation's time left."""
        ...


class CommitPort(Protocol):
    """A batch committed but maybe not landed (``tally.commit.applier.Committed``)."""

    @property
    def landing(self) -> frozenset[str]:
        """The messages whose deltas are still landing (committed: they count either way)."""
        ...

    @property
    def counted(self) -> ApplyOutcome:
        """The outcome if they land: what a step that needs only the fates is given beside the landing."""
        ...

    def land(self) -> ApplyOutcome:
        """Land them; the outcome that counts (they are handed back if the landing must wait)."""
        ...


class DeadLetterQueue(Protocol):
    """The port poison records go to; returns the record ids it could NOT accept."""

    def send(self, letters: Sequence[DeadLetter]) -> frozenset[str]: ...


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """What the pipeline needs to know besides its ports: input limits and the deduplication horizon."""

    limits: WireLimits
    dedup_horizon_ms: int
    """How long markers live; a message whose ``ts`` is older than this could be counted twice: refused."""
    declarations: Declarations = NO_DECLARATIONS
    """The deployment's declarations: default deltas and views for the decoder, windows, hot keys and views for the
    aggregate
    (the applier's planner gets the same value)."""


@dataclass(frozen=True, slots=True)
class HeldRecord:
    """A record reported failed because another invocation's journal batch holds its message (a stall)."""

    record_id: str
    batch_id: str
    lease_until_ms: int
    """When that batch's lease ends: from then on anyone may abort it and the record can be counted."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """The batch's outcome: which records to report as failed, and the figures for metrics and logs."""

    failed_record_ids: tuple[str, ...]
    dead_letters: tuple[DeadLetter, ...]
    stalls: tuple[HeldRecord, ...]
    figures: Mapping[str, int]
    """Metric name -> count (``tally.runtime.report`` publishes each): the commit's and every step's."""


@dataclass(frozen=True, slots=True)
class _Admitted:
    """The batch's records that decoded into messages (in source order), and the poison among the rest."""

    records: list[SourceRecord] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)


class BatchPipeline:
    """Processes one delivered batch through the applier, the post-commit steps and the dead-letter queue."""

    def __init__(
        self,
        applier: ApplyPort,
        dead_letters: DeadLetterQueue,
        settings: PipelineSettings,
        rng: random.Random | None = None,
        *,
        steps: Sequence[PostCommitStep] | None = None,
    ) -> None:
        self._applier = applier
        self._dead_letters = dead_letters
        self._settings = settings
        self._rng = rng or random.Random()
        self._steps = tuple(steps) if steps is not None else post_commit_steps(settings.declarations.windows)
        """The work after the commit, in order (``tally.post_commit``). By default steps without stores,
        which refuse messages carrying gauges or distinct members rather than drop what they carry."""
        self._beside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tally-beside-landing")
        """Where a step that needs only the fates (``BESIDE_LANDING``: the archive's write) runs while the last
        FENCED batch's item writes land; built once per container, like the clients."""

    @property
    def steps(self) -> tuple[PostCommitStep, ...]:
        """The post-commit steps, in the order they run."""
        return self._steps

    def process(self, records: Sequence[SourceRecord], now_ms: int, remaining_ms: Callable[[], int]) -> BatchResult:
        """Count a batch exactly once; ``now_ms`` is the invocation's clock, read once by the caller."""
        admitted = self._admit(records, now_ms)
        copies = deduplicate(admitted.messages)
        unique = [admitted.messages[position] for position in copies.unique]
        received_ms = [admitted.records[position].received_ms for position in copies.unique]
        windows, hot_keys = self._settings.declarations.windows, self._settings.declarations.hot_keys
        batch = aggregate_batch(
            unique,
            received_ms,
            windows=windows,
            hot_keys=hot_keys,
            now_ms=now_ms,
            choose_shard=self._rng.randrange,
            views=self._settings.declarations.views,
        )
        committed = self._applier.commit(batch.messages, now_ms, remaining_ms)

        def settled_by(outcome: ApplyOutcome, landing: frozenset[str] = frozenset()) -> SettledBatch:
            counted = outcome.applied | outcome.already_applied
            return SettledBatch(
                [message for message in unique if message.message_id in counted],
                [net for net in batch.messages if net.message_id in counted],
                now_ms,
                remaining_ms,
                # Every step sends through it: the commit's retries, and nothing started in the time kept for
                # reporting.
                attempt_within(self._applier.policy, remaining_ms, self._applier.sleep),
                commits=outcome.commits,
                counted_here=outcome.applied,
                sources={
                    message.message_id: admitted.records[position]
                    for position, message in zip(copies.unique, unique, strict=True)
                    if message.message_id in counted
                },
                landing=landing,
            )

        # Every message's fate is decided once its last batch is FENCED: a step that needs only that runs while
        # the batch's item writes land, the others after them, as before (they read or write what landed).
        beside = [step for step in self._steps if committed.landing and getattr(step, BESIDE_LANDING, False)]
        early = [self._beside.submit(step.settle, settled_by(committed.counted, committed.landing)) for step in beside]
        try:
            outcome = committed.land()
        finally:
            wait(early)  # whatever stopped the landing, nothing of this batch runs on after it
        # The step's own outcome, or its error, is the batch's as when it ran after the landing.
        done = {id(step): future.result() for step, future in zip(beside, early, strict=True)}
        settled = settled_by(outcome)
        steps = [done[id(step)] if id(step) in done else step.settle(settled) for step in self._steps]
        retry = outcome.unapplied.union(*(step.retry for step in steps))
        refused = {key: why for step in steps for key, why in step.refused.items() if key not in retry}
        refused.update(outcome.rejected)
        conflicts, counted_copies = _copy_fates(admitted, copies, outcome)
        letters = admitted.letters + _refused_letters(admitted, copies, refused) + conflicts
        refused_by_dlq = self._dead_letters.send(letters) if letters else frozenset()
        failed = [
            record.record_id
            for record, message in zip(admitted.records, admitted.messages, strict=True)
            if message.message_id in retry
        ]
        failed.extend(admitted.records[position].record_id for position in counted_copies)
        failed.extend(letter.record.record_id for letter in letters if letter.record.record_id in refused_by_dlq)
        stalls = _held_records(admitted, outcome)
        figures = _commit_figures(
            len(records), copies=copies, batch=batch, outcome=outcome, letters=letters, failed=failed, stalls=stalls
        )
        figures["DeadLetterFailures"] = len(refused_by_dlq)
        return BatchResult(tuple(failed), tuple(letters), stalls, _with_steps(figures, steps))

    def _admit(self, records: Sequence[SourceRecord], now_ms: int) -> _Admitted:
        """Decode each record; refuse what may be too old, and what no post-commit step could serve."""
        admitted = _Admitted()
        for record in records:
            decoded = decode_message(
                record.body,
                self._settings.limits,
                self._settings.declarations.defaults,
                self._settings.declarations.views,
            )
            if isinstance(decoded, Message):
                decoded = self._refuse_if_too_old(decoded, now_ms)
            if isinstance(decoded, Message):
                message = decoded
                decoded = next((why for step in self._steps if (why := step.admit(message)) is not None), message)
            if isinstance(decoded, Rejection):
                admitted.letters.append(DeadLetter(record, decoded))
            else:
                admitted.records.append(record)
                admitted.messages.append(decoded)
        return admitted

    def _refuse_if_too_old(self, message: Message, now_ms: int) -> Message | Rejection:
        """Refuse a message that may be older than the markers it could have left: only its ``ts`` can say.

        A message exists no earlier than its newest event (``ts``), so ``now - newest ts`` bounds its age
        from above: within the horizon (less the clock tolerance granted to producers), every marker it
        could have left is still there. The source timestamp proves nothing either way: an SQS redrive
        resets ``SentTimestamp``, and an event the SAM CLI generates carries one from 2018. It only places
        events without ``ts`` in their windows; messages without ``ts`` are accepted (docs/explanation/how-it-works.md:
        what the horizon guarantees).
        """
        newest = max((event.ts_ms for event in message.events if event.ts_ms is not None), default=None)
        if newest is None:
            return message
        tolerance_ms = self._settings.declarations.windows.future_tolerance_ms
        if newest > now_ms + tolerance_ms:
            ahead_s = (newest - now_ms) / 1000
            return Rejection(RejectCode.TS_IN_FUTURE, f"ts is {ahead_s:.0f} s ahead of the clock (a unit mix-up?)")
        age_ms = now_ms - newest
        if age_ms > self._settings.dedup_horizon_ms - tolerance_ms:
            days = self._settings.dedup_horizon_ms / 86_400_000
            detail = f"newest ts is {age_ms / 86_400_000:.1f} days old; markers are kept {days:g} days"
            return Rejection(RejectCode.TOO_OLD, detail)
        return message


def _refused_letters(admitted: _Admitted, copies: Deduplicated, refused: Mapping[str, Rejection]) -> list[DeadLetter]:
    """The letters of the batch's refused messages (by the applier or a step)."""
    return [
        DeadLetter(admitted.records[position], rejection)
        for position in copies.unique
        if (rejection := refused.get(admitted.messages[position].message_id)) is not None
    ]


def _copy_fates(admitted: _Admitted, copies: Deduplicated, outcome: ApplyOutcome) -> tuple[list[DeadLetter], list[int]]:
    """The fates of the copies of an id reused with other content in this batch, once the first copy is settled
    (a copy whose first copy is unapplied goes back to the source with it): the letters of the copies that
    conflict, and the positions of those that carry the content the id's marker counts.

    Such a copy comes behind a first copy refused as an id conflict by the marker: it is a duplicate of what
    was counted before, but it is not in the batch the post-commit steps settle (the first copy is), so the
    archive and the other steps never see it. It may be the very redelivery that repairs a crash between that
    commit and those steps: reported done, the repair would be lost. So it goes back to the source, whose next
    delivery (without the refused copy) meets the marker and settles it, under the commit the marker names.
    """
    letters: list[DeadLetter] = []
    counted: list[int] = []
    for position, first in copies.conflict_of.items():
        first_message = admitted.messages[first]
        if first_message.message_id in outcome.unapplied:
            continue
        conflict = copy_conflict(
            first_message, admitted.messages[position], outcome.rejected.get(first_message.message_id)
        )
        if conflict is not None:
            letters.append(DeadLetter(admitted.records[position], conflict))
        else:
            counted.append(position)
    return letters, counted


def _held_records(admitted: _Admitted, outcome: ApplyOutcome) -> tuple[HeldRecord, ...]:
    """The records held back by another invocation's live journal batch (each a stall, logged with its lease)."""
    holders = {stall.message_id: stall for stall in outcome.stalls}
    return tuple(
        HeldRecord(record.record_id, stall.batch_id, stall.lease_until_ms)
        for record, message in zip(admitted.records, admitted.messages, strict=True)
        if (stall := holders.get(message.message_id)) is not None
    )


def _commit_figures(
    records: int,
    *,
    copies: Deduplicated,
    batch: BatchTotals,
    outcome: ApplyOutcome,
    letters: Sequence[DeadLetter],
    failed: Sequence[str],
    stalls: Sequence[HeldRecord],
) -> dict[str, int]:
    """The figures of the pipeline's own stages (decode, deduplicate, aggregate, commit, dead letters)."""
    return {
        "RecordsReceived": records,
        "MessagesApplied": len(outcome.applied),
        "EventsApplied": outcome.applied_events,
        "DuplicatesInBatch": len(copies.duplicate_of),
        "DuplicatesAlreadyApplied": len(outcome.already_applied),
        "PoisonRecords": len(letters),
        "Transactions": outcome.transactions,
        "TransactionRetries": outcome.retries,
        "RecordsFailed": len(failed),
        "JournalBatches": outcome.journal_batches,
        "RefusedChunks": outcome.refused_chunks,
        "LateEvents": batch.late_events,
        "MarkerReads": outcome.marker_reads,
        # A write that would cross a declared level, sent again from the value met with its notifications
        # (tally.core.thresholds): one per crossing batch, more when another writer moved the value meanwhile.
        "ThresholdRewrites": outcome.threshold_rewrites,
        # Crossings of one message that did not fit its transaction beside its writes: paged for a journal batch
        # its marker names, and recorded right after it (tally.commit.protocol, ``_spill``).
        "SpilledCrossings": outcome.spilled_crossings,
        # An id reused with other content (dead-lettered too, but worth an alarm of its own: a producer bug)
        "IdConflicts": sum(1 for letter in letters if letter.rejection.code is RejectCode.ID_CONFLICT),
        "RecordsHeldByLease": len(stalls),
    }


def _with_steps(figures: dict[str, int], steps: Sequence[StepResult]) -> dict[str, int]:
    """The batch's figures with each post-commit step's added (a name two steps share is summed)."""
    for step in steps:
        for name, value in step.figures.items():
            figures[name] = figures.get(name, 0) + value
    return figures
