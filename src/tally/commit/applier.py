"""Apply a batch's distinct messages to the store, exactly once, by the cheapest safe path.

``Applier`` is what the pipeline calls, once per invocation. It owns two choices and nothing else:
whether to read the batch's markers first (``MarkerReadGate``), and which path each message takes
(``plan_batch``, pure: units whose keys no other unit touches; a small unit is written in a **direct
transaction**, a large one through the **commit journal**), in rounds: a round either settles messages
or learns that some markers name aborted batches, which sends those messages to a journal claim in the
next round; three rounds settle any batch.

Each step, and what its outcome means for each message, is the protocol's (``tally.commit.protocol``,
beside docs/journal.md); how a step is retried under the invocation's deadline is
``tally.commit.retrying``'s; each message's fate and the figures are recorded in ``tally.commit.fates``,
and the outcome is built from that record only. This module must not call the store, retry, or give a
message a fate itself, except the one the planner decides (a message no transaction can hold is
dead-lettered) and handing back what is still unsettled after the last round.

A batch holding resets or corrections (``tally.core.resets``) is committed in segments, in source order,
each operator message alone; when a segment leaves a message unsettled, every later message is handed back
with it (so a reset never commits before an earlier message of its source), and an operator message that
only a journal claim could write is dead-lettered (the journal's chunks hold increments, never a reset).
"""

from __future__ import annotations

import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

from tally.commit.fates import ApplyOutcome, Fates, Figures, Stall
from tally.commit.marker_reads import MarkerReadGate
from tally.commit.protocol import CommitProtocol
from tally.commit.retrying import DEFAULT_RETRY_POLICY, RetryingSteps, RetryPolicy
from tally.core.declarations import NO_DECLARATIONS, Declarations
from tally.core.epochs import FencedBatch, WriterEpoch
from tally.core.fence import MAX_PRUNES_PER_WRITE, fence_horizon_ms, plan_fenced_apply, prunable
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.model import RejectCode, Rejection
from tally.core.plan import plan_batch
from tally.core.resets import commit_segments
from tally.core.write_planner import plan_write
from tally.store.expressions import counter_limit_for, counters_per_add
from tally.store.pages import page_bytes

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tally.commit.ports import CounterStore, JournalStore
    from tally.core.aggregate import MessageTotals
    from tally.core.fence import FencedPlanner, HeaderSeen, PruneRule
    from tally.core.items import ItemKey
    from tally.core.plan import CounterLimit
    from tally.core.write_planner import WritePlanner

__all__ = ["Applier", "ApplyOutcome", "Committed", "RetryPolicy", "Stall"]

ROUNDS = 3
"""Direct or journal, then (markers of aborted batches met) a journal claim replacing them, then a last try."""
OPERATOR_ID_TAKEN = Rejection(
    RejectCode.ID_CONFLICT,
    "a reset or correction under an id whose marker names an aborted journal batch (the id was used for "
    "another message): send the operator's message again under a new id",
)
"""Why an operator message is refused when only a journal claim could replace its id's marker."""


UNFENCED_BATCH_ID_BYTES: Final = 11
"""Random bytes of a journal batch id applied by chunks (22 hex characters; a fenced batch's is 24, its epoch and
sequence: ``tally.core.epochs``, which no 22-character id can be taken for). A block of numbered ids names the batch
on each of its 16 claims: at 22 characters its worst case, every claim with a digest and a placing time, is 965
bytes, under the 1 KB a write is billed by (``tally.core.numbered_ids.BLOCK_SEQS``; uuid4's 32 made it 1,125 once
markers kept placing times). 88 random bits: among a billion batches alive at once, two share an id with a
chance of 1.6 x 10^-9."""


def unfenced_batch_id() -> str:
    """A new journal batch id for a batch applied by chunks (``UNFENCED_BATCH_ID_BYTES``)."""
    return secrets.token_hex(UNFENCED_BATCH_ID_BYTES)


