"""The producer's events, bodies and packing, checked against the consumer's own decoder."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core.decode import decode_message
from tally.core.defaults import parse_counter_defaults
from tally.core.items import SHARD_SEPARATOR
from tally.core.limits import PARTITION_KEY_MAX_BYTES, WIRE_LIMITS
from tally.core.model import Gauge, GaugeKind, Message
from tally.core.numbers import storage_problem
from tally.core.sharding import MAX_SHARDS
from tally.producer import (
    Event,
    KinesisPublisher,
    PackLimits,
    SqsPublisher,
    build_messages,
    packed_message,
    single_message,
)
from tally.store.markers import marker_id
from tests.support.imports import loaded_by

if TYPE_CHECKING:
    from collections.abc import Callable


def counting_ids(prefix: str = "m") -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


def decoded(body: bytes) -> Message:
    message = decode_message(body, WIRE_LIMITS)
    assert isinstance(message, Message), message
    return message


def as_consumer_sees(event: Event) -> tuple[str, dict[str, Decimal], int | None]:
    return event.key, {name: Decimal(value) for name, value in event.deltas.items()}, event.ts_ms


# --- events ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: Event.count("k", 0.1), TypeError, "float is not exact"),  # type: ignore[arg-type]
        (lambda: Event.count("k", True), TypeError, "int or a Decimal"),
        (lambda: Event.count("k", "5"), TypeError, "int or a Decimal"),  # type: ignore[arg-type]
        (lambda: Event.count("k", Decimal("NaN")), ValueError, "finite"),
        (lambda: Event.count("k", Decimal("Infinity")), ValueError, "finite"),
        (lambda: Event.count("k", Decimal("1." + "1" * 38)), ValueError, "39 significant digits"),
        (lambda: Event.count("k", 10**126), ValueError, "magnitude above"),
        (lambda: Event.count("k", Decimal("1E-131")), ValueError, "below 1E-130"),
        (lambda: Event.count(""), ValueError, "key must be a non-empty string"),
        (lambda: Event("k", {}, gauges={"p": ("latest", "x")}), ValueError, "needs the event's ts"),
        (lambda: Event("k", {}, gauges={"p": ("max", 1.5)}), TypeError, "a float is not exact"),  # type: ignore[dict-item]
        (lambda: Event("k", {}, gauges={"p": ("mean", 1)}), ValueError, "max, min and latest"),
        (lambda: Event("k", {}, gauges={}), ValueError, "gauges of"),
        (lambda: Event.count("k", counter=""), ValueError, "counter name"),
        (lambda: Event.count("k", counter="n" * 256), ValueError, "counter name is 256 bytes"),
        (lambda: Event.count("k" * 2001), ValueError, "key is 2001 bytes"),
        (lambda: Event.count("\ud800"), ValueError, "lone surrogate"),
        (lambda: Event.count("hot\x1f3"), ValueError, "U\\+001F"),
        (lambda: Event("k", {f"c{i}": 1 for i in range(101)}), ValueError, "101 counters"),
        (lambda: Event.count("k", ts=datetime(2026, 1, 1)), ValueError, "timezone-aware"),
        (lambda: Event.count("k", ts=-1), ValueError, "epoch milliseconds"),
        (lambda: Event.count("k", ts=253_402_300_800_000), ValueError, "epoch milliseconds"),
        (lambda: Event.count("k", id=""), ValueError, "id must be a non-empty string"),
        (lambda: Event.count("k", id="i" * 1025), ValueError, "id is 1025 bytes"),
    ],
)
def test_an_event_no_consumer_could_count_is_refused_at_the_call(
    build: Callable[[], Event], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        build()


def test_an_aware_datetime_becomes_exact_epoch_milliseconds() -> None:
    moment = datetime(2026, 11, 21, 11, 15, 0, 123_999, tzinfo=timezone(timedelta(hours=1)))
    assert Event.count("k", ts=moment).ts_ms == 1_795_256_100_123  # 10:15:00.123Z, sub-ms cut like the decoder


def test_the_event_keeps_its_own_copy_of_the_deltas() -> None:
    deltas: dict[str, int | Decimal] = {"count": 1}
    event = Event("k", deltas)
    deltas["count"] = 99
    assert event.deltas == {"count": 1}


def test_the_store_holds_whatever_the_wire_limits_admit() -> None:
    # The longest key with the widest shard suffix, and the marker of the longest id, fit DynamoDB's
    # partition key: a message the decoder admits can always be written.
    longest_shard = f"{SHARD_SEPARATOR}{MAX_SHARDS - 1}"
    assert WIRE_LIMITS.max_key_bytes + len(longest_shard.encode()) <= PARTITION_KEY_MAX_BYTES
    assert len(marker_id("é" * (WIRE_LIMITS.max_id_bytes // 2)).encode()) <= PARTITION_KEY_MAX_BYTES


# --- bodies ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "body"),
    [
        (Event.count("page:/home"), b'{"id":"m","key":"page:/home","delta":1}'),
        (Event.count("k", Decimal("-0.10")), b'{"id":"m","key":"k","delta":-0.10}'),
        (Event.count("k", Decimal("1E+2"), counter="x"), b'{"id":"m","key":"k","deltas":{"x":1E+2}}'),
        (Event("k", {"a": 1, "b": Decimal("49.99")}, ts=7), b'{"id":"m","key":"k","deltas":{"a":1,"b":49.99},"ts":7}'),
        (Event.count("caf\u00e9 \U0001f600"), b'{"id":"m","key":"caf\\u00e9 \\ud83d\\ude00","delta":1}'),
    ],
)
def test_single_bodies_are_exact_ascii_json(event: Event, body: bytes) -> None:
    message = single_message(event, "m")
    assert message.body == body
    assert (message.message_id, message.packed, message.events) == ("m", False, (event,))


# U+001F is the consumer's shard separator and marks an open window's counter on the key's item: left out of the
# alphabet, where a filter on the text retried up to one draw in seven (--hypothesis-show-statistics, ci profile).
_names = st.text(st.characters(codec="utf-8", exclude_characters="\x1f"), min_size=1, max_size=20)
_numbers = st.one_of(
    st.integers(min_value=-(10**38) + 1, max_value=10**38 - 1),
    st.decimals(allow_nan=False, allow_infinity=False).filter(lambda d: storage_problem(d) is None),
)
_keys = _names
_counter_names = _keys
_events = st.builds(
    Event,
    key=_keys,
    deltas=st.dictionaries(_counter_names, _numbers, min_size=1, max_size=5),
    ts=st.none() | st.integers(min_value=0, max_value=253_402_300_799_999),
)


@given(events=st.lists(_events, min_size=1, max_size=6))
def test_whatever_the_producer_writes_the_consumer_reads_back_exactly(events: list[Event]) -> None:
    # GIVEN any valid events WHEN written as single messages and as one packed message
    for index, event in enumerate(events):
        got = decoded(single_message(event, f"s-{index}").body)
        assert got.message_id == f"s-{index}"
        (only,) = got.events
        # THEN the decoder sees exactly the same key, numbers (no float anywhere) and time
        assert (only.key, dict(only.deltas), only.ts_ms) == as_consumer_sees(event)
    packed = decoded(packed_message(events, "p").body)
    assert [(e.key, dict(e.deltas), e.ts_ms) for e in packed.events] == [as_consumer_sees(e) for e in events]


def test_numbers_with_more_digits_than_a_float_survive_the_trip() -> None:
    value = Decimal("0.30000000000000000000000000000000000001")
    (event,) = decoded(single_message(Event.count("k", value), "m").body).events
    assert event.deltas["count"] == value


# --- packing -----------------------------------------------------------------------------------------


def test_packing_fills_messages_up_to_the_byte_limit_and_never_beyond() -> None:
    events = [Event.count(f"key-{i % 7}", i) for i in range(3_000)]
    messages = build_messages(events, PackLimits(max_bytes=4_096), counting_ids())
    assert all(m.size <= 4_096 for m in messages)
    assert all(m.size > 4_096 - 40 for m in messages[:-1])  # full: the next event would not have fitted
    assert [e for m in messages for e in m.events] == events  # every event, once, in order
    for message in messages:
        assert [(e.key, dict(e.deltas)) for e in decoded(message.body).events] == [
            (e.key, {n: Decimal(v) for n, v in e.deltas.items()}) for e in message.events
        ]


@pytest.mark.parametrize(
    ("events", "limits", "sizes"),
    [
        ([Event.count("hot") for _ in range(1_000)], PackLimits(max_bytes=1_000_000, max_events=400), [400, 400, 200]),
        ([Event.count(f"k{i}") for i in range(1_000)], PackLimits(max_bytes=1_000_000, max_keys=3), [3] * 333 + [1]),
    ],
    ids=["events", "distinct-keys"],
)
def test_packing_respects_the_consumers_event_and_key_limits(
    events: list[Event], limits: PackLimits, sizes: list[int]
) -> None:
    messages = build_messages(events, limits, counting_ids())
    assert [len(m.events) for m in messages] == sizes
    assert all(len({e.key for e in m.events}) <= limits.max_keys for m in messages)


def test_many_events_of_a_few_keys_pack_densely() -> None:
    # Repeated keys cost no key budget: 10,000 events over 50 keys fit the 10,000-event limit.
    events = [Event.count(f"k{i % 50}") for i in range(10_000)]
    messages = build_messages(events, PackLimits(max_bytes=1_000_000), counting_ids())
    assert [len(m.events) for m in messages] == [10_000]


def test_ids_are_assigned_once_each_and_events_with_an_id_travel_alone_under_it() -> None:
    events = [Event.count("a"), Event.count("b", id="order-17"), Event.count("c"), Event.count("d")]
    messages = build_messages(events, PackLimits(max_bytes=10_000), counting_ids())
    # The event with an id goes out at once, under its id; the others share one pack and one fresh id.
    assert [(m.message_id, [e.key for e in m.events], m.packed) for m in messages] == [
        ("order-17", ["b"], False),
        ("m-1", ["a", "c", "d"], True),
    ]
    assert decoded(messages[0].body).message_id == "order-17"


def test_without_packing_every_event_is_its_own_message() -> None:
    events = [Event.count("a"), Event.count("b"), Event.count("c", id="mine")]
    messages = build_messages(events, None, counting_ids())
    assert [(m.message_id, m.packed) for m in messages] == [("m-1", False), ("m-2", False), ("mine", False)]


def test_a_pack_of_one_is_sent_in_the_single_shape() -> None:
    (message,) = build_messages([Event.count("a")], PackLimits(max_bytes=10_000), counting_ids())
    assert message.body == b'{"id":"m-1","key":"a","delta":1}'


def test_the_library_needs_nothing_but_boto3() -> None:
    # The producer is embedded in applications: importing it must not pull in the Lambda's dependencies.
    heavy = ("msgspec", "aws_lambda_powertools", "tenacity", "click", "rich")
    assert loaded_by("import tally.producer", heavy) == []


def test_a_utc_datetime_and_its_epoch_ms_are_the_same_event_time() -> None:
    moment = datetime(2026, 11, 21, 10, 15, tzinfo=UTC)
    assert Event.count("k", ts=moment).ts_ms == int(moment.timestamp()) * 1000


def test_events_without_deltas_and_with_gauges_decode_as_the_consumer_reads_them() -> None:
    # GIVEN an event left to its key's default deltas, and one with gauges
    defaults = parse_counter_defaults("views:*#count=delta:1")
    bare = single_message(Event("views:/a", {}), "m1")
    with_gauges = single_message(
        Event("shop:1", {"orders": 1}, ts=5, gauges={"peak": ("max", Decimal("4.5")), "last": ("latest", "x")}), "m2"
    )
    # WHEN the consumer decodes their bodies
    first = decode_message(bare.body, defaults=defaults)
    second = decode_message(with_gauges.body)
    # THEN the default counts, and the readings arrive exactly
    assert isinstance(first, Message)
    assert dict(first.events[0].deltas) == {"count": 1}
    assert isinstance(second, Message)
    assert second.events[0].gauges == {
        "peak": Gauge(GaugeKind.MAX, Decimal("4.5")),
        "last": Gauge(GaugeKind.LATEST, "x"),
    }


@pytest.mark.parametrize("publisher", ["sqs", "kinesis"])
def test_a_publisher_can_pack_more_distinct_keys_per_message_for_high_volume(publisher: str) -> None:
    """The 99-key default keeps a lone message in one transaction, but caps a message of events over many
    keys (220 events on workload U's 1,000 Zipf keys), and with it the write units per event at high
    volume (0.037 at best, against a target of 0.03). A publisher must let a producer raise it."""
    rng = random.Random(7)
    events = [Event.count(f"tenant-{rng.randrange(1000):04d}") for _ in range(5_000)]
    client: Any = object()  # prepare() makes no call
    default = SqsPublisher(client, "https://sqs/q") if publisher == "sqs" else KinesisPublisher(client, stream_name="s")
    raised = (
        SqsPublisher(client, "https://sqs/q", max_keys_per_message=10_000)
        if publisher == "sqs"
        else KinesisPublisher(client, stream_name="s", max_keys_per_message=10_000)
    )
    assert max(len({e.key for e in m.events}) for m in default.prepare(events)) <= 99
    packed = raised.prepare(events)
    assert max(len({e.key for e in m.events}) for m in packed) > 99
    assert [e for m in packed for e in m.events] == events
    assert all(m.size <= 256 * 1024 for m in packed)
