"""The recount: what the counters must hold, computed from the archive's records with the core that counts.

``recount(records, windows=..., defaults=...)`` takes archive records (``tally.core.archive``), in any order,
from any number of objects, duplicates included, and returns what every counter, window, gauge and distinct
count must hold if each counted message was counted exactly once:

1. **One counting per (message id, commit)** (``countings``): copies written again by a retry or by a
   redelivery (``counted_here`` False) are dropped; a message counted twice by design (re-sent past the marker
   horizon) has two commits and counts twice. The record kept is the one written by the invocation that
   committed it when there is one (its ``received_ms`` placed the events without ``ts``; a later delivery's
   copy names that time as the marker keeps it, ``placed_ms``), otherwise the first written; ``hi_ms``, the
   earliest ``archived_ms`` of all copies, is when its deltas had certainly landed.
2. **Counters, windows, gauges, distinct counts** from ``tally.core.aggregate.message_totals`` (the same
   netting, window placement and late-window rule as the commit: windows from ``ts`` or the receive time,
   a window already expired at the commit skipped; each view an event's ``dims`` count it in, derived by the same
   function as the commit's, ``tally.core.views``: keyed by the view item's key), ``tally.core.gauges.batch_gauges`` and
   ``tally.core.distinct.event_sets``; start values (``CounterDefaults``) as the store applies them
   (``if_not_exists(c, start) + delta``: counted once, on the all-time value only).
3. **Resets** do not commute. A reset orders *by commit* against the other messages of its key
   (docs/explanation/counter-patterns.md): a counting is before a reset when its deltas had landed
   (``hi_ms``) before the reset's invocation began (``lo_ms``, its ``committed_ms``), after it when it began
   after the reset had landed, with ``clock_tolerance_ms`` of doubt between the clocks of two containers; two
   messages committed by one invocation (one ``delivery``, both ``counted_here``) are in its source order
   (``seq``), which is the order its segments commit in (``tally.core.resets.commit_segments``). A counter
   whose last reset cannot be ordered so against every counting of its key is **not recounted exactly**: it
   is listed in ``Recount.inexact`` with the reason (never reported as drift); its value in ``counters`` is
   the one the order of ``(committed_ms, delivery, seq)`` gives.

Also reported: records whose content does not hash to their digest (``Recount.digest_mismatches``: an archive
edited by hand, or a marker written before digests existed), and the keys whose windows hold an event without
``ts`` of a message whose placing receive time no copy knows (``Recount.unplaced``): the committing invocation's
copy names it, and a later delivery's copy the one the message's marker keeps (``ArchiveRecord.placed_ms``); a
marker written before markers kept it leaves only the later delivery's own receive time, which may not be the one
that placed it, so which window it went to is unknown.

Pure: no boto3, no clock, no environment. Exact: every sum in ``tally.core.numbers.EXACT``.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from tally.core.aggregate import message_totals
from tally.core.archive import record_message
from tally.core.defaults import NO_DEFAULTS
from tally.core.distinct import event_sets
from tally.core.gauges import batch_gauges
from tally.core.items import ALL_TIME, WINDOW_COUNTER_MARK, item_parts, split_window_counter
from tally.core.numbers import add
from tally.core.views import NO_VIEWS
from tally.core.windows import WindowSpec

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from tally.core.aggregate import Totals
    from tally.core.archive import ArchivedEvent, ArchiveRecord
    from tally.core.defaults import CounterDefaults
    from tally.core.gauges import GaugeSlot
    from tally.core.model import CounterEvent, Message
    from tally.core.numbers import Number
    from tally.core.views import CounterViews

DEFAULT_CLOCK_TOLERANCE_MS: Final = 100
"""How far apart two Lambda containers' clocks may be, assumed (they are synchronised by Amazon Time Sync;
AWS publishes no bound for Lambda): within it, which of two commits came first is not decided."""


@dataclass(frozen=True, slots=True)
class Counting:
    """One counting of one message: the record kept for its (message id, commit), and its time bounds."""

    record: ArchiveRecord
    message: Message
    hi_ms: int
    """The earliest ``archived_ms`` of every copy: its deltas had landed by then."""
    copies: int
    """Records of this (message id, commit) read, the kept one included."""
    placed_ms: int | None = None
    """The receive time that placed the message's events without ``ts`` in their windows: the committing
    invocation's, from its copy (``received_ms``) or, on a later delivery's copy, from the message's marker
    (``ArchiveRecord.placed_ms``). None: no copy knows it (the committing invocation's copy is missing and the
    marker kept none); a later delivery's own receive time, the same for a redelivery of the same record and
    another for a producer's re-send or a redrive, is not to be trusted."""

    @property
    def lo_ms(self) -> int:
        """When the committing invocation began (its clock, read before any of its writes)."""
        return self.record.committed_ms

    @property
    def order(self) -> tuple[int, str, int]:
        """The order a recount assumes where the commits cannot be ordered for certain."""
        return (self.record.committed_ms, self.record.delivery, self.record.seq)


