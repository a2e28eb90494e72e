"""Distinct counts: how many different members each key's sets have seen.

An event names members (``"distinct": {"viewers": "user-17"}``). Each (key, window, set, member) becomes
one *member item*, written once, on the condition that it does not exist yet, in the same transaction as
the ``ADD`` of the set's count on the key's counter item (``tally.store.distinct``). So a member item
exists exactly when it was counted: a repeat (in the batch, in another batch, in a redelivery, or
concurrently in another invocation) finds the item and adds nothing, and the count cannot drift.

This module is the pure half: ``batch_members`` pre-aggregates a batch's members per (key, window, set)
to a set, so each member costs at most one read and one write per batch, whatever its repetitions.

Windows come from the event's ``ts`` only: an event without ``ts`` counts its members all-time. Why: the
receive time that places a counter's event in a window differs between deliveries once a message is
redriven from the dead-letter queue (``SentTimestamp`` is reset), and members are written *after* the
counters' commit, by whichever delivery finds the marker. Counters ride in the commit with their marker,
so they are placed once; a member written by a redrive would land in the redrive's window as well as
(or instead of) the first one. ``ts`` is part of the content, so every delivery agrees on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from tally.core.items import ALL_TIME

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.core.model import Message
    from tally.core.windows import WindowSpec


class MemberSet(NamedTuple):
    """One distinct-count set of one key in one window (``ALL_TIME`` or a window id)."""

    key: str
    window: str
    name: str
    expires_at_s: int | None = None
    """When the window's member items and count may be deleted (TTL): the window's counter retention."""


@dataclass(frozen=True, slots=True)
class MemberBatch:
    """A batch's members, one set per (key, window, set name), and which messages name members of each key."""

    members: Mapping[str, Mapping[MemberSet, frozenset[str]]]
    """Key -> its sets -> the members the batch names in them."""
    sources: Mapping[str, frozenset[str]]
    """Key -> the ids of the messages naming members of it (reported failed if its members stay unwritten)."""

    @property
    def member_count(self) -> int:
        """(set, member) pairs to look up: one item read each."""
        return sum(len(names) for sets in self.members.values() for names in sets.values())


def event_sets(key: str, name: str, ts_ms: int | None, windows: WindowSpec | None, now_ms: int) -> list[MemberSet]:
    """The sets a member of ``name`` on ``key`` counts in: all-time, and each window its ``ts`` falls in
    that is still kept (``WindowSpec.windows_of``: an expired window is never written again)."""
    sets = [MemberSet(key, ALL_TIME, name)]
    if ts_ms is not None and windows is not None and windows.units:
        spans, _ = windows.windows_of(ts_ms, now_ms)
        sets.extend(MemberSet(key, unit.window_id(start), name, unit.expires_at_s(start)) for unit, start in spans)
    return sets


def batch_members(messages: Iterable[Message], windows: WindowSpec | None = None, now_ms: int = 0) -> MemberBatch:
    """Every member the messages name, per key and set (all-time and each window of the event's ``ts``).

    The caller passes each message once (the batch's distinct ids whose counters count); a member named
    twice, by one message or by several, is one entry.
    """
    members: dict[str, dict[MemberSet, set[str]]] = {}
    sources: dict[str, set[str]] = {}
    for message in messages:
        for event in message.events:
            if not event.distinct:
                continue
            sets = members.setdefault(event.key, {})
            sources.setdefault(event.key, set()).add(message.message_id)
            for name, member in event.distinct.items():
                for member_set in event_sets(event.key, name, event.ts_ms, windows, now_ms):
                    sets.setdefault(member_set, set()).add(member)
    return MemberBatch(
        {key: {s: frozenset(names) for s, names in sets.items()} for key, sets in members.items()},
        {key: frozenset(ids) for key, ids in sources.items()},
    )


def carries_members(message: Message) -> bool:
    """Whether any event of the message names a distinct member."""
    return any(event.distinct for event in message.events)


def exact_distinct(members: Iterable[tuple[str, str, str, str]]) -> dict[tuple[str, str, str], int]:
    """The expected stored counts of (key, window, set) from the (key, window, set, member) tuples of every
    counted event, repeats included: the size of each exact set. For tests, the chaos run and the demo."""
    seen: dict[tuple[str, str, str], set[str]] = {}
    for key, window, name, member in members:
        seen.setdefault((key, window, name), set()).add(member)
    return {slot: len(names) for slot, names in seen.items()}
