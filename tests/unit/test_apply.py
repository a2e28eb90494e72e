"""Unit tests for ``tally.commit.applier.Applier`` against an in-memory, scriptable counter store."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.commit.applier import Applier, ApplyOutcome, RetryPolicy
from tally.commit.marker_reads import MarkerReadGate
from tally.commit.protocol import CommitProtocol
from tally.core.aggregate import MessageTotals
from tally.core.ledger import BatchRecord, BatchState, MarkerMet, MarkerRecord, MarkersExistError
from tally.core.model import RejectCode, Rejection
from tally.core.numbers import add
from tally.core.plan import plan_transactions
from tally.errors import (
    RetryableStoreError,
    StoreError,
    UnsettledMessagesError,
    WriteRejectedError,
)
from tally.store.requests import NUMBER_RANGE

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from tally.core.aggregate import Totals
    from tally.core.items import ItemKey
    from tally.core.numbers import Number
    from tally.core.plan import WritePlan
    from tally.core.write import DirectWrite, ItemRead

NOW_MS = 1_704_067_200_000
DEFAULT_POLICY = RetryPolicy()
RESERVE_MS = DEFAULT_POLICY.reserve_ms
PLENTY_MS = 600_000

LOSE_RESPONSE: Literal["lose-response"] = "lose-response"
"""Script step: the transaction commits, then the caller sees a retryable error (the response was lost)."""
Step: TypeAlias = StoreError | Literal["lose-response"] | None
"""What the store does on one call: raise this error before committing, commit and lose the response, or
behave normally (commit, or MarkersExistError / WriteRejectedError as the data dictates)."""


class Clock:
    """The invocation's remaining time; sleeping and store calls spend it, no real time passes."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining = remaining_ms
        self.sleeps: list[float] = []

    def remaining_ms(self) -> int:
        return self.remaining

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.remaining -= round(seconds * 1000)


@dataclass(frozen=True)
class Sent:
    """What one transaction the store was asked to write carried: its messages and its net increments per item."""

    message_ids: tuple[str, ...]
    increments: Mapping[ItemKey, Mapping[str, Number]]

    @classmethod
    def of(cls, write: DirectWrite) -> Sent:
        return cls(
            tuple(claim.message_id for claim in write.claims),
            {item.item: item.adds for item in write.items if item.adds},
        )


@dataclass
class FakeCounterStore:
    """In-memory ``CounterStore``: one idempotency marker per message, counters summed per key.

    It refuses a chunk holding an already-marked message with ``MarkersExistError`` naming them, and a
    chunk holding a ``poison`` message with ``WriteRejectedError`` (as DynamoDB would for a counter leaving
    the Number range); with ``range_checked_first`` the range is checked before the markers, as DynamoDB
    does. ``script`` overrides what happens on the next calls, in order.
    """

    clock: Clock = field(default_factory=lambda: Clock(PLENTY_MS))
    script: deque[Step] = field(default_factory=deque)
    poison: frozenset[str] = frozenset()
    refusal: str = "Number overflow"
    """How DynamoDB words its refusal of a poison message's write."""
    range_checked_first: bool = False
    call_cost_ms: int = 0
    markers: set[str] = field(default_factory=set)
    counters: dict[ItemKey, dict[str, Number]] = field(default_factory=dict)
    calls: list[Sent] = field(default_factory=list)
    remaining_at_call: list[int] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)

    def write(self, write: DirectWrite) -> None:
        assert write.at_ms == NOW_MS
        chunk = Sent.of(write)
        self.calls.append(chunk)
        self.remaining_at_call.append(self.clock.remaining_ms())
        self.clock.remaining -= self.call_cost_ms
        step = self.script.popleft() if self.script else None
        if isinstance(step, StoreError):
            raise step
        if self.range_checked_first:
            self._check_range(chunk)
        existing = self.markers.intersection(chunk.message_ids)
        if existing:
            raise MarkersExistError(dict.fromkeys(existing, MarkerMet()))
        self._check_range(chunk)
        self.markers.update(chunk.message_ids)
        for key, counters in chunk.increments.items():
            into = self.counters.setdefault(key, {})
            for name, delta in counters.items():
                into[name] = add(into.get(name, 0), delta)
        if step == LOSE_RESPONSE:
            raise RetryableStoreError("response lost after commit")

    def read_marker(self, message_id: str) -> MarkerRecord | None:
        self.lookups.append(message_id)
        return MarkerRecord(message_id, NOW_MS, 0, None) if message_id in self.markers else None

    def read_markers(self, message_ids: Sequence[str]) -> Mapping[str, MarkerRecord]:
        return {mid: MarkerRecord(mid, NOW_MS, 0, None) for mid in message_ids if mid in self.markers}

    def read_items(self, items: Sequence[ItemKey]) -> Mapping[ItemKey, ItemRead]:
        pytest.fail(f"no write of these tests reads before it is planned: {items}")

    def _check_range(self, chunk: Sent) -> None:
        if self.poison.intersection(chunk.message_ids):
            raise WriteRejectedError(self.refusal, number_range=NUMBER_RANGE.search(self.refusal) is not None)


