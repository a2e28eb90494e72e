"""Small batches through the fenced journal: with ``FencedApply`` on, ``plan_batch`` chooses each unfixed unit's path
by write units (``tally.core.write_cost``), so single-event traffic takes the journal when its fenced writes (1 unit
per item) cost less than direct transactions (2 per item); with it off, the routing is the action count's, as
before. Pinned, forced and operator messages keep their paths.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import TYPE_CHECKING, NoReturn

from hypothesis import given
from hypothesis import strategies as st

import tally.core.plan as plan_module
from tally.core.aggregate import MessageTotals
from tally.core.bounds import parse_counter_bounds
from tally.core.numbered_ids import numbered_id
from tally.core.plan import (
    BatchPlan,
    fenced_price,
    least_direct_write_units,
    plan_apply_chunks,
    plan_batch,
    plan_price,
    plan_transactions,
    unit_increments,
)
from tally.core.resets import OperatorKind, OperatorStamp
from tally.core.write_cost import READ_UNIT_PRICE, direct_write_units, planner_page_bytes
from tally.cost.model import Prices

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

    from tally.core.items import ItemKey
    from tally.core.numbers import Number

SESSION = "0123456789abcdef0123456789abcdef"
STOCK = parse_counter_bounds("stock:*#stock>=0")


def single_events(count: int, keys: int, *, numbered: bool = True, seed: int = 7) -> list[MessageTotals]:
    """``count`` messages of one event each on Zipf-drawn keys of ``keys``, two counters (workload U's shape)."""
    rng = random.Random(seed)
    weights = [1 / rank for rank in range(1, keys + 1)]
    messages = []
    for number in range(count):
        (rank,) = rng.choices(range(keys), weights=weights)
        message_id = numbered_id(SESSION, number) if numbered else f"m{number}"
        messages.append(MessageTotals(message_id, {f"key-{rank}": {"count": 1, "amount": rank}}, 1))
    return messages


def ids(messages: list[MessageTotals] | tuple[MessageTotals, ...]) -> set[str]:
    return {message.message_id for message in messages}


def journaled(plan: BatchPlan) -> set[str]:
    return {message.message_id for unit in plan.journals for message in unit}


def written_direct(plan: BatchPlan) -> set[str]:
    return {message.message_id for chunk in plan.direct for message in chunk.messages}


def test_a_batch_of_single_events_is_one_journal_unit_when_fenced() -> None:
    messages = single_events(100, 1000)
    assert 50 <= len({key for message in messages for key in message.totals}) <= 70
    plan = plan_batch(messages, fenced_apply=True)
    assert len(plan.journals) == 1
    assert ids(plan.journals[0]) == ids(messages)
    assert not plan.direct
    assert not plan.rejected
    assert plan_price(plan) < plan_price(plan_batch(messages))


def test_unnumbered_single_events_join_one_journal_unit_too() -> None:
    """Each message is a unit of its own (no shared block): small units go together, or not at all."""
    messages = single_events(100, 1000, numbered=False)
    plan = plan_batch(messages, fenced_apply=True)
    assert [ids(unit) for unit in plan.journals] == [ids(messages)]


def test_with_fenced_apply_off_single_events_go_direct_as_before() -> None:
    plan = plan_batch(single_events(100, 1000))
    assert not plan.journals
    assert len(plan.direct) == 1


def test_a_few_events_stay_direct() -> None:
    """Up to 6 items the journal's header writes, page and reads cost more than the unit each item saves: one block
    marker and k items cost 2 + 2k write units direct, and 7 + k fenced (the claim's marker and header, a page, the
    commit and DONE, the items) plus k reads at a fifth of a unit each, so from 7 items on the journal is cheaper."""
    for keys in range(1, 7):
        messages = [MessageTotals(numbered_id(SESSION, n), {f"k{n}": {"count": 1}}, 1) for n in range(keys)]
        plan = plan_batch(messages, fenced_apply=True)
        assert not plan.journals, keys
    messages = [MessageTotals(numbered_id(SESSION, n), {f"k{n}": {"count": 1}}, 1) for n in range(7)]
    assert len(plan_batch(messages, fenced_apply=True).journals) == 1


def test_pinned_and_operator_messages_keep_their_direct_transactions() -> None:
    messages = single_events(100, 1000)
    sale = MessageTotals("sale", {"stock:a": {"stock": -1}, "key-0": {"count": 1}}, 1)
    stamp = OperatorStamp(OperatorKind.RESET, "other", "reset", 0, {"count": 0})
    reset = MessageTotals("reset", {}, 1, sets={"other": {"count": 0}}, stamp=stamp)
    plan = plan_batch([*messages, sale, reset], fenced_apply=True, bounded=STOCK.is_bounded)
    assert journaled(plan) == ids(messages)
    assert written_direct(plan) == {"sale", "reset"}


# ------------------------------------------------------------------------------------------------ any batch


# The strategies a batch draws from are built once (the keys' per example, its pool being drawn), not at each of
# up to 80 messages: a strategy built in a draw is validated and analysed again every time. Same batches (the
# module alone at ci: 6.7 to 8.2 s of CPU before, 5.5 to 6.0 after, 2026-12-02).
POOL = st.integers(1, 40)
MESSAGE_COUNT = st.integers(0, 80)
STEP = st.integers(-2, 3)
KIND = st.integers(0, 19)
MAX_ACTIONS = st.sampled_from([6, 20, 100])


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[MessageTotals], dict[str, str], int]:
    """Messages of 0-4 keys over a small pool (so units join and split), numbered or not, some on a bounded counter,
    some resets, some with more counters on one item than one ADD holds, some whose marker names an aborted batch."""
    numbered = draw(st.booleans())
    pool = draw(POOL)
    keys = st.lists(st.integers(0, pool), max_size=4, unique=True)
    messages = []
    for number in range(draw(MESSAGE_COUNT)):
        message_id = numbered_id(SESSION, number) if numbered else f"m{number}"
        totals: dict[ItemKey, dict[str, Number]] = {}
        for key in draw(keys):
            totals[f"k{key}"] = {"count": draw(STEP)}
        kind = draw(KIND)
        if kind == 0:
            totals["stock:a"] = {"stock": -1}
        elif kind == 1 and totals:
            totals[next(iter(totals))] = {f"c{n}": 1 for n in range(4)}
        if kind == 2:
            stamp = OperatorStamp(OperatorKind.RESET, f"k{number % (pool + 1)}", message_id, 0, {"count": 0})
            messages.append(MessageTotals(message_id, {}, 1, sets={stamp.key: {"count": 0}}, stamp=stamp))
        else:
            messages.append(MessageTotals(message_id, totals, len(totals)))
    replaced = draw(st.lists(st.sampled_from([m.message_id for m in messages]), unique=True)) if messages else []
    return messages, dict.fromkeys(replaced, "dead-1"), draw(MAX_ACTIONS)


