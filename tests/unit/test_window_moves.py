"""Which ended windows a move takes off a key's item, and how much one move carries: pure parts."""

from __future__ import annotations

from decimal import Decimal

from tally.core.items import CounterItem, window_counter
from tally.core.thresholds import parse_counter_thresholds
from tally.core.windows import DAY_MS, HOUR_MS, closed_windows, parse_window_id, parse_window_spec
from tally.store.windows import MAX_MOVED_ATTRIBUTES, plan_move

SPEC = parse_window_spec("hour,day", "hour=90,day=0")
DAY0 = 4_102_444_800_000  # 2100-01-01T00:00Z


def test_window_ids_read_back_to_their_unit_and_start() -> None:
    assert parse_window_id("h#2100-01-01T05:00Z") == ("hour", DAY0 + 5 * HOUR_MS)
    assert parse_window_id("d#2100-01-02") == ("day", DAY0 + DAY_MS)


def test_only_ended_windows_are_closed_oldest_first_and_expired_ones_are_not_kept() -> None:
    spec = parse_window_spec("hour,day", "hour=1,day=0")
    open_windows = {
        "h#2100-01-01T05:00Z": {"count": Decimal(1)},
        "h#2100-01-01T00:00Z": {"count": Decimal(2)},
        "d#2100-01-02": {"count": Decimal(3)},  # still open at the time below
        "x#nonsense": {"count": Decimal(4)},  # never touched
    }
    ended = closed_windows(open_windows, spec, DAY0 + DAY_MS + 30 * 60_000 + 2 * HOUR_MS)
    assert [(e.window, e.kept) for e in ended] == [("h#2100-01-01T00:00Z", False), ("h#2100-01-01T05:00Z", True)]
    assert ended[1].expires_at_s == (DAY0 + 6 * HOUR_MS + DAY_MS) // 1000


def test_a_window_of_a_unit_no_longer_counted_is_moved_and_kept() -> None:
    ended = closed_windows({"d#2100-01-01": {"n": Decimal(1)}}, parse_window_spec("hour"), DAY0 + DAY_MS)
    assert [(e.window, e.kept, e.expires_at_s) for e in ended] == [("d#2100-01-01", True, None)]


def test_one_move_takes_at_most_its_attribute_limit_and_the_rest_waits() -> None:
    raw = {"pk": {"S": "k\x1f3"}, "sk": {"S": "all"}, "c#n": {"N": "9"}}
    for hour in range(30):
        for counter in range(5):
            raw[f"w#h#2100-01-01T{hour % 24:02d}:00Z\x1fc{counter}"] = {"N": "1"}
    move = plan_move(raw, SPEC, DAY0 + 3 * DAY_MS)
    assert move is not None
    assert len(move.removed) == MAX_MOVED_ATTRIBUTES
    ((day_item, counters),) = move.adds  # every hour onto day 0's item of shard 3 (days kept forever)
    assert day_item == CounterItem("k", "d#2100-01-01", 3, None)
    assert counters[window_counter("h#2100-01-01T00:00Z", "c0")] == 1
    assert plan_move({"pk": {"S": "k"}, "sk": {"S": "all"}, "c#n": {"N": "9"}}, SPEC, DAY0) is None


def test_ended_hours_wait_while_the_item_is_small_and_its_day_is_open() -> None:
    raw = {"pk": {"S": "k"}, "sk": {"S": "all"}, "w#h#2100-01-01T00:00Z\x1fn": {"N": "1"}}
    assert plan_move(raw, SPEC, DAY0 + 2 * HOUR_MS) is None
    assert plan_move(raw, SPEC, DAY0 + 2 * HOUR_MS, move_at_bytes=0) is not None
    assert plan_move(raw, SPEC, DAY0 + 2 * HOUR_MS, move_at_bytes=20) is not None  # the item is over 20 bytes
    with_day = raw | {"w#d#2100-01-01\x1fn": {"N": "1"}}
    assert plan_move(with_day, SPEC, DAY0 + DAY_MS) is not None  # a day ended: everything moves


def test_an_ended_month_moves_to_its_month_item_once_the_month_is_over() -> None:
    spec = parse_window_spec("day,month", "day=0,month=400")
    feb = 4_105_123_200_000  # 2100-02-01T00:00Z (2100 is not a leap year: February has 28 days)
    raw = {"pk": {"S": "k"}, "sk": {"S": "all"}, "w#mo#2100-02\x1fn": {"N": "5"}, "w#d#2100-02-28\x1fn": {"N": "2"}}
    # on February's last millisecond neither the month nor its last day has ended: nothing moves
    assert plan_move(raw, spec, feb + 28 * DAY_MS - 1, move_at_bytes=0) is None
    # at March's first instant both have: the month to its own item, kept its retention after its end
    move = plan_move(raw, spec, feb + 28 * DAY_MS)
    assert move is not None
    assert dict(move.adds) == {
        CounterItem("k", "d#2100-02-28", 0, None): {"n": Decimal(2)},
        CounterItem("k", "mo#2100-02", 0, (feb + 28 * DAY_MS + 400 * DAY_MS) // 1000): {"n": Decimal(5)},
    }
    assert parse_window_id("mo#2100-02") == ("month", feb)


DAILY_CALLS = parse_counter_thresholds("usage:*#calls@day>=10", windows=SPEC)


def test_a_move_keeps_the_pointer_of_each_unit_with_levels_and_is_conditioned_on_the_moves_it_read() -> None:
    # GIVEN usage:a's key item with days 0 and 1 ended (calls 8 and 3, and a counter without levels), moved once
    raw = {
        "pk": {"S": "usage:a"},
        "sk": {"S": "all"},
        "moves": {"N": "1"},
        "mpk#day": {"N": "1"},
        "mp#hour": {"S": "h#2099-12-31T00:00Z"},  # a unit whose levels are gone
        "w#d#2100-01-01\x1fcalls": {"N": "8"},
        "w#d#2100-01-02\x1fcalls": {"N": "3"},
        "w#d#2100-01-02\x1fbytes": {"N": "5"},
    }
    # WHEN its move is planned with a daily level on calls
    move = plan_move(raw, SPEC, DAY0 + 2 * DAY_MS, thresholds=DAILY_CALLS)
    # THEN the day pointer goes to day 1, the newest moved, with its total of calls only; the hour pointer is
    # removed; the move is conditioned on the count of moves read (the pointer was planned from it)
    assert move is not None
    assert move.pointers == {"mp#day": {"S": "d#2100-01-02"}, "mp#day\x1fcalls": {"N": "3"}, "mpk#day": {"N": "2"}}
    assert move.dropped == ("mp#hour",)
    assert move.moves == 1
    # AND without levels, or on a hot key's shard, a move keeps no pointer
    assert plan_move(raw, SPEC, DAY0 + 2 * DAY_MS).pointers == {}  # type: ignore[union-attr]
    shard = plan_move(raw | {"pk": {"S": "usage:a\x1f2"}}, SPEC, DAY0 + 2 * DAY_MS, thresholds=DAILY_CALLS)
    assert shard is not None
    assert shard.pointers == {}
