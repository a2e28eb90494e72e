"""Epoch-fenced apply in the core (``tally.core.fence``, ``tally.core.epochs``), as pure functions.

The property: over any interleaving of an owner and its finishers, each part of each item of each batch is added at
most once, and exactly once when the batches are finished. A model runs the writes the core plans against items
whose conditions are evaluated as DynamoDB evaluates the expression the store encodes (``admits_fenced``), with:

- an owner applying its epoch's batches one after another, whose answers may be lost (it sends the write again),
  which may be killed or run out of time (its batch stays FENCED and its epoch ends), paused while others work;
- finishers (any number at once) that read a FENCED batch's header and the items' marks (as they are, or as they
  were at any earlier point: an eventually consistent read) and send the writes those marks do not show applied
  (``still_to_send``), with the batch's own epoch and sequence, until their own deadline;
- marks pruned by the owner's writes when ``prunable`` says so, and headers swept by TTL once DONE;
- a clock that moves on by any amount between steps.

Broken variants of the planner (a mark forgotten, the finisher's epoch used, a prune without the DONE horizon) and
of the finisher's skip (a part skipped whose mark the read does not reach) make the same model fail: the property
can fail.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tally.core.defaults import NO_DEFAULTS, CounterDefaults, CounterRule
from tally.core.epochs import EPOCH_BYTES, MAX_SEQ, FencedBatch, WriterEpoch
from tally.core.fence import (
    MAX_MARK,
    MAX_PRUNES_PER_WRITE,
    PART_SLOTS,
    HeaderSeen,
    Refusal,
    batches_to_look_up,
    fence_horizon_ms,
    mark_batch,
    mark_value,
    plan_fenced_apply,
    prunable,
    refusal,
    still_to_send,
    unstorable_sums,
    without_prune,
)
from tally.core.items import CounterItem
from tally.core.ledger import BatchState
from tally.core.patterns import KeyPattern
from tally.core.windows import MOVE_AT_BYTES
from tally.cost.capacity import WRITE_UNIT_BYTES, item_size
from tally.store.schema import fence_attribute
from tests.support.reference import admits_fenced

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tally.core.aggregate import Totals
    from tally.core.items import ItemKey
    from tally.core.write import FencedWrite

TIMEOUT_MS = 60_000
MARGIN_MS = 1_000
HORIZON_MS = fence_horizon_ms(TIMEOUT_MS // 1000, MARGIN_MS)
ITEMS: tuple[ItemKey, ...] = ("a", "b", CounterItem("a", "h#2100-01-01T03:00Z"))
COUNTERS = ("n", "m", "k")


def _draw(seed: int) -> Callable[[int], bytes]:
    """Random bytes from a seed, so that Hypothesis shrinks and replays epochs."""
    state = [seed]

    def draw(size: int) -> bytes:
        state[0] += 1
        return (state[0] * 0x9E3779B97F4A7C15 % 2**64).to_bytes(8, "big")[:size].ljust(size, b"\0")

    return draw


# ------------------------------------------------------------------------------------------------ epochs
def test_an_epoch_is_drawn_at_its_first_batch_and_numbers_its_batches_from_one() -> None:
    draws: list[int] = []

    def random_bytes(size: int) -> bytes:
        draws.append(size)
        return secrets.token_bytes(size)

    epoch = WriterEpoch()
    assert epoch.epoch is None
    assert not draws
    epoch, first = epoch.next_batch(random_bytes)
    epoch, second = epoch.next_batch(random_bytes)
    assert draws == [EPOCH_BYTES]
    assert (first.epoch, first.seq) == (second.epoch, 1)
    assert second.seq == 2
    assert len(first.epoch) == 11


def test_an_ended_epoch_is_never_continued() -> None:
    epoch, first = WriterEpoch().next_batch(secrets.token_bytes)
    epoch, after = epoch.ended().next_batch(secrets.token_bytes)
    assert after.epoch != first.epoch
    assert after.seq == 1


def test_an_epoch_past_its_last_sequence_draws_a_new_one() -> None:
    epoch, last = WriterEpoch("AAAAAAAAAAA", MAX_SEQ - 1).next_batch(secrets.token_bytes)
    _, after = epoch.next_batch(secrets.token_bytes)
    assert last.seq == MAX_SEQ
    assert after.epoch != last.epoch
    assert after.seq == 1


@given(st.binary(min_size=EPOCH_BYTES, max_size=EPOCH_BYTES), st.integers(1, MAX_SEQ))
def test_a_fenced_batch_id_names_its_epoch_and_sequence(raw: bytes, seq: int) -> None:
    _, batch = WriterEpoch().next_batch(lambda _: raw)
    batch = replace(batch, seq=seq)
    assert FencedBatch.parse(batch.batch_id) == batch
    assert all(c in "0123456789abcdef" for c in batch.batch_id)  # journal batch ids stay hex


def test_an_unfenced_batch_id_names_no_epoch() -> None:
    assert FencedBatch.parse(secrets.token_hex(16)) is None  # today's ids: uuid4().hex
    assert FencedBatch.parse("direct-1795000000000") is None
    with pytest.raises(ValueError, match="sequence"):
        FencedBatch("AAAAAAAAAAA", 0)
    with pytest.raises(ValueError, match="epoch id"):
        FencedBatch("short", 1)


# ------------------------------------------------------------------------------------------------ plans
def test_a_finisher_plans_the_owner_marks_from_the_batch_id() -> None:
    _, batch = WriterEpoch().next_batch(secrets.token_bytes)
    owner = plan_fenced_apply({"a": {"n": 1}}, batch, defaults=NO_DEFAULTS)
    finisher = plan_fenced_apply({"a": {"n": 1}}, FencedBatch.parse(batch.batch_id) or batch, defaults=NO_DEFAULTS)
    assert owner == finisher
    ((write,),) = owner
    assert (write.epoch, write.mark, write.after) == (batch.epoch, mark_value(batch.seq, 0), None)


def test_an_item_over_the_counter_limit_takes_parts_each_after_the_previous() -> None:
    _, batch = WriterEpoch().next_batch(secrets.token_bytes)
    counters = {f"c{i}": i + 1 for i in range(5)}
    ((first, second, third),) = plan_fenced_apply(
        {"a": counters}, batch, defaults=NO_DEFAULTS, counter_limit=lambda _: 2
    )
    assert [dict(w.adds) for w in (first, second, third)] == [{"c0": 1, "c1": 2}, {"c2": 3, "c3": 4}, {"c4": 5}]
    assert first.after is None
    assert second.after == first.mark
    assert third.after == second.mark
    assert [mark_batch(w.epoch, w.mark) for w in (first, second, third)] == [batch] * 3
    assert mark_batch(batch.epoch, PART_SLOTS - 1) is None  # no batch 0: a mark not written by mark_value


def test_zero_deltas_write_nothing_and_start_values_ride_on_the_all_time_item() -> None:
    _, batch = WriterEpoch().next_batch(secrets.token_bytes)
    defaults = CounterDefaults((CounterRule(KeyPattern("a"), "n", Decimal(100)),))
    plans = plan_fenced_apply(
        {"a": {"n": 1, "m": 0}, "b": {"n": 0}, CounterItem("a", "h#x"): {"n": 2}}, batch, defaults=defaults
    )
    assert [(w.item, dict(w.adds), dict(w.starts)) for (w,) in plans] == [
        ("a", {"n": 1}, {"n": Decimal(100)}),
        (CounterItem("a", "h#x"), {"n": 2}, {}),  # windows count from zero
    ]


def test_a_refusal_says_applied_prune_moved_or_out_of_order() -> None:
    _, batch = WriterEpoch().next_batch(secrets.token_bytes)
    ((first, second),) = plan_fenced_apply(
        {"a": {"n": 1, "m": 1}}, batch, defaults=NO_DEFAULTS, counter_limit=lambda _: 1, prune={"a": {"other": 7}}
    )
    assert dict(first.prune) == {"other": 7}
    assert not second.prune
    e = batch.epoch
    assert refusal(first, {e: first.mark}) is Refusal.APPLIED
    assert refusal(first, {e: second.mark}) is Refusal.APPLIED
    assert refusal(first, {"other": 8}) is Refusal.PRUNE_MOVED
    assert admits_fenced(without_prune(first), {"other": 8})
    assert refusal(second, {e: second.mark}) is Refusal.APPLIED
    assert refusal(second, {}) is Refusal.OUT_OF_ORDER  # the first part is not on the item
    assert mark_value(MAX_SEQ, PART_SLOTS - 1) == MAX_MARK
    with pytest.raises(ValueError, match="parts"):
        mark_value(1, PART_SLOTS)


def test_the_pre_commit_check_finds_a_sum_dynamodb_would_refuse() -> None:
    big = Decimal("9" * 38)
    found = unstorable_sums(
        {"a": {"n": big}, "b": {"n": Decimal(1)}}, {"a": {"n": Decimal("0.1")}, "b": {"n": 1}, "c": {"n": 1}}
    )
    assert list(found) == ["a"]
    assert "'a'/'n'" in found["a"]


# ------------------------------------------------------------------------------------------------ prune
def test_a_mark_goes_only_once_its_batch_was_done_past_the_horizon() -> None:
    batch = FencedBatch("AAAAAAAAAAA", 3)
    fence = {batch.epoch: mark_value(3, 1), "own________": mark_value(9, 0), "junk": 5}
    done = HeaderSeen(BatchState.DONE, read_at_ms=0, done_at_ms=1_000)
    assert prunable(fence, "own________", {batch: done}, 1_000 + HORIZON_MS, HORIZON_MS) == {}
    assert prunable(fence, "own________", {batch: done}, 1_001 + HORIZON_MS, HORIZON_MS) == {
        batch.epoch: fence[batch.epoch]
    }
    for state in (BatchState.FENCED, BatchState.COMMITTED, BatchState.PREPARING, BatchState.ABORTED):
        assert prunable(fence, None, {batch: HeaderSeen(state, 0, 1_000)}, 10 * HORIZON_MS, HORIZON_MS) == {}
    gone = HeaderSeen(None, read_at_ms=1_000, consistent=True)
    assert prunable(fence, None, {batch: gone}, 1_001 + HORIZON_MS, HORIZON_MS) == {batch.epoch: fence[batch.epoch]}
    stale = HeaderSeen(None, read_at_ms=1_000)  # an eventually consistent read may miss a header just written
    assert prunable(fence, None, {batch: stale}, 10 * HORIZON_MS, HORIZON_MS) == {}
    assert batches_to_look_up(fence, "own________", {batch: stale}) == (batch,)
    assert batches_to_look_up(fence, "own________", {batch: done}) == ()


def test_a_write_prunes_few_marks_oldest_batches_first() -> None:
    epochs = [FencedBatch(f"{chr(65 + i)}AAAAAAAAAA", 10 - i) for i in range(6)]
    fence = {b.epoch: mark_value(b.seq, 0) for b in epochs}
    seen = {b: HeaderSeen(BatchState.DONE, 0, 0) for b in epochs}
    pruned = prunable(fence, None, seen, HORIZON_MS + 1, HORIZON_MS)
    assert len(pruned) == MAX_PRUNES_PER_WRITE
    assert set(pruned) == {b.epoch for b in sorted(epochs, key=lambda b: b.seq)[:MAX_PRUNES_PER_WRITE]}


# ------------------------------------------------------------------------------------------------ size
MARKS_WITHIN_A_KB = 10
"""Marks a key item at ``MOVE_AT_BYTES`` plus an hour of two counters can carry within its first KB (the default
concurrency, 5 containers, plus as many epochs ended recently)."""


@given(st.integers(1, MAX_SEQ), st.integers(0, PART_SLOTS - 1))
def test_a_key_item_about_to_move_its_windows_with_its_marks_stays_within_one_write_unit(seq: int, part: int) -> None:
    # The key item as the mover leaves it at worst: just under MOVE_AT_BYTES, then an hour of two counters lands
    # (two 38-digit window counters, about 60 bytes as tally's names spell them), then the marks.
    hour = {f"w#h#2100-01-01T03:00Z\x1f{name}": {"N": "1" * 38} for name in ("units", "cost")}
    item: dict[str, dict[str, str]] = {"pk": {"S": "k" * 17}, "sk": {"S": "all"}, "pad": {"S": ""}}
    item["pad"] = {"S": "x" * (MOVE_AT_BYTES - 1 - item_size(item))}
    item.update(hour)
    for index in range(MARKS_WITHIN_A_KB):
        epoch = FencedBatch(f"{index:02d}AAAAAAAAA", seq).epoch
        item[fence_attribute(epoch)] = {"N": str(mark_value(seq, part))}
    assert item_size(item) <= WRITE_UNIT_BYTES, item_size(item)


# ------------------------------------------------------------------------------------------------ the model
def correct_planner(
    increments: Totals, batch: FencedBatch, prune: Mapping[ItemKey, Mapping[str, int]]
) -> tuple[tuple[FencedWrite, ...], ...]:
    return plan_fenced_apply(increments, batch, defaults=NO_DEFAULTS, counter_limit=lambda _: 2, prune=prune)


@dataclass
class _Item:
    counters: Counter[str] = field(default_factory=Counter)
    fence: dict[str, int] = field(default_factory=dict)


@dataclass
class _Header:
    state: BatchState
    done_at_ms: int | None = None


@dataclass
class _Sender:
    """The owner or a finisher: the writes of one batch, sent in order, until its deadline."""

    batch: FencedBatch
    writes: list[FencedWrite]
    deadline_ms: int
    sent: int = 0


@dataclass
class _Container:
    """A Lambda execution environment: its epoch, and the batch it applies."""

    epoch: WriterEpoch = field(default_factory=WriterEpoch)
    owner: _Sender | None = None


@dataclass
class Model:
    planner: Callable[..., tuple[tuple[FencedWrite, ...], ...]] = correct_planner
    horizon_ms: int = HORIZON_MS
    finisher_epoch: bool = False
    """A broken variant: finishers plan with an epoch of their own."""
    forget_mark: bool = False
    """A broken variant: a write sets no mark."""
    skip: Callable[..., tuple[tuple[FencedWrite, ...], ...]] = still_to_send
    """What a finisher leaves out from the marks it read (``still_to_send``, or a broken variant)."""
    history: list[dict[ItemKey, dict[str, int]]] = field(default_factory=lambda: [{}])
    """The items' marks after each write: what an eventually consistent read may return."""
    now_ms: int = 0
    items: dict[ItemKey, _Item] = field(default_factory=dict)
    headers: dict[FencedBatch, _Header] = field(default_factory=dict)
    increments: dict[FencedBatch, dict[ItemKey, dict[str, int]]] = field(default_factory=dict)
    applied: Counter[tuple[FencedBatch, ItemKey, frozenset[str]]] = field(default_factory=Counter)
    containers: list[_Container] = field(default_factory=lambda: [_Container(), _Container()])
    finishers: list[_Sender] = field(default_factory=list)
    draw: Callable[[int], bytes] = field(default_factory=lambda: _draw(1))

    # ----------------------------------------------------------------------------- what DynamoDB does
    def send(self, sender: _Sender, *, lost: bool = False) -> None:
        """Send the sender's next write; an answer lost leaves it to be sent again."""
        write = sender.writes[sender.sent]
        item = self.items.setdefault(write.item, _Item())
        if admits_fenced(write, item.fence):
            for name, delta in write.adds.items():
                item.counters[name] += int(delta)
            if not self.forget_mark:
                item.fence[write.epoch] = write.mark
            for epoch in write.prune:
                del item.fence[epoch]
            self.history.append({key: dict(state.fence) for key, state in self.items.items()})
            self.applied[(sender.batch, write.item, frozenset(write.adds))] += 1
            if not lost:
                sender.sent += 1
            return
        match refusal(write, item.fence):
            case Refusal.APPLIED:
                sender.sent += 1
            case Refusal.PRUNE_MOVED:
                sender.writes[sender.sent] = without_prune(write)
            case Refusal.OUT_OF_ORDER:
                raise AssertionError(f"a part sent out of order: {write}")

    def plan(self, batch: FencedBatch, prune: Mapping[ItemKey, Mapping[str, int]]) -> list[FencedWrite]:
        return [write for writes in self.planner(self.increments[batch], batch, prune) for write in writes]

    # ----------------------------------------------------------------------------- the actors
    def owner_step(self, choice: int) -> None:
        """A container's next step: commit its next batch, or send the next write of the one it applies."""
        container, choice = self.containers[choice % len(self.containers)], choice // len(self.containers)
        if container.owner is None:
            container.epoch, batch = container.epoch.next_batch(self.draw)
            chosen = [item for bit, item in enumerate(ITEMS) if choice >> bit & 1] or [ITEMS[0]]
            self.increments[batch] = {item: {name: 1 + choice % 5 for name in COUNTERS} for item in chosen}
            self.headers[batch] = _Header(BatchState.FENCED)
            prunes = self._prunes(container.epoch.epoch, chosen)
            container.owner = _Sender(batch, self.plan(batch, prunes), self.now_ms + TIMEOUT_MS)
            return
        owner = container.owner
        self._step(owner, lost=choice % 3 == 0)
        if container.owner is owner and owner.sent == len(owner.writes):
            self._done(owner.batch, owner)
            container.owner = None

    def restart(self, choice: int) -> None:
        """A container runs out of time, is killed or restarted: its batch stays FENCED, its epoch ends."""
        self._left(self.containers[choice % len(self.containers)])

    def _left(self, container: _Container) -> None:
        container.owner = None
        container.epoch = container.epoch.ended()

    def finisher_start(self, choice: int) -> None:
        committed = sorted(batch for batch, header in self.headers.items() if header.state is BatchState.FENCED)
        if not committed:
            return
        batch = committed[choice % len(committed)]
        planned = batch
        if self.finisher_epoch:
            _, planned = WriterEpoch().next_batch(_draw(choice + 10_000))
            self.increments[planned] = self.increments[batch]
        read = self.history[-1 - choice // len(committed) % len(self.history)]  # as now, or as it was
        self.finishers.append(_Sender(batch, self.missing(planned, read), self.now_ms + TIMEOUT_MS))

    def missing(self, batch: FencedBatch, read: Mapping[ItemKey, Mapping[str, int]]) -> list[FencedWrite]:
        """A finisher's writes of ``batch``: those the marks it ``read`` do not show applied."""
        marks = {item: fence[batch.epoch] for item, fence in read.items() if batch.epoch in fence}
        plans = self.planner(self.increments[batch], batch, {})
        return [write for writes in self.skip(plans, marks) for write in writes]

    def finisher_step(self, choice: int) -> None:
        if not self.finishers:
            return
        finisher = self.finishers[choice % len(self.finishers)]
        if finisher.sent < len(finisher.writes):
            self._step(finisher, lost=choice % 4 == 0)
        elif self.now_ms > finisher.deadline_ms:  # it read every part applied, then was stopped before its DONE
            self.finishers.remove(finisher)
        # DONE once every part is sent: at once for a finisher that read every part applied (nothing to send)
        if finisher in self.finishers and finisher.sent == len(finisher.writes):
            self._done(finisher.batch, finisher)
            self.finishers.remove(finisher)

    def sweep(self, choice: int) -> None:
        """The TTL sweep deletes a DONE header (journal items expire long after their lease)."""
        done = sorted(batch for batch, header in self.headers.items() if header.state is BatchState.DONE)
        if done:
            del self.headers[done[choice % len(done)]]

    def _step(self, sender: _Sender, *, lost: bool) -> None:
        if self.now_ms > sender.deadline_ms:  # Lambda stops an invocation at its deadline
            for container in self.containers:
                if container.owner is sender:
                    self._left(container)
            if sender in self.finishers:
                self.finishers.remove(sender)
            return
        self.send(sender, lost=lost)

    def _done(self, batch: FencedBatch, sender: _Sender | None = None) -> None:
        """DONE, with ``done_at`` the sender's clock: read once, at the start of its invocation."""
        header = self.headers.get(batch)
        if header is not None and header.state is BatchState.FENCED:
            started = self.now_ms if sender is None else sender.deadline_ms - TIMEOUT_MS
            header.state, header.done_at_ms = BatchState.DONE, started

    def _prunes(self, own: str | None, items: Sequence[ItemKey]) -> dict[ItemKey, dict[str, int]]:
        prunes: dict[ItemKey, dict[str, int]] = {}
        for item in items:
            fence = self.items.get(item, _Item()).fence
            seen = {batch: self._read(batch) for batch in batches_to_look_up(fence, own or "", {})}
            prunes[item] = prunable(fence, own, seen, self.now_ms, self.horizon_ms)
        return prunes

    def _read(self, batch: FencedBatch) -> HeaderSeen:
        header = self.headers.get(batch)
        if header is None:
            return HeaderSeen(None, self.now_ms, consistent=True)
        return HeaderSeen(header.state, self.now_ms, header.done_at_ms)

    # ----------------------------------------------------------------------------- the checks
    def twice(self) -> list[tuple[FencedBatch, ItemKey, frozenset[str]]]:
        return [part for part, count in self.applied.items() if count > 1]

    def finish_all(self) -> None:
        """Everyone else gone, a last finisher finishes every batch still FENCED."""
        for container in self.containers:
            self._left(container)
        self.finishers.clear()
        for batch, header in sorted(self.headers.items()):
            if header.state is BatchState.FENCED:
                now = {item: state.fence for item, state in self.items.items()}
                finisher = _Sender(batch, self.missing(batch, now), self.now_ms + TIMEOUT_MS)
                while finisher.sent < len(finisher.writes):
                    self.send(finisher)
                self._done(batch)


STEPS = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 63)), max_size=80)


