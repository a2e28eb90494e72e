"""Which path each message takes (``plan_batch``), whatever else shares its batch, its keys or its block.

The invariant, for any batch:

- a bounded item travels only in a direct transaction, which carries its bound condition (the store builds
  it from the chunk's messages): never in a journal unit, whose chunks cannot refuse after the commit;
- a message is refused for its size only when it cannot fit the one path it may take: a message on a
  bounded counter, one transaction (one action more when it replaces an aborted batch's marker); any other,
  the journal, which holds any size;
- a message whose marker names an aborted batch is written only where that marker is replaced (a journal
  claim, or a direct transaction carrying the batch's check);
- joining a unit (a shared key, a shared block marker item) may save actions; it never decides any of this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from tally.core.aggregate import MessageTotals
from tally.core.bounds import parse_counter_bounds
from tally.core.declarations import Declarations
from tally.core.items import CounterItem, ItemKey, item_parts
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.model import RejectCode
from tally.core.numbered_ids import numbered_id
from tally.core.numbers import add, storage_problem
from tally.core.plan import BatchPlan, plan_batch
from tally.core.thresholds import parse_counter_thresholds

if TYPE_CHECKING:
    from tally.core.numbers import Number

STOCK = parse_counter_bounds("stock:*#stock>=0")
SESSION = "0123456789abcdef0123456789abcdef"
OTHER_SESSION = "fedcba9876543210fedcba9876543210"
SIZE_CODES = (RejectCode.TOO_MANY_KEYS, RejectCode.TOO_MANY_COUNTERS)


def big(message_id: str, keys: int, prefix: str = "k") -> MessageTotals:
    """A packed message of ``keys`` events on as many keys (``count`` +1 each)."""
    return MessageTotals(message_id, {f"{prefix}{n}": {"count": 1} for n in range(keys)}, keys)


def sale(message_id: str, amount: int = -5, *, also: str | None = None) -> MessageTotals:
    totals: dict[ItemKey, dict[str, Number]] = {"stock:a": {"stock": amount}}
    if also is not None:
        totals[also] = {"count": 1}
    return MessageTotals(message_id, totals, 1)


def journal_ids(plan: BatchPlan) -> set[str]:
    return {message.message_id for unit in plan.journals for message in unit}


def direct_ids(plan: BatchPlan) -> set[str]:
    return {message.message_id for chunk in plan.direct for message in chunk.messages}


# ------------------------------------------------------------------------------------- the two defects
def test_a_sale_of_the_same_session_never_rides_a_big_message_forced_through_the_journal() -> None:
    # GIVEN a 120-key message whose marker names an aborted journal batch (killed after its claim), and a
    # sale of stock:a from the same producer session: their markers share a block item
    redelivered = big(numbered_id(SESSION, 0), 120)
    bounded_sale = sale(numbered_id(SESSION, 1))
    # WHEN the batch holding both is planned
    plan = plan_batch(
        [redelivered, bounded_sale], replaces={redelivered.message_id: "dead-batch"}, bounded=STOCK.is_bounded
    )
    # THEN the big message goes to a journal claim (which replaces its marker), the sale to a direct
    # transaction (which carries the floor's condition), and nothing is refused
    assert journal_ids(plan) == {redelivered.message_id}
    assert direct_ids(plan) == {bounded_sale.message_id}
    assert plan.rejected == {}


def test_a_sale_sharing_a_key_never_rides_a_big_message_forced_through_the_journal() -> None:
    redelivered = big("big-1", 120)
    bounded_sale = sale("sale-1", also="k7")
    plan = plan_batch([redelivered, bounded_sale], replaces={"big-1": "dead-batch"}, bounded=STOCK.is_bounded)
    assert journal_ids(plan) == {"big-1"}
    assert direct_ids(plan) == {"sale-1"}


def test_a_big_message_beside_a_bounded_sale_of_its_session_is_not_refused() -> None:
    # GIVEN a fresh batch: a 120-key packed message and a sale from the same session (one block)
    messages = [big(numbered_id(SESSION, 0), 120), sale(numbered_id(SESSION, 1), -1)]
    # WHEN it is planned with the sale's counter bounded
    plan = plan_batch(messages, bounded=STOCK.is_bounded)
    # THEN the big message goes through the journal, the sale direct, nothing is dead-lettered
    assert plan.rejected == {}
    assert journal_ids(plan) == {messages[0].message_id}
    assert direct_ids(plan) == {messages[1].message_id}


def test_minute_windows_make_a_99_key_message_a_big_one_that_a_bounded_sale_must_not_refuse() -> None:
    # 60 keys, each with a minute-window item: 120 items, beside a sale sharing one of its keys
    totals: dict[ItemKey, dict[str, Number]] = {}
    for n in range(60):
        totals[f"k{n}"] = {"count": 1}
        totals[CounterItem(f"k{n}", "m#2026-11-26T07:00Z", 0, 1)] = {"count": 1}
    messages = [MessageTotals("packed", totals, 60), sale("sale", also="k3")]
    plan = plan_batch(messages, bounded=STOCK.is_bounded)
    assert plan.rejected == {}
    assert journal_ids(plan) == {"packed"}


def test_a_bounded_message_too_big_for_one_transaction_is_refused_and_says_why() -> None:
    messages = [MessageTotals("huge-sale", {"stock:a": {"stock": -1}, **big("x", 99).totals}, 100)]
    plan = plan_batch(messages, bounded=STOCK.is_bounded)
    rejection = plan.rejected["huge-sale"]
    assert rejection.code is RejectCode.TOO_MANY_KEYS
    assert "bounded counter" in rejection.detail


def test_a_bounded_message_whose_marker_names_an_aborted_batch_replaces_it_in_its_own_transaction() -> None:
    messages = [sale(numbered_id(SESSION, 1)), sale(numbered_id(SESSION, 2), -1)]
    plan = plan_batch(messages, replaces={messages[0].message_id: "dead-batch"}, bounded=STOCK.is_bounded)
    assert plan.journals == ()
    (replacing,) = [chunk for chunk in plan.direct if chunk.replaces]
    assert replacing.message_ids == (messages[0].message_id,)
    assert replacing.replaces == {messages[0].message_id: "dead-batch"}
    assert replacing.action_count == 3  # block, stock:a, the aborted batch's header check


# ------------------------------------------------------------------------------------- for any batch
SESSIONS = (SESSION, OTHER_SESSION)
BIG = 10**38 - 1
"""38 nines: storable, and two of them on one counter are not (the planner cuts such a unit for its sums)."""


# The strategies a batch draws from are built once, here, not at each draw (a strategy built in a draw is
# validated and analysed again at every example), and a key's window coin is tossed only for the keys that may
# take it: the same batches, for a fraction of the generation (the module alone at ci: 18.1 to 20.9 s of CPU
# before, 8.6 to 9.7 after, 2026-12-02).
MAX_ACTIONS = st.sampled_from([6, 12, TRANSACT_MAX_ACTIONS])
COUNTER_LIMIT = st.sampled_from([3, 1_000])
SEQS = st.permutations(range(40))
MESSAGE_COUNT = st.integers(1, 14)
ID_KIND = st.sampled_from(["numbered", "numbered", "own"])
SESSION_OF = st.sampled_from(SESSIONS)
WIDTH = st.sampled_from([(0, 1), (0, 2), (0, 3), (1, -2), (1, -1), (1, 0), (1, 20)])
"""A message's width as (times ``max_actions``, plus): 1, 2, 3, max-2, max-1, max, max+20 keys."""
START = st.integers(0, 150)
STOCKS = st.lists(st.sampled_from(["stock:a", "stock:b"]), max_size=2, unique=True)
STOCK_STEP = st.one_of(st.integers(-5, 5), st.sampled_from([BIG, -BIG]))
ONE_IN_5 = st.integers(0, 4)
ONE_IN_10 = st.integers(0, 9)
DEAD_BATCH = st.sampled_from(["dead-1", "dead-2"])


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[MessageTotals], dict[str, str], int, int]:
    max_actions = draw(MAX_ACTIONS)
    counter_limit = draw(COUNTER_LIMIT)
    seqs = iter(draw(SEQS))
    messages: list[MessageTotals] = []
    for index in range(draw(MESSAGE_COUNT)):
        how = draw(ID_KIND)
        message_id = numbered_id(draw(SESSION_OF), next(seqs)) if how == "numbered" else f"m{index}"
        totals: dict[ItemKey, dict[str, Number]] = {}
        times, plus = draw(WIDTH)
        width = times * max_actions + plus
        start = draw(START)
        for n in range(width):
            key: ItemKey = f"k{start + n}"
            if n % 7 == 0 and draw(st.booleans()):
                key = CounterItem(f"k{start + n}", "m#2026-11-26T07:00Z", 0, 1)
            totals[key] = {"count": 1}
        for stock in draw(STOCKS):
            totals[stock] = {"stock": draw(STOCK_STEP)}
        if draw(ONE_IN_5) == 0:  # a count of 38 nines: two such steps on one item need 39 digits
            totals[next(iter(totals))] = {"count": BIG}
        if draw(ONE_IN_10) == 0:  # more counters on one item than one ADD holds (with limit 3)
            totals[next(iter(totals))] = {f"c{n}": 1 for n in range(4)}
        messages.append(MessageTotals(message_id, totals, 1))
    ids = [message.message_id for message in messages]
    replaced = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
    replaces = {message_id: draw(DEAD_BATCH) for message_id in replaced}
    return messages, replaces, max_actions, counter_limit


