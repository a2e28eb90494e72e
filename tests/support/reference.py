"""The reference models the tests compare with: what a counter pattern means, applied one message at a time, and
what DynamoDB does with a planned write's conditions.

Each says what any batching of the same messages, in the same order, must give; the product never imports them
(they lived in the core until they were found shipping in the Lambda package only for the tests' sake).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tally.core.numbers import add
from tally.core.thresholds import Direction, crossed

if TYPE_CHECKING:
    from collections.abc import Container, Iterable, Mapping

    from tally.core.bounds import Bound
    from tally.core.model import Message
    from tally.core.numbers import Number
    from tally.core.thresholds import Levels
    from tally.core.write import FencedWrite, ItemWrite


def expected_value(start: Number, amounts: Iterable[Number], bound: Bound) -> tuple[Number, tuple[int, ...]]:
    """One bounded counter's value after the messages' net ``amounts`` are applied one after another from
    ``start``, and the positions of those refused.

    Any batching of the same messages in the same order gives this result: a batch whose condition holds
    applies steps that each hold, and one whose condition fails falls back to these single steps.
    """
    value = start
    refused: list[int] = []
    for position, amount in enumerate(amounts):
        if bound.refusal(value, amount) is None:
            value = add(value, amount)
        else:
            refused.append(position)
    return value, tuple(refused)


def expected_crossings(
    start: Number, amounts: Iterable[tuple[str, Number]], levels: Levels, resets: Container[str] = ()
) -> list[tuple[Number, Direction, str]]:
    """The crossings of one counter whose messages' net ``amounts`` (message id, amount) are applied one after
    another from ``start``: (level, direction, message id); a message id in ``resets`` sets the value to its
    amount instead. Any batching of the same messages in the same order gives these."""
    value = start
    found: list[tuple[Number, Direction, str]] = []
    for message_id, amount in amounts:
        after = amount if message_id in resets else add(value, amount)
        found.extend(
            (level, direction, message_id)
            for level, direction in levels.each()
            if crossed(level, direction, value, after)
        )
        value = after
    return found


def expected_values(messages: Iterable[Message]) -> dict[str, dict[str, Number]]:
    """The all-time counters after applying ``messages`` one by one, in order (the meaning of a reset).

    Pass the *distinct* messages (first copy of each id) in the order they were first applied. Counters
    never touched are absent; start values (``CounterDefaults``) are not modelled. Exact arithmetic.
    """
    values: dict[str, dict[str, Number]] = {}
    for message in messages:
        for event in message.events:
            counters = values.setdefault(event.key, {})
            if event.reset is not None:
                counters.update(event.reset)
                continue
            for name, delta in event.deltas.items():
                counters[name] = add(counters.get(name, 0), delta)
    return values


def admits(write: ItemWrite, stored: Mapping[str, Number]) -> bool:
    """Whether DynamoDB lets ``write`` through an item holding ``stored`` (a counter it does not hold: absent): its
    conditions as the store encodes them (``tally.store.expressions``: ``bound_condition``, ``threshold_condition``;
    a comparison with a missing attribute is false, so only ``if_missing`` lets a missing counter through). The
    count of moves it may be conditioned on is not modelled (no window is moved here)."""
    for bound in write.bounds:
        value = stored.get(bound.counter)
        if value is None:
            held = bound.if_missing
        else:
            held = (bound.at_least is None or value >= bound.at_least) and (
                bound.at_most is None or value <= bound.at_most
            )
        if not held:
            return False
    for level in write.free:
        value = stored.get(level.counter)
        if value is None:
            held = level.if_missing
        elif level.direction is Direction.RISING:
            held = (level.low is not None and value < level.low) or (level.high is not None and value >= level.high)
        else:
            held = (level.low is not None and value <= level.low) or (level.high is not None and value > level.high)
        if not held:
            return False
    for exact in write.exact:
        value = stored.get(exact.counter)
        if not (exact.if_missing if value is None else value == exact.value):
            return False
    return True


def admits_fenced(write: FencedWrite, fence: Mapping[str, int]) -> bool:
    """Whether an item whose epochs' marks are ``fence`` lets a fenced write commit, as DynamoDB evaluates the
    condition the journal's store encodes: the first part needs its epoch's mark absent or lower, a later part the
    previous part's value exactly, and every mark it removes still at the value seen."""
    own = fence.get(write.epoch)
    ok = (own is None or own < write.mark) if write.after is None else own == write.after
    return ok and all(fence.get(epoch) == value for epoch, value in write.prune.items())