def run(steps: Sequence[tuple[int, int]], model: Model) -> Model:
    for action, choice in steps:
        if action == 0:
            model.owner_step(choice)
        elif action == 1:
            model.restart(choice)
        elif action == 2:
            model.finisher_start(choice)
        elif action == 3:
            model.finisher_step(choice)
        elif action == 4:
            model.now_ms += choice * 5_000  # up to ~5 minutes: past deadlines and horizons
        elif action == 5:
            model.sweep(choice)
        else:
            model.finisher_step(choice)
        assert not model.twice(), model.twice()
    return model


A_FINISHER_BESIDE_THE_OWNER = [
    (0, 0),  # container 0 commits a batch on item "a" (two parts)
    (2, 0),  # a finisher reads it FENCED
    (0, 2),  # the owner sends the first part
    (3, 1),  # the finisher sends it again: refused, applied
    (0, 0),  # the owner sends the second part, its answer lost
    (0, 2),  # the owner sends it again: refused, applied; the batch is DONE
    (3, 1),  # the finisher sends the second part: refused, applied
]
A_PRUNE_RACING_A_FINISHER = [
    (0, 0),  # container 0 commits a batch B on item "a"
    (2, 0),  # a finisher reads B FENCED, then pauses
    (0, 2),
    (0, 2),  # the owner applies both parts: B is DONE
    (0, 3),  # container 1 commits a batch on "a": B's mark is prunable only past the horizon
    (0, 3),
    (0, 3),  # container 1 applies both parts
    (3, 1),  # the finisher wakes up and sends B's first part
    (3, 1),
]
A_PRUNE_AFTER_A_LONG_INVOCATION = [
    (0, 0),  # container 0 commits a batch B on "a" at 0 s: its clock, read once, says 0 s
    (4, 11),  # 55 s
    (2, 0),  # a finisher reads B FENCED at 55 s (its deadline: 115 s)
    (0, 2),
    (0, 2),  # the owner applies both parts at 55 s: B is DONE, done_at 0 s (the owner's clock)
    (4, 2),  # 65 s: past done_at + timeout + margin, not past done_at + twice the timeout
    (0, 3),  # container 1 commits a batch on "a"
    (0, 3),
    (0, 3),
    (3, 1),  # the finisher, within its deadline, sends B's first part
    (3, 1),
]
A_PRUNE_PAST_THE_HORIZON = [
    *A_PRUNE_RACING_A_FINISHER[:4],
    (4, 63),  # past the finisher's deadline and the horizon: the finisher is stopped, B's mark may go
    (3, 1),
    (0, 3),
    (0, 3),
    (0, 3),
]

