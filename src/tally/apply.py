"""Apply a batch's distinct messages to the store, exactly once, by the cheapest safe path.

``plan_batch`` (pure) splits the batch into units whose keys no other unit touches. A small unit is
written in a **direct transaction** (markers and ADDs together, all or nothing); a large one goes through
the **commit journal** (``tally.commit``), which writes one ADD per key for the whole unit across several
transactions. Both are exactly-once; docs/journal.md explains the protocol.

A message whose marker already exists is resolved through the batch its marker names: a direct marker or
a DONE batch means applied; a COMMITTED batch is finished here and then counts as applied; a PREPARING
batch with a live lease is left for later (its records are reported failed and redelivered); an expired
one is aborted, and a marker of an ABORTED batch counts as absent, so the message is claimed again. An
applied message is a duplicate only if its marker's content digest matches: other content under the id
is rejected as ``id_conflict`` (``tally.core.ledger.content_conflict``).

Throttling, conflicts and unknown outcomes are retried with exponential backoff and full jitter
(tenacity) while the invocation has time; what is still unapplied is reported for redelivery. Any other
store error propagates and fails the whole batch: a missing table or a denied permission must not quietly
dead-letter every message.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_random_exponential

from tally.core.ledger import BatchState, content_conflict
from tally.core.model import RejectCode, Rejection
from tally.core.plan import MAX_TRANSACTION_ACTIONS, plan_batch, plan_transactions
from tally.errors import (
    MarkersExistError,
    RetryableStoreError,
    StoreError,
    UnsettledMessagesError,
    WriteRejectedError,
)
from tally.marker_reads import MarkerReadGate
from tally.store.expressions import counters_per_add

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tally.core.aggregate import MessageTotals, Totals
    from tally.core.items import ItemKey
    from tally.core.ledger import BatchRecord, Claim, MarkerRecord
    from tally.core.numbers import Number
    from tally.core.plan import Chunk, CounterLimit

T = TypeVar("T")


def refusal_code(refused: WriteRejectedError) -> RejectCode:
    """The dead-letter code of a message whose write DynamoDB itself refused."""
    return RejectCode.COUNTER_OUT_OF_RANGE if refused.number_range else RejectCode.WRITE_REFUSED


class CounterStore(Protocol):
    """Direct transactions and marker reads (``tally.store.dynamodb.DynamoDBCounterStore``)."""

    def apply(self, chunk: Chunk, now_ms: int) -> None: ...

    def read_marker(self, message_id: str) -> MarkerRecord | None: ...

    def read_markers(self, message_ids: Sequence[str]) -> Mapping[str, MarkerRecord]: ...


class JournalStore(Protocol):
    """The journal steps (``tally.store.journal.DynamoDBJournal``)."""

    def open(self, batch_id: str, lease_until_ms: int, claims: Sequence[Claim], now_ms: int) -> None: ...

    def claim(self, batch_id: str, claims: Sequence[Claim], now_ms: int) -> None: ...

    def commit_single(self, batch_id: str, increments: Totals) -> None: ...

    def write_pages(self, batch_id: str, pages: Sequence[Totals], lease_until_ms: int) -> None: ...

    def commit(self, batch_id: str, chunk_count: int, first_chunk: Totals, lease_until_ms: int) -> None: ...

    def apply_chunk(self, batch_id: str, index: int, increments: Totals, lease_until_ms: int) -> None: ...

    def refuse_chunk(self, batch_id: str, index: int, reason: str, lease_until_ms: int) -> None: ...

    def finish(self, batch_id: str) -> None: ...

    def abort(self, batch_id: str, now_ms: int, *, expired_only: bool) -> bool: ...

    def read(self, batch_id: str) -> BatchRecord | None: ...

    def read_progress(self, batch_id: str, chunk_count: int) -> tuple[Sequence[Totals], set[int]]: ...

    def read_counters(self, items: Sequence[ItemKey]) -> Mapping[ItemKey, Mapping[str, Number]]: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try a throttled or conflicted request before handing the records back to the source."""

    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    max_attempts: int = 8
    reserve_ms: int = 3_000
    """Time kept back for reporting and dead-lettering; no step starts inside it."""
    lease_margin_ms: int = 60_000
    """How long past the invocation's deadline its journal batch stays protected from abort."""


@dataclass(frozen=True, slots=True)
class Stall:
    """A message handed back because its marker names another invocation's batch whose lease is live.

    It cannot be settled before that batch commits, aborts or outlives its lease; the source brings it
    back later (docs/journal.md, "Liveness"). Reported so the wait is visible, with what it waits for.
    """

    message_id: str
    batch_id: str
    lease_until_ms: int