@given(batches())
def test_fenced_routing_costs_no_more_and_gives_every_message_one_fate(
    batch: tuple[list[MessageTotals], dict[str, str], int],
) -> None:
    messages, replaces, max_actions = batch

    def limit(_: ItemKey) -> int:
        return 3

    def plan(**options: bool) -> BatchPlan:
        return plan_batch(messages, max_actions, replaces, counter_limit=limit, bounded=STOCK.is_bounded, **options)

    fenced = plan(fenced_apply=True)
    as_before = plan()
    direct_only = plan(allow_journal=False)
    by_id = {message.message_id: message for message in messages}
    journal = [message.message_id for unit in fenced.journals for message in unit]
    direct = [message.message_id for chunk in fenced.direct for message in chunk.messages]
    assert sorted([*journal, *direct, *fenced.rejected]) == sorted(by_id)
    # The same refusals as the routing by actions: the fenced choice only moves messages between the two paths.
    assert fenced.rejected.keys() == as_before.rejected.keys()
    for message_id in journal:
        message = by_id[message_id]
        assert not any(STOCK.is_bounded(item) for item in message.totals)
    # An operator message takes the path it took before.
    operators = {message.message_id for message in messages if message.is_operator}
    assert operators & set(journal) == operators & {m.message_id for unit in as_before.journals for m in unit}
    # Chosen by price (write units, and the fenced path's reads): never more than the routing by actions, nor than
    # all direct where that is a plan (it refuses nothing, and no marker names an aborted batch: only a claim
    # replaces one).
    cost = plan_price(fenced, counter_limit=limit)
    assert cost <= plan_price(as_before, counter_limit=limit)
    if not direct_only.rejected and not replaces:
        assert cost <= plan_price(direct_only, counter_limit=limit)


def assert_priced_as_again(plan: BatchPlan, counter_limit: Callable[[ItemKey], int]) -> int:
    """Each journal unit the planner priced carries exactly what pricing it again gives: its increments (in their
    order), its pages and their sizes (what ``tally plan``'s bill reads instead of pricing it again). How many were."""
    assert not plan.journal_prices or len(plan.journal_prices) == len(plan.journals)
    priced_units = 0
    for unit, priced in plan.priced_journals():
        if priced is None:
            continue
        increments = unit_increments(unit)
        assert list(priced.increments.items()) == list(increments.items())
        pages = plan_apply_chunks(increments, counter_limit=counter_limit)
        assert priced.pages == pages
        assert priced.page_sizes == tuple(planner_page_bytes(page) for page in pages)
        priced_units += 1
    return priced_units