A_FINISHER_WITH_NOTHING_LEFT = [
    (0, 0),  # container 0 commits a batch on item "a" (two parts)
    (0, 2),  # the owner sends the first part
    (0, 0),  # the owner sends the second part, its answer lost
    (2, 0),  # a finisher reads both parts applied: it has nothing to send
    (3, 0),  # its step marks the batch DONE, sending nothing
]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
@example(A_FINISHER_BESIDE_THE_OWNER)
@example(A_PRUNE_RACING_A_FINISHER)
@example(A_PRUNE_PAST_THE_HORIZON)
@example(A_PRUNE_AFTER_A_LONG_INVOCATION)
@example(A_FINISHER_WITH_NOTHING_LEFT)
def test_a_part_is_added_at_most_once_over_any_interleaving_and_exactly_once_when_finished(
    steps: list[tuple[int, int]],
) -> None:
    model = run(steps, Model())
    model.finish_all()
    assert not model.twice()
    for batch, increments in model.increments.items():
        for item in increments:
            for writes in correct_planner({item: increments[item]}, batch, {}):
                for write in writes:
                    assert model.applied[(batch, write.item, frozenset(write.adds))] == 1, (batch, write)
    totals: Counter[tuple[ItemKey, str]] = Counter()
    for increments in model.increments.values():
        for item, counters in increments.items():
            for name, delta in counters.items():
                totals[(item, name)] += delta
    assert {(item, name): value for item, state in model.items.items() for name, value in state.counters.items()} == {
        key: value for key, value in totals.items() if value
    }


