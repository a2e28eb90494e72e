"""No ``ADD`` the planner makes may exceed DynamoDB's 4 KB expression limit.

``tally.store.expressions.counters_per_add`` says how many counters one ADD can carry (measured on the
expression the adapter builds); the planner must keep every ADD within it, splitting one item's counters
across transactions (the commit journal's chunks) when one message, or the messages of one unit, need more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from tally.core.aggregate import MessageTotals, merge_totals
from tally.core.items import CounterItem
from tally.core.limits import UPDATE_EXPRESSION_MAX_BYTES
from tally.core.plan import nonzero_increments, plan_apply_chunks, plan_batch
from tally.store.actions import add_update
from tally.store.expressions import add_expression, counters_per_add

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tally.core.aggregate import Totals
    from tally.core.items import ItemKey
    from tally.core.plan import BatchPlan

Writes = list["Totals"]
"""Each transaction's ADDs: item -> counters (a mapping: one action per item per transaction)."""


def hundred_counters(message_id: str, key: ItemKey = "k", first: int = 0) -> MessageTotals:
    """One ordinary message: 100 named counters (the decoder's per-event maximum) on one key."""
    return MessageTotals(message_id, {key: {f"n{first + i}": 1 for i in range(100)}}, 1)


def test_the_bound_is_the_expression_the_adapter_sends() -> None:
    window = CounterItem("k", "h#2100-01-01T00:00Z", 0, 4_102_444_800)
    for item in ("k", window):
        most = counters_per_add(item)
        for count in (1, 9, 10, 99, 100, most - 1, most, most + 1):
            counters = {"x" * 255 + str(i): 1 for i in range(count)}  # long names: they must not count
            action, _ = add_update("table", item, counters)
            expression = action["Update"]["UpdateExpression"]
            assert expression == add_expression(count, sets_expiry=item is window)
            assert (len(expression.encode()) <= UPDATE_EXPRESSION_MAX_BYTES) == (count <= most)
    assert (counters_per_add("k"), counters_per_add(window)) == (331, 328)


def test_four_ordinary_messages_on_one_key_never_make_an_oversized_add() -> None:
    # GIVEN four messages of 100 distinct counters each on one key (400 names: one ADD would be 4,982 bytes)
    messages = [hundred_counters(f"m{i}", first=100 * i) for i in range(4)]
    # WHEN the batch is planned
    plan = plan_batch(messages, counter_limit=counters_per_add)
    # THEN every ADD fits, and every counter of every message is written exactly once
    assert_within_limits(plan_writes(plan))
    assert_exact(messages, plan_writes(plan))


def test_one_packed_message_with_hundreds_of_counters_on_one_item_goes_through_the_journal() -> None:
    # GIVEN one message whose single key carries 1,000 counters (ten events of 100 names)
    message = MessageTotals("packed", {"k": {f"n{i}": 1 for i in range(1000)}}, 10)
    plan = plan_batch([message], counter_limit=counters_per_add)
    # THEN it is not rejected: it is claimed once and its ADDs are spread over the journal's chunks
    assert plan.rejected == {}
    assert plan.direct == ()
    assert plan.journals == ((message,),)
    chunks = plan_apply_chunks(nonzero_increments(message.totals), counter_limit=counters_per_add)
    assert len(chunks) == 4  # 331 + 331 + 331 + 7
    assert_within_limits(list(chunks))
    assert_exact([message], list(chunks))


def plan_writes(plan: BatchPlan) -> Writes:
    """Each transaction's ADDs: direct chunks, and the apply chunks of every journal unit."""
    writes: Writes = [chunk.increments for chunk in plan.direct]
    for unit in plan.journals:
        increments = nonzero_increments(merge_totals(message.totals for message in unit))
        writes.extend(plan_apply_chunks(increments, counter_limit=counters_per_add))
    return writes


def assert_within_limits(writes: Writes, limit: Callable[[ItemKey], int] = counters_per_add) -> None:
    for write in writes:
        for item, counters in write.items():
            assert len(counters) <= limit(item), f"{len(counters)} counters in one ADD on {item!r}"


def assert_exact(messages: Sequence[MessageTotals], writes: Writes) -> None:
    assert merge_totals(writes) == nonzero_increments(merge_totals(message.totals for message in messages))


@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["a", "b", "c", CounterItem("a", "h#x", 0, 7)]),
            st.dictionaries(st.sampled_from([f"n{i}" for i in range(12)]), st.integers(1, 9), min_size=1),
            min_size=1,
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 5),
)
def test_any_batch_is_planned_within_a_small_counter_limit(totals: list[Totals], limit: int) -> None:
    # GIVEN a tiny limit of counters per ADD (and of actions per transaction), so that splits are common
    messages = [MessageTotals(f"m{i}", t, 1) for i, t in enumerate(totals)]

    def small(_: ItemKey) -> int:
        return limit

    plan = plan_batch(messages, max_actions=6, counter_limit=small)
    writes: Writes = [chunk.increments for chunk in plan.direct]
    for unit in plan.journals:
        increments = nonzero_increments(merge_totals(m.totals for m in unit))
        writes.extend(plan_apply_chunks(increments, 4, counter_limit=small))
    # THEN nothing is rejected, no ADD exceeds the limit, and the writes add up to the batch exactly
    assert plan.rejected == {}
    assert_within_limits(writes, small)
    assert_exact(messages, writes)