def pinned(message: MessageTotals) -> bool:
    return any(STOCK.is_bounded(item) for item in message.totals)


def fits_alone(message: MessageTotals, max_actions: int, counter_limit: int, *, replacing: bool) -> bool:
    """Whether ``message`` fits one direct transaction by itself (its marker, its items, a batch check)."""
    return 1 + len(message.totals) + replacing <= max_actions and all(
        len(counters) <= counter_limit for counters in message.totals.values()
    )


@given(batches())
def test_every_message_takes_the_path_its_own_content_decides(
    batch: tuple[list[MessageTotals], dict[str, str], int, int],
) -> None:
    messages, replaces, max_actions, limit = batch
    plan = plan_batch(messages, max_actions, replaces, counter_limit=lambda _: limit, bounded=STOCK.is_bounded)
    by_id = {message.message_id: message for message in messages}
    journaled = [message.message_id for unit in plan.journals for message in unit]
    written = [message.message_id for chunk in plan.direct for message in chunk.messages]
    # Every message has exactly one path.
    assert sorted([*journaled, *written, *plan.rejected]) == sorted(by_id)
    # A bounded item travels only in a direct transaction (which carries its condition).
    assert not any(pinned(by_id[message_id]) for message_id in journaled)
    for chunk in plan.direct:
        assert chunk.action_count <= max_actions
        for message in chunk.messages:
            # a message whose marker names an aborted batch is written only where that marker is replaced
            assert chunk.replaces.get(message.message_id) == (
                replaces.get(message.message_id) if pinned(message) else None
            )
            assert message.message_id not in replaces or pinned(message)
        for item, counters in chunk.increments.items():
            assert len(counters) <= limit, item_parts(item)
        # No running sum of the chunk's steps, in its messages' order, is one DynamoDB cannot store (the net ADD
        # and every condition value derive from them)
        running: dict[tuple[ItemKey, str], Number] = {}
        for message in chunk.messages:
            for item, counters in message.totals.items():
                for name, amount in counters.items():
                    running[item, name] = add(running.get((item, name), 0), amount)
                    assert storage_problem(running[item, name]) is None, (item, name)
    # A bounded item's messages are written in their batch order (its steps are judged in that order)
    for stock in ("stock:a", "stock:b"):
        order = [message.message_id for message in messages if stock in message.totals]
        wrote = [m.message_id for chunk in plan.direct for m in chunk.messages if stock in m.totals]
        assert wrote == [message_id for message_id in order if message_id in wrote], stock
    # Refused for size exactly when the one path the message may take cannot hold it: joining a unit or a
    # block never decides it.
    for message_id, message in by_id.items():
        replacing = message_id in replaces
        refused_for_size = message_id in plan.rejected and plan.rejected[message_id].code in SIZE_CODES
        assert refused_for_size == (
            pinned(message) and not fits_alone(message, max_actions, limit, replacing=replacing)
        )


