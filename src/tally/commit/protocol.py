"""The commit protocol: each step of committing a batch exactly once, over the store's port.

Read beside docs/journal.md, which has the diagram, the invariant and why each condition is there. The
sections below follow the life of a message:

0. **What the markers already say** (``without_existing``): a message with a marker is settled through
   it (section 3) instead of being written again.
1. **Direct transaction** (``direct``): markers and ADDs together, all or nothing, as the core plans the write
   (``tally.core.write_planner.plan_write``: first the reads it asks for, through the runner like any read). A
   transaction DynamoDB refuses (a counter would leave the Number range, an action a size limit) is split into
   single messages, so that only the culprit is dead-lettered; a refused condition is planned again from the
   values it met (a threshold's), or its messages applied in order (a bound's).
2. **Journal** (``journal``), for a unit too large for one transaction:
   claim (a header ``PREPARING`` with a lease, created with the first markers; more markers in
   transactions that check the header) -> aggregate what was claimed -> check the stored values the
   later chunks will ADD to -> one chunk: ``PREPARING -> DONE`` with every ADD; several: write the pages,
   then ``PREPARING -> COMMITTED`` with chunk 0 -> apply chunks 1..n-1, each once -> ``DONE``
   (``finish``). A unit DynamoDB refuses, before the commit, is aborted and its culprits isolated. With the
   fenced apply, every item is checked, the pages written, ``PREPARING -> FENCED`` alone, then each item's
   fenced writes -> ``DONE`` (``tally.core.fence``).
3. **Another batch's marker** (``settle_existing``, ``resolve``): a direct marker or a DONE batch means
   applied (a duplicate if the content digest matches, an ``id_conflict`` if not); a COMMITTED or FENCED
   batch is finished here (as its state says, whichever path this container's own batches take), then
   applied; a PREPARING batch with a live lease holds the message (handed back); an expired one is aborted,
   and a marker of an ABORTED batch counts as absent: the message is claimed again, replacing it. So does a
   marker whose batch's header TTL has deleted (past its own horizon), and a marker TTL deleted between the
   read that found it and the claim replacing it (``vanished``).

This module owns the order of the steps and what each outcome means for each message, which it records
in ``Fates`` (the one place a fate is given). It must not retry, sleep, read the clock or count requests:
every store call goes through the ``Steps`` port (``tally.commit.retrying``), and a
``RetryableStoreError`` out of it means the runner gave up and the step's outcome is unknown. It notes
three things only it can see in ``Figures`` (a journal batch started, a committed chunk refused, existing
markers met); which of them become metrics is decided outside (``tally.runtime.report``). It must not
know item names either (the adapters', ``tally.store``), nor decide a write's conditions (the write planner's,
``tally.core.write_planner``, which it is given: ``write_planner``). A round's direct transactions may be planned
and sent on a thread pool it is given (``direct_all``); their fates are still given here, on the caller's thread,
in plan order.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import FIRST_EXCEPTION, wait
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from tally.core.aggregate import merge_totals
from tally.core.bounds import bounds_hold, refusal, runs_within_bounds
from tally.core.declarations import NO_DECLARATIONS, Declarations
from tally.core.epochs import FencedBatch
from tally.core.fence import (
    MAX_HEADER_READS_PER_BATCH,
    HeaderSeen,
    Refusal,
    batches_to_look_up,
    plan_fenced_apply,
    prunable,
    still_to_send,
    unstorable_sums,
    without_prune,
)
from tally.core.fence import refusal as fence_refusal
from tally.core.ledger import (
    BatchRecord,
    BatchState,
    Claim,
    Commit,
    MarkerMet,
    MarkersExistError,
    content_conflict,
)
from tally.core.model import RejectCode, Rejection
from tally.core.numbered_ids import marker_item
from tally.core.plan import (
    Chunk,
    ConditionRefusedError,
    Spill,
    crossing_pages,
    item_disjoint_lanes,
    nonzero_increments,
    plan_apply_chunks,
    plan_transactions,
    split_refused,
    unit_increments,
)
from tally.core.thresholds import CrossingPage
from tally.core.write import DirectWrite, Seen
from tally.core.write_planner import counters_met, plan_write
from tally.errors import (
    BatchStateError,
    ChunkAppliedError,
    RetryableStoreError,
    StoreError,
    WriteRejectedError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence
    from concurrent.futures import Executor
    from decimal import Decimal

    from tally.commit.fates import Fates, Figures
    from tally.commit.ports import BatchNumbers, CounterStore, JournalStore, Steps
    from tally.core.aggregate import MessageTotals, Totals
    from tally.core.fence import FencedPlanner, PruneRule
    from tally.core.items import ItemKey
    from tally.core.plan import CounterLimit, JournalPage
    from tally.core.thresholds import Crossing
    from tally.core.write import FencedWrite, ItemRead
    from tally.core.write_planner import WritePlanner

_Job = TypeVar("_Job")
_Done = TypeVar("_Done")


class Resolution(Enum):
    """What an existing marker means for its message."""

    APPLIED = "applied"
    PENDING = "pending"
    REPLACEABLE = "replaceable"


class DirectStatus(Enum):
    """A direct transaction that committed, or was never sent (no time left to start it)."""

    COMMITTED = "committed"
    NOT_STARTED = "not started"


DirectOutcome: TypeAlias = (
    "DirectStatus | MarkersExistError | RetryableStoreError | WriteRejectedError | ConditionRefusedError"
)
"""What came of one direct transaction: its status, or the store's answer the protocol settles it by."""

MAX_READ_ROUNDS = 3
"""Reads a write may ask for before it is planned (``ReadFirst``): a reset's values and the key items, then the window
items their pointers cannot say. One more means the planner asked again for what it was given: a defect."""

MAX_EXACT_ATTEMPTS = 4
"""Times a thresholded write is planned again from the values its refused condition met (``_exact``): each
failure means another writer committed to the same item in between; past this, the messages go back to the
source (a key that busy is retried later, never announced wrong)."""


def refusal_code(refused: WriteRejectedError) -> RejectCode:
    """The dead-letter code of a message whose write DynamoDB itself refused."""
    return RejectCode.COUNTER_OUT_OF_RANGE if refused.number_range else RejectCode.WRITE_REFUSED


class _ClaimRefused(Exception):
    """A journal claim DynamoDB refused as sent: the messages claimed before it, those left, and why."""

    def __init__(
        self, claimed: Sequence[MessageTotals], unclaimed: Sequence[MessageTotals], error: WriteRejectedError
    ) -> None:
        super().__init__(error.detail)
        self.claimed = list(claimed)
        self.unclaimed = list(unclaimed)
        self.error = error


@dataclass(frozen=True, slots=True)
class _PendingLanding:
    """A FENCED batch of this call whose item writes and DONE are still to be sent."""

    record: BatchRecord
    pages: Sequence[Totals]
    claimed: tuple[MessageTotals, ...]