class UnusedJournal:
    """These tests plan only direct transactions: any journal call is a failure of the test's premise."""

    def __getattr__(self, name: str) -> Any:
        pytest.fail(f"journal.{name} called in a direct-path test")


def mt(message_id: str, totals: Totals, event_count: int = 1) -> MessageTotals:
    return MessageTotals(message_id, totals, event_count)


def batch(*ids: str, shared_key: bool = False) -> list[MessageTotals]:
    """Messages that each add 1 to their own key (or all to key ``shared``)."""
    return [mt(mid, {"shared" if shared_key else f"key-{mid}": {"count": 1}}) for mid in ids]


def expected_counters(messages: Iterable[MessageTotals]) -> dict[ItemKey, dict[str, Number]]:
    total: dict[ItemKey, dict[str, Number]] = {}
    for message in messages:
        for key, counters in message.totals.items():
            for name, delta in counters.items():
                total.setdefault(key, {})
                total[key][name] = add(total[key].get(name, 0), delta)
    return {key: {n: v for n, v in counters.items() if v} for key, counters in total.items()}


def run(
    store: FakeCounterStore,
    plan: WritePlan,
    policy: RetryPolicy = DEFAULT_POLICY,
    max_actions: int = 100,
    *,
    use_journal: bool = True,
) -> ApplyOutcome:
    # The cancellation path is what these tests exercise: no marker pre-read.
    applier = Applier(
        store,
        UnusedJournal(),
        policy=policy,
        sleep=store.clock.sleep,
        max_actions=max_actions,
        marker_read_gate=MarkerReadGate(quiet_batches=0),
        use_journal=use_journal,
    )
    messages = [message for chunk in plan.chunks for message in chunk.messages]
    outcome = applier.apply(messages, NOW_MS, store.clock.remaining_ms)
    # Invariants of every run: no attempt starts inside the reserve, and every attempt is counted.
    assert all(remaining >= policy.reserve_ms for remaining in store.remaining_at_call)
    assert outcome.transactions == len(store.calls)
    return outcome


# --- the happy path ------------------------------------------------------------------------------------


def test_applies_every_chunk_once() -> None:
    # GIVEN five messages planned into chunks of at most 4 actions
    messages = batch("a", "b", "c", "d", "e")
    plan = plan_transactions(messages, max_actions=4)
    store = FakeCounterStore()
    # WHEN the plan is applied
    outcome = run(store, plan, max_actions=4)
    # THEN every message is applied exactly once, one transaction per chunk, without retries or sleeps
    assert outcome == ApplyOutcome(
        applied=frozenset("abcde"), applied_events=5, transactions=len(plan.chunks), retries=0
    )
    assert store.counters == expected_counters(messages)
    assert store.clock.sleeps == []