@given(batches())
def test_without_bounds_nothing_is_refused_for_its_size(
    batch: tuple[list[MessageTotals], dict[str, str], int, int],
) -> None:
    messages, replaces, max_actions, limit = batch
    plan = plan_batch(messages, max_actions, replaces, counter_limit=lambda _: limit)
    assert not any(rejection.code in SIZE_CODES for rejection in plan.rejected.values())
    assert set(replaces) <= {message.message_id for unit in plan.journals for message in unit}


# A threshold pins its messages as a bound does: the crossing is recorded in the transaction that commits it, so a
# journal chunk applied after the commit could never carry it (tally.core.thresholds).
USAGE = parse_counter_thresholds("k1*#count>=3;stock:b#stock<=0")
CONDITIONED = Declarations(bounds=STOCK, thresholds=USAGE).conditioned()


def conditioned_message(message: MessageTotals) -> bool:
    assert CONDITIONED is not None
    return any(CONDITIONED(item) for item in message.totals)


@given(batches())
def test_a_thresholded_message_takes_only_a_direct_transaction(
    batch: tuple[list[MessageTotals], dict[str, str], int, int],
) -> None:
    messages, replaces, max_actions, limit = batch
    plan = plan_batch(messages, max_actions, replaces, counter_limit=lambda _: limit, bounded=CONDITIONED)
    by_id = {message.message_id: message for message in messages}
    journaled = [message.message_id for unit in plan.journals for message in unit]
    written = [message.message_id for chunk in plan.direct for message in chunk.messages]
    assert sorted([*journaled, *written, *plan.rejected]) == sorted(by_id)
    # A thresholded (or bounded) item travels only in a direct transaction.
    assert not any(conditioned_message(by_id[message_id]) for message_id in journaled)
    assert not any(USAGE.is_thresholded(item) for unit in plan.journals for m in unit for item in m.totals)
    for chunk in plan.direct:
        assert chunk.action_count <= max_actions
    # Refused for size exactly when the one path the message may take cannot hold it.
    for message_id, message in by_id.items():
        refused_for_size = message_id in plan.rejected and plan.rejected[message_id].code in SIZE_CODES
        assert refused_for_size == (
            conditioned_message(message)
            and not fits_alone(message, max_actions, limit, replacing=message_id in replaces)
        )