def countings(records: Iterable[ArchiveRecord]) -> list[Counting]:
    """One ``Counting`` per (message id, commit), in the order ``Counting.order``."""
    groups: dict[tuple[str, str], list[ArchiveRecord]] = {}
    for record in records:
        key = (record.id, record.commit)
        copies = groups.get(key)
        if copies is None:
            groups[key] = [record]
        else:
            copies.append(record)
    found: list[Counting] = []
    for copies in groups.values():
        if len(copies) == 1:  # the common case: no copy to choose from
            (only,) = copies
            found.append(Counting(only, record_message(only), only.archived_ms, 1, only.placing_ms))
            continue
        here = [record for record in copies if record.counted_here]
        kept = min(here or copies, key=lambda record: (record.archived_ms, record.delivery, record.seq))
        hi_ms = min(record.archived_ms for record in copies)
        placed = kept.placing_ms
        if placed is None:
            placed = next((record.placing_ms for record in copies if record.placing_ms is not None), None)
        found.append(Counting(kept, record_message(kept), hi_ms, len(copies), placed))
    found.sort(key=lambda counting: counting.order)
    return found


def certainly_before(first: Counting, then: Counting, tolerance_ms: int) -> bool:
    """Whether ``first``'s deltas certainly landed before ``then``'s."""
    a, b = first.record, then.record
    if a.delivery == b.delivery and a.counted_here and b.counted_here:
        return a.seq < b.seq
    return first.hi_ms + tolerance_ms < then.lo_ms


