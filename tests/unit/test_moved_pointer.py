"""The moved-part pointer (tally.core.moved): what a key item's pointer says of a window's moved part, and the
pointer each move leaves, checked against a model of every move's history (Hypothesis)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from tally.core.moved import MovedPointer, anchor_window, moved_part, next_pointer
from tally.core.thresholds import MOVE_CLOCK_MARGIN_MS
from tally.core.windows import DAY_MS, parse_window_spec
from tally.store.schema import moved_pointer_attributes, moved_pointer_from_item, moved_pointer_values

WINDOWS = parse_window_spec("hour,day,month")
DAY = WINDOWS.unit("day")
DAY0 = 4_102_444_800_000  # 2100-01-01
D = [DAY.window_id(DAY0 + n * DAY_MS) for n in range(8)]


def test_a_trusted_pointer_says_its_own_windows_total_and_zero_for_a_newer_window() -> None:
    # GIVEN a pointer at day 2 with 8 moved of calls, kept by the last of 3 moves
    pointer = MovedPointer(D[2], {"calls": Decimal(8)}, Decimal(3))
    # THEN day 2's part is 8, a newer day's 0 (never moved), an older day's unknown (its window item is read),
    # and a counter it keeps no total of unknown
    assert moved_part(pointer, Decimal(3), D[2], "calls") == 8
    assert moved_part(pointer, Decimal(3), D[5], "calls") == 0
    assert moved_part(pointer, Decimal(3), D[1], "calls") is None
    assert moved_part(pointer, Decimal(3), D[2], "other") is None
    # AND once a move that did not keep it has come (4 moves), it says nothing
    assert moved_part(pointer, Decimal(4), D[5], "calls") is None


def test_an_item_never_moved_has_no_moved_part_and_one_moved_without_a_pointer_says_nothing() -> None:
    assert moved_part(MovedPointer(), None, D[0], "calls") == 0
    assert moved_part(MovedPointer(), Decimal(1), D[0], "calls") is None


def test_a_move_sets_a_newer_window_adds_to_its_own_and_leaves_an_older_one() -> None:
    pointer = MovedPointer(D[2], {"calls": Decimal(8)}, Decimal(3))
    counters = ("calls",)
    # a newer day: its moved part is all of it (never moved before)
    assert next_pointer(pointer, Decimal(3), {D[3]: {"calls": Decimal(5)}}, counters, D[6]) == MovedPointer(
        D[3], {"calls": Decimal(5)}, Decimal(4)
    )
    # the pointer's own day again (late events moved): added
    assert next_pointer(pointer, Decimal(3), {D[2]: {"calls": Decimal(5)}}, counters, D[6]) == MovedPointer(
        D[2], {"calls": Decimal(13)}, Decimal(4)
    )
    # an older day, or no day of this unit: unchanged, but kept by this move
    for moved in ({D[1]: {"calls": Decimal(5)}}, {}):
        assert next_pointer(pointer, Decimal(3), moved, counters, D[6]) == MovedPointer(
            D[2], {"calls": Decimal(8)}, Decimal(4)
        )


def test_a_pointer_not_kept_by_every_move_starts_again_at_the_anchor_with_totals_unknown() -> None:
    pointer = MovedPointer(D[2], {"calls": Decimal(8)}, Decimal(3))
    restarted = next_pointer(pointer, Decimal(5), {D[4]: {"calls": Decimal(1)}}, ("calls",), D[6])
    assert restarted == MovedPointer(D[6], {}, Decimal(6))
    assert moved_part(restarted, Decimal(6), D[7], "calls") == 0
    assert moved_part(restarted, Decimal(6), D[6], "calls") is None


def test_the_anchor_is_the_newest_window_any_clock_may_have_ended() -> None:
    # a minute before day 3 ends, another container's clock may already be in day 3's end: day 3 may be moved
    assert anchor_window(DAY, DAY0 + 3 * DAY_MS + DAY_MS - MOVE_CLOCK_MARGIN_MS) == D[3]
    assert anchor_window(DAY, DAY0 + 3 * DAY_MS + DAY_MS - MOVE_CLOCK_MARGIN_MS - 1) == D[2]
    month = WINDOWS.unit("month")
    assert anchor_window(month, DAY0 + 40 * DAY_MS) == "mo#2100-01"


def test_a_pointer_reads_back_from_the_attributes_it_is_written_as() -> None:
    pointer = MovedPointer(D[2], {"calls": Decimal(8), "bytes": Decimal("0.5")}, Decimal(3))
    values = moved_pointer_values("day", pointer)
    item = {"pk": {"S": "k"}, "c#calls": {"N": "1"}, **values, **moved_pointer_values("hour", MovedPointer())}
    assert moved_pointer_from_item(item, "day") == pointer
    assert moved_pointer_from_item(item, "month") == MovedPointer()
    assert sorted(moved_pointer_attributes(item, "day")) == sorted(values)
    assert sorted(moved_pointer_attributes(item)) == sorted(values)


# A step of a key item's history: a late event adds to an ended window on the key item; a move takes some
# windows off it, by a mover that keeps the pointer (of some counters) or by one that does not.
_step = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5), st.sampled_from(["a", "b"]), st.integers(-3, 9)),
    st.tuples(st.just("move"), st.sets(st.integers(0, 5)), st.sets(st.sampled_from(["a", "b"]))),
    st.tuples(st.just("blind move"), st.sets(st.integers(0, 5))),
    st.tuples(
        st.just("tick"),
    ),
)


@given(st.lists(_step, max_size=40))
def test_whatever_the_moves_a_pointer_never_says_a_wrong_moved_part(steps: list[tuple[object, ...]]) -> None:
    # GIVEN a key item's day windows 0..5 and the clock at the start of day ``ended`` (every earlier day may
    # have been moved, by any container), and what the model knows: each window's part on the key item and its
    # moved total
    on_item: dict[tuple[int, str], Decimal] = {}
    moved: dict[tuple[int, str], Decimal] = {}
    pointer, moves, ended = MovedPointer(), None, 1
    for step in steps:
        if step[0] == "tick":
            ended = min(ended + 1, 6)
        elif step[0] == "add":
            _, drawn, counter, value = step
            day = drawn % ended  # type: ignore[operator]  # a late event for an ended day lands on the key item
            on_item[(day, counter)] = on_item.get((day, counter), Decimal(0)) + value  # type: ignore[index,operator]
        else:
            days = {day % ended for day in step[1]}  # type: ignore[attr-defined]
            taken = {key: value for key, value in on_item.items() if key[0] in days}
            for key, value in taken.items():
                moved[key] = moved.get(key, Decimal(0)) + value
                del on_item[key]
            if step[0] == "move":  # keeps the pointer, planned from the one read and conditioned on ``moves``
                by_window: dict[str, dict[str, Decimal]] = {}
                for (day, counter), value in taken.items():
                    by_window.setdefault(D[day], {})[counter] = value
                pointer = next_pointer(pointer, moves, by_window, sorted(step[2]), D[ended - 1])  # type: ignore[call-overload]
            moves = (moves or Decimal(0)) + 1
        # THEN whatever the pointer says of a window's part is that window's moved total
        for day in range(6):
            for counter in ("a", "b"):
                said = moved_part(pointer, moves, D[day], counter)
                assert said is None or said == moved.get((day, counter), Decimal(0)), (day, counter, pointer)