@pytest.mark.parametrize(
    "steps",
    [A_FINISHER_BESIDE_THE_OWNER, A_PRUNE_RACING_A_FINISHER, A_PRUNE_PAST_THE_HORIZON, A_PRUNE_AFTER_A_LONG_INVOCATION],
    ids=repr,
)
def test_the_situations_the_broken_variants_fail_keep_every_part_once(steps: list[tuple[int, int]]) -> None:
    model = run(steps, Model())
    model.finish_all()
    assert not model.twice()
    assert model.applied
    assert set(model.applied.values()) == {1}


def test_a_mark_pruned_past_the_horizon_is_gone_and_counts_stay_exact() -> None:
    model = run(A_PRUNE_PAST_THE_HORIZON, Model())
    first, second = model.increments
    assert first.epoch not in model.items["a"].fence  # pruned by container 1's write
    assert second.epoch in model.items["a"].fence


def _fails(steps: list[tuple[int, int]], model: Model) -> bool:
    try:
        run(steps, model).finish_all()
    except AssertionError:
        return True
    return bool(model.twice())


def test_a_forgotten_mark_fails_the_model() -> None:
    # A write that sets no mark: an answer lost and the write sent again, or a finisher beside the owner, adds twice.
    assert _fails(A_FINISHER_BESIDE_THE_OWNER, Model(forget_mark=True))


