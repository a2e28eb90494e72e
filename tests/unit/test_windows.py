"""Window assignment, expiry and late events, and hot-key shard assignment: pure functions."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core.aggregate import message_totals
from tally.core.decode import decode_message
from tally.core.items import CounterItem, item_parts, split_window_counter, window_counter
from tally.core.limits import MAX_TS_MS
from tally.core.model import Message
from tally.core.patterns import KeyPattern
from tally.core.sharding import HotKeys, assign_shards, parse_hot_keys
from tally.core.windows import DAY_MS, HOUR_MS, MINUTE_MS, parse_window_id, parse_window_spec, unit_named

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tally.core.items import ItemKey
    from tally.core.numbers import Number

SPEC = parse_window_spec("minute,hour,day", "minute=7,hour=90,day=0")


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def windows_in(totals: Mapping[ItemKey, Mapping[str, Number]]) -> dict[str, dict[str, Number]]:
    """Window id (or ``all``) -> counters, whether the window is an item or counters on the key's item."""
    found: dict[str, dict[str, Number]] = {}
    for item, counters in totals.items():
        for name, value in counters.items():
            split = split_window_counter(name)
            window, counter = split if split is not None else (item_parts(item).window, name)
            found.setdefault(window, {})[counter] = value
    return found


@pytest.mark.parametrize(
    ("ts", "minute", "hour", "day"),
    [
        pytest.param(
            "2026-11-22T03:59:59.999Z", "m#2026-11-22T03:59Z", "h#2026-11-22T03:00Z", "d#2026-11-22", id="last-ms"
        ),
        pytest.param(
            "2026-11-22T04:00:00.000Z", "m#2026-11-22T04:00Z", "h#2026-11-22T04:00Z", "d#2026-11-22", id="first-ms"
        ),
        pytest.param(
            "2026-11-22T23:59:59.999Z", "m#2026-11-22T23:59Z", "h#2026-11-22T23:00Z", "d#2026-11-22", id="end-of-day"
        ),
        pytest.param(
            "2026-11-23T00:30:00+01:00",
            "m#2026-11-22T23:30Z",
            "h#2026-11-22T23:00Z",
            "d#2026-11-22",
            id="offset-is-utc",
        ),
        pytest.param(
            "2026-11-22T05:30:00-05:00",
            "m#2026-11-22T10:30Z",
            "h#2026-11-22T10:00Z",
            "d#2026-11-22",
            id="negative-offset",
        ),
    ],
)
def test_an_event_lands_in_the_half_open_utc_window_of_its_ts(ts: str, minute: str, hour: str, day: str) -> None:
    ts_ms = ms(ts.replace("Z", "+00:00"))
    assert [unit.window_id(unit.start_ms(ts_ms)) for unit in SPEC.units] == [minute, hour, day]


@pytest.mark.parametrize("ts_text", ['"2026-11-22T03:15:00Z"', "1795317300000"], ids=["iso", "epoch-ms"])
def test_iso_and_epoch_timestamps_give_the_same_windows(ts_text: str) -> None:
    message = decode_message(f'{{"id":"m","key":"k","delta":2,"ts":{ts_text}}}')
    assert isinstance(message, Message)
    totals = message_totals(message, SPEC, received_ms=0, now_ms=ms("2026-11-22T04:00:00+00:00")).totals
    windows = windows_in(totals)
    assert sorted(windows) == ["all", "d#2026-11-22", "h#2026-11-22T03:00Z", "m#2026-11-22T03:15Z"]
    assert all(counters == {"count": 2} for counters in windows.values())


def test_hour_and_day_windows_ride_on_the_keys_item_and_minutes_are_items_of_their_own() -> None:
    # GIVEN an event counted in minute, hour and day windows
    message = decode_message('{"id":"m","key":"k","delta":2,"ts":"2026-11-22T03:15:00Z"}')
    assert isinstance(message, Message)
    totals = message_totals(message, SPEC, received_ms=0, now_ms=ms("2026-11-22T04:00:00+00:00")).totals
    # THEN the batch writes two items: the key's (all-time, hour, day) and the minute's
    assert totals == {
        "k": {
            "count": 2,
            window_counter("h#2026-11-22T03:00Z", "count"): 2,
            window_counter("d#2026-11-22", "count"): 2,
        },
        CounterItem("k", "m#2026-11-22T03:15Z", 0, (ms("2026-11-22T03:16:00+00:00") + 7 * DAY_MS) // 1000): {
            "count": 2
        },
    }