class CommitProtocol:
    """The protocol for one apply call (one invocation): its steps, and what it learned on the way."""

    def __init__(
        self,
        store: CounterStore,
        journal: JournalStore,
        steps: Steps,
        fates: Fates,
        figures: Figures,
        *,
        now_ms: int,
        digests: Mapping[str, bytes],
        placements: Mapping[str, int] | None = None,
        max_actions: int,
        counter_limit: CounterLimit,
        new_batch_id: Callable[[], str],
        declarations: Declarations = NO_DECLARATIONS,
        write_planner: WritePlanner = plan_write,
        pool: Executor | None = None,
        epochs: BatchNumbers | None = None,
        fenced_counter_limit: CounterLimit | None = None,
        fence_horizon_ms: int = 0,
        fenced_planner: FencedPlanner = plan_fenced_apply,
        prune_rule: PruneRule = prunable,
        defer_landing: bool = False,
    ) -> None:
        self._store = store
        self._defer_landing = defer_landing
        """Keep a FENCED batch's item writes (its landing) pending until the next step of this call that reaches
        items or markers, which lands it first: what is pending when the caller's rounds end is landed by the
        caller (``land_pending``), beside work that needs only the messages' fates (the archive's write)."""
        self._pending: _PendingLanding | None = None
        self._plan_fenced = fenced_planner
        """Decides each item's fenced writes (``tally.core.fence.plan_fenced_apply``; a broken one in tests)."""
        self._prunable = prune_rule
        """Decides which other epochs' marks a write removes (``tally.core.fence.prunable``; a broken one in tests)."""
        self._epochs = epochs
        """The container's writer epoch: journal batches are fenced (``tally.core.fence``); None: applied by chunk
        transactions with applied-records."""
        self._fenced_limit = fenced_counter_limit if fenced_counter_limit is not None else counter_limit
        """The most counters of one fenced write of an item (its mark and prunes take room in the expression)."""
        self._fence_horizon_ms = fence_horizon_ms
        """How long after its ``done_at`` another epoch's mark may be pruned; 0: never prune."""
        self._declared = declarations
        """The deployment's declarations, which the write planner decides each direct transaction's write from."""
        self._plan_write = write_planner
        """Decides each direct transaction's write (``tally.core.write_planner.plan_write``; a broken one in tests)."""
        self._thresholds = declarations.thresholds
        """Declared levels: a refused crossing condition sends its write again from the values met (``_exact``)."""
        self._pool = pool
        """Threads for a round's key-disjoint direct transactions (``direct_all``); None: one at a time."""
        self._bounds = declarations.bounds
        """Declared floors and ceilings: only to name why a message a bound refused is dead-lettered."""
        self._journal = journal
        self._steps = steps
        self._fates = fates
        self._figures = figures
        self._now_ms = now_ms
        self._digests = digests
        """Message id -> the content digest of the message this call applies under it."""
        self._placements: Mapping[str, int] = placements or {}
        """Message id -> the receive time that placed its events without ``ts`` (``MessageTotals.placed_ms``)."""
        self._max_actions = max_actions
        self._counter_limit = counter_limit
        self._new_batch_id = new_batch_id
        self._replaces: dict[str, str] = {}
        """Messages whose marker names an aborted batch -> that batch (claimed by replacing the marker)."""
        self._resolutions: dict[str, Resolution] = {}
        """Batches already resolved in this call (a PENDING one is asked again)."""
        self._leases: dict[str, int] = {}
        """PREPARING batches met with a live lease -> their lease end (epoch ms)."""
        self._key_items: dict[ItemKey, ItemRead] = {}
        """Key items whose count of window moves and pointers this call has read, or had returned by a refusal: what
        one says of a window stays true while its count does, which every write planned from it is conditioned on,
        so the call's next write of the key reads no key item (``Seen.key_items``)."""
        self._knowing = threading.Lock()
        """A round's direct transactions are planned on the pool's threads too (``_key_items``)."""

    @property
    def landing(self) -> tuple[list[MessageTotals], Commit] | None:
        """The messages of the FENCED batch whose item writes are pending, and its commit; None if none is."""
        pending = self._pending
        if pending is None:
            return None
        return list(pending.claimed), Commit.of_marker(self._now_ms, pending.record.batch_id)

    def land_pending(self) -> None:
        """Land the pending FENCED batch, if any: its item writes, then DONE; its messages applied, or handed back
        (and the epoch ended: no later batch of it may reach an item before this one is DONE) if that must wait.
        Whatever stops it (a kill, an error), the epoch ends too."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            landed = self.finish(pending.record, pages=pending.pages, done=())
        except BaseException:
            self._end_epoch()
            raise
        if landed:
            self._fates.applied(pending.claimed, Commit.of_marker(self._now_ms, pending.record.batch_id))
        else:
            self._end_epoch()
            self._fates.failed(message.message_id for message in pending.claimed)

    @property
    def replaceable(self) -> dict[str, str]:
        """Messages whose marker names an aborted batch -> that batch: the planner sends them to a journal
        claim, or (a bounded one) to a direct transaction that replaces the marker (``Chunk.replaces``)."""
        return dict(self._replaces)

    # ----------------------------------------------------------------- 0. what the markers already say
    def without_existing(self, messages: Sequence[MessageTotals]) -> list[MessageTotals]:
        """Settle the messages that already have markers; the rest (and the replaceable) are to be written.

        The read is advice: the conditional marker writes still catch every duplicate, at the price of a
        cancelled transaction, so a read DynamoDB keeps throttling must not fail the batch.
        """
        self.land_pending()
        ids = [message.message_id for message in messages]
        try:
            existing = self._steps.read(partial(self._store.read_markers, ids))
        except RetryableStoreError:
            return list(messages)
        if not existing:
            return list(messages)
        claimable = self.settle_existing(
            MarkersExistError({mid: MarkerMet.of(marker) for mid, marker in existing.items()})
        )
        return [m for m in messages if m.message_id not in existing or m.message_id in claimable]

    # ----------------------------------------------------------------------- 1. direct transaction
    def direct(self, chunk: Chunk, *, predicted: bool = False, write: DirectWrite | None = None) -> list[MessageTotals]:
        """One direct transaction; returns the messages to plan again.

        ``predicted``: the chunk was grouped from the stored values a bound's refusal returned; if a bound
        refuses it all the same (the value moved meanwhile), its messages go one by one. ``write``: the chunk's
        write, already planned (else it is planned here).
        """
        self.land_pending()
        return self._settle_direct(chunk, self._write_direct(chunk, write), predicted=predicted)

    def direct_all(self, chunks: Sequence[Chunk]) -> list[MessageTotals]:
        """A round's direct transactions; returns the messages to plan again.

        When a pool is given, chunks that share no item (key, window, shard or marker item) are written
        concurrently, chunks that do (the parts of one split unit) one after the other in plan order
        (``item_disjoint_lanes``: on AWS two transactions in flight on one item conflict); their outcomes are
        then settled one by one in plan order, on this thread, exactly as ``direct`` settles them: only the
        waiting overlaps.
        Sequential still where order matters: a bounded counter's chunks (their worst-prefix order) and a
        reset or correction (its segment's order, ``tally.core.resets``).
        """
        self.land_pending()
        if (
            self._pool is None
            or len(chunks) < 2  # one transaction has nothing to overlap with
            or any(self._bounded(chunk) or any(m.is_operator for m in chunk.messages) for chunk in chunks)
        ):
            return [message for chunk in chunks for message in self.direct(chunk)]
        outcomes = self._write_concurrently(self._pool, chunks)
        return [
            message
            for chunk, outcome in zip(chunks, outcomes, strict=True)
            for message in self._settle_direct(chunk, outcome)
        ]

    def _write_concurrently(self, pool: Executor, chunks: Sequence[Chunk]) -> list[DirectOutcome]:
        """Each chunk's transaction on ``pool``; any other error is raised once none is left in flight.

        Such an error (a missing table, a denied permission, the invocation killed) fails the whole batch,
        as it does sequentially: the transactions that committed are settled by their markers on
        redelivery. Those not started yet are cancelled, those in flight are waited for, so that nothing
        of this batch is still writing when the error leaves.
        """
        lanes = item_disjoint_lanes(chunks)
        written = _each_on(pool, self._write_lane, [[chunks[index] for index in lane] for lane in lanes])
        outcomes: dict[int, DirectOutcome] = {}
        for lane, lane_outcomes in zip(lanes, written, strict=True):
            outcomes.update(zip(lane, lane_outcomes, strict=True))
        return [outcomes[index] for index in range(len(chunks))]

    def _write_lane(self, chunks: Sequence[Chunk]) -> list[DirectOutcome]:
        """Chunks that share items, one after the other (on one of the pool's threads)."""
        return [self._write_direct(chunk) for chunk in chunks]

    def _write_direct(self, chunk: Chunk, write: DirectWrite | None = None) -> DirectOutcome:
        """Plan and send one direct transaction (on any thread): what came of it, for ``_settle_direct``.

        Touches nothing of this protocol's state but the runner (whose figures are locked) and what it knows of key
        items (under its lock), so that concurrent calls are safe.
        """
        if not self._steps.may_start():
            return DirectStatus.NOT_STARTED
        try:
            planned = write if write is not None else self._planned(chunk)
            self._steps.write(partial(self._store.write, planned))
        except ConditionRefusedError as refused:
            self._remember({item: read for item, read in refused.found.items() if read is not None})
            return refused
        except (MarkersExistError, RetryableStoreError, WriteRejectedError) as outcome:
            return outcome
        return DirectStatus.COMMITTED

    def _remember(self, found: Mapping[ItemKey, ItemRead]) -> None:
        """Keep what reads and refusals said of key items' moves and pointers, for this call's next writes of them."""
        with self._knowing:
            self._key_items.update(found)

    def _planned(self, chunk: Chunk) -> DirectWrite:
        """The chunk's write, as the core decides it, after the reads it asks for (``ReadFirst``: strongly
        consistent, through the runner like any read; a read the runner gives up on raises its
        ``RetryableStoreError``)."""
        with self._knowing:
            seen = Seen(key_items=dict(self._key_items))
        for _ in range(MAX_READ_ROUNDS + 1):
            planned = self._plan_write(chunk, self._declared, seen, now_ms=self._now_ms)
            if isinstance(planned, DirectWrite):
                return planned
            found = self._steps.read(partial(self._store.read_items, planned.items))
            self._remember(found)
            seen = seen.with_read(found)
        raise StoreError(f"the write planner still asks for reads after {MAX_READ_ROUNDS}: {planned.items[:3]}")

    def _settle_direct(self, chunk: Chunk, outcome: DirectOutcome, *, predicted: bool = False) -> list[MessageTotals]:
        """Give the chunk's messages their fates from its transaction's outcome; returns those to plan again."""
        if isinstance(outcome, DirectStatus):
            settle = _SETTLE[outcome]
        else:
            settle = next(_SETTLE[kind] for kind in type(outcome).__mro__ if kind in _SETTLE)
        return settle(self, chunk, outcome, predicted)

    def _not_started(self, chunk: Chunk, _: DirectStatus, __: bool) -> list[MessageTotals]:
        self._fates.failed(chunk.message_ids)
        return []

    def _committed(self, chunk: Chunk, _: DirectStatus, __: bool) -> list[MessageTotals]:
        spill = chunk.spill
        if spill is None:
            self._fates.applied(chunk.messages, Commit.of_marker(self._now_ms, None))
            return []
        # Counted; the crossings its pages hold are recorded now, each once, or by whoever meets a marker next.
        # Its marker names the spill's batch: that batch is the commit a redelivery meeting it names too.
        record = BatchRecord(spill.batch_id, BatchState.COMMITTED, spill.lease_until_ms, len(spill.pages))
        if self.finish(record, pages=spill.pages, done=set()):
            self._fates.applied(chunk.messages, Commit.of_marker(self._now_ms, spill.batch_id))
        else:
            self._fates.failed(chunk.message_ids)
        return []

    def _markers_met(self, chunk: Chunk, exists: MarkersExistError, _: bool) -> list[MessageTotals]:
        if not exists.message_ids & set(chunk.message_ids):
            raise StoreError("markers reported for messages outside the transaction") from exists
        # A marker naming an aborted (or expired, now aborted) batch counts as absent: that message is
        # planned again, into a journal claim that replaces the marker.
        claimable = self.settle_existing(exists)
        rest = [m for m in chunk.messages if m.message_id not in exists.message_ids or m.message_id in claimable]
        if not self._bounded(chunk):
            return rest
        # A bounded counter's messages keep their order: planned again in a later round, the
        # rest would be applied after the chunks that follow this one. Write them now, in order.
        return [m for m in rest if m.message_id in claimable] + self._in_order(
            [m for m in rest if m.message_id not in claimable]
        )

    def _unknown(self, chunk: Chunk, _: RetryableStoreError, __: bool) -> list[MessageTotals]:
        self._fates.failed(chunk.message_ids)
        return []

    def _refused_as_sent(self, chunk: Chunk, refused: WriteRejectedError, _: bool) -> list[MessageTotals]:
        if len(chunk.messages) > 1:
            again: list[MessageTotals] = []
            for message in chunk.messages:
                (single,) = plan_transactions([message], self._max_actions, self._counter_limit).chunks
                again.extend(self.direct(single))
            return again
        self._refused_alone(chunk.messages[0], refused)
        return []

    def _condition_refused(self, chunk: Chunk, refused: ConditionRefusedError, predicted: bool) -> list[MessageTotals]:
        # A refused condition: a threshold's, or a bound's. An operator's message carries no bound's condition (it
        # is applied as given): its refusal is always a threshold's.
        met = counters_met(refused.found, self._declared.defaults)
        if self._thresholds.rules and (
            any(message.is_operator for message in chunk.messages) or bounds_hold(chunk.messages, met, self._bounds)
        ):
            return self._exact(chunk, refused.found)
        # A bounded counter would cross its floor or ceiling somewhere in the chunk's order:
        # nothing was applied. The messages that share keys with a refused item are applied in order: the
        # runs the stored values (ALL_OLD) let through together, each message predicted to cross alone,
        # each write with its own condition, so only a message that would cross is refused; the others
        # are written together again.
        if len(chunk.messages) > 1:
            in_order, others = split_refused(chunk.messages, met.keys())
            again = self._in_order(others)
            runs = [[m] for m in in_order] if predicted else runs_within_bounds(in_order, met, self._bounds)
            for run in runs:
                again.extend(self._in_order(run, predicted=True))
            return again
        self._refused_by_bound(chunk.messages[0], met)
        return []

    def _exact(self, chunk: Chunk, found: Mapping[ItemKey, ItemRead | None]) -> list[MessageTotals]:
        """A crossing condition failed (a step would cross a declared level, or the value moved since it was
        met): write the chunk again planned from exactly the values met, recording the crossings its steps make
        from there, in the same transaction (``tally.core.write_planner``)."""
        if chunk.attempt >= MAX_EXACT_ATTEMPTS:
            self._fates.failed(chunk.message_ids)
            return []
        self._figures.exact_writes += 1
        before = {**chunk.before, **found}
        return self._write_exact(replace(chunk, before=before, attempt=chunk.attempt + 1, spill=None))

    def _write_exact(self, chunk: Chunk) -> list[MessageTotals]:
        """Write a chunk planned from the values met (``chunk.before``) with the crossings its steps make from them.

        They go in its transaction when they fit beside its markers and writes (the planner counts them: the write
        is planned first, then sent as planned). When they do not, the messages go again, in order, in transactions
        leaving room for them: the first from the values met, each later one meeting its own value, as any write
        does. A single message whose crossings still do not fit records those beyond the room in the pages of a
        journal batch its marker names (``_spill``): it is never refused for how many levels it crosses.
        """
        if not self._steps.may_start():
            self._fates.failed(chunk.message_ids)
            return []
        try:
            write = self._planned(chunk)
        except RetryableStoreError:
            self._fates.failed(chunk.message_ids)
            return []
        found = write.crossings
        room = self._max_actions - (write.action_count - len(found))
        if len(found) <= room:
            return self.direct(chunk, write=write)
        if len(chunk.messages) == 1:
            return self._spill(chunk, write, max(room, 0))
        plan = plan_transactions(chunk.messages, max(2, self._max_actions - len(found)), self._counter_limit)
        parts = (
            [Chunk((m,), nonzero_increments(m.totals)) for m in chunk.messages] if plan.rejected else list(plan.chunks)
        )
        rest: list[MessageTotals] = []
        for index, part in enumerate(parts):
            replaces = {mid: batch for mid, batch in chunk.replaces.items() if mid in part.message_ids}
            if index == 0:
                rest.extend(
                    self._write_exact(replace(part, replaces=replaces, before=chunk.before, attempt=chunk.attempt))
                )
            else:
                rest.extend(self.direct(replace(part, replaces=replaces)))
        return rest

    def _spill(self, chunk: Chunk, write: DirectWrite, room: int) -> list[MessageTotals]:
        """Write one message with the crossings of its ``write`` beyond ``room`` recorded by a journal batch's pages,
        not its transaction.

        The pages and the batch's header (``COMMITTED``) first, then the transaction, whose marker names the batch:
        it commits the crossings with the counts that made them, all or nothing (``Spill``). Its outcome is
        settled as any direct transaction's (``_settle_direct``), the pages then applied once each (``finish``).
        """
        paged: Sequence[Crossing] = write.crossings[room:]
        spill = Spill(
            self._new_batch_id(),
            self._steps.lease_until_ms(),
            crossing_pages(paged, max_crossings=self._max_actions - 1),
        )
        try:
            self._steps.write(partial(self._journal.write_spill, spill.batch_id, spill.pages, spill.lease_until_ms))
        except RetryableStoreError:
            self._fates.failed(chunk.message_ids)
            return []
        except WriteRejectedError as refused:  # a page DynamoDB refuses as sent: settled as its transaction would be
            self._refused_alone(chunk.messages[0], refused)
            return []
        self._figures.spilled_crossings += sum(len(page.crossings) for page in spill.pages)
        # Planned again with the spill: its markers name the batch, and the crossings its pages hold are left out.
        return self.direct(replace(chunk, spill=spill))

    def _in_order(self, messages: Sequence[MessageTotals], *, predicted: bool = False) -> list[MessageTotals]:
        """Write ``messages`` now, in direct transactions in their order; returns the messages to plan again."""
        again: list[MessageTotals] = []
        for together in plan_transactions(messages, self._max_actions, self._counter_limit).chunks:
            again.extend(self.direct(together, predicted=predicted))
        return again

    def _bounded(self, chunk: Chunk) -> bool:
        bounds = self._bounds
        return bool(bounds.rules) and any(bounds.is_bounded(item) for m in chunk.messages for item in m.totals)

    def _refused_by_bound(self, message: MessageTotals, met: Mapping[ItemKey, Mapping[str, Decimal]]) -> None:
        # Its marker may exist (a redelivered copy of a message applied before, whose response was lost):
        # DynamoDB reports every failed condition, and a marker's wins (MarkersExistError), but look before
        # refusing all the same; a copy already counted is settled as such, never dead-lettered.
        try:
            marker = self._steps.read(partial(self._store.read_marker, message.message_id))
        except RetryableStoreError:
            self._fates.failed([message.message_id])
            return
        if marker is not None and marker.batch_id is None:
            self._settle_applied(message.message_id, marker.digest, marker.commit)
            return
        if marker is not None and marker.batch_id != self._replaces.get(message.message_id):
            # A journal marker on a bounded message other than the aborted one this write replaced (another
            # invocation claimed it meanwhile, before the bound was declared): the next delivery resolves it.
            self._fates.failed([message.message_id])
            return
        rejection = refusal(message.totals, met, self._bounds)
        if rejection is None:
            # The value moved between the condition and our reading of it (a concurrent batch): try again.
            self._fates.failed([message.message_id])
            return
        self._fates.dead_lettered(message.message_id, rejection)

    def _refused_alone(self, message: MessageTotals, refused: WriteRejectedError) -> None:
        # DynamoDB checks number ranges before conditions: a redelivered message that was applied before
        # can be refused for the range instead of being cancelled by its marker. Look before rejecting;
        # if the read never answers, only this message goes back to the source.
        try:
            marker = self._steps.read(partial(self._store.read_marker, message.message_id))
        except RetryableStoreError:
            self._fates.failed([message.message_id])  # cannot tell applied from refused yet: ask again later
            return
        if marker is not None:
            resolution = Resolution.APPLIED if marker.batch_id is None else self._resolve_or_pending(marker.batch_id)
            if resolution is Resolution.APPLIED:
                self._settle_applied(message.message_id, marker.digest, marker.commit)
                return
            if resolution is Resolution.PENDING:
                self._hold(message.message_id, marker.batch_id or "")
                return
        if refused.number_range and (bounded := [item for item in message.totals if self._bounds.is_bounded(item)]):
            # A step past its bound whose sums DynamoDB cannot store (a 36-digit step onto a seat, or onto its
            # unbounded windows): refused for the range before its condition is looked at. The bound is the rule
            # the deployment declared, so it is the reason given whenever the values met say it is crossed.
            try:
                found = self._steps.read(partial(self._store.read_items, bounded))
            except RetryableStoreError:
                self._fates.failed([message.message_id])
                return
            crossed = refusal(message.totals, counters_met(found, self._declared.defaults), self._bounds)
            if crossed is not None:
                self._fates.dead_lettered(message.message_id, crossed)
                return
        detail = f"DynamoDB refused the message's write: {refused.detail}"
        self._fates.dead_lettered(message.message_id, Rejection(refusal_code(refused), detail[:1000]))

    # -------------------------------------------------------------------------------- 2. journal
    def journal(self, unit: Sequence[MessageTotals], *, isolate: bool = False) -> list[MessageTotals]:
        """Apply one unit through a new journal batch; returns the messages to plan again."""
        self.land_pending()
        if not self._steps.may_start():
            self._fates.failed(message.message_id for message in unit)
            return []
        fenced = self._epochs.next_batch() if self._epochs is not None else None
        batch_id = fenced.batch_id if fenced is not None else self._new_batch_id()
        lease_until_ms = self._steps.lease_until_ms()
        self._figures.journal_batches += 1
        try:
            claimed = self._claim(batch_id, lease_until_ms, unit)
        except _ClaimRefused as refusal:
            return self._refused_claims(batch_id, refusal, isolate=isolate)
        if claimed is None:
            return []
        if not claimed:
            self._abort_own(batch_id)
            return []
        increments = unit_increments(claimed)
        chunks = plan_apply_chunks(increments, max_keys=self._max_actions - 2, counter_limit=self._counter_limit)
        if fenced is not None:
            try:
                return self._journal_fenced(fenced, lease_until_ms, claimed, chunks, isolate=isolate)
            except BaseException:
                # Whatever stopped it, the batch may be FENCED and not DONE: no later batch of the epoch may
                # reach an item before it is (tally.core.epochs).
                self._end_epoch()
                raise
        return self._journal_chunked(batch_id, lease_until_ms, claimed, chunks, isolate=isolate)

    def _journal_chunked(
        self,
        batch_id: str,
        lease_until_ms: int,
        claimed: Sequence[MessageTotals],
        chunks: Sequence[Totals],
        *,
        isolate: bool,
    ) -> list[MessageTotals]:
        """A claimed unit committed with its first chunk, then its other chunks each with an applied-record."""
        if len(chunks) > 1:
            # Only chunk 0 travels with the commit; a later chunk DynamoDB refuses could no longer be
            # undone. Check them against the stored values while we can still abort.
            settled = self._refused_before_commit(batch_id, claimed, chunks[1:], isolate=isolate)
            if settled is not None:
                return settled
        try:
            if len(chunks) <= 1:
                self._steps.write(partial(self._journal.commit_single, batch_id, chunks[0] if chunks else {}))
                self._fates.applied(claimed, Commit.of_marker(self._now_ms, batch_id))
                return []
            self._steps.write(partial(self._journal.write_pages, batch_id, chunks, lease_until_ms))
            self._steps.write(partial(self._journal.commit, batch_id, len(chunks), chunks[0], lease_until_ms))
        except (BatchStateError, RetryableStoreError):
            if not self._committed_after_all(batch_id, claimed):
                return []
        except WriteRejectedError as refused:
            # A counter would leave the Number range (or an action a size limit): nothing was committed.
            # Abort, then settle each message alone so that only the culprit is dead-lettered.
            return self._isolate(batch_id, claimed, {}, isolate=isolate, refused=refused)
        record = BatchRecord(batch_id, BatchState.COMMITTED, lease_until_ms, len(chunks))
        if self.finish(record, pages=chunks, done={0}):
            self._fates.applied(claimed, Commit.of_marker(self._now_ms, batch_id))
        else:
            self._fates.failed(message.message_id for message in claimed)
        return []

    def _journal_fenced(
        self,
        batch: FencedBatch,
        lease_until_ms: int,
        claimed: Sequence[MessageTotals],
        pages: Sequence[Totals],
        *,
        isolate: bool,
    ) -> list[MessageTotals]:
        """A claimed unit as a fenced batch: every item checked against its stored values, the pages, the header
        PREPARING -> FENCED alone, then each item's fenced writes and DONE (``finish``)."""
        batch_id = batch.batch_id
        settled = self._refused_before_commit(batch_id, claimed, pages, isolate=isolate) if pages else None
        if settled is not None:
            return settled
        try:
            if pages:
                self._steps.write(partial(self._journal.write_pages, batch_id, pages, lease_until_ms))
            self._steps.write(partial(self._journal.commit_header, batch_id, len(pages)))
        except (BatchStateError, RetryableStoreError):
            if not self._committed_after_all(batch_id, claimed):
                return []
        except WriteRejectedError as refused:
            return self._isolate(batch_id, claimed, {}, isolate=isolate, refused=refused)
        record = BatchRecord(batch_id, BatchState.FENCED, lease_until_ms, len(pages))
        if self._defer_landing:
            # Committed: its messages count whether or not its item writes land now (a finisher lands them).
            self._pending = _PendingLanding(record, pages, tuple(claimed))
            return []
        if self.finish(record, pages=pages, done=()):
            self._fates.applied(claimed, Commit.of_marker(self._now_ms, batch_id))
        else:
            self._end_epoch()
            self._fates.failed(message.message_id for message in claimed)
        return []

    def _refused_before_commit(
        self, batch_id: str, claimed: Sequence[MessageTotals], chunks: Sequence[Totals], *, isolate: bool
    ) -> list[MessageTotals] | None:
        """The read before the commit: None if DynamoDB will store every sum of ``chunks``; else the batch is aborted
        and its messages settled here (handed back when the read failed, the culprits isolated)."""
        try:
            unstorable = self._unstorable(chunks)
        except RetryableStoreError:
            self._abort_own(batch_id)
            self._fates.failed(message.message_id for message in claimed)
            return []
        if unstorable:
            return self._isolate(batch_id, claimed, unstorable, isolate=isolate)
        return None

    def _committed_after_all(self, batch_id: str, claimed: Sequence[MessageTotals]) -> bool:
        """After a commit whose outcome is unknown: True if the batch is committed (apply it); else its messages are
        settled here. Either the answer to our commit was lost (the retry then finds the header moved on), or our
        lease expired and someone aborted us, or DynamoDB kept throttling: look before deciding."""
        state = self._state(batch_id)
        if state is not None and state.committed:
            return True
        if state is BatchState.DONE:
            self._fates.applied(claimed, Commit.of_marker(self._now_ms, batch_id))
            return False
        if state is BatchState.PREPARING:
            self._abort_own(batch_id)
        self._fates.failed(message.message_id for message in claimed)
        return False

    def _end_epoch(self) -> None:
        if self._epochs is not None:
            self._epochs.end_epoch()

    def _claim(self, batch_id: str, lease_until_ms: int, unit: Sequence[MessageTotals]) -> list[MessageTotals] | None:
        """Claim what can be claimed for the batch; None if the batch was aborted under us."""
        by_id = {message.message_id: message for message in unit}
        # A block's messages next to each other, so that they are claimed by one action (tally.core.numbered_ids).
        first_seen: dict[str, int] = {}
        for message in unit:
            first_seen.setdefault(marker_item(message.message_id), len(first_seen))
        to_claim = sorted(by_id, key=lambda mid: first_seen[marker_item(mid)])
        claimed: list[MessageTotals] = []
        opened = False
        while to_claim:
            if not self._steps.may_start():
                self._fates.failed(to_claim)
                break
            claims = self._next_claims(to_claim)
            try:
                if opened:
                    self._steps.write(partial(self._journal.claim, batch_id, claims, self._now_ms))
                else:
                    self._steps.write(partial(self._journal.open, batch_id, lease_until_ms, claims, self._now_ms))
            except MarkersExistError as exists:
                # Markers naming our own batch come from our own attempt whose answer was lost.
                mine = [mid for mid, met in exists.markers.items() if met.batch_id == batch_id]
                opened = opened or bool(mine)
                claimed.extend(by_id[mid] for mid in mine)
                claimable = self.settle_existing(exists, own_batch=batch_id)
                to_claim = [mid for mid in to_claim if mid not in exists.message_ids or mid in claimable]
                continue
            except WriteRejectedError as refused:
                # DynamoDB refuses this claim as sent (a limit one of its messages breaks): none of it was written.
                unclaimed = [by_id[mid] for mid in to_claim]
                raise _ClaimRefused(claimed, unclaimed, refused) from refused
            except BatchStateError:
                if not opened and self._state(batch_id) is BatchState.PREPARING:
                    opened = True  # our header exists: an earlier attempt went through, its answer was lost
                    continue
                self._fates.failed(message.message_id for message in claimed)
                self._fates.failed(to_claim)
                return None
            except RetryableStoreError:
                # The last attempt's outcome is unknown: its claims may have committed, naming this batch.
                # Committing the rest would then mark them applied without their deltas, and
                # re-reading them cannot rule out a claim still in flight. Abort instead: markers
                # of an aborted batch count as absent, and a late claim fails on the header check.
                self._abort_own(batch_id)
                self._fates.failed(message.message_id for message in claimed)
                self._fates.failed(to_claim)
                return None
            opened = True
            done = {claim.message_id for claim in claims}
            claimed.extend(by_id[mid] for mid in to_claim if mid in done)
            to_claim = [mid for mid in to_claim if mid not in done]
        return claimed if opened else []

    def _refused_claims(self, batch_id: str, refusal: _ClaimRefused, *, isolate: bool) -> list[MessageTotals]:
        """A claim DynamoDB refuses for good: abort our batch, then claim each message alone, so that only the one
        whose own claim is refused is dead-lettered (its marker read first, as any refused message's)."""
        self._abort_own(batch_id)
        for message in refusal.claimed:
            self._replaces[message.message_id] = batch_id  # our aborted claim's marker: claimed again, replacing it
        pending = [*refusal.claimed, *refusal.unclaimed]
        if isolate or len(pending) == 1:
            for message in pending:
                self._refused_alone(message, refusal.error)
            return []
        return [again for message in pending for again in self.journal([message], isolate=True)]

    def _next_claims(self, to_claim: Sequence[str]) -> list[Claim]:
        """As many claims as fit one transaction besides the header action: one action per marker item (a
        block's claims share one), and one more per replacing claim (its aborted batch's check)."""
        claims: list[Claim] = []
        items: set[str] = set()
        actions = 1
        for message_id in to_claim:
            replaces = self._replaces.get(message_id)
            item = marker_item(message_id)
            cost = (item not in items) + (replaces is not None)
            if actions + cost > self._max_actions:
                break
            claims.append(
                Claim(message_id, replaces, self._digests.get(message_id, b""), self._placements.get(message_id))
            )
            items.add(item)
            actions += cost
        return claims

    def _unstorable(self, chunks: Sequence[Totals]) -> dict[ItemKey, str]:
        """The items whose stored value plus this batch's increment DynamoDB would refuse, with why.

        A consistent read just before the commit; the sums are exact (``numbers.add``). The docs
        (docs/journal.md, "A later chunk DynamoDB would refuse") give the exactness argument and its limit.
        """
        # An item whose counters need more than one ADD spans chunks (its counter names split between them).
        increments = merge_totals(chunks)
        stored = self._steps.read(partial(self._journal.read_counters, list(increments)))
        return unstorable_sums(stored, increments)

    def finish(
        self, record: BatchRecord, pages: Sequence[JournalPage] | None, *, done: Collection[int] | None = None
    ) -> bool:
        """Apply every chunk of a committed batch not applied yet (each item of a FENCED one), then mark it DONE.

        ``pages`` and ``done`` (the chunks applied already), when the caller knows them; else they are read.
        False if that must wait (out of time, or DynamoDB kept throttling): whoever meets the batch's
        markers next finishes it. The header's state says how, whatever this container's own batches take.
        """
        if record.state is BatchState.FENCED:
            fenced = FencedBatch.parse(record.batch_id)
            if fenced is None:
                raise StoreError(f"batch {record.batch_id} is FENCED, and its id names no writer epoch")
            return self._finish_fenced(record, fenced, pages)
        if pages is None or done is None:
            try:
                stored_pages, done = self._steps.read(
                    partial(self._journal.read_progress, record.batch_id, record.chunks)
                )
            except RetryableStoreError:
                return False  # committed batches are finished by whoever meets their markers next
            pages = pages if pages is not None else stored_pages
        for index, page in enumerate(pages):
            if index in done:
                continue
            if not self._steps.may_start():
                return False
            try:
                self._steps.write(partial(self._journal.add_chunk, record.batch_id, index, page, record.lease_until_ms))
            except ChunkAppliedError:
                continue
            except WriteRejectedError as refused:
                # Committed increments DynamoDB refuses (a counter would leave the Number range) cannot be
                # un-committed; they are recorded on the chunk, alarmed, and the batch can finish.
                self._figures.refused_chunks += 1
                try:
                    self._steps.write(
                        partial(
                            self._journal.refuse_chunk, record.batch_id, index, refused.detail, record.lease_until_ms
                        )
                    )
                except ChunkAppliedError:
                    continue
            except RetryableStoreError:
                return False
        try:
            self._steps.write(partial(self._journal.finish, record.batch_id))
        except RetryableStoreError:
            return False
        return True

    def _finish_fenced(self, record: BatchRecord, batch: FencedBatch, pages: Sequence[JournalPage] | None) -> bool:
        """Each item's fenced writes of a FENCED batch, with the batch's own epoch and sequence whoever sends
        them (a write on an item that has it already is refused as applied), then DONE. A finisher (the pages
        not known: read here) sends only the parts the items' marks do not show on them already."""
        finisher = pages is None
        if pages is None:
            try:
                pages, _ = self._steps.read(partial(self._journal.read_progress, record.batch_id, record.chunks))
            except RetryableStoreError:
                return False  # committed batches are finished by whoever meets their markers next
        increments = merge_totals(page for page in pages if not isinstance(page, CrossingPage))
        prune = self._prunes(batch, increments) if self._epochs is not None else {}
        plans = self._plan_fenced(
            increments, batch, defaults=self._declared.defaults, counter_limit=self._fenced_limit, prune=prune
        )
        if finisher:
            plans = self._missing(plans, batch)
        if self._pool is not None and len(plans) > 1:
            # Items are independent: each item's parts in order, the items at once.
            finished = all(_each_on(self._pool, self._apply_item, plans))
        else:
            finished = all(self._apply_item(writes) for writes in plans)
        if not finished:
            return False
        try:
            self._steps.write(partial(self._journal.mark_done, record.batch_id, self._now_ms))
        except RetryableStoreError:
            return False
        return True

    def _missing(
        self, plans: tuple[tuple[FencedWrite, ...], ...], batch: FencedBatch
    ) -> tuple[tuple[FencedWrite, ...], ...]:
        """The parts of ``plans`` the items' marks, read (eventually consistent), do not show applied; all of them
        when the read fails (it only saves requests: each write's condition is the guard)."""
        items = [writes[0].item for writes in plans if writes]
        if not items:
            return plans
        try:
            # Eventually consistent is enough: no mark of a batch still FENCED is pruned, and the batch's epoch
            # writes no later batch before it is DONE, so a mark read, however stale, was set by a part applied.
            marks = self._steps.read(partial(self._journal.read_marks, items, batch.epoch))
        except RetryableStoreError:
            return plans
        return still_to_send(plans, marks)

    def _prunes(self, batch: FencedBatch, increments: Totals) -> dict[ItemKey, dict[str, int]]:
        """Other epochs' marks the owner's writes of ``batch`` may remove, from what the container saw of the items'
        marks and of those epochs' headers (a few read here, in one request: a header found DONE or gone is final);
        a finisher prunes nothing."""
        epochs = self._epochs
        if epochs is None or self._fence_horizon_ms <= 0 or batch.epoch != epochs.current:
            return {}
        fences = {item: epochs.marks_of(item) for item in increments}
        fences = {item: fence for item, fence in fences.items() if any(epoch != batch.epoch for epoch in fence)}
        seen = epochs.headers_seen()
        wanted = dict.fromkeys(b for fence in fences.values() for b in batches_to_look_up(fence, batch.epoch, seen))
        if wanted:
            # One strongly consistent BatchGetItem for all of them: the same read units as a GetItem each, and one
            # round trip where a batch meeting many live epochs on hot keys waited for one per epoch in turn.
            looked_up = list(wanted)[:MAX_HEADER_READS_PER_BATCH]
            try:
                records = self._steps.read(partial(self._journal.read_headers, [b.batch_id for b in looked_up]))
            except RetryableStoreError:
                records = {}
            for other in looked_up:
                if other.batch_id not in records:
                    continue  # not read (the read failed): nothing learnt
                record = records[other.batch_id]
                if record is None:
                    # Gone: counted from no earlier than this read (the lease's end is past it).
                    epochs.remember_header(other, HeaderSeen(None, self._steps.lease_until_ms(), consistent=True))
                elif record.state is BatchState.DONE:
                    epochs.remember_header(other, HeaderSeen(record.state, self._now_ms, record.done_at_ms))
            seen = epochs.headers_seen()
        prune: dict[ItemKey, dict[str, int]] = {}
        for item, fence in fences.items():
            due = self._prunable(fence, batch.epoch, seen, self._now_ms, self._fence_horizon_ms)
            if due:
                prune[item] = due
        return prune

    def _apply_item(self, writes: Sequence[FencedWrite]) -> bool:
        """One item's parts of a fenced batch, in order, each sent until it is on the item; False if that must
        wait (out of time, DynamoDB kept throttling, an answer that says a part is missing)."""
        for planned in writes:
            write = planned
            while True:
                if not self._steps.may_start():
                    return False
                try:
                    answer = self._steps.write(partial(self._journal.apply_fenced, write))
                except WriteRejectedError:
                    # Committed increments DynamoDB refuses (a sum past the Number range, which the pre-commit read
                    # missed: a race it cannot close) cannot be un-committed: counted, alarmed, the batch finishes.
                    self._figures.refused_chunks += 1
                    return True  # the item's later parts follow this one's mark: none can land
                except RetryableStoreError:
                    return False
                if self._epochs is not None:
                    self._epochs.remember_marks(write.item, answer.fence)
                if answer.committed:
                    break
                why = fence_refusal(write, answer.fence)
                if why is Refusal.APPLIED:
                    break
                if why is Refusal.OUT_OF_ORDER:
                    return False
                write = without_prune(write)
        return True

    def _isolate(
        self,
        batch_id: str,
        claimed: Sequence[MessageTotals],
        culprits: Mapping[ItemKey, str],
        *,
        isolate: bool,
        refused: WriteRejectedError | None = None,
    ) -> list[MessageTotals]:
        """Abort our uncommitted batch, then count what can be counted and reject only the culprits.

        ``culprits`` names the items DynamoDB would refuse (empty when it did not say which: every message
        is then a suspect). Messages that touch none of them are claimed again together; each suspect is
        claimed alone, so that a message is rejected only when its own increment cannot be stored.
        """
        self._abort_own(batch_id)
        for message in claimed:
            self._replaces[message.message_id] = batch_id
        if isolate or len(claimed) == 1:
            reasons = [culprits[item] for message in claimed for item in message.totals if item in culprits]
            self._reject(claimed, "; ".join(reasons[:3]) or None, refused)
            return []
        suspects = [m for m in claimed if not culprits or any(item in culprits for item in m.totals)]
        innocent = [m for m in claimed if m not in suspects]
        again = self.journal(innocent) if innocent else []
        return again + [retry for message in suspects for retry in self.journal([message], isolate=True)]

    def _reject(
        self, messages: Sequence[MessageTotals], detail: str | None, refused: WriteRejectedError | None
    ) -> None:
        """Dead-letter ``messages``: DynamoDB refused (or would refuse) their increments."""
        code = RejectCode.COUNTER_OUT_OF_RANGE if refused is None else refusal_code(refused)
        if detail is None and refused is not None and not refused.number_range:
            detail = refused.detail
        reason = f"DynamoDB refused the increment: {detail or 'a counter would leave the Number range'}"
        for message in messages:
            self._fates.dead_lettered(message.message_id, Rejection(code, reason[:1000]))

    def _abort_own(self, batch_id: str) -> None:
        # If this fails, the lease will expire and anyone may abort the batch then.
        with contextlib.suppress(RetryableStoreError):
            self._steps.write(partial(self._journal.abort, batch_id, self._now_ms, expired_only=False))

    def _state(self, batch_id: str) -> BatchState | None:
        try:
            record = self._steps.read(partial(self._journal.read, batch_id))
        except RetryableStoreError as exc:
            raise StoreError(f"cannot learn the state of batch {batch_id}") from exc
        return record.state if record is not None else None

    # ---------------------------------------------------------------------- 3. another batch's marker
    def settle_existing(self, exists: MarkersExistError, own_batch: str | None = None) -> set[str]:
        """Settle messages whose markers exist; returns those that are (now) claimable again."""
        self._figures.markers_met += len(exists.message_ids)
        claimable: set[str] = set()
        for message_id in exists.message_ids:
            if message_id in exists.vanished:
                self._vanished(message_id, claimable)
                continue
            met = exists.markers[message_id]
            batch_id, commit = met.batch_id, met.commit
            if batch_id is None:
                self._settle_applied(message_id, met.digest, commit)
                continue
            if batch_id == own_batch:
                continue  # our own claim, from an attempt whose response was lost: the caller keeps it
            resolution = self._resolve_or_pending(batch_id)
            if resolution is Resolution.APPLIED:
                self._settle_applied(message_id, met.digest, commit)
            elif resolution is Resolution.PENDING:
                self._hold(message_id, batch_id)
            else:
                self._replaces[message_id] = batch_id
                claimable.add(message_id)
        return claimable

    def _vanished(self, message_id: str, claimable: set[str]) -> None:
        """A claim found no marker where it replaced one: TTL deleted it since it was read. A marker gone is a
        marker absent (as a header gone is, ``_expired``): the message is claimed again, as a new one."""
        if self._replaces.pop(message_id, None) is not None:
            claimable.add(message_id)
            return
        # Only a claim replacing a marker can fail for want of one (DynamoDB returns the marker that stands in
        # the way of any other): never guess that such a message was applied; it goes back to the source.
        self._fates.failed([message_id])

    def _settle_applied(self, message_id: str, counted: bytes | None, commit: Commit | None) -> None:
        """A marker (of ``commit``) says the id was applied with content ``counted``: a duplicate, or an id
        conflict."""
        conflict = content_conflict(counted, self._digests.get(message_id), where="its marker")
        if conflict is None:
            self._fates.already_applied(message_id, commit)
        else:
            self._fates.dead_lettered(message_id, conflict)

    def _hold(self, message_id: str, batch_id: str) -> None:
        """``message_id`` goes back to the source, unsettled; with the batch if a live lease holds it."""
        lease_until_ms = self._leases.get(batch_id)
        if lease_until_ms is None:
            self._fates.failed([message_id])
        else:
            self._fates.held(message_id, batch_id, lease_until_ms)

    def _resolve_or_pending(self, batch_id: str) -> Resolution:
        """``resolve``, but a journal that stays throttled through every retry settles the message later.

        PENDING hands only the messages whose markers name ``batch_id`` back to the source; the rest of
        the batch goes on. Their redelivery meets the same markers and resolves them then.
        """
        try:
            return self.resolve(batch_id)
        except RetryableStoreError:
            return Resolution.PENDING

    def _expired(self, batch_id: str) -> Resolution:
        """A marker naming ``batch_id``, whose header TTL has deleted: past its horizon, it counts as absent."""
        self._resolutions[batch_id] = Resolution.REPLACEABLE
        return Resolution.REPLACEABLE

    def resolve(self, batch_id: str) -> Resolution:
        """What a marker naming ``batch_id`` means now; finishes a committed batch on the way."""
        known = self._resolutions.get(batch_id)
        if known is not None:
            return known
        record = self._steps.read(partial(self._journal.read, batch_id))
        if record is None:
            # Journal items outlive every marker of their batch by a day (TTL rule), so a header is gone only
            # once the marker met is past its own horizon: a seq whose block item later writes kept alive,
            # met by a message without ``ts`` redriven past the horizon or by an id reused with a fresh one.
            # Such a marker counts as absent, as a marker item TTL deleted would: the message is claimed
            # again, replacing it (the claim checks that the header is still gone, or aborted).
            return self._expired(batch_id)
        state = record.state
        if state is BatchState.PREPARING and record.lease_until_ms < self._now_ms:
            if self._steps.write(partial(self._journal.abort, batch_id, self._now_ms, expired_only=True)):
                state = BatchState.ABORTED
            else:  # it moved on meanwhile (committed, or aborted by someone else, or TTL deleted it): look again
                record = self._steps.read(partial(self._journal.read, batch_id))
                if record is None:
                    return self._expired(batch_id)
                state = record.state
        if state is BatchState.ABORTED:
            resolution = Resolution.REPLACEABLE
        elif state is BatchState.DONE:
            resolution = Resolution.APPLIED
        elif state.committed:
            resolution = Resolution.APPLIED if self.finish(record, pages=None) else Resolution.PENDING
        else:
            resolution = Resolution.PENDING  # another invocation's batch, lease live: it decides first
            self._leases[batch_id] = record.lease_until_ms
        if resolution is not Resolution.PENDING:
            self._resolutions[batch_id] = resolution
        return resolution


def _each_on(pool: Executor, work: Callable[[_Job], _Done], jobs: Sequence[_Job]) -> list[_Done]:
    """``work`` on each of ``jobs`` on ``pool``, the results in order. When one raises, the jobs not started are
    cancelled and the running ones waited for before the first error is raised: nothing of the batch is still
    writing when the error leaves. Lambda freezes the environment once the invocation has answered, and a write
    thawed with a later invocation would land long past its own invocation's deadline, which the fenced apply's
    prune horizon (and the lease) say no write of this invocation outlives."""
    futures = [pool.submit(work, job) for job in jobs]
    _, pending = wait(futures, return_when=FIRST_EXCEPTION)
    if pending:  # an error came out of a job: start no more
        for future in pending:
            future.cancel()
        wait(pending)
    for future in futures:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise error
    return [future.result() for future in futures]


_Settle: TypeAlias = "Callable[[CommitProtocol, Chunk, Any, bool], list[MessageTotals]]"

_SETTLE: dict[object, _Settle] = {
    DirectStatus.COMMITTED: CommitProtocol._committed,
    DirectStatus.NOT_STARTED: CommitProtocol._not_started,
    MarkersExistError: CommitProtocol._markers_met,
    RetryableStoreError: CommitProtocol._unknown,
    WriteRejectedError: CommitProtocol._refused_as_sent,
    ConditionRefusedError: CommitProtocol._condition_refused,
}
"""What each outcome of a direct transaction means for its messages (``_settle_direct``), by status or error type."""
