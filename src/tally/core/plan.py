"""Transaction planning: pack messages into ``TransactWriteItems`` calls that each fit DynamoDB's limits.

This is the one place that decides what travels together. The rule that makes counting exactly-once
is that a message's idempotency marker is committed in the same transaction as every delta it carries;
so a message is never split across transactions, and a transaction holds one conditional marker per
message plus one ``ADD`` per distinct key of those messages, at most ``max_actions`` in all.

Packing is greedy, in batch order. A new transaction starts when the next message would overflow the
action limit, or when adding it would make some key's net delta unstorable (more than 38 significant
digits) even though each message alone is fine. A message that cannot be written even alone is
rejected here with a reason, before any I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tally.core.aggregate import MessageTotals, Totals, add_into
from tally.core.model import RejectCode, Rejection
from tally.core.numbers import Number, add, storage_problem

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

MAX_TRANSACTION_ACTIONS = 100
"""DynamoDB's limit on actions in one ``TransactWriteItems`` call."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One transaction: the messages it marks applied and the net increments it adds per key."""

    messages: tuple[MessageTotals, ...]
    increments: Totals
    """key -> counter -> non-zero net delta; keys whose counters all net to zero are left out."""

    @property
    def message_ids(self) -> tuple[str, ...]:
        return tuple(message.message_id for message in self.messages)

    @property
    def action_count(self) -> int:
        return len(self.messages) + len(self.increments)

    @property
    def event_count(self) -> int:
        return sum(message.event_count for message in self.messages)


@dataclass(frozen=True, slots=True)
class WritePlan:
    """The transactions to run, in order, and the messages that can never be written."""

    chunks: tuple[Chunk, ...]
    rejected: Mapping[str, Rejection] = field(default_factory=dict)


def plan_transactions(
    messages: Sequence[MessageTotals], max_actions: int = MAX_TRANSACTION_ACTIONS
) -> WritePlan:
    """Pack distinct messages into transactions of at most ``max_actions`` actions each."""
    chunks: list[Chunk] = []
    rejected: dict[str, Rejection] = {}
    members: list[MessageTotals] = []
    sums: dict[str, dict[str, Number]] = {}

    def close() -> None:
        if members:
            chunks.append(_chunk(members, sums))
            members.clear()
            sums.clear()

    for message in messages:
        rejection = _unwritable(message, max_actions)
        if rejection is not None:
            rejected[message.message_id] = rejection
            continue
        new_keys = sum(1 for key in message.totals if key not in sums)
        if len(members) + 1 + len(sums) + new_keys > max_actions or not _fits(sums, message.totals):
            close()
        members.append(message)
        add_into(sums, message.totals)
    close()
    return WritePlan(tuple(chunks), rejected)


def _unwritable(message: MessageTotals, max_actions: int) -> Rejection | None:
    if 1 + len(message.totals) > max_actions:
        return Rejection(
            RejectCode.TOO_MANY_KEYS,
            f"{len(message.totals)} distinct keys in one message (at most {max_actions - 1})",
        )
    for key, counters in message.totals.items():
        for name, total in counters.items():
            problem = storage_problem(total)
            if problem is not None:
                return Rejection(
                    RejectCode.NUMBER_OUT_OF_RANGE,
                    f"net delta of {key!r}/{name!r} in this message: {problem}",
                )
    return None


def _fits(sums: Mapping[str, Mapping[str, Number]], totals: Totals) -> bool:
    for key, counters in totals.items():
        into = sums.get(key)
        if into is None:
            continue
        for name, delta in counters.items():
            previous = into.get(name)
            if previous is not None and storage_problem(add(previous, delta)) is not None:
                return False
    return True


def _chunk(members: Sequence[MessageTotals], sums: Mapping[str, Mapping[str, Number]]) -> Chunk:
    increments = {
        key: nonzero
        for key, counters in sums.items()
        if (nonzero := {name: delta for name, delta in counters.items() if delta})
    }
    return Chunk(tuple(members), increments)
