"""``tally void MESSAGE_ID``: undo one counted message, exactly once, by corrections with its negated deltas.

A counting is undone by one correction per (key, time) of its events, each with the event's deltas negated and
the time that placed the event in its windows (its ``ts``, or without one the receive time of the delivery
that counted it), so the same windows lose exactly what they got; corrections carry at most
``MAX_OPERATOR_COUNTERS`` counters, so a wide event takes several. Their ids are ``void_id(message id,
commit, n)``: voiding again publishes the same ids, which the consumer drops.

``plan_void`` refuses, saying why:

- a message the archive does not hold (never counted, refused into the dead-letter queue, or counted in hours
  not read);
- one counted more than once (re-sent past the marker horizon: two commits) unless the commit is named;
- one already voided (every correction of its void is in the archive);
- a reset (a correction cannot take a ``SET`` back), and a repair (``tally audit --fix`` owns those);
- one with gauge readings or distinct members (a correction cannot take them back), unless told to void
  only its deltas (``additive_only``);
- one a reset of its key came after (or cannot be ordered against): the reset already took its deltas off
  the all-time value, and a correction would take them off twice.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tally.audit.corrections import PlannedCorrection, is_repair, void_id
from tally.audit.recount import DEFAULT_CLOCK_TOLERANCE_MS, certainly_before
from tally.core.limits import MAX_OPERATOR_COUNTERS
from tally.core.numbers import add

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from tally.audit.recount import Counting
    from tally.core.numbers import Number


class VoidRefused(ValueError):
    """The message cannot be voided; the message says why."""


@dataclass(frozen=True, slots=True)
class VoidPlan:
    message_id: str
    commit: str
    corrections: tuple[PlannedCorrection, ...]
    left_out: tuple[str, ...] = ()
    """What is not undone (with ``additive_only``): ``gauge max:temp of k``, ``member viewers=u1 of k``."""
    resent: tuple[str, ...] = ()
    """Ids of its corrections the archive already holds (a void sent before and not finished): sent again."""


def plan_void(
    message_id: str,
    found: Sequence[Counting],
    *,
    commit: str | None = None,
    additive_only: bool = False,
    archived_ids: Collection[str] = (),
    key_countings: Sequence[Counting] = (),
    tolerance_ms: int = DEFAULT_CLOCK_TOLERANCE_MS,
) -> VoidPlan:
    """The void of ``message_id``, whose countings in the archive are ``found``. ``archived_ids`` are the ids
    of every counting read (to know what of a void is already counted); ``key_countings`` every counting of
    the keys the message touches (to find the resets after it)."""
    counting = _the_counting(message_id, found, commit)
    record, message = counting.record, counting.message
    if is_repair(record):
        raise VoidRefused(f"{message_id!r} is a repair: the next `tally audit --fix` corrects what it did")
    resets = [event.key for event in message.events if event.reset is not None]
    if resets:
        raise VoidRefused(
            f"{message_id!r} is a reset of {resets[0]!r}: a correction cannot take a reset back (reset again)"
        )
    parts = [
        f"gauge {gauge.kind}:{name} of {event.key!r}"
        for event in message.events
        for name, gauge in (event.gauges or {}).items()
    ]
    parts += [
        f"member {name}={member!r} of {event.key!r}"
        for event in message.events
        for name, member in (event.distinct or {}).items()
    ]
    if parts and not additive_only:
        raise VoidRefused(
            f"{message_id!r} carries what a correction cannot undo ({'; '.join(parts)}): "
            "give --additive-only to void its deltas only"
        )
    _refuse_after_reset(counting, key_countings, tolerance_ms)
    negated: dict[tuple[str, int], dict[str, Number]] = {}
    for event in message.events:
        ts_ms = event.ts_ms if event.ts_ms is not None else _placing_time(counting)
        into = negated.setdefault((event.key, ts_ms), {})
        for name, delta in event.deltas.items():
            into[name] = add(into.get(name, 0), -delta)
    corrections: list[PlannedCorrection] = []
    for (key, ts_ms), deltas in negated.items():
        nonzero = [(name, delta) for name, delta in deltas.items() if delta]
        for start in range(0, len(nonzero), MAX_OPERATOR_COUNTERS):
            chunk = dict(nonzero[start : start + MAX_OPERATOR_COUNTERS])
            correction_id = void_id(message_id, record.commit, len(corrections))
            corrections.append(PlannedCorrection(correction_id, key, chunk, ts_ms))
    if not corrections:
        raise VoidRefused(f"{message_id!r} added nothing to any counter: there is nothing to void")
    ids = {correction.message_id for correction in corrections}
    done = sorted(ids & set(archived_ids))
    if len(done) == len(ids):
        raise VoidRefused(f"{message_id!r} is already voided (by {', '.join(done)})")
    return VoidPlan(message_id, record.commit, tuple(corrections), tuple(parts), tuple(done))


def _placing_time(counting: Counting) -> int:
    """The receive time that placed the counting's events without ``ts`` in their windows, or the refusal."""
    if counting.placed_ms is None:
        raise VoidRefused(
            f"{counting.record.id!r} has events without ts and was archived only by a later delivery whose marker "
            "kept no receive time for them (written before markers kept it): which window they went to is unknown"
        )
    return counting.placed_ms


def _the_counting(message_id: str, found: Sequence[Counting], commit: str | None) -> Counting:
    if not found:
        raise VoidRefused(
            f"{message_id!r} is not in the archive: never counted (refused messages are in the dead-letter queue:"
            " tally dlq list), or counted before the hours read (--since)"
        )
    if commit is not None:
        chosen = [counting for counting in found if counting.record.commit == commit]
        if not chosen:
            commits = ", ".join(counting.record.commit for counting in found)
            raise VoidRefused(f"{message_id!r} was not counted by commit {commit!r} (its commits: {commits})")
        return chosen[0]
    if len(found) > 1:
        commits = ", ".join(counting.record.commit for counting in found)
        raise VoidRefused(
            f"{message_id!r} was counted {len(found)} times (re-sent past the marker horizon; commits {commits}):"
            " name the one to void with --commit"
        )
    return found[0]


def _refuse_after_reset(counting: Counting, key_countings: Sequence[Counting], tolerance_ms: int) -> None:
    """A reset of a counter the message adds to, not certainly before it, took (or may have taken) its deltas
    off the all-time value already."""
    added = {(event.key, name) for event in counting.message.events for name in event.deltas}
    for other in key_countings:
        if other is counting or is_repair(other.record) or certainly_before(other, counting, tolerance_ms):
            continue  # a repair's reset set the value the archive recounts, this message included
        for event in other.message.events:
            hit = sorted(name for name in (event.reset or {}) if (event.key, name) in added)
            if hit:
                raise VoidRefused(
                    f"{counting.record.id!r}: {event.key!r} {hit[0]} was reset after it (by {other.record.id!r}):"
                    " the reset already took its deltas off the all-time value (correct its windows by hand)"
                )