def test_a_finisher_using_its_own_epoch_fails_the_model() -> None:
    assert _fails(A_FINISHER_BESIDE_THE_OWNER, Model(finisher_epoch=True))


def test_a_prune_without_the_done_horizon_fails_the_model() -> None:
    assert _fails(A_PRUNE_RACING_A_FINISHER, Model(horizon_ms=-1))


def test_a_horizon_of_one_timeout_fails_the_model_when_done_at_is_the_invocation_s_start() -> None:
    # done_at is the clock of the invocation that marked the batch DONE, read at its start: a finisher that read the
    # batch FENCED late in that invocation runs up to two timeouts after done_at.
    assert _fails(A_PRUNE_AFTER_A_LONG_INVOCATION, Model(horizon_ms=TIMEOUT_MS + MARGIN_MS))
    assert not _fails(A_PRUNE_AFTER_A_LONG_INVOCATION, Model())


# ------------------------------------------------------------------------------------------------ what a finisher sends
A_PART_LEFT_BY_A_KILLED_OWNER = [
    (0, 0),  # container 0 commits a batch on item "a" (two parts)
    (0, 2),  # the owner sends the first part
    (1, 0),  # and is killed: the batch stays FENCED, its first part on "a"; the last finisher reads that mark
]
A_FINISHER_READING_STALE_MARKS = [
    *A_PART_LEFT_BY_A_KILLED_OWNER,
    (2, 1),  # a finisher reads the batch FENCED and the marks as they were before the first part
    (3, 1),  # it sends the first part again: refused, applied
    (3, 1),
]