@dataclass(frozen=True, slots=True)
class ApplyOutcome:
    """What happened to each message."""

    applied: frozenset[str] = frozenset()
    already_applied: frozenset[str] = frozenset()
    rejected: Mapping[str, Rejection] = field(default_factory=dict)
    unapplied: frozenset[str] = frozenset()
    applied_events: int = 0
    transactions: int = 0
    retries: int = 0
    journal_batches: int = 0
    refused_chunks: int = 0
    marker_reads: int = 0
    """``read_markers`` calls (0 while the ``MarkerReadGate`` is closed)."""
    stalls: tuple[Stall, ...] = ()
    """Unapplied messages held back by a live lease of another batch (a subset of ``unapplied``)."""


class Resolution(Enum):
    """What an existing marker means for its message."""

    APPLIED = "applied"
    PENDING = "pending"
    REPLACEABLE = "replaceable"


@dataclass
class Run:
    """The mutable record of one ``apply`` call (one invocation)."""

    now_ms: int
    remaining_ms: Callable[[], int]
    applied: set[str] = field(default_factory=set)
    already: set[str] = field(default_factory=set)
    rejected: dict[str, Rejection] = field(default_factory=dict)
    unapplied: set[str] = field(default_factory=set)
    replaces: dict[str, str] = field(default_factory=dict)
    """Messages whose marker names an aborted batch -> that batch (claimed by replacing the marker)."""
    resolutions: dict[str, Resolution] = field(default_factory=dict)
    digests: Mapping[str, bytes] = field(default_factory=dict)
    """Message id -> the content digest of the message this run applies under it."""
    applied_events: int = 0
    requests: int = 0
    retries: int = 0
    journal_batches: int = 0
    refused_chunks: int = 0
    markers_met: int = 0
    """Existing markers this run met, through the marker read or a cancelled write."""
    marker_reads: int = 0
    leases: dict[str, int] = field(default_factory=dict)
    """PREPARING batches met with a live lease -> their lease end (epoch ms)."""
    held: dict[str, str] = field(default_factory=dict)
    """Messages handed back because of such a batch -> that batch."""

    def hold(self, message_id: str, batch_id: str) -> None:
        """``message_id`` goes back to the source, unsettled; remember the batch if a live lease holds it."""
        self.unapplied.add(message_id)
        if batch_id in self.leases:
            self.held[message_id] = batch_id

    def settle_applied(self, message_id: str, counted: bytes | None) -> None:
        """A marker says the id was applied with content ``counted``: a duplicate, or an id conflict."""
        conflict = content_conflict(counted, self.digests.get(message_id), where="its marker")
        if conflict is None:
            self.already.add(message_id)
        else:
            self.rejected[message_id] = conflict

    def mark_applied(self, messages: Sequence[MessageTotals]) -> None:
        for message in messages:
            self.applied.add(message.message_id)
            self.applied_events += message.event_count


def _check_fates(messages: Sequence[MessageTotals], run: Run, unapplied: set[str]) -> None:
    """Every message has exactly one fate: applied, already applied, rejected, or handed back.

    A message with none would be reported done to the source and deleted without being counted; a
    message both rejected and applied would be dead-lettered and counted. Either is a defect of this
    module, and failing the whole batch (redelivered, and settled by the markers) is the safe answer.
    """
    fates = (run.applied, run.already, run.rejected.keys(), unapplied)
    counted = sum(len(fate) for fate in fates)
    every = {message.message_id for message in messages}
    if counted != len(every) or set().union(*fates) != every:
        without = sorted(every.difference(*fates))[:5]
        raise UnsettledMessagesError(f"{len(every)} message(s), {counted} fate(s); without a fate: {without}")


