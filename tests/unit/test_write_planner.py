"""``plan_write``: the write of one direct transaction, decided in the core (``tally.core.write_planner``), as a pure
function.

Properties over any chunk of messages, declarations and stored values, each condition evaluated as DynamoDB
evaluates the expression the store encodes it as (``tests/support/reference.py``: ``admits``):

- every bounded or thresholded counter a write moves is conditioned: when the conditions admit the stored values, no
  step of the chunk's messages, in their order, crosses a bound or a level;
- crossing-free conditions never refuse a write that crosses nothing: when no step crosses a bound or a level, in
  either direction, the conditions admit the stored values;
- conditions need no more digits than the values they compare: every number a condition carries is storable;
- a write planned from the values met is conditioned on exactly them and records exactly the crossings the one-by-one
  model finds.

Then, by example, what a write asks to read first (a reset's values, a key item's moves, a window item its pointer
cannot say) and how the moved part shifts its conditions.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from tally.core.aggregate import MessageTotals
from tally.core.bounds import BoundRule, CounterBounds
from tally.core.declarations import Declarations
from tally.core.defaults import CounterDefaults, CounterRule
from tally.core.items import CounterItem, window_counter
from tally.core.moved import MovedPointer
from tally.core.numbers import add, storage_problem
from tally.core.patterns import KeyPattern
from tally.core.plan import plan_transactions
from tally.core.resets import OperatorKind, OperatorStamp
from tally.core.thresholds import CounterThresholds, Direction, ThresholdRule, parse_counter_thresholds
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_spec
from tally.core.write import DirectWrite, ItemRead, ItemWrite, MovesSeen, ReadFirst, Seen
from tally.core.write_planner import counters_met, plan_write
from tests.support.reference import admits, expected_crossings

if TYPE_CHECKING:
    from tally.core.items import ItemKey
    from tally.core.numbers import Number
    from tally.core.plan import Chunk

NOW = 1_795_000_000_000 - 1_795_000_000_000 % DAY_MS + 10 * HOUR_MS + 30 * 60_000  # 10:30 UTC on some day
KEYS = ("k:0", "k:1", "j:0")
COUNTERS = ("n", "m")

DELTA = st.one_of(
    st.integers(-6, 6),
    st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False, allow_infinity=False),
    st.sampled_from([Decimal("12345678901234567890123456789012345678"), Decimal("-0.000000000000000000000000000001")]),
)
STORED = st.one_of(
    st.none(),  # the counter does not exist yet (it holds its start value, or 0)
    st.integers(-20, 20),
    st.decimals(min_value=-100, max_value=100, places=2, allow_nan=False, allow_infinity=False),
    st.sampled_from([Decimal(1000), Decimal(-1000)]),  # far from every level and bound: nothing crosses
    st.sampled_from([Decimal("99999999999999999999999999999999999999"), Decimal("0.125")]),
)
LEVEL = st.one_of(
    st.integers(-10, 10),
    st.sampled_from([Decimal("0.125"), Decimal("-2.5"), 50, -50]),  # 50: beyond every step
)


# Every strategy a composite draws from is built once, here: a strategy built inside a draw is a new object that
# Hypothesis validates and analyses again at each example, which cost this module more than the planning it tests
# (cProfile, ci profile: 7.1 of 24.5 s of one property in strategy validation alone). Same distributions as before;
# the module alone at ci: 25.8 to 35.5 s of CPU before, 12.7 to 16.0 after (2026-12-02, twice each).
LEVEL_OR_NONE = st.one_of(st.none(), LEVEL)
BOUND_TARGETS = st.lists(st.tuples(st.sampled_from(["k:*", "k:0", "j:0"]), st.sampled_from(COUNTERS)))
THRESHOLD_TARGETS = st.lists(
    st.tuples(st.sampled_from(["k:*", "j:0"]), st.sampled_from(COUNTERS), st.sampled_from(Direction))
)
LEVELS = st.lists(LEVEL, min_size=1, max_size=3)
STARTS = st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(COUNTERS), st.integers(-3, 3)), max_size=2)
MESSAGE_COUNT = st.integers(1, 5)
MESSAGE_TOTALS = st.dictionaries(
    st.sampled_from(KEYS), st.dictionaries(st.sampled_from(COUNTERS), DELTA, min_size=1), min_size=1
)


@st.composite
def declarations(draw: st.DrawFn) -> Declarations:
    """Bounds, levels and start values on some of ``KEYS``' counters (patterns exact or by prefix)."""
    bounds = []
    for pattern, counter in draw(BOUND_TARGETS):
        floor, ceiling = draw(LEVEL_OR_NONE), draw(LEVEL_OR_NONE)
        if floor is None and ceiling is None:
            continue
        if floor is not None and ceiling is not None and floor > ceiling:
            floor, ceiling = ceiling, floor
        bounds.append(BoundRule(KeyPattern(pattern), counter, floor, ceiling))
    rules = []
    for pattern, counter, direction in draw(THRESHOLD_TARGETS):
        levels = tuple(sorted(set(draw(LEVELS))))
        rules.append(ThresholdRule(KeyPattern(pattern), counter, direction, levels))
    starts = [CounterRule(KeyPattern(key), counter, start) for key, counter, start in draw(STARTS)]
    return Declarations(
        defaults=CounterDefaults(tuple(starts)),
        bounds=CounterBounds(tuple(bounds)),
        thresholds=CounterThresholds(tuple(rules)),
    )