def test_a_window_counter_name_can_never_be_a_users_counter() -> None:
    # A user counter name holding U+001F is refused, so the window counters' names are theirs alone
    refused = decode_message('{"id":"m","key":"k","deltas":{"\\u001fh#2026-11-22T03:00Z\\u001fcount":1}}')
    assert not isinstance(refused, Message)
    assert refused.code.value == "invalid_counter_name"
    assert split_window_counter(window_counter("d#2026-11-22", "a\u001fb")) == ("d#2026-11-22", "a\u001fb")
    assert split_window_counter("count") is None


def test_without_ts_the_window_comes_from_the_time_the_source_received_it() -> None:
    message = decode_message('{"id":"m","key":"k","delta":1}')
    assert isinstance(message, Message)
    received = ms("2026-11-22T03:15:00+00:00")
    totals = message_totals(message, parse_window_spec("hour"), received_ms=received, now_ms=received).totals
    assert windows_in(totals) == {"all": {"count": 1}, "h#2026-11-22T03:00Z": {"count": 1}}


def test_window_expiry_is_window_end_plus_retention_and_day_is_kept() -> None:
    start = ms("2026-11-22T03:00:00+00:00")
    minute, hour, day = SPEC.units
    assert minute.expires_at_s(start) == (start + MINUTE_MS + 7 * DAY_MS) // 1000
    assert hour.expires_at_s(start) == (start + HOUR_MS + 90 * DAY_MS) // 1000
    assert day.expires_at_s(start) is None


def test_a_late_event_counts_all_time_and_in_the_windows_still_kept() -> None:
    # GIVEN an event 10 days old: its minute window (7 days) has expired, its hour window (90) has not
    now = ms("2026-11-22T03:00:00+00:00")
    message = decode_message(f'{{"id":"m","key":"k","delta":1,"ts":{now - 10 * DAY_MS}}}')
    assert isinstance(message, Message)
    net = message_totals(message, SPEC, received_ms=now, now_ms=now)
    units = sorted(window[:1] for window in windows_in(net.totals))
    assert units == ["a", "d", "h"]
    assert net.late_events == 1


def test_events_of_one_message_in_one_window_are_summed() -> None:
    body = '{"id":"m","events":[{"key":"k","delta":1,"ts":"2026-11-22T03:01:00Z"},{"key":"k","delta":2,"ts":"2026-11-22T03:59:00Z"}]}'
    message = decode_message(body)
    assert isinstance(message, Message)
    totals = message_totals(message, parse_window_spec("hour"), now_ms=ms("2026-11-22T04:00:00+00:00")).totals
    assert totals == {"k": {"count": 3, window_counter("h#2026-11-22T03:00Z", "count"): 3}}


@pytest.mark.parametrize(
    ("text", "problem"),
    [("week", "unknown window"), ("hour", None), ("", None), ("month", None)],
)
def test_window_config_is_checked(text: str, problem: str | None) -> None:
    if problem is None:
        parse_window_spec(text)
    else:
        with pytest.raises(ValueError, match=problem):
            parse_window_spec(text)


def test_hot_key_rules_match_exact_keys_and_prefixes() -> None:
    hot = parse_hot_keys("page:/home=8,tenant:*=4")
    assert (hot.shards_for("page:/home"), hot.shards_for("tenant:7"), hot.shards_for("page:/x")) == (8, 4, 1)
    with pytest.raises(ValueError, match="KEY=N"):
        parse_hot_keys("page=99")


def test_assign_shards_moves_only_hot_items_with_their_windows() -> None:
    hot = HotKeys(((KeyPattern("hot"), 4),))
    window = CounterItem("hot", "h#2026-11-22T03:00Z", 0, 123)
    moved = assign_shards({"hot": {"count": 1}, "cold": {"count": 2}, window: {"count": 1}}, hot, lambda _, n: n - 1)
    assert moved == {
        CounterItem("hot", "all", 3): {"count": 1},
        "cold": {"count": 2},
        CounterItem("hot", "h#2026-11-22T03:00Z", 3, 123): {"count": 1},
    }


def test_keys_may_not_contain_the_shard_separator() -> None:
    rejection = decode_message('{"id":"m","key":"a\\u001fb","delta":1}')
    assert not isinstance(rejection, Message)
    assert rejection.code == "invalid_key"


# ------------------------------------------------------------------------------- month: a calendar month of UTC
MONTH = unit_named("month")