def _each_part_once(model: Model) -> bool:
    return all(
        model.applied[(batch, write.item, frozenset(write.adds))] == 1
        for batch, increments in model.increments.items()
        for writes in correct_planner(increments, batch, {})
        for write in writes
    )


def skip_the_batch(
    plans: Sequence[Sequence[FencedWrite]], marks: Mapping[ItemKey, int]
) -> tuple[tuple[FencedWrite, ...], ...]:
    """A broken variant: an item whose mark names the batch is taken as having all its parts."""
    return tuple(
        tuple(writes)
        for writes in plans
        if mark_batch(writes[0].epoch, marks.get(writes[0].item, 0)) != mark_batch(writes[0].epoch, writes[0].mark)
    )


@pytest.mark.parametrize("steps", [A_PART_LEFT_BY_A_KILLED_OWNER, A_FINISHER_READING_STALE_MARKS], ids=repr)
def test_a_finisher_sends_what_the_marks_it_read_do_not_show_and_every_part_lands_once(
    steps: list[tuple[int, int]],
) -> None:
    model = run(steps, Model())
    model.finish_all()
    assert _each_part_once(model)
    assert not model.twice()


def test_the_last_finisher_of_a_killed_owner_s_batch_plans_only_the_part_missing() -> None:
    model = run(A_PART_LEFT_BY_A_KILLED_OWNER, Model())
    ((batch, _),) = model.headers.items()
    first, second = correct_planner(model.increments[batch], batch, {})[0]
    assert model.missing(batch, {"a": model.items["a"].fence}) == [second]
    assert model.missing(batch, {}) == [first, second]  # nothing read: everything, the condition refuses the first