class Applier:
    """Applies a batch's distinct messages through the direct path and the commit journal."""

    def __init__(
        self,
        store: CounterStore,
        journal: JournalStore,
        *,
        policy: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
        max_actions: int = MAX_TRANSACTION_ACTIONS,
        new_batch_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        use_journal: bool = True,
        marker_read_gate: MarkerReadGate | None = None,
        counter_limit: CounterLimit = counters_per_add,
    ) -> None:
        self.store = store
        self.journal = journal
        self.policy = policy
        self._sleep = sleep
        self.max_actions = max_actions
        self.new_batch_id = new_batch_id
        self.use_journal = use_journal
        """False: direct transactions only (the chunked path, kept for comparison in benchmarks)."""
        self.marker_read_gate = marker_read_gate if marker_read_gate is not None else MarkerReadGate()
        """Whether to read the batch's markers first, so duplicates do not cancel whole transactions
        (``MarkerReadGate(quiet_batches=0)`` never reads: the cancellation path, for tests)."""
        self.counter_limit = counter_limit
        """The most counters one ADD on an item may carry (DynamoDB's 4 KB expression limit, issue 14)."""

    def apply(self, messages: Sequence[MessageTotals], now_ms: int, remaining_ms: Callable[[], int]) -> ApplyOutcome:
        """Apply every message once; ``remaining_ms`` reports the invocation's time left."""
        from tally.commit import JournalRunner  # noqa: PLC0415  (commit imports this module's types)

        run = Run(now_ms, remaining_ms, digests={message.message_id: message.digest for message in messages})
        runner = JournalRunner(self, run)
        pending = list(messages)
        if pending and self.marker_read_gate.is_open:
            pending = self._without_existing(pending, run)
        # Each round either settles messages or learns that some markers name aborted batches (which
        # forces those messages into a journal claim next round); three rounds settle any batch.
        for _ in range(3):
            if not pending:
                break
            plan = plan_batch(
                pending,
                self.max_actions,
                frozenset(run.replaces),
                allow_journal=self.use_journal,
                counter_limit=self.counter_limit,
            )
            run.rejected.update(plan.rejected)
            again: list[MessageTotals] = []
            for chunk in plan.direct:
                again.extend(self._direct(chunk, run))
            for unit in plan.journals:
                again.extend(runner.run(unit))
            pending = again
        run.unapplied.update(message.message_id for message in pending)
        self.marker_read_gate.observe(met_existing_markers=run.markers_met > 0)
        unapplied = run.unapplied - run.applied - run.already
        _check_fates(messages, run, unapplied)
        return ApplyOutcome(
            applied=frozenset(run.applied),
            already_applied=frozenset(run.already),
            rejected=run.rejected,
            unapplied=frozenset(unapplied),
            applied_events=run.applied_events,
            transactions=run.requests,
            retries=run.retries,
            journal_batches=run.journal_batches,
            refused_chunks=run.refused_chunks,
            marker_reads=run.marker_reads,
            stalls=tuple(
                Stall(message_id, batch_id, run.leases[batch_id])
                for message_id, batch_id in run.held.items()
                if message_id in unapplied
            ),
        )

    def _without_existing(self, messages: list[MessageTotals], run: Run) -> list[MessageTotals]:
        """Settle the messages that already have markers; the conditional writes still guard races."""
        ids = [message.message_id for message in messages]
        run.marker_reads += 1
        try:
            existing = self.attempt(run, partial(self.store.read_markers, ids), counts_as_request=False)
        except RetryableStoreError:
            # The read is an optimisation: the conditional marker writes still catch every duplicate,
            # at the price of a cancelled transaction. A throttled read must not fail the batch.
            return messages
        if not existing:
            return messages
        batches = {mid: marker.batch_id for mid, marker in existing.items() if marker.batch_id is not None}
        digests = {mid: marker.digest for mid, marker in existing.items() if marker.digest is not None}
        claimable = self.settle_existing(MarkersExistError(frozenset(existing), batches, digests), run)
        return [m for m in messages if m.message_id not in existing or m.message_id in claimable]

    # --------------------------------------------------------------------------------- direct path
    def _direct(self, chunk: Chunk, run: Run) -> list[MessageTotals]:
        """One direct transaction; returns the messages to plan again."""
        if not self.has_time(run):
            run.unapplied.update(chunk.message_ids)
            return []
        try:
            self.attempt(run, lambda: self.store.apply(chunk, run.now_ms))
        except MarkersExistError as exists:
            if not exists.message_ids & set(chunk.message_ids):
                raise StoreError("markers reported for messages outside the transaction") from exists
            # A marker naming an aborted (or expired, now aborted) batch counts as absent: that message is
            # planned again, into a journal claim that replaces the marker (issue 14, defect 1).
            claimable = self.settle_existing(exists, run)
            return [m for m in chunk.messages if m.message_id not in exists.message_ids or m.message_id in claimable]
        except RetryableStoreError:
            run.unapplied.update(chunk.message_ids)
            return []
        except WriteRejectedError as refused:
            if len(chunk.messages) > 1:
                again: list[MessageTotals] = []
                for message in chunk.messages:
                    (single,) = plan_transactions([message], self.max_actions, self.counter_limit).chunks
                    again.extend(self._direct(single, run))
                return again
            self._refused_alone(chunk.messages[0], refused, run)
            return []
        run.mark_applied(chunk.messages)
        return []

    def _refused_alone(self, message: MessageTotals, refused: WriteRejectedError, run: Run) -> None:
        # DynamoDB checks number ranges before conditions: a redelivered message that was applied before
        # can be refused for the range instead of being cancelled by its marker. Look before rejecting,
        # retrying the read like any step; if it never answers, only this message goes back to the source.
        try:
            marker = self.attempt(run, partial(self.store.read_marker, message.message_id), counts_as_request=False)
        except RetryableStoreError:
            run.unapplied.add(message.message_id)  # cannot tell applied from refused yet: ask again later
            return
        if marker is not None:
            resolution = (
                Resolution.APPLIED if marker.batch_id is None else self._resolve_or_pending(marker.batch_id, run)
            )
            if resolution is Resolution.APPLIED:
                run.settle_applied(message.message_id, marker.digest)
                return
            if resolution is Resolution.PENDING:
                run.hold(message.message_id, marker.batch_id or "")
                return
        detail = f"DynamoDB refused the increment: {refused.detail}"
        run.rejected[message.message_id] = Rejection(refusal_code(refused), detail)

    # --------------------------------------------------------------------------------- resolution
    def settle_existing(self, exists: MarkersExistError, run: Run, own_batch: str | None = None) -> set[str]:
        """Settle messages whose markers exist; returns those that are (now) claimable again."""
        run.markers_met += len(exists.message_ids)
        claimable: set[str] = set()
        for message_id in exists.message_ids:
            batch_id = exists.batches.get(message_id)
            if batch_id is None:
                run.settle_applied(message_id, exists.digests.get(message_id))
                continue
            if batch_id == own_batch:
                continue  # our own claim, from an attempt whose response was lost: the caller keeps it
            resolution = self._resolve_or_pending(batch_id, run)
            if resolution is Resolution.APPLIED:
                run.settle_applied(message_id, exists.digests.get(message_id))
            elif resolution is Resolution.PENDING:
                run.hold(message_id, batch_id)
            else:
                run.replaces[message_id] = batch_id
                claimable.add(message_id)
        return claimable

    def _resolve_or_pending(self, batch_id: str, run: Run) -> Resolution:
        """``resolve``, but a journal that stays throttled through every retry settles the message later.

        PENDING hands only the messages whose markers name ``batch_id`` back to the source; the rest of
        the batch goes on. Their redelivery meets the same markers and resolves them then.
        """
        try:
            return self.resolve(batch_id, run)
        except RetryableStoreError:
            return Resolution.PENDING

    def resolve(self, batch_id: str, run: Run) -> Resolution:
        """What a marker naming ``batch_id`` means now; finishes a COMMITTED batch on the way."""
        known = run.resolutions.get(batch_id)
        if known is not None:
            return known
        from tally.commit import JournalRunner  # noqa: PLC0415

        record = self.attempt(run, lambda: self.journal.read(batch_id), counts_as_request=False)
        if record is None:
            # Journal items outlive the markers of their batch (TTL rule) and too-old messages are
            # refused before any marker is consulted, so this cannot happen unless items were deleted.
            raise StoreError(f"journal header of batch {batch_id} is missing")
        state = record.state
        if state is BatchState.PREPARING and record.lease_until_ms < run.now_ms:
            if self.attempt(run, lambda: self.journal.abort(batch_id, run.now_ms, expired_only=True)):
                state = BatchState.ABORTED
            else:  # it moved on meanwhile (committed, or aborted by someone else): look again
                record = self.attempt(run, lambda: self.journal.read(batch_id), counts_as_request=False)
                if record is None:
                    raise StoreError(f"journal header of batch {batch_id} vanished")
                state = record.state
        if state is BatchState.ABORTED:
            resolution = Resolution.REPLACEABLE
        elif state is BatchState.DONE:
            resolution = Resolution.APPLIED
        elif state is BatchState.COMMITTED:
            finished = JournalRunner(self, run).finish(record, pages=None)
            resolution = Resolution.APPLIED if finished else Resolution.PENDING
        else:
            resolution = Resolution.PENDING  # another invocation's batch, lease live: it decides first
            run.leases[batch_id] = record.lease_until_ms
        if resolution is not Resolution.PENDING:
            run.resolutions[batch_id] = resolution
        return resolution

    # ------------------------------------------------------------------------------------ retrying
    def has_time(self, run: Run) -> bool:
        return run.remaining_ms() >= self.policy.reserve_ms

    def attempt(self, run: Run, step: Callable[[], T], *, counts_as_request: bool = True) -> T:
        """Run one store step, retrying retryable failures with backoff while time allows."""
        policy = self.policy

        def out_of_time_or_attempts(state: RetryCallState) -> bool:
            worst_wait_ms = policy.max_delay_s * 1000
            return state.attempt_number >= policy.max_attempts or (
                run.remaining_ms() < policy.reserve_ms + worst_wait_ms
            )

        retrying = Retrying(
            retry=retry_if_exception_type(RetryableStoreError),
            wait=wait_random_exponential(multiplier=policy.base_delay_s, max=policy.max_delay_s),
            stop=out_of_time_or_attempts,
            reraise=True,
            sleep=self._sleep,
        )
        try:
            for attempt in retrying:
                with attempt:
                    if counts_as_request:
                        run.requests += 1
                    return step()
        finally:
            run.retries += retrying.statistics.get("attempt_number", 1) - 1
        raise AssertionError("unreachable: tenacity either returns or re-raises")  # pragma: no cover