@pytest.mark.parametrize(
    ("ts", "window", "end"),
    [
        pytest.param("2026-12-31T23:59:59.999", "mo#2026-12", "2027-01-01T00:00:00", id="dec-last-ms"),
        pytest.param("2027-01-01T00:00:00.000", "mo#2027-01", "2027-02-01T00:00:00", id="jan-first-ms"),
        pytest.param("2024-02-29T23:59:59.999", "mo#2024-02", "2024-03-01T00:00:00", id="leap-feb-29-days"),
        pytest.param("2023-02-28T23:59:59.999", "mo#2023-02", "2023-03-01T00:00:00", id="common-feb-28-days"),
        pytest.param("2023-03-01T00:00:00.000", "mo#2023-03", "2023-04-01T00:00:00", id="after-common-feb"),
        pytest.param("2100-02-28T12:00:00.000", "mo#2100-02", "2100-03-01T00:00:00", id="century-not-leap"),
        pytest.param("2026-04-30T23:59:59.999", "mo#2026-04", "2026-05-01T00:00:00", id="30-day-month"),
        pytest.param("1970-01-01T00:00:00.000", "mo#1970-01", "1970-02-01T00:00:00", id="epoch"),
    ],
)
def test_a_month_window_is_the_utc_calendar_month_of_its_ts(ts: str, window: str, end: str) -> None:
    ts_ms = ms(ts + "+00:00")
    start = MONTH.start_ms(ts_ms)
    assert MONTH.window_id(start) == window
    assert parse_window_id(window) == ("month", start)
    assert MONTH.end_ms(start) == ms(end + "+00:00")
    assert start <= ts_ms < MONTH.end_ms(start)  # the last millisecond of a month is still in it


def test_a_month_window_rides_on_the_keys_item_and_expires_its_retention_after_its_end() -> None:
    spec = parse_window_spec("day,month", "day=0,month=30")
    message = decode_message('{"id":"m","key":"k","delta":2,"ts":"2026-02-28T23:59:59.999Z"}')
    assert isinstance(message, Message)
    totals = message_totals(message, spec, received_ms=0, now_ms=ms("2026-03-01T00:00:00+00:00")).totals
    assert totals == {
        "k": {"count": 2, window_counter("d#2026-02-28", "count"): 2, window_counter("mo#2026-02", "count"): 2}
    }
    assert (
        spec.unit("month").expires_at_s(ms("2026-02-01T00:00:00+00:00"))
        == (ms("2026-03-01T00:00:00+00:00") + 30 * DAY_MS) // 1000
    )
    # an event of a month whose retention has passed counts all-time (and in its day, kept forever) only
    late = message_totals(message, spec, received_ms=0, now_ms=ms("2026-03-31T00:00:00+00:00"))
    assert late.late_events == 1
    assert sorted(windows_in(late.totals)) == ["all", "d#2026-02-28"]


def test_series_of_months_step_by_calendar_month() -> None:
    first, last = ms("2023-11-15T00:00:00+00:00"), ms("2024-03-01T00:00:00+00:00")
    starts = MONTH.starts(first, last)
    assert [MONTH.window_id(start) for start in starts] == [
        "mo#2023-11",
        "mo#2023-12",
        "mo#2024-01",
        "mo#2024-02",
        "mo#2024-03",
    ]
    assert MONTH.count(first, last) == 5
    assert MONTH.count(last, first) == 0
    assert MONTH.shifted(starts[0], 4) == starts[-1]
    assert MONTH.shifted(starts[-1], -4) == starts[0]


# the window after 9999-12 would start in year 10000, which ``datetime`` cannot hold (nor can an event's ts)
@given(ts=st.integers(0, MAX_TS_MS - 31 * DAY_MS), later=st.integers(0, 40 * 366 * DAY_MS))
def test_every_unit_holds_its_ts_in_a_half_open_window_whose_id_reads_back_and_sorts_in_time(
    ts: int, later: int
) -> None:
    for unit in parse_window_spec("minute,hour,day,month").units:
        start = unit.start_ms(ts)
        end = unit.end_ms(start)
        # GIVEN any instant THEN its window holds it, half-open, and the next window starts at its end
        assert start <= ts < end
        assert unit.start_ms(end) == end == unit.shifted(start, 1)
        assert unit.start_ms(end - 1) == start
        assert parse_window_id(unit.window_id(start)) == (unit.name, start)
        if unit.duration_ms is None:
            assert 28 * DAY_MS <= end - start <= 31 * DAY_MS
        # AND a later instant's window id sorts after (or is) this one's, as a ``BETWEEN`` on the sort key needs
        other = min(ts + later, MAX_TS_MS)
        assert unit.window_id(unit.start_ms(other)) >= unit.window_id(start)
        assert unit.count(ts, other) == len(unit.starts(ts, other))