LAMBDA_MAX_TIMEOUT_HORIZON_MS: Final = fence_horizon_ms(900, 60_000)
"""The prune horizon for Lambda's longest timeout (15 minutes) and a minute of clock margin: 31 minutes."""


class WriterEpochs:
    """A container's writer epoch (``tally.core.epochs``): drawn at its first journal batch, never at init, so that
    execution environments cloned from one snapshot never share it; ended when one of its batches is left
    unfinished."""

    def __init__(self, random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> None:
        self._random_bytes = random_bytes
        self._epoch = WriterEpoch()
        self._lock = threading.Lock()
        self._marks: dict[ItemKey, Mapping[str, int]] = {}
        """Item -> its marks as the container's last write of it returned them (at most ``REMEMBERED`` items)."""
        self._headers: dict[FencedBatch, HeaderSeen] = {}
        """Other epochs' batches found DONE or gone (final: read once per container)."""

    @property
    def current(self) -> str | None:
        """The epoch id, None before the first batch or after an epoch ended."""
        return self._epoch.epoch

    def next_batch(self) -> FencedBatch:
        with self._lock:
            self._epoch, batch = self._epoch.next_batch(self._random_bytes)
            return batch

    def end_epoch(self) -> None:
        with self._lock:
            self._epoch = self._epoch.ended()

    def marks_of(self, item: ItemKey) -> Mapping[str, int]:
        with self._lock:
            return self._marks.get(item, {})

    def remember_marks(self, item: ItemKey, fence: Mapping[str, int]) -> None:
        with self._lock:
            self._marks.pop(item, None)
            self._marks[item] = dict(fence)
            while len(self._marks) > REMEMBERED:
                del self._marks[next(iter(self._marks))]

    def headers_seen(self) -> Mapping[FencedBatch, HeaderSeen]:
        with self._lock:
            return dict(self._headers)

    def remember_header(self, batch: FencedBatch, seen: HeaderSeen) -> None:
        with self._lock:
            self._headers[batch] = seen
            while len(self._headers) > REMEMBERED:
                del self._headers[next(iter(self._headers))]


REMEMBERED: Final = 10_000
"""Items (and headers) whose marks a container remembers: the oldest are forgotten (their marks wait for a later
write to be learnt again)."""


class Applier:
    """Applies a batch's distinct messages through the direct path and the commit journal."""

    def __init__(
        self,
        store: CounterStore,
        journal: JournalStore,
        *,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        sleep: Callable[[float], None] = time.sleep,
        max_actions: int = TRANSACT_MAX_ACTIONS,
        new_batch_id: Callable[[], str] = unfenced_batch_id,
        use_journal: bool = True,
        marker_read_gate: MarkerReadGate | None = None,
        counter_limit: CounterLimit = counters_per_add,
        declarations: Declarations = NO_DECLARATIONS,
        write_planner: WritePlanner = plan_write,
        write_concurrency: int = 1,
        fenced: bool = False,
        random_bytes: Callable[[int], bytes] = secrets.token_bytes,
        fence_horizon: int = LAMBDA_MAX_TIMEOUT_HORIZON_MS,
        fenced_planner: FencedPlanner = plan_fenced_apply,
        prune_rule: PruneRule = prunable,
    ) -> None:
        self.store = store
        self.fenced_planner = fenced_planner
        """Decides each item's fenced writes (``tally.core.fence.plan_fenced_apply``); the chaos run's broken variants
        pass another."""
        self.prune_rule = prune_rule
        """Decides which other epochs' marks a fenced write removes (``tally.core.fence.prunable``); the chaos run's
        broken variants pass another."""
        self.epochs = WriterEpochs(random_bytes) if fenced else None
        """The container's writer epoch when journal batches are fenced (``tally.core.fence``: each item one plain
        conditional write); None: each apply chunk a transaction with its applied-record."""
        self.fence_horizon_ms = fence_horizon
        """How long after its ``done_at`` another epoch's mark may be pruned (``tally.core.fence.fence_horizon_ms``;
        the default holds for any function timeout Lambda allows)."""
        fenced_limit = counter_limit_for(declarations.defaults, fenced_prunes=MAX_PRUNES_PER_WRITE)
        self.fenced_counter_limit: CounterLimit = lambda item: min(counter_limit(item), fenced_limit(item))
        """The most counters of one fenced write of an item: its mark and the marks it removes take room too."""
        self.journal = journal
        self.policy = policy
        """How a store call that fails for now is retried within the invocation, and the time kept for reporting;
        the post-commit steps' requests go by it too (``tally.post_commit.step.attempt_within``)."""
        self.sleep = sleep
        self.max_actions = max_actions
        self.new_batch_id = new_batch_id
        self.use_journal = use_journal
        """False: direct transactions only (the chunked path, kept for comparison in benchmarks)."""
        self.marker_read_gate = marker_read_gate if marker_read_gate is not None else MarkerReadGate()
        """Whether to read the batch's markers first, so duplicates do not cancel whole transactions
        (``MarkerReadGate(quiet_batches=0)`` never reads: the cancellation path, for tests)."""
        self.counter_limit = counter_limit
        """The most counters one ADD on an item may carry (DynamoDB's 4 KB expression limit)."""
        self.declarations = declarations
        """The deployment's declarations (``tally.core.declarations``): units that touch a bounded or thresholded
        counter stay off the journal (their writes carry conditions; a crossing is recorded in the transaction that
        commits it), and each direct transaction's write is planned from them (``write_planner``)."""
        self.write_planner = write_planner
        """Decides each direct transaction's write (``tally.core.write_planner.plan_write``); the chaos run's broken
        variants pass another."""
        self.write_concurrency = write_concurrency
        """How many of a round's key-disjoint direct transactions may be in flight at once (1: one at a time,
        the default here; the handlers take ``TALLY_WRITE_CONCURRENCY``, ``tally.config``)."""
        self._pool = (
            ThreadPoolExecutor(max_workers=write_concurrency, thread_name_prefix="tally-write")
            if write_concurrency > 1
            else None
        )
        """Built once per container and kept warm between invocations, like the boto3 client."""

    def prunable_marks(self, fence: Mapping[str, int], now_ms: int) -> dict[str, int]:
        """Other epochs' marks (epoch -> value) any write of an item carrying ``fence`` may remove now, from the
        headers this container has read (``tally.core.fence.prunable``): what a window move takes with it."""
        if self.epochs is None or self.fence_horizon_ms <= 0:
            return {}
        return self.prune_rule(fence, self.epochs.current, self.epochs.headers_seen(), now_ms, self.fence_horizon_ms)

    def apply(self, messages: Sequence[MessageTotals], now_ms: int, remaining_ms: Callable[[], int]) -> ApplyOutcome:
        """Apply every message once; ``remaining_ms`` reports the invocation's time left."""
        return self._apply(messages, now_ms, remaining_ms, defer_landing=False).land()

    def commit(self, messages: Sequence[MessageTotals], now_ms: int, remaining_ms: Callable[[], int]) -> Committed:
        """Apply every message once, except the item writes of the call's last FENCED batch, which the caller
        lands (``Committed.land``) beside what needs only the fates (``Committed.counted``)."""
        return self._apply(messages, now_ms, remaining_ms, defer_landing=True)

    def _apply(
        self, messages: Sequence[MessageTotals], now_ms: int, remaining_ms: Callable[[], int], *, defer_landing: bool
    ) -> Committed:
        fates = Fates(message.message_id for message in messages)
        figures = Figures()
        protocol = CommitProtocol(
            self.store,
            self.journal,
            RetryingSteps(self.policy, now_ms, remaining_ms, figures, self.sleep),
            fates,
            figures,
            now_ms=now_ms,
            digests={message.message_id: message.digest for message in messages},
            placements={message.message_id: message.placed_ms for message in messages if message.placed_ms is not None},
            max_actions=self.max_actions,
            counter_limit=self.counter_limit,
            new_batch_id=self.new_batch_id,
            declarations=self.declarations,
            write_planner=self.write_planner,
            pool=self._pool,
            epochs=self.epochs,
            fenced_counter_limit=self.fenced_counter_limit,
            fence_horizon_ms=self.fence_horizon_ms,
            fenced_planner=self.fenced_planner,
            prune_rule=self.prune_rule,
            # Resets do not commute with sums: a segment must be settled, landing included, before the next.
            defer_landing=defer_landing and not any(message.is_operator for message in messages),
        )
        pending = list(messages)
        if pending and self.marker_read_gate.is_open:
            figures.marker_reads += 1
            pending = protocol.without_existing(pending)
        if not any(message.is_operator for message in messages):
            self._rounds(protocol, fates, pending)
        else:
            # Resets do not commute with sums: commit in source order, one operator message at a time. The
            # segments are cut from the whole batch, so a message the marker read already handed back (held
            # by another batch's lease) holds back what follows it too.
            to_write = {message.message_id for message in pending}
            segments = commit_segments(messages)
            for index, segment in enumerate(segments):
                self._rounds(protocol, fates, [message for message in segment if message.message_id in to_write])
                if fates.any_failed(message.message_id for message in segment):
                    # Handed back: what follows it in the source must not commit before it (tally.core.resets).
                    later = (message.message_id for rest in segments[index + 1 :] for message in rest)
                    fates.failed(fates.without_fate(later))
                    break
        self.marker_read_gate.observe(met_existing_markers=figures.markers_met > 0)
        return Committed(protocol, fates, figures)

    def _rounds(self, protocol: CommitProtocol, fates: Fates, pending: list[MessageTotals]) -> None:
        """Settle ``pending`` in up to ``ROUNDS`` rounds; what is still unsettled after them is handed back."""
        for _ in range(ROUNDS):
            if not pending:
                break
            plan = plan_batch(
                pending,
                self.max_actions,
                protocol.replaceable,
                allow_journal=self.use_journal,
                counter_limit=self.counter_limit,
                bounded=self.declarations.conditioned(),
                fenced_apply=self.epochs is not None,
                page_bytes=page_bytes,
            )
            for message_id, rejection in plan.rejected.items():
                fates.dead_lettered(message_id, rejection)
            again: list[MessageTotals] = protocol.direct_all(plan.direct)
            for unit in plan.journals:
                operators = [message for message in unit if message.is_operator]
                for message in operators:
                    # Only a journal claim could replace its marker (an aborted batch's, under this id),
                    # and the journal's chunks hold increments only: never half-apply a reset.
                    fates.dead_lettered(message.message_id, OPERATOR_ID_TAKEN)
                rest = [message for message in unit if not message.is_operator]
                if rest:
                    again.extend(protocol.journal(rest))
            pending = again
        fates.failed(message.message_id for message in pending)


class Committed:
    """An apply call whose every message's fate is decided, save whether its last FENCED batch's item writes land
    now: ``counted`` is the outcome if they do (a FENCED batch counts either way; what needs only that, the
    archive's write, may run beside the landing), ``land()`` sends them and gives the outcome that counts (their
    messages handed back if the landing must wait: a redelivery meets the FENCED markers and finishes it)."""

    def __init__(self, protocol: CommitProtocol, fates: Fates, figures: Figures) -> None:
        self._protocol, self._fates, self._figures = protocol, fates, figures
        landing = protocol.landing
        self.landing: frozenset[str] = (
            frozenset(message.message_id for message in landing[0]) if landing else frozenset()
        )
        """The messages whose deltas are still landing (their batch FENCED)."""
        self.counted: ApplyOutcome = (
            fates.if_landed(landing[0], landing[1], figures) if landing else fates.close(figures)
        )
        self._outcome: ApplyOutcome | None = None if landing else self.counted

    def land(self) -> ApplyOutcome:
        """Land what is pending (once) and return the call's outcome."""
        if self._outcome is None:
            self._protocol.land_pending()
            self._outcome = self._fates.close(self._figures)
        return self._outcome
