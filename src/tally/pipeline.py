"""One batch, end to end: source records -> messages -> aggregate -> write plan -> store.

The pipeline is the only place that knows how those steps connect, and the only place that maps
message-level outcomes back to source records, which is what the source's partial-failure report needs:

- a record is *failed* (reported to the source for redelivery) when its message could not be applied
  this time (time ran out under throttling), or when it is poison and the dead-letter queue refused it;
- every other record is done: applied now, applied before, a duplicate of a message in this batch
  (it shares the fate of the first record with its id), or poison safely in the dead-letter queue.

Nothing here catches an unexpected exception: it propagates and fails the whole batch, which the source
redelivers, rather than being turned into an empty failure list that would delete unprocessed records.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from msgspec.structs import replace

from tally.core.aggregate import copy_conflict, deduplicate, key_items_with_windows, message_totals
from tally.core.decode import decode_message
from tally.core.defaults import NO_DEFAULTS, CounterDefaults
from tally.core.distinct import batch_members, carries_members
from tally.core.gauges import batch_gauges
from tally.core.model import DeadLetter, Message, RejectCode, Rejection
from tally.core.resets import reset_items
from tally.core.sharding import HotKeys, assign_shards
from tally.core.windows import WindowSpec
from tally.errors import RetryableStoreError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from tally.commit.applier import Applier
    from tally.core.aggregate import MessageTotals
    from tally.core.distinct import MemberSet
    from tally.core.gauges import GaugeSlot, GaugeValue
    from tally.core.items import ItemKey
    from tally.core.limits import WireLimits
    from tally.core.model import SourceRecord
    from tally.store.distinct import DistinctWrite
    from tally.store.windows import WindowsMoved

logger = logging.getLogger(__name__)

WINDOW_MOVE_RESERVE_MS = 3_000
"""Below this much time left, a batch moves no ended windows (they wait for a later batch): reporting the
batch matters more, and a window left on the key's item is still counted by every read."""


class DeadLetterQueue(Protocol):
    """The port poison records go to; returns the record ids it could NOT accept."""

    def send(self, letters: Sequence[DeadLetter]) -> frozenset[str]: ...


class GaugeStore(Protocol):
    """The port gauge readings go to (``tally.store.gauges.DynamoDBGaugeStore``); idempotent writes.

    Returns the write requests made; raises ``RetryableStoreError`` when a key's write may not have
    happened (its messages are then reported failed and their redelivery writes the readings again).
    """

    def write_gauges(self, key: str, slots: Mapping[GaugeSlot, GaugeValue]) -> int: ...


class DistinctStore(Protocol):
    """The port distinct-count members go to (``tally.store.distinct.DynamoDBDistinctStore``): idempotent.

    Takes every key's members of the batch at once (one read and as few transactions as the action limit
    allows). Names the keys whose members may be uncounted in ``DistinctWrite.unwritten``, or raises
    ``RetryableStoreError`` when that may be any key: their messages are then reported failed, and their
    redelivery writes the members again (a counted member is never counted twice).
    """

    def write_members(
        self, members: Mapping[str, Mapping[MemberSet, frozenset[str]]], remaining_ms: Callable[[], int] | None = None
    ) -> DistinctWrite: ...


class WindowMover(Protocol):
    """The port that moves ended windows off the key items a batch wrote (``tally.store.windows``).

    Optional work: a window left on a key's item is still read exactly, so a failure here never fails the
    batch. Raises ``StoreError`` when the key items could not be read.
    """

    def after_batch(self, items: Iterable[ItemKey], now_ms: int) -> WindowsMoved: ...


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """What the pipeline needs to know besides its ports: input limits and the deduplication horizon."""

    limits: WireLimits
    dedup_horizon_ms: int
    """How long markers live; a message whose ``ts`` is older than this could be counted twice: refused."""
    windows: WindowSpec = field(default_factory=WindowSpec)
    hot_keys: HotKeys = field(default_factory=HotKeys)
    counter_defaults: CounterDefaults = NO_DEFAULTS
    """Declared default deltas, for the decoder (start values are the store's: ``tally.core.defaults``)."""


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
    records: int
    messages_applied: int
    events_applied: int
    duplicates_in_batch: int
    already_applied: int
    dead_letters: tuple[DeadLetter, ...]
    dead_letter_failures: int
    transactions: int
    retries: int
    journal_batches: int = 0
    refused_chunks: int = 0
    late_events: int = 0
    marker_reads: int = 0
    stalls: tuple[HeldRecord, ...] = ()
    gauge_writes: int = 0
    """Conditional gauge write requests (``tally.store.gauges``), beside the counters' transactions."""
    member_reads: int = 0
    """Distinct-count member items looked up (``tally.store.distinct``): one read unit each."""
    member_transactions: int = 0
    """Member transactions sent (retries included)."""
    members_added: int = 0
    """Members counted by this batch (new member items)."""
    window_checks: int = 0
    """Key items read to find ended windows (``tally.store.windows``): once per key item, container and hour."""
    windows_moved: int = 0
    """(key item, window) pairs moved off key items to their window items (or, past retention, removed)."""
    window_move_transactions: int = 0
    window_items_written: int = 0
    """Window items the moves added to."""
    window_moves_left: int = 0
    """Key items whose ended windows stay on them for now (a late event kept changing them, a conflict, an
    error): still counted by every read, moved by a later batch."""


