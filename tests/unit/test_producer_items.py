"""The producer's ``max_keys_per_message`` bounds the counter items a packed message makes the consumer
write: with minute windows, each minute an event of a key falls in is one more item ."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tally.core.aggregate import message_totals
from tally.core.decode import decode_message
from tally.core.model import Message
from tally.core.windows import parse_window_spec
from tally.producer import Event, PackLimits, build_messages

NOW_MS = 1_795_000_000_000
WINDOWS = parse_window_spec("minute,hour,day", "minute=7,hour=90,day=0")


def items_written(body: str) -> int:
    """The counter items the consumer (with minute windows) writes for one message body."""
    message = decode_message(body)
    assert isinstance(message, Message)
    return len(message_totals(message, WINDOWS, received_ms=NOW_MS, now_ms=NOW_MS).totals)


def test_minute_windows_close_a_message_at_99_items_not_99_keys() -> None:
    # GIVEN 60 events on 60 keys, alternately in two minutes
    events = [Event(f"k:{n}", {"count": 1}, ts=NOW_MS - 60_000 * (n % 2)) for n in range(60)]
    # WHEN packed with the defaults, the consumer's minute windows declared or not
    plain = build_messages(events, PackLimits(max_bytes=256_000))
    minutes = build_messages(events, PackLimits(max_bytes=256_000, minute_windows=True))
    # THEN without them one message of 60 keys, 120 items: too many for a direct transaction; with them,
    # messages of at most 99 items
    assert [len(message.events) for message in plain] == [60]
    assert items_written(plain[0].body) == 120
    assert [len(message.events) for message in minutes] == [49, 11]
    assert [items_written(message.body) for message in minutes] == [98, 22]


@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.one_of(st.none(), st.integers(0, 5))),
        min_size=1,
        max_size=300,
    ),
    st.integers(1, 99),
)
def test_a_packed_message_never_makes_the_consumer_write_more_items_than_asked(
    shape: list[tuple[int, int | None]], max_keys: int
) -> None:
    events = [
        Event(f"k:{key}", {"count": 1}, ts=None if minute is None else NOW_MS - 60_000 * minute)
        for key, minute in shape
    ]
    for message in build_messages(events, PackLimits(max_bytes=256_000, max_keys=max_keys, minute_windows=True)):
        assert items_written(message.body) <= max(max_keys, 2)