def test_unstorable_message_totals_are_rejected_before_any_io() -> None:
    # GIVEN a message whose own net delta for a key needs more than 38 digits
    huge = Decimal("9" * 38)
    messages = [
        *batch("a"),
        mt("wide", {"k": {"count": huge, "other": 1}}),
        mt("wide2", {"k2": {"count": Decimal("9" * 39)}}),
    ]
    store = FakeCounterStore()
    applier = Applier(
        store,
        UnusedJournal(),
        policy=DEFAULT_POLICY,
        sleep=store.clock.sleep,
        marker_read_gate=MarkerReadGate(quiet_batches=0),
    )
    # WHEN it is applied
    outcome = applier.apply(messages, NOW_MS, store.clock.remaining_ms)
    # THEN the rejection is in the outcome and the rest is applied
    assert outcome.applied == {"a", "wide"}
    assert outcome.rejected["wide2"].code == RejectCode.NUMBER_OUT_OF_RANGE


# --- messages applied before: dropped, the rest re-planned ---------------------------------------------

ALREADY_APPLIED: list[object] = [
    pytest.param(set(), 100, id="none"),
    pytest.param({"b"}, 100, id="one-in-the-middle"),
    pytest.param({"a", "c"}, 100, id="two"),
    pytest.param({"a", "b", "c", "d"}, 100, id="all"),
    pytest.param({"b"}, 3, id="one-with-small-chunks"),
    pytest.param({"a", "d"}, 3, id="in-different-chunks"),
]


@pytest.mark.parametrize(("marked", "max_actions"), ALREADY_APPLIED)
def test_already_applied_messages_are_dropped_and_the_rest_applied(marked: set[str], max_actions: int) -> None:
    # GIVEN a store holding markers of messages applied by an earlier batch
    messages = batch("a", "b", "c", "d", shared_key=True)
    store = FakeCounterStore(markers=set(marked))
    # WHEN a plan with them is applied
    outcome = run(store, plan_transactions(messages, max_actions), max_actions=max_actions)
    # THEN they are reported as already applied, and only the others are counted
    fresh = [message for message in messages if message.message_id not in marked]
    assert outcome.already_applied == marked
    assert outcome.applied == {message.message_id for message in fresh}
    assert outcome.unapplied == frozenset()
    assert outcome.applied_events == len(fresh)
    assert store.counters == expected_counters(fresh)
    # AND a message applied before is offered once, then dropped from every later attempt
    for mid in marked:
        assert sum(mid in chunk.message_ids for chunk in store.calls) == 1


def test_replanned_chunk_carries_only_the_remaining_messages_deltas() -> None:
    # GIVEN one chunk of three messages on one key, the second applied before
    messages = [mt("a", {"k": {"count": 1}}), mt("b", {"k": {"count": 10}}), mt("c", {"k": {"count": 100}})]
    store = FakeCounterStore(markers={"b"})
    # WHEN it is applied
    run(store, plan_transactions(messages))
    # THEN the retry is re-planned without b's marker or its delta
    assert [chunk.message_ids for chunk in store.calls] == [("a", "b", "c"), ("a", "c")]
    assert store.calls[1].increments == {"k": {"count": 101}}
    assert store.counters == {"k": {"count": 101}}


# --- throttling and conflicts: retried with backoff ----------------------------------------------------

RETRIES: list[object] = [
    pytest.param([RetryableStoreError("throttled")], 1, id="one-throttle"),
    pytest.param([RetryableStoreError("conflict")] * 3, 3, id="three-conflicts"),
    pytest.param([RetryableStoreError("throttled")] * 7, 7, id="succeeds-on-the-last-attempt"),
]


@pytest.mark.parametrize(("script", "retries"), RETRIES)
def test_retryable_errors_are_retried_with_backoff(script: list[Step], retries: int) -> None:
    # GIVEN a store that throttles the first attempts
    store = FakeCounterStore(script=deque(script))
    policy = RetryPolicy(base_delay_s=0.05, max_delay_s=2.0, max_attempts=8)
    # WHEN a chunk is applied
    outcome = run(store, plan_transactions(batch("a", "b")), policy)
    # THEN it is retried until it commits, sleeping before each retry within the backoff window
    assert outcome.applied == {"a", "b"}
    assert outcome.retries == retries
    assert len(store.calls) == retries + 1
    assert len(store.clock.sleeps) == retries
    for attempt, delay in enumerate(store.clock.sleeps):
        assert 0 <= delay <= min(policy.base_delay_s * 2**attempt, policy.max_delay_s)
    assert store.counters == expected_counters(batch("a", "b"))