class BatchPipeline:
    """Processes one delivered batch through the applier and the dead-letter queue."""

    def __init__(
        self,
        applier: Applier,
        dead_letters: DeadLetterQueue,
        settings: PipelineSettings,
        rng: random.Random | None = None,
        *,
        gauges: GaugeStore | None = None,
        distinct: DistinctStore | None = None,
        windows: WindowMover | None = None,
    ) -> None:
        self._windows = windows
        """None: ended windows stay on key items (read exactly all the same) until something moves them."""
        self._gauges = gauges
        self._distinct = distinct
        """None: this pipeline counts no distinct members, and dead-letters messages that name some."""
        """None: this pipeline writes no gauges, and dead-letters messages that carry some (never drops them)."""
        self._applier = applier
        self._dead_letters = dead_letters
        self._settings = settings
        self._rng = rng or random.Random()

    def process(self, records: Sequence[SourceRecord], now_ms: int, remaining_ms: Callable[[], int]) -> BatchResult:
        """Count a batch exactly once; ``now_ms`` is the invocation's clock, read once by the caller."""
        poison: list[DeadLetter] = []
        valid_records: list[SourceRecord] = []
        messages: list[Message] = []
        for record in records:
            decoded = decode_message(record.body, self._settings.limits, self._settings.counter_defaults)
            decoded_or_old = self._refuse_if_too_old(decoded, now_ms) if isinstance(decoded, Message) else decoded
            if self._gauges is None and isinstance(decoded_or_old, Message) and _carries_gauges(decoded_or_old):
                decoded_or_old = Rejection(RejectCode.INVALID_GAUGE, "this pipeline has no gauge store")
            if self._distinct is None and isinstance(decoded_or_old, Message) and carries_members(decoded_or_old):
                decoded_or_old = Rejection(RejectCode.INVALID_DISTINCT, "this pipeline has no distinct-count store")
            if isinstance(decoded_or_old, Rejection):
                poison.append(DeadLetter(record, decoded_or_old))
            else:
                valid_records.append(record)
                messages.append(decoded_or_old)

        distinct = deduplicate(messages)
        settings = self._settings
        shard_of_key: dict[str, int] = {}  # one shard per hot key for the whole batch: one ADD per item

        def pick(key: str, shards: int) -> int:
            return shard_of_key.setdefault(key, self._rng.randrange(shards))

        totals = []
        late_events = 0
        for position in distinct.unique:
            net = message_totals(messages[position], settings.windows, valid_records[position].received_ms, now_ms)
            late_events += net.late_events
            if settings.hot_keys.rules:
                net = replace(net, totals=assign_shards(net.totals, settings.hot_keys, pick))
                if net.sets and net.stamp is not None:
                    net = replace(net, sets=reset_items(net.stamp, settings.hot_keys))
            totals.append(net)
        outcome = self._applier.apply(totals, now_ms, remaining_ms)
        gauge_writes, gauges_unwritten = self._write_gauges(
            messages, distinct.unique, outcome.applied | outcome.already_applied
        )
        members = self._write_members(
            messages, distinct.unique, outcome.applied | outcome.already_applied, now_ms, remaining_ms
        )
        moved = self._move_windows(totals, outcome.applied | outcome.already_applied, now_ms, remaining_ms)

        for position in distinct.unique:
            rejection = outcome.rejected.get(messages[position].message_id)
            if rejection is not None:
                poison.append(DeadLetter(valid_records[position], rejection))
        for position, first in distinct.conflict_of.items():
            # An id reused with other content in this batch; left to redelivery with the first copy if
            # that one is unapplied (its record is reported failed below).
            first_id = messages[first].message_id
            if first_id not in outcome.unapplied:
                conflict = copy_conflict(messages[first], messages[position], outcome.rejected.get(first_id))
                if conflict is not None:
                    poison.append(DeadLetter(valid_records[position], conflict))
        refused_by_dlq = self._dead_letters.send(poison) if poison else frozenset()

        failed = [
            record.record_id
            for record, message in zip(valid_records, messages, strict=True)
            if message.message_id in outcome.unapplied
            or message.message_id in gauges_unwritten
            or message.message_id in members.unwritten
        ]
        failed.extend(letter.record.record_id for letter in poison if letter.record.record_id in refused_by_dlq)
        holders = {stall.message_id: stall for stall in outcome.stalls}
        stalls = tuple(
            HeldRecord(record.record_id, stall.batch_id, stall.lease_until_ms)
            for record, message in zip(valid_records, messages, strict=True)
            if (stall := holders.get(message.message_id)) is not None
        )
        return BatchResult(
            failed_record_ids=tuple(failed),
            records=len(records),
            messages_applied=len(outcome.applied),
            events_applied=outcome.applied_events,
            duplicates_in_batch=len(distinct.duplicate_of),
            already_applied=len(outcome.already_applied),
            dead_letters=tuple(poison),
            dead_letter_failures=len(refused_by_dlq),
            transactions=outcome.transactions,
            retries=outcome.retries,
            journal_batches=outcome.journal_batches,
            refused_chunks=outcome.refused_chunks,
            late_events=late_events,
            marker_reads=outcome.marker_reads,
            stalls=stalls,
            gauge_writes=gauge_writes,
            member_reads=members.read,
            member_transactions=members.transactions,
            members_added=members.added,
            window_checks=moved.checked if moved is not None else 0,
            windows_moved=moved.windows if moved is not None else 0,
            window_move_transactions=moved.transactions if moved is not None else 0,
            window_items_written=moved.window_items if moved is not None else 0,
            window_moves_left=moved.left if moved is not None else 0,
        )

    def _move_windows(
        self, totals: Sequence[MessageTotals], settled: frozenset[str], now_ms: int, remaining_ms: Callable[[], int]
    ) -> WindowsMoved | None:
        """Move ended windows off the key items this batch's counted messages write.

        After the commit, like gauges and members, and for already-applied messages too: a kill between a
        commit and this step leaves the windows on the key's item, where reads still count them, and the
        redelivery (or the next batch writing the key) moves them. Never fails the batch: what is not moved
        now is moved later.
        """
        if self._windows is None or remaining_ms() < WINDOW_MOVE_RESERVE_MS:
            return None
        items = key_items_with_windows(net.totals for net in totals if net.message_id in settled)
        if not items:
            return None
        try:
            return self._windows.after_batch(items, now_ms)
        except StoreError as exc:
            logger.warning("ended windows not moved this batch (read failed): %s", exc)
            return None

    def _write_gauges(
        self, messages: Sequence[Message], unique: Sequence[int], settled: frozenset[str]
    ) -> tuple[int, frozenset[str]]:
        """Write the gauges of every message whose counters count (applied now, or before: a marker).

        After the commit, never inside it (a failed condition would cancel the counters' transaction), and
        for already-applied messages too: a crash between a commit and its gauge writes leaves the marker,
        and the redelivery that meets it writes the gauges then. Returns the write requests and the ids of
        the messages whose readings may be unwritten (reported failed: redelivered, written again).
        """
        if self._gauges is None:
            return 0, frozenset()
        carrying = [
            messages[position]
            for position in unique
            if messages[position].message_id in settled and _carries_gauges(messages[position])
        ]
        if not carrying:
            return 0, frozenset()
        batch = batch_gauges(carrying)
        requests = 0
        unwritten: set[str] = set()
        for key, slots in batch.updates.items():
            try:
                requests += self._gauges.write_gauges(key, slots)
            except RetryableStoreError:
                unwritten |= batch.sources[key]
        return requests, frozenset(unwritten)

    def _write_members(
        self,
        messages: Sequence[Message],
        unique: Sequence[int],
        settled: frozenset[str],
        now_ms: int,
        remaining_ms: Callable[[], int],
    ) -> _MembersWritten:
        """Count the distinct members of every message whose counters count (applied now, or before).

        After the commit, like the gauges (``_write_gauges``), and for the same reasons: a member's condition
        must never cancel the counters, and a crash before this step is repaired by the redelivery, which
        meets the markers and writes the members again (``tally.store.distinct``: a counted member is never
        counted twice). A key whose members may be unwritten has its messages reported failed.
        """
        if self._distinct is None:
            return _MembersWritten()
        carrying = [
            messages[position]
            for position in unique
            if messages[position].message_id in settled and carries_members(messages[position])
        ]
        if not carrying:
            return _MembersWritten()
        batch = batch_members(carrying, self._settings.windows, now_ms)
        try:
            written = self._distinct.write_members(batch.members, remaining_ms)
        except RetryableStoreError:
            return _MembersWritten(unwritten=frozenset().union(*batch.sources.values()))
        unwritten = frozenset().union(*(batch.sources[key] for key in written.unwritten))
        return _MembersWritten(written.read, written.transactions, written.added, unwritten)

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
        tolerance_ms = self._settings.windows.future_tolerance_ms
        if newest > now_ms + tolerance_ms:
            ahead_s = (newest - now_ms) / 1000
            return Rejection(RejectCode.TS_IN_FUTURE, f"ts is {ahead_s:.0f} s ahead of the clock (a unit mix-up?)")
        age_ms = now_ms - newest
        if age_ms > self._settings.dedup_horizon_ms - tolerance_ms:
            days = self._settings.dedup_horizon_ms / 86_400_000
            detail = f"newest ts is {age_ms / 86_400_000:.1f} days old; markers are kept {days:g} days"
            return Rejection(RejectCode.TOO_OLD, detail)
        return message


@dataclass(frozen=True, slots=True)
class _MembersWritten:
    """The distinct-count step's figures, and the ids of the messages whose members may be uncounted."""

    read: int = 0
    transactions: int = 0
    added: int = 0
    unwritten: frozenset[str] = frozenset()


def _carries_gauges(message: Message) -> bool:
    return any(event.gauges for event in message.events)