@st.composite
def chunks(draw: st.DrawFn) -> Chunk:
    """One transaction's messages, in order: each steps some of ``KEYS``' counters."""
    messages = [MessageTotals(f"m{index}", draw(MESSAGE_TOTALS), 1) for index in range(draw(MESSAGE_COUNT))]
    # the first transaction the planner packs them into (it starts another where a sum would need 39 digits)
    return plan_transactions(messages).chunks[0]


def stored_values(draw: st.DrawFn) -> dict[ItemKey, ItemRead]:
    return {
        key: ItemRead({name: Decimal(value) for name in COUNTERS if (value := draw(STORED)) is not None})
        for key in KEYS
    }


def steps_of(chunk: Chunk, key: str, counter: str) -> list[tuple[str, Number]]:
    return [
        (message.message_id, amount)
        for message in chunk.messages
        if (amount := message.totals.get(key, {}).get(counter, 0))
    ]


def value_before(declared: Declarations, stored: dict[ItemKey, ItemRead], key: str, counter: str) -> Number:
    return stored[key].counters.get(counter, declared.defaults.starts(key).get(counter, 0))


def bound_crossed(declared: Declarations, chunk: Chunk, stored: dict[ItemKey, ItemRead]) -> bool:
    """Whether some message, applied in order from the stored values, takes a counter across its bound."""
    for key in KEYS:
        for counter, bound in declared.bounds.bounds(key).items():
            value = value_before(declared, stored, key, counter)
            for _, amount in steps_of(chunk, key, counter):
                if bound.refusal(value, amount) is not None:
                    return True
                value = add(value, amount)
    return False


def level_changed_side(declared: Declarations, chunk: Chunk, stored: dict[ItemKey, ItemRead]) -> bool:
    """Whether some running sum lies on the other side of a level than the stored value, either way (a rising
    level crossed downwards too: a crossing-free condition asks every step to stay on its side)."""
    for key in KEYS:
        for counter, levels in declared.thresholds.thresholds(key).items():
            value = value_before(declared, stored, key, counter)
            for level, direction in levels.each():
                side = value >= level if direction is Direction.RISING else value > level
                running = value
                for _, amount in steps_of(chunk, key, counter):
                    running = add(running, amount)
                    if (running >= level if direction is Direction.RISING else running > level) != side:
                        return True
    return False


def admitted(write: DirectWrite, stored: dict[ItemKey, ItemRead]) -> bool:
    return all(admits(item, stored[item.item].counters) for item in write.items)


def crossing_free_write(chunk: Chunk, declared: Declarations) -> DirectWrite:
    planned = plan_write(chunk, declared, Seen(), now_ms=NOW)
    assert isinstance(planned, DirectWrite)  # no reset, no ended window: nothing to read first
    assert planned.crossings == ()  # nothing is recorded without the values before
    return planned


# ------------------------------------------------------------------------------------------- the properties
@given(chunks(), declarations(), st.data())
def test_every_bounded_or_thresholded_counter_a_write_moves_is_conditioned(
    chunk: Chunk, declared: Declarations, data: st.DataObject
) -> None:
    # GIVEN any chunk, any declarations, any stored values
    stored = stored_values(data.draw)
    # WHEN its write is planned
    write = crossing_free_write(chunk, declared)
    # THEN a write whose conditions hold crosses no bound and no level, whatever the messages' order does
    if admitted(write, stored):
        assert not bound_crossed(declared, chunk, stored)
        assert not level_changed_side(declared, chunk, stored)