@dataclass(frozen=True, slots=True)
class Recount:
    """What the archive says every counter must hold (see the module)."""

    counters: Mapping[str, Mapping[str, Number]]
    """Key -> counter -> its all-time value (the start value included, the last reset and what followed it)."""
    windows: Mapping[str, Mapping[str, Mapping[str, Number]]]
    """Key -> window id -> counter -> the sum of its events in that window."""
    gauges: Mapping[str, Mapping[GaugeSlot, Number | str]]
    """Key -> (kind, gauge name) -> the reading the counted messages leave."""
    distinct: Mapping[str, Mapping[tuple[str, str], int]]
    """Key -> (window id or ``ALL_TIME``, set name) -> how many different members were counted."""
    inexact: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    """(key, ``ALL_TIME``, counter) -> why that all-time value cannot be recounted exactly (a reset)."""
    unplaced: Mapping[str, str] = field(default_factory=dict)
    """Key -> why its windows cannot be recounted exactly: an event without ``ts`` whose placing receive time no
    copy knows (``Counting.placed_ms``). Which window it went to is unknown; its all-time value is exact."""
    records: int = 0
    """Records read."""
    messages: int = 0
    """Countings: distinct (message id, commit)."""
    digest_mismatches: tuple[str, ...] = ()
    """Ids of countings whose archived content does not hash to the archived digest."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (on again after, if it was).

    A million records read back hold millions of small dicts and Decimals, none part of a cycle, that the
    collector walks again at each of its full passes as more are made: at 300,000 records pausing it saved 9% of
    the recount's CPU, and the passes grow with what is held. Wrap the reading of the records in it as well as the
    recount.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def recount(
    records: Iterable[ArchiveRecord],
    *,
    windows: WindowSpec | None = None,
    defaults: CounterDefaults = NO_DEFAULTS,
    clock_tolerance_ms: int = DEFAULT_CLOCK_TOLERANCE_MS,
    views: CounterViews = NO_VIEWS,
) -> Recount:
    """Recount ``records`` (see the module); ``windows``, ``defaults`` and ``views`` are the deployment's (as they
    were when the records were counted). The collector is paused while it runs (``gc_paused``)."""
    with gc_paused():
        return _recount(records, windows or WindowSpec(), defaults, clock_tolerance_ms, views)


def _recount(
    records: Iterable[ArchiveRecord],
    spec: WindowSpec,
    defaults: CounterDefaults,
    clock_tolerance_ms: int,
    views: CounterViews,
) -> Recount:
    read = list(records)
    found = countings(read)
    sums: dict[str, dict[str, Number]] = {}
    window_sums: dict[str, dict[str, dict[str, Number]]] = {}
    members: dict[str, dict[tuple[str, str], set[str]]] = {}
    inexact: dict[tuple[str, str, str], str] = {}
    unplaced: dict[str, str] = {}
    operated: dict[str, list[Counting]] = {}
    """Key -> the countings of its resets, in ``Counting.order`` (a correction is a delta like any other)."""
    touching: dict[str, list[Counting]] = {}
    """Key -> every counting touching its all-time counters, for the keys some reset names."""
    mismatches: list[str] = []
    for counting in found:
        record, message = counting.record, counting.message
        placed_ms = counting.placed_ms
        net = message_totals(
            message, spec, record.received_ms if placed_ms is None else placed_ms, record.committed_ms, views
        )
        if record.digest and net.digest.hex() != record.digest:
            mismatches.append(record.id)
        _add_totals(sums, window_sums, net.totals)
        if placed_ms is None and net.placed_ms is not None:  # a window placed by a receive time not to be trusted
            why = (
                f"message {record.id!r} was archived only by a later delivery, whose receive time may not be the one "
                "that placed its events without ts in their windows"
            )
            for event in message.events:
                if event.ts_ms is None:
                    for key in event_keys(event, views):
                        unplaced.setdefault(key, why)
        for event in message.events:
            if event.reset is not None:
                operated.setdefault(views.reset_target(event.key, event.dims), []).append(counting)
            for name, member in (event.distinct or {}).items():
                for member_set in event_sets(event.key, name, event.ts_ms, spec, record.committed_ms):
                    slot = (member_set.window, member_set.name)
                    members.setdefault(event.key, {}).setdefault(slot, set()).add(member)
    if operated:
        for counting in found:
            touched = {key for event in counting.message.events for key in event_keys(event, views)}
            for key in touched & operated.keys():
                touching.setdefault(key, []).append(counting)
    all_time = _with_starts(sums, defaults)
    for key, resets in operated.items():
        _apply_resets(all_time, inexact, key, resets, touching[key], tolerance_ms=clock_tolerance_ms, views=views)
    gauges = batch_gauges(counting.message for counting in found)
    return Recount(
        counters=all_time,
        windows=window_sums,
        gauges={key: {slot: value.value for slot, value in slots.items()} for key, slots in gauges.updates.items()},
        distinct={key: {slot: len(names) for slot, names in sets.items()} for key, sets in members.items()},
        inexact=inexact,
        unplaced=unplaced,
        records=len(read),
        messages=len(found),
        digest_mismatches=tuple(mismatches),
    )


def _add_totals(
    sums: dict[str, dict[str, Number]], window_sums: dict[str, dict[str, dict[str, Number]]], totals: Totals
) -> None:
    """Add a message's net totals: a key's all-time counters to ``sums``, every window's (open on the key's item, or
    an item of its own) to ``window_sums``."""
    for item, counters in totals.items():
        if type(item) is not str:  # a window of its own (minute), or a shard (not in a recount's totals)
            parts = item_parts(item)
            _add_all(window_sums.setdefault(parts.key, {}).setdefault(parts.window, {}), counters)
            continue
        keyed = sums.get(item)
        if keyed is None:
            keyed = sums[item] = {}
        for name, delta in counters.items():
            if name[:1] != WINDOW_COUNTER_MARK:
                keyed[name] = add(keyed.get(name, 0), delta)
                continue
            window, counter = split_window_counter(name) or (ALL_TIME, name)
            into = window_sums.setdefault(item, {}).setdefault(window, {})
            into[counter] = add(into.get(counter, 0), delta)


def _add_all(into: dict[str, Number], deltas: Mapping[str, Number]) -> None:
    for name, delta in deltas.items():
        into[name] = add(into.get(name, 0), delta)


def _with_starts(sums: Mapping[str, Mapping[str, Number]], defaults: CounterDefaults) -> dict[str, dict[str, Number]]:
    """The sums with each declared start value added once, to counters some message touched."""
    counters: dict[str, dict[str, Number]] = {}
    for key, named in sums.items():
        starts = defaults.starts(key) if defaults.rules else {}
        counters[key] = {name: add(starts[name], value) if name in starts else value for name, value in named.items()}
    return counters


def _apply_resets(
    counters: dict[str, dict[str, Number]],
    inexact: dict[tuple[str, str, str], str],
    key: str,
    resets: Sequence[Counting],
    touching: Sequence[Counting],
    *,
    tolerance_ms: int,
    views: CounterViews,
) -> None:
    """Each counter a reset of ``key`` names: the last reset's value plus what committed after it (a reset's
    ``SET c = :value`` replaces any start value: nothing of the declaration remains)."""
    by_counter: dict[str, list[tuple[Counting, Number]]] = {}
    for counting in resets:
        for event in counting.message.events:
            if event.reset is not None and views.reset_target(event.key, event.dims) == key:
                for name, value in event.reset.items():
                    by_counter.setdefault(name, []).append((counting, value))
    keyed = counters.setdefault(key, {})
    for name, candidates in by_counter.items():
        last, value = candidates[-1]  # the last in the assumed order (``countings`` sorted them)
        doubt: str | None = None
        for other, _ in candidates[:-1]:
            if not certainly_before(other, last, tolerance_ms):
                doubt = f"resets {other.record.id!r} and {last.record.id!r} cannot be ordered by their commits"
        total: Number = value
        for counting in touching:
            if counting is last:
                continue
            delta = _all_time_delta(counting.message, key, name, views)
            if delta is None:
                continue
            if certainly_before(last, counting, tolerance_ms):
                total = add(total, delta)
            elif not certainly_before(counting, last, tolerance_ms):
                doubt = doubt or (
                    f"message {counting.record.id!r} and reset {last.record.id!r} cannot be ordered by their commits"
                )
                if counting.order > last.order:
                    total = add(total, delta)
        keyed[name] = total
        if doubt is not None:
            inexact[(key, ALL_TIME, name)] = doubt


def event_keys(event: CounterEvent | ArchivedEvent, views: CounterViews) -> tuple[str, ...]:
    """The keys whose all-time values ``event`` touches: its key's and its views' (a reset's: the item it sets)."""
    if event.reset is not None:
        return (views.reset_target(event.key, event.dims),)
    return (event.key, *views.view_keys(event.key, event.dims)) if event.dims else (event.key,)


def _all_time_delta(message: Message, key: str, counter: str, views: CounterViews) -> Number | None:
    """What ``message`` adds to the all-time ``counter`` of ``key`` (a key, or a view item's key): None when it does
    not touch it; a reset adds none."""
    total: Number | None = None
    for event in message.events:
        if event.reset is not None or counter not in event.deltas or key not in event_keys(event, views):
            continue
        delta = event.deltas[counter]
        total = delta if total is None else add(total, delta)
    return total