def test_backoff_window_doubles_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN full jitter pinned to the top of its window, and a store that never stops throttling
    monkeypatch.setattr("tenacity.wait.random.uniform", lambda low, high: high)
    store = FakeCounterStore(script=deque([RetryableStoreError("throttled")] * 20))
    policy = RetryPolicy(base_delay_s=0.05, max_delay_s=2.0, max_attempts=10)
    # WHEN a chunk is applied
    run(store, plan_transactions(batch("a")), policy)
    # THEN the windows are 0.05, 0.1, 0.2 ... capped at 2 s
    assert store.clock.sleeps == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0])


def test_exhausted_attempts_leave_the_chunk_unapplied_and_continue() -> None:
    # GIVEN two chunks, and a store that throttles the first one on every attempt
    policy = RetryPolicy(max_attempts=4)
    store = FakeCounterStore(script=deque([RetryableStoreError("throttled")] * 4))
    plan = plan_transactions(batch("a", "b", "c", "d"), max_actions=4)
    assert [chunk.message_ids for chunk in plan.chunks] == [("a", "b"), ("c", "d")]
    # WHEN the plan is applied
    outcome = run(store, plan, policy, max_actions=4)
    # THEN after max_attempts the first chunk's messages are unapplied (the source redelivers them) and the
    # second chunk is still applied
    assert outcome.unapplied == {"a", "b"}
    assert outcome.applied == {"c", "d"}
    assert outcome.retries == 3
    assert len(store.calls) == 5
    assert len(store.clock.sleeps) == 3
    assert store.counters == expected_counters(batch("c", "d"))


def test_time_running_out_stops_retrying() -> None:
    # GIVEN just enough time for one attempt plus one worst-case wait, and store calls that take 100 ms
    policy = RetryPolicy(base_delay_s=0.05, max_delay_s=2.0, max_attempts=8, reserve_ms=3_000)
    clock = Clock(policy.reserve_ms + 2_000 + 150)
    store = FakeCounterStore(clock=clock, call_cost_ms=100, script=deque([RetryableStoreError("throttled")] * 8))
    # WHEN a throttled chunk is applied
    outcome = run(store, plan_transactions(batch("a")), policy)
    # THEN it is tried again only while a worst-case wait still leaves the reserve, then handed back
    assert len(store.calls) == 2
    assert outcome.unapplied == {"a"}
    assert outcome.applied == frozenset()


def test_lost_response_is_not_counted_twice() -> None:
    # GIVEN a store that commits the first attempt but loses its response
    store = FakeCounterStore(script=deque([LOSE_RESPONSE]))
    messages = batch("a", "b", shared_key=True)
    # WHEN the chunk is applied
    outcome = run(store, plan_transactions(messages))
    # THEN the retry is cancelled by the markers: the messages are already applied, counted once
    assert outcome.already_applied == {"a", "b"}
    assert outcome.applied == frozenset()
    assert store.counters == {"shared": {"count": 2}}
    assert outcome.retries == 1


# --- the reserve: no attempt starts inside it -----------------------------------------------------------

RESERVE: list[object] = [
    pytest.param(0, 0, id="no-time-left"),
    pytest.param(RESERVE_MS - 1, 0, id="one-ms-inside-the-reserve"),
    pytest.param(RESERVE_MS, 1, id="exactly-the-reserve-still-starts"),
    pytest.param(PLENTY_MS, 1, id="plenty"),
]


@pytest.mark.parametrize(("remaining_ms", "calls"), RESERVE)
def test_no_attempt_starts_inside_the_reserve(remaining_ms: int, calls: int) -> None:
    # GIVEN the invocation's remaining time
    store = FakeCounterStore(clock=Clock(remaining_ms))
    # WHEN a chunk is applied
    outcome = run(store, plan_transactions(batch("a", "b")))
    # THEN no attempt starts when the remaining time is below the reserve, and its messages are unapplied
    assert len(store.calls) == calls
    if calls:
        assert outcome.applied == {"a", "b"}
    else:
        assert outcome.unapplied == {"a", "b"}
        assert outcome.applied == frozenset()
        assert store.counters == {}