@given(chunks(), declarations(), st.data())
def test_crossing_free_conditions_never_refuse_a_write_that_crosses_nothing(
    chunk: Chunk, declared: Declarations, data: st.DataObject
) -> None:
    stored = stored_values(data.draw)
    write = crossing_free_write(chunk, declared)
    if not bound_crossed(declared, chunk, stored) and not level_changed_side(declared, chunk, stored):
        assert admitted(write, stored)


@given(chunks(), declarations(), st.data())
def test_conditions_need_no_more_digits_than_the_values_they_compare(
    chunk: Chunk, declared: Declarations, data: st.DataObject
) -> None:
    stored = stored_values(data.draw)
    for write in (
        crossing_free_write(chunk, declared),
        plan_write(replace(chunk, before=dict(stored)), declared, Seen(), now_ms=NOW),
    ):
        assert isinstance(write, DirectWrite)
        for item in write.items:
            numbers = [n for check in item.bounds for n in (check.at_least, check.at_most)]
            numbers += [n for check in item.free for n in (check.low, check.high)]
            numbers += [check.value for check in item.exact]
            assert all(storage_problem(n) is None for n in numbers if n is not None), item


@given(chunks(), declarations(), st.data())
def test_a_write_planned_from_the_values_met_is_conditioned_on_them_and_records_every_crossing(
    chunk: Chunk, declared: Declarations, data: st.DataObject
) -> None:
    # GIVEN the values a refused condition met (DynamoDB's ALL_OLD of each item)
    stored = stored_values(data.draw)
    # WHEN the write is planned again from them
    write = plan_write(replace(chunk, before=dict(stored)), declared, Seen(), now_ms=NOW)
    assert isinstance(write, DirectWrite)
    # THEN its thresholded counters are conditioned on exactly those values
    for item in write.items:
        for check in item.exact:
            assert admits(replace(item, bounds=(), free=()), stored[item.item].counters)
            assert check.counter in {name for name, _ in item.adds.items()} | {c.counter for c in item.exact}
    # AND it records the crossings of every counter, in order, as the one-by-one model makes them
    for key in KEYS:
        for counter, levels in declared.thresholds.thresholds(key).items():
            want = expected_crossings(
                value_before(declared, stored, key, counter), steps_of(chunk, key, counter), levels
            )
            got = [
                (c.level, c.direction, c.message_id) for c in write.crossings if (c.key, c.counter) == (key, counter)
            ]
            assert got == want


@given(chunks(), declarations())
def test_each_item_is_written_once_with_its_net_increments_and_start_values(
    chunk: Chunk, declared: Declarations
) -> None:
    write = crossing_free_write(chunk, declared)
    items = [item.item for item in write.items]
    assert len(items) == len(set(items))  # a transaction takes one action per item
    adds = {item.item: item.adds for item in write.items if item.adds}
    assert adds == chunk.increments
    for item in write.items:
        assert item.writes or item.conditioned  # never an action that does nothing
        starts = declared.defaults.starts(item.item if isinstance(item.item, str) else "")
        assert item.starts == {name: starts[name] for name in item.adds if name in starts}
    assert [claim.message_id for claim in write.claims] == list(chunk.message_ids)
    assert write.action_count == len(chunk.messages) + len(write.items)


# ------------------------------------------------------------------------------------------------ by example
BOUNDED = Declarations(bounds=CounterBounds((BoundRule(KeyPattern("stock:*"), "stock", 0, None),)))


def message(message_id: str, totals: dict[ItemKey, dict[str, Number]]) -> MessageTotals:
    return MessageTotals(message_id, totals, 1)


def test_an_operators_message_is_applied_as_given_its_bound_unconditioned() -> None:
    stamp = OperatorStamp(OperatorKind.CORRECTION, "stock:1", "fix", NOW, {"stock": -50})
    correction = MessageTotals("fix", {"stock:1": {"stock": -50}}, 1, stamp=stamp)
    (chunk,) = plan_transactions([correction]).chunks
    write = crossing_free_write(chunk, BOUNDED)
    assert write.items == (ItemWrite("stock:1", {"stock": -50}, stamp=stamp),)


def test_a_step_that_nets_to_zero_is_still_checked() -> None:
    # -5 then +5 must not take a counter at 3 below its floor on the way: the item is checked, not written
    (chunk,) = plan_transactions(
        [message("a", {"stock:1": {"stock": -5}}), message("b", {"stock:1": {"stock": 5}})]
    ).chunks
    write = crossing_free_write(chunk, BOUNDED)
    (item,) = write.items
    assert (item.item, item.writes, [check.at_least for check in item.bounds]) == ("stock:1", False, [5])
    assert not admits(item, {"stock": Decimal(3)})