def test_a_finisher_skipping_a_part_its_read_mark_does_not_reach_fails_the_model() -> None:
    model = run(A_PART_LEFT_BY_A_KILLED_OWNER, Model(skip=skip_the_batch))
    model.finish_all()
    assert not _each_part_once(model)  # the second part never lands


PARTS = st.lists(st.integers(1, 4), min_size=1, max_size=len(ITEMS))
"""Parts per item of a batch (counters beyond the limit of 2 per write)."""


@st.composite
def marks_read(draw: st.DrawFn) -> tuple[tuple[tuple[FencedWrite, ...], ...], list[int], dict[ItemKey, int], bool]:
    """A batch's plans, how many parts of each item are on it, and marks a read returned: each as it is now, or as
    it was (fewer parts, an earlier batch's mark, none), or not returned at all."""
    _, batch = WriterEpoch().next_batch(_draw(draw(st.integers(0, 1000))))
    batch = replace(batch, seq=draw(st.integers(2, MAX_SEQ)))
    parts = draw(PARTS)
    increments = {ITEMS[i]: {f"c{j}": 1 for j in range(2 * count)} for i, count in enumerate(parts)}
    plans = plan_fenced_apply(increments, batch, defaults=NO_DEFAULTS, counter_limit=lambda _: 2)
    applied = [draw(st.integers(0, count)) for count in parts]
    marks: dict[ItemKey, int] = {}
    exact = True
    for writes, on_item in zip(plans, applied, strict=True):
        item = writes[0].item
        seen = draw(st.sampled_from(["now", "earlier", "older_batch", "none"]))
        if seen == "now" or (seen == "earlier" and on_item == 0):
            if on_item:
                marks[item] = writes[on_item - 1].mark
            continue
        exact = False
        if seen == "earlier":
            parts_then = draw(st.integers(0, on_item - 1))
            if parts_then:
                marks[item] = writes[parts_then - 1].mark
        elif seen == "older_batch":
            marks[item] = mark_value(draw(st.integers(1, batch.seq - 1)), draw(st.integers(0, PART_SLOTS - 1)))
    return plans, applied, marks, exact


@given(marks_read())
def test_a_finisher_never_skips_a_part_not_on_its_item_and_sends_nothing_more_when_the_read_is_current(
    drawn: tuple[tuple[tuple[FencedWrite, ...], ...], list[int], dict[ItemKey, int], bool],
) -> None:
    plans, applied, marks, exact = drawn
    left = {writes[0].item: writes for writes in still_to_send(plans, marks)}
    for writes, on_item in zip(plans, applied, strict=True):
        missing = writes[on_item:]
        sent = left.get(writes[0].item, ())
        # Never skips an unapplied part, in order, after its predecessor: the sent parts end with the missing ones.
        assert sent[len(sent) - len(missing) :] == missing
        assert sent == writes[len(writes) - len(sent) :]
        if exact:
            assert sent == missing  # a current read re-sends nothing
    if exact and all(on_item == len(writes) for writes, on_item in zip(plans, applied, strict=True)):
        assert still_to_send(plans, marks) == ()