def test_later_chunks_are_unapplied_once_time_runs_short() -> None:
    # GIVEN three chunks and store calls that each spend 1 s of a budget that allows two
    store = FakeCounterStore(clock=Clock(RESERVE_MS + 1_500), call_cost_ms=1_000)
    plan = plan_transactions(batch("a", "b", "c"), max_actions=2)
    # WHEN the plan is applied
    outcome = run(store, plan, max_actions=2)
    # THEN the chunks that would start inside the reserve are not attempted
    assert outcome.applied == {"a", "b"}
    assert outcome.unapplied == {"c"}


# --- DynamoDB refusing an increment: isolate the culprit -------------------------------------------------

WRITE_REJECTED: list[object] = [
    pytest.param(["a", "b", "c"], {"b"}, 100, id="culprit-in-the-middle"),
    pytest.param(["a", "b", "c"], {"a", "c"}, 100, id="two-culprits"),
    pytest.param(["a"], {"a"}, 100, id="single-message-chunk"),
    pytest.param(["a", "b", "c", "d"], {"d"}, 4, id="culprit-in-a-later-chunk"),
    pytest.param(["a", "b", "c"], {"a", "b", "c"}, 100, id="all-culprits"),
]


@given(
    size=st.integers(1, 12),
    culprits=st.sets(st.integers(0, 11), max_size=4),
    max_actions=st.integers(2, 100),
    refusal=st.sampled_from(["Number overflow", "Item size has exceeded the maximum allowed size", "anything else"]),
    shared_key=st.booleans(),
)
def test_any_refusal_settles_exactly_the_culprits_and_counts_the_rest(
    size: int, culprits: set[int], max_actions: int, refusal: str, shared_key: bool
) -> None:
    # GIVEN a store refusing, in any words, every transaction that holds a culprit's write
    ids = [f"m{n}" for n in range(size)]
    poison = {ids[n] for n in culprits if n < size}
    messages = batch(*ids, shared_key=shared_key)
    store = FakeCounterStore(poison=frozenset(poison), refusal=refusal)
    # WHEN the batch is applied
    outcome = run(store, plan_transactions(messages, max_actions), max_actions=max_actions, use_journal=False)
    # THEN each culprit is dead-lettered with DynamoDB's words, every other message counted, none handed back
    assert set(outcome.rejected) == poison
    code = RejectCode.COUNTER_OUT_OF_RANGE if refusal == "Number overflow" else RejectCode.WRITE_REFUSED
    assert all(r.code == code and refusal in r.detail for r in outcome.rejected.values())
    assert outcome.applied == set(ids) - poison
    assert outcome.unapplied == set()
    assert store.counters == expected_counters(m for m in messages if m.message_id not in poison)


@pytest.mark.parametrize(("ids", "culprits", "max_actions"), WRITE_REJECTED)
def test_write_rejected_isolates_the_culprit(ids: list[str], culprits: set[str], max_actions: int) -> None:
    # GIVEN a store that refuses any transaction holding a culprit's increment
    messages = batch(*ids, shared_key=True)
    store = FakeCounterStore(poison=frozenset(culprits))
    # WHEN the plan is applied
    outcome = run(store, plan_transactions(messages, max_actions), max_actions=max_actions)
    # THEN only the culprits are rejected, as counter_out_of_range, and every other message is applied
    assert set(outcome.rejected) == culprits
    for rejection in outcome.rejected.values():
        assert rejection.code == RejectCode.COUNTER_OUT_OF_RANGE
        assert "Number overflow" in rejection.detail
    innocent = [message for message in messages if message.message_id not in culprits]
    assert outcome.applied == {message.message_id for message in innocent}
    assert store.counters == expected_counters(innocent)
    # AND a culprit is retried alone exactly once, never retried with backoff
    assert store.clock.sleeps == []
    assert outcome.retries == 0