def test_a_reset_of_a_thresholded_counter_reads_its_value_first_and_records_its_crossing() -> None:
    declared = Declarations(thresholds=parse_counter_thresholds("stock:*#stock<=10"))
    stamp = OperatorStamp(OperatorKind.RESET, "stock:1", "r", NOW, {"stock": 5})
    reset = MessageTotals("r", {}, 1, sets={"stock:1": {"stock": 5}}, stamp=stamp)
    (chunk,) = plan_transactions([reset]).chunks
    # WHEN planned with nothing read: it asks for the item's value (a reset crosses depending on the value before)
    assert plan_write(chunk, declared, Seen(), now_ms=NOW) == ReadFirst(("stock:1",))
    # THEN, read at 40: conditioned on exactly 40, setting 5, recording the fall through 10
    write = plan_write(chunk, declared, Seen().with_read({"stock:1": ItemRead({"stock": Decimal(40)})}), now_ms=NOW)
    assert isinstance(write, DirectWrite)
    (item,) = write.items
    assert (item.sets, [check.value for check in item.exact]) == ({"stock": 5}, [40])
    assert [(c.level, c.direction, c.value) for c in write.crossings] == [(10, Direction.FALLING, 5)]


WINDOWS = parse_window_spec("hour,day")
DAILY = parse_counter_thresholds("usage:*#calls@day>=10", windows=WINDOWS)
DAILY_DECLARED = Declarations(windows=WINDOWS, thresholds=DAILY)
YESTERDAY = WINDOWS.unit("day").window_id(WINDOWS.unit("day").start_ms(NOW - DAY_MS))
LATE = window_counter(YESTERDAY, "calls")


def late_event_chunk() -> Chunk:
    (chunk,) = plan_transactions([message("late", {"usage:t": {"calls": 3, LATE: 3}})]).chunks
    return chunk


def test_a_late_event_reads_its_key_items_moves_then_the_window_item_its_pointer_cannot_say() -> None:
    chunk = late_event_chunk()
    # an ended day: part of it may have moved; first the key item's moves and pointers
    assert plan_write(chunk, DAILY_DECLARED, Seen(), now_ms=NOW) == ReadFirst(("usage:t",))
    # a pointer at an older day cannot say yesterday's part... newer: it can (never moved)
    never = Seen().with_read(
        {"usage:t": ItemRead({LATE: Decimal(4)}, Decimal(2), {"day": MovedPointer(None, {}, Decimal(2))})}
    )
    write = plan_write(chunk, DAILY_DECLARED, never, now_ms=NOW)
    assert isinstance(write, DirectWrite)
    assert write.moved == {"usage:t": {LATE: 0}}
    assert write.items[0].moves == MovesSeen(Decimal(2))
    # an untrusted pointer (a move that did not keep it): the day item is read, where the move put the day
    untrusted = Seen().with_read(
        {"usage:t": ItemRead({}, Decimal(3), {"day": MovedPointer(YESTERDAY, {}, Decimal(2))})}
    )
    day_item = CounterItem("usage:t", YESTERDAY)
    assert plan_write(chunk, DAILY_DECLARED, untrusted, now_ms=NOW) == ReadFirst((day_item,))
    write = plan_write(
        chunk, DAILY_DECLARED, untrusted.with_read({day_item: ItemRead({"calls": Decimal(6)})}), now_ms=NOW
    )
    assert isinstance(write, DirectWrite)
    assert write.moved == {"usage:t": {LATE: Decimal(6)}}
    # its crossing-free condition on the key item's part is the day's shifted by the 6 moved: 10 - 3 - 6 = 1
    (level,) = write.items[0].free
    assert (level.low, level.high) == (1, 4)


def test_a_refusal_is_met_at_the_start_values_of_counters_not_there_yet() -> None:
    declared = Declarations(defaults=CounterDefaults((CounterRule(KeyPattern("stock:*"), "stock", 100),)))
    met = counters_met(
        {
            "stock:1": ItemRead({}),
            CounterItem("stock:1", "d#2026-11-18"): None,
            "stock:2": ItemRead({"stock": Decimal(3)}),
        },
        declared.defaults,
    )
    assert met == {"stock:1": {"stock": 100}, CounterItem("stock:1", "d#2026-11-18"): {}, "stock:2": {"stock": 3}}
