"""The batch's bookkeeping: one fate per message, the figures for metrics, and the outcome built from them.

Every distinct message of a batch ends in exactly one of four fates:

- **applied**: its deltas were committed by this invocation (a direct transaction, or a journal batch
  that committed, whoever finished it);
- **already applied**: a marker says the same content was counted before (a duplicate);
- **dead-lettered**, with the reason: it can never be counted (DynamoDB refuses its increment, its id
  counts other content, the planner cannot write it);
- **failed**: reported to the source, which delivers it again (out of time, DynamoDB kept throttling, an
  outcome it cannot know yet, or **held** by another invocation's journal batch whose lease is live).

A message without a fate would be reported done and deleted by the source without being counted; a
message with two (dead-lettered and applied) would be counted and dead-lettered. ``Fates``
holds one fate per message in one mapping, so two cannot be stored; a second, different fate is refused
where it is given, and ``close`` refuses a batch in which a message has none. Either raises
``UnsettledMessagesError``: the whole batch fails and is redelivered, and the markers settle it.

This module decides nothing and calls nothing: the protocol (``tally.commit.protocol``) reports fates,
the step runner (``tally.commit.retrying``) and the protocol add to the ``Figures``, and ``ApplyOutcome``
is built from these two records only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from tally.errors import UnsettledMessagesError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.core.aggregate import MessageTotals
    from tally.core.ledger import Commit
    from tally.core.model import Rejection


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
class Applied:
    events: int
    commit: Commit


@dataclass(frozen=True, slots=True)
class AlreadyApplied:
    commit: Commit | None
    """The commit its marker names; None when the marker was met without it (then the post-commit steps that
    need it, the archive's, leave the message to a redelivery, which reads the marker again)."""


@dataclass(frozen=True, slots=True)
class DeadLettered:
    rejection: Rejection


@dataclass(frozen=True, slots=True)
class Failed:
    held_by: Stall | None = None
    """Set when a live lease of another batch holds the message (a stall); None for any other cause."""


Fate: TypeAlias = Applied | AlreadyApplied | DeadLettered | Failed


@dataclass(slots=True)
class Figures:
    """What one apply call did, for metrics and logs; each counter is added to by the layer that sees it."""

    requests: int = 0
    """Write attempts (transactions and batch writes), retries included (``tally.commit.retrying``)."""
    retries: int = 0
    journal_batches: int = 0
    refused_chunks: int = 0
    """Committed chunks DynamoDB refused (alarmed: their increments are not applied)."""
    marker_reads: int = 0
    """``read_markers`` calls (0 while the ``MarkerReadGate`` is closed)."""
    markers_met: int = 0
    """Existing markers met, through the marker read or a cancelled write (feeds the gate)."""
    exact_writes: int = 0
    """Thresholded writes sent again from the values a refused crossing condition met (``CommitProtocol._exact``)."""
    spilled_crossings: int = 0
    """Crossings written to a journal batch's pages: they did not fit their message's transaction (``_spill``)."""


@dataclass(frozen=True, slots=True)
class ApplyOutcome:
    """What happened to each message, and the figures of the call."""

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
    threshold_rewrites: int = 0
    """Writes sent again from the values a refused crossing condition met (``Figures.exact_writes``)."""
    spilled_crossings: int = 0
    """Crossings paged for a journal batch beside their message's transaction (``Figures.spilled_crossings``)."""
    stalls: tuple[Stall, ...] = ()
    """Unapplied messages held back by a live lease of another batch (a subset of ``unapplied``)."""
    commits: Mapping[str, Commit] = field(default_factory=dict, compare=False)
    """The commit that counted each applied and already applied message (one whose marker was met without
    its applied time is absent). Left out of equality: it follows from the fates, and outcomes are compared
    by what happened to each message; the tests that need the commits read them."""


class Fates:
    """The fate of every message of one apply call: at most one each, and exactly one at ``close``."""

    def __init__(self, message_ids: Iterable[str]) -> None:
        self._expected = frozenset(message_ids)
        self._fates: dict[str, Fate] = {}
        self._closed = False

    def applied(self, messages: Iterable[MessageTotals], commit: Commit) -> None:
        """Their deltas were committed by this call, under ``commit`` (their markers')."""
        for message in messages:
            self._settle(message.message_id, Applied(message.event_count, commit))

    def already_applied(self, message_id: str, commit: Commit | None) -> None:
        """A marker (of ``commit``) says the same content was counted before."""
        self._settle(message_id, AlreadyApplied(commit))

    def dead_lettered(self, message_id: str, rejection: Rejection) -> None:
        """It can never be counted, for ``rejection``."""
        self._settle(message_id, DeadLettered(rejection))

    def failed(self, message_ids: Iterable[str]) -> None:
        """Handed back to the source, which delivers them again."""
        for message_id in message_ids:
            self._settle(message_id, Failed())

    def held(self, message_id: str, batch_id: str, lease_until_ms: int) -> None:
        """Handed back because ``batch_id``, another invocation's, holds it until ``lease_until_ms``."""
        self._settle(message_id, Failed(Stall(message_id, batch_id, lease_until_ms)))

    def any_failed(self, message_ids: Iterable[str]) -> bool:
        """Whether any of ``message_ids`` was handed back (or has no fate yet): later work must wait."""
        return any(not isinstance(self._fates.get(mid), Applied | AlreadyApplied | DeadLettered) for mid in message_ids)

    def without_fate(self, message_ids: Iterable[str]) -> list[str]:
        """Those of ``message_ids`` not settled yet (a marker read may have settled some early)."""
        return [message_id for message_id in message_ids if message_id not in self._fates]

    def _settle(self, message_id: str, fate: Fate) -> None:
        if self._closed:
            raise UnsettledMessagesError(f"a fate for {message_id!r} after the batch was closed")
        if message_id not in self._expected:
            raise UnsettledMessagesError(f"a fate for {message_id!r}, which is not in the batch")
        known = self._fates.setdefault(message_id, fate)
        if known != fate:
            raise UnsettledMessagesError(f"two fates for {message_id!r}: {known} and then {fate}")

    def close(self, figures: Figures) -> ApplyOutcome:
        """The outcome of the call; refuses a batch in which some message has no fate."""
        self._closed = True
        return _outcome(self._expected, self._fates, figures)

    def if_landed(self, landing: Iterable[MessageTotals], commit: Commit, figures: Figures) -> ApplyOutcome:
        """The outcome the call will have if ``landing`` (committed under ``commit``, its deltas still landing) is
        applied: what may run beside the landing is given it (the archive's write needs only the fates); the fates
        stay open for the landing's own, and ``close`` gives the outcome that counts."""
        fates = dict(self._fates)
        for message in landing:
            fates[message.message_id] = Applied(message.event_count, commit)
        return _outcome(self._expected, fates, figures)


def _outcome(expected: frozenset[str], fates: Mapping[str, Fate], figures: Figures) -> ApplyOutcome:
    """The outcome of ``fates``; refuses a batch in which some message has no fate."""
    without = expected.difference(fates)
    if without:
        raise UnsettledMessagesError(
            f"{len(expected)} message(s), {len(fates)} fate(s); without a fate: {sorted(without)[:5]}"
        )
    by_kind: dict[type, list[str]] = {}
    for message_id, fate in fates.items():
        by_kind.setdefault(type(fate), []).append(message_id)
    return ApplyOutcome(
        applied=frozenset(by_kind.get(Applied, ())),
        already_applied=frozenset(by_kind.get(AlreadyApplied, ())),
        rejected={mid: fate.rejection for mid, fate in fates.items() if isinstance(fate, DeadLettered)},
        unapplied=frozenset(by_kind.get(Failed, ())),
        applied_events=sum(fate.events for fate in fates.values() if isinstance(fate, Applied)),
        transactions=figures.requests,
        retries=figures.retries,
        journal_batches=figures.journal_batches,
        refused_chunks=figures.refused_chunks,
        marker_reads=figures.marker_reads,
        threshold_rewrites=figures.exact_writes,
        spilled_crossings=figures.spilled_crossings,
        stalls=tuple(fate.held_by for fate in fates.values() if isinstance(fate, Failed) and fate.held_by),
        commits={
            mid: fate.commit
            for mid, fate in fates.items()
            if isinstance(fate, Applied | AlreadyApplied) and fate.commit is not None
        },
    )