def test_write_rejected_splits_into_single_message_chunks() -> None:
    # GIVEN one chunk of three messages, the second of which DynamoDB refuses
    store = FakeCounterStore(poison=frozenset({"b"}))
    # WHEN it is applied
    outcome = run(store, plan_transactions(batch("a", "b", "c")))
    # THEN the chunk is split into single-message transactions, in order
    assert [chunk.message_ids for chunk in store.calls] == [("a", "b", "c"), ("a",), ("b",), ("c",)]
    assert outcome.rejected == {"b": Rejection(RejectCode.COUNTER_OUT_OF_RANGE, outcome.rejected["b"].detail)}


@pytest.mark.parametrize(
    "range_checked_first", [pytest.param(True, id="range-first"), pytest.param(False, id="markers-first")]
)
def test_write_rejected_redelivered_message_is_already_applied_not_rejected(
    range_checked_first: bool,
) -> None:
    # GIVEN a message applied before whose increment DynamoDB would now refuse (it may check the number
    # range before the marker condition)
    store = FakeCounterStore(markers={"b"}, poison=frozenset({"b"}), range_checked_first=range_checked_first)
    # WHEN it is redelivered with others
    outcome = run(store, plan_transactions(batch("a", "b", "c", shared_key=True)))
    # THEN it is reported as already applied, never dead-lettered, and the others are applied
    assert outcome.already_applied == {"b"}
    assert outcome.rejected == {}
    assert outcome.applied == {"a", "c"}
    assert store.counters == {"shared": {"count": 2}}  # b was counted before this store was seeded


# --- anything else propagates ----------------------------------------------------------------------------

PROPAGATES: list[object] = [
    pytest.param([StoreError("AccessDenied")], id="first-attempt"),
    pytest.param([RetryableStoreError("throttled"), StoreError("ResourceNotFound")], id="after-a-retry"),
]


@pytest.mark.parametrize("script", PROPAGATES)
def test_plain_store_error_propagates(script: list[Step]) -> None:
    # GIVEN a store failing in a way no retry can fix (a missing table, a denied permission)
    store = FakeCounterStore(script=deque(script))
    applier = Applier(store, UnusedJournal(), sleep=store.clock.sleep, marker_read_gate=MarkerReadGate(quiet_batches=0))
    # WHEN a batch is applied
    # THEN the error fails the whole batch instead of dead-lettering every message
    with pytest.raises(StoreError, match=r"AccessDenied|ResourceNotFound") as raised:
        applier.apply(batch("a"), NOW_MS, store.clock.remaining_ms)
    assert type(raised.value) is StoreError
    assert store.counters == {}


# --- a read DynamoDB keeps throttling hands back only what it concerns -------------------------------


@dataclass
class PreReadingStore(FakeCounterStore):
    """``FakeCounterStore`` with the marker pre-read; its first ``throttled_reads`` reads are throttled.

    ``batches`` names the journal batch of some markers (the others are plain direct-path markers).
    """

    batches: dict[str, str] = field(default_factory=dict)
    throttled_reads: int = 0
    reads: int = 0

    def read_markers(self, message_ids: Sequence[str]) -> Mapping[str, MarkerRecord]:
        self.reads += 1
        if self.reads <= self.throttled_reads:
            raise RetryableStoreError("BatchGetItem throttled")
        return {mid: MarkerRecord(mid, NOW_MS, 0, self.batches.get(mid)) for mid in message_ids if mid in self.markers}


class ThrottledJournal:
    """A journal whose header reads stay throttled, or whose progress reads do (after a COMMITTED header)."""

    def __init__(self, *, committed: bool = False) -> None:
        self.committed = committed
        self.reads = 0

    def read(self, batch_id: str) -> BatchRecord:
        self.reads += 1
        if not self.committed:
            raise RetryableStoreError("GetItem throttled")
        return BatchRecord(batch_id, BatchState.COMMITTED, NOW_MS + PLENTY_MS, 2)

    def read_progress(self, batch_id: str, chunks: int) -> Any:
        self.reads += 1
        raise RetryableStoreError("Query throttled")

    def __getattr__(self, name: str) -> Any:
        pytest.fail(f"journal.{name} called: only reads are expected")