@given(batches())
def test_a_priced_journal_unit_carries_what_pricing_it_again_gives(
    batch: tuple[list[MessageTotals], dict[str, str], int],
) -> None:
    messages, replaces, max_actions = batch

    def limit(_: ItemKey) -> int:
        return 3

    fenced = plan_batch(
        messages, max_actions, replaces, counter_limit=limit, bounded=STOCK.is_bounded, fenced_apply=True
    )
    assert_priced_as_again(fenced, limit)
    # AND a plan not fenced prices nothing (its journal is chosen by actions)
    assert (
        plan_batch(messages, max_actions, replaces, counter_limit=limit, bounded=STOCK.is_bounded).journal_prices == ()
    )


def test_small_units_merged_into_one_journal_unit_and_a_packed_unit_are_priced_as_again() -> None:
    # GIVEN single events (small units merged into one journal unit) and packed messages on shared keys (one unit too
    # large for a transaction, priced against its least split)
    rng = random.Random(7)
    packed = [
        MessageTotals(numbered_id(SESSION, n), {f"k{rng.randrange(30)}": {"count": 1} for _ in range(20)}, 20)
        for n in range(40)
    ]
    for messages in (single_events(100, 50), packed):
        # WHEN planned fenced THEN its one journal unit was priced, as pricing it again gives
        plan = plan_batch(messages, fenced_apply=True)
        assert len(plan.journals) == 1
        assert assert_priced_as_again(plan, lambda _: 10_000) == 1
        assert fenced_price(plan.journals[0], lambda _: 10_000, planner_page_bytes) == plan_price(plan)


def test_small_units_cut_for_their_sums_are_summed_again_when_merged() -> None:
    # GIVEN single messages whose sum on one key needs 39 significant digits: cut into units that each store theirs,
    # every unit sharing that key's item
    big = 6 * 10**37 + 1
    messages = [MessageTotals(f"m{n}", {"k": {"c": big}, f"own-{n}": {"c": 1}}, 1) for n in range(12)]
    # WHEN they are planned fenced and merged into one journal unit
    plan = plan_batch(messages, fenced_apply=True)
    assert [len(unit) for unit in plan.journals] == [12]
    # THEN its priced increments are the sums over the whole unit (the key's item once, its total), not the units'
    # increments side by side
    assert assert_priced_as_again(plan, lambda _: 10_000) == 1
    (priced,) = plan.journal_prices
    assert priced is not None
    assert priced.increments["k"] == {"c": 12 * big}


@given(batches())
def test_no_split_into_direct_transactions_writes_less_than_the_least_the_planner_assumes(
    batch: tuple[list[MessageTotals], dict[str, str], int],
) -> None:
    """The planner sends a unit to the journal without splitting it when the fenced price is under the least any
    split writes (``least_direct_write_units``): that must be a floor of every split it would have made."""
    messages, _, max_actions = batch

    def limit(_: ItemKey) -> int:
        return 3

    split = plan_transactions(messages, max_actions, limit)
    kept = [message for message in messages if message.message_id not in split.rejected]
    written = sum(direct_write_units(chunk.marker_items, [1] * len(chunk.increments)) for chunk in split.chunks)
    assert least_direct_write_units(kept, unit_increments(kept)) <= written


def test_a_unit_the_journal_wins_by_its_floor_is_not_split_to_be_priced(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a packed batch (40 messages of 20 events over 30 keys: one unit, far cheaper fenced than direct)
    rng = random.Random(7)
    messages = [
        MessageTotals(numbered_id(SESSION, n), {f"k{rng.randrange(30)}": {"count": 1} for _ in range(20)}, 20)
        for n in range(40)
    ]
    unpatched = plan_batch(messages, fenced_apply=True)

    # WHEN the planner plans it with no way to split a unit into transactions
    def no_split(*_: object, **__: object) -> NoReturn:
        raise AssertionError("split to be priced")

    monkeypatch.setattr(plan_module, "plan_transactions", no_split)
    # THEN it plans the same journal unit all the same
    assert plan_batch(messages, fenced_apply=True) == unpatched
    assert [len(unit) for unit in unpatched.journals] == [40]


def test_the_planner_prices_a_read_unit_as_the_bill_does() -> None:
    """The planner weighs the fenced path's reads at the cost model's own ratio of a read unit's price to a write
    unit's (the planner cannot import the cost model: its arrow points the other way)."""
    prices = Prices()
    assert Fraction(str(prices.read_unit)) / Fraction(str(prices.write_unit)) == READ_UNIT_PRICE