@pytest.mark.parametrize("committed", [False, True], ids=["header-read", "progress-read"])
def test_a_journal_dynamodb_keeps_throttling_hands_back_only_the_messages_it_concerns(committed: bool) -> None:
    # GIVEN a batch where message "a" has a marker naming journal batch "batch-1", whose journal items
    # DynamoDB throttles through every retry
    store = PreReadingStore(markers={"a"}, batches={"a": "batch-1"})
    journal = ThrottledJournal(committed=committed)
    applier = Applier(store, journal, sleep=store.clock.sleep)
    # WHEN the batch is applied
    outcome = applier.apply(batch("a", "b", "c"), NOW_MS, store.clock.remaining_ms)
    # THEN only "a" goes back to the source (its redelivery resolves the batch later); the rest is counted
    assert outcome.unapplied == {"a"}
    assert outcome.applied == {"b", "c"}
    assert store.counters == expected_counters(batch("b", "c"))
    assert journal.reads == DEFAULT_POLICY.max_attempts + (1 if committed else 0)


def test_a_throttled_marker_pre_read_falls_back_to_the_conditional_writes() -> None:
    # GIVEN a batch where "a" was applied before, and a marker pre-read DynamoDB throttles every time
    store = PreReadingStore(markers={"a"}, throttled_reads=DEFAULT_POLICY.max_attempts)
    applier = Applier(store, UnusedJournal(), sleep=store.clock.sleep)
    # WHEN the batch is applied
    outcome = applier.apply(batch("a", "b", "c"), NOW_MS, store.clock.remaining_ms)
    # THEN the batch goes on without the read: the transaction's conditional marker catches "a"
    assert store.reads == DEFAULT_POLICY.max_attempts
    assert outcome.already_applied == {"a"}
    assert outcome.applied == {"b", "c"}
    assert outcome.unapplied == frozenset()
    assert store.counters == expected_counters(batch("b", "c"))


# --- the marker read is skipped while it finds nothing ----------------------------------------------


def test_the_marker_read_stops_on_a_quiet_stream_and_resumes_when_a_write_meets_a_marker() -> None:
    # GIVEN an applier whose gate closes after 3 batches that met no existing marker
    store = PreReadingStore()
    applier = Applier(store, UnusedJournal(), sleep=store.clock.sleep, marker_read_gate=MarkerReadGate(3))
    # WHEN five batches without duplicates are applied
    outcomes = [applier.apply(batch(f"a{n}", f"b{n}"), NOW_MS, store.clock.remaining_ms) for n in range(5)]
    # THEN the first three read their markers, the next two do not (one transaction each, no read)
    assert [outcome.marker_reads for outcome in outcomes] == [1, 1, 1, 0, 0]
    assert [outcome.transactions for outcome in outcomes] == [1] * 5
    # WHEN a re-send of an applied message arrives while the gate is closed
    resent = applier.apply(batch("a0", "c"), NOW_MS, store.clock.remaining_ms)
    # THEN the marker cancels the transaction, the re-send settles as applied and the rest is counted
    assert (resent.marker_reads, resent.transactions) == (0, 2)
    assert resent.already_applied == {"a0"}
    assert resent.applied == {"c"}
    # AND the next batch reads its markers again
    assert applier.apply(batch("d"), NOW_MS, store.clock.remaining_ms).marker_reads == 1
    every = [f"{prefix}{n}" for n in range(5) for prefix in ("a", "b")] + ["c", "d"]
    assert store.counters == expected_counters(batch(*every))


def test_a_stream_with_duplicates_in_every_batch_reads_every_batch() -> None:
    # GIVEN an applier whose gate closes after 3 quiet batches
    store = PreReadingStore()
    applier = Applier(store, UnusedJournal(), sleep=store.clock.sleep, marker_read_gate=MarkerReadGate(3))
    applier.apply(batch("m0"), NOW_MS, store.clock.remaining_ms)
    # WHEN every batch re-sends the message applied by the batch before it
    outcomes = [applier.apply(batch(f"m{n - 1}", f"m{n}"), NOW_MS, store.clock.remaining_ms) for n in range(1, 8)]
    # THEN every batch reads its markers and no transaction is cancelled by a re-send
    assert [outcome.marker_reads for outcome in outcomes] == [1] * 7
    assert [outcome.transactions for outcome in outcomes] == [1] * 7
    assert [outcome.already_applied for outcome in outcomes] == [{f"m{n - 1}"} for n in range(1, 8)]


@dataclass
class FlakyMarkerReads(FakeCounterStore):
    """A store whose strongly consistent marker read loses its response ``failures`` times first."""

    failures: int = 0

    def read_marker(self, message_id: str) -> MarkerRecord | None:
        if self.failures:
            self.failures -= 1
            raise RetryableStoreError("outcome unknown: read timeout")
        return super().read_marker(message_id)


@pytest.mark.parametrize(("failures", "rejected", "unapplied"), [(1, {"b"}, set()), (1_000, set(), {"b"})])
def test_a_lost_marker_read_while_isolating_a_refused_message_does_not_fail_the_batch(
    failures: int, rejected: set[str], unapplied: set[str]
) -> None:
    # GIVEN a chunk whose message b DynamoDB refuses, and a marker read (to tell a redelivery from a new
    # culprit) that loses its response once, or every time (found by the chaos smoke run)
    store = FlakyMarkerReads(poison=frozenset({"b"}), failures=failures)
    # WHEN it is applied
    outcome = run(store, plan_transactions(batch("a", "b", "c", shared_key=True)))
    # THEN the read is retried like any store step; if it never answers, only b goes back to the source
    assert set(outcome.rejected) == rejected
    assert outcome.unapplied == unapplied
    assert outcome.applied == {"a", "c"}


# --- every message has exactly one fate --------------------------------------------------


def test_a_message_left_without_a_fate_fails_the_whole_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an applier whose direct path forgets a message (as the MarkersExistError branch once did with a
    # message claimable again): neither applied, nor rejected, nor handed back
    store = FakeCounterStore()
    applier = Applier(store, UnusedJournal(), sleep=store.clock.sleep, marker_read_gate=MarkerReadGate(quiet_batches=0))
    monkeypatch.setattr(CommitProtocol, "direct", lambda self, chunk: [])
    # WHEN a batch is applied
    # THEN the batch fails as a whole (redelivered) instead of reporting the message done
    with pytest.raises(UnsettledMessagesError, match="without a fate"):
        applier.apply(batch("a", "b"), NOW_MS, store.clock.remaining_ms)


@dataclass
class UnreadableMarkersStore(FakeCounterStore):
    """``FakeCounterStore`` whose single-marker reads never get an answer (lost responses, throttling)."""

    def read_marker(self, message_id: str) -> MarkerRecord | None:
        self.lookups.append(message_id)
        raise RetryableStoreError("GetItem: outcome unknown")


def test_a_refused_message_whose_marker_cannot_be_read_is_handed_back_not_the_batch() -> None:
    # GIVEN a culprit DynamoDB refuses for the range, and a marker read that keeps failing
    store = UnreadableMarkersStore(poison=frozenset({"b"}))
    # WHEN the batch is applied
    outcome = run(store, plan_transactions(batch("a", "b", "c")))
    # THEN only the culprit goes back to the source (its redelivery looks again); the rest is counted
    assert outcome.unapplied == {"b"}
    assert outcome.rejected == {}
    assert outcome.applied == {"a", "c"}
    assert store.lookups == ["b"] * DEFAULT_POLICY.max_attempts


def test_a_plain_claim_reported_without_its_marker_goes_back_to_the_source_never_applied() -> None:
    # GIVEN a store whose answer to a claim conditioned on no marker says the condition failed for want of a
    # marker (DynamoDB never answers so: it returns the marker that stood in the way; only a claim replacing a
    # marker can fail because TTL deleted it)
    store = FakeCounterStore(script=deque([MarkersExistError({}, vanished=frozenset({"a"}))]))
    # WHEN the message is applied
    outcome = run(store, plan_transactions(batch("a"), max_actions=4))
    # THEN it is handed back to the source, neither settled as applied nor claimed in a loop
    assert (outcome.unapplied, outcome.already_applied, outcome.applied) == (frozenset({"a"}), frozenset(), frozenset())
    assert store.counters == {}
