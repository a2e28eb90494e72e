"""In the pure core and at the edges: distinct counts' wire format, digest and pre-aggregation.

What it proves: ``"distinct": {set: member}`` decodes strictly (a bad member is ``invalid_distinct``), it is
part of the content digest without changing the digests of events without it, a batch's members collapse
to one entry per (key, window, set, member) with windows from ``ts`` only, the member items' keys fit
DynamoDB's key limits, the producer writes what the decoder reads (and refuses, at the call, what the
consumer would dead-letter).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tally.core.decode import decode_message
from tally.core.digest import content_digest
from tally.core.distinct import MemberSet, batch_members, exact_distinct
from tally.core.items import ALL_TIME
from tally.core.limits import MAX_MEMBER_BYTES, WIRE_LIMITS
from tally.core.model import CounterEvent, Message, RejectCode, Rejection
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_spec
from tally.producer.event import Event
from tally.producer.wire import single_message
from tally.store.schema import distinct_from_item, member_key, member_of_item

TS = 4_102_444_800_000  # 2100-01-01T00:00Z
WINDOWS = parse_window_spec("hour,day", "hour=2,day=0")


def decoded(body: dict[str, Any]) -> Message:
    message = decode_message(json.dumps(body))
    assert isinstance(message, Message), message
    return message


# ------------------------------------------------------------------------------------------ decoding
@pytest.mark.parametrize(
    ("body", "deltas", "members"),
    [
        ({"id": "a", "key": "v", "delta": 1, "distinct": {"viewers": "u1"}}, {"count": 1}, {"viewers": "u1"}),
        ({"id": "a", "key": "v", "distinct": {"viewers": "u1", "countries": "fr"}}, {}, None),  # distinct only
        ({"id": "a", "events": [{"key": "v", "distinct": {"viewers": "ü" * 256}}]}, {}, {"viewers": "ü" * 256}),
    ],
)
def test_distinct_members_decode(body: dict[str, Any], deltas: dict[str, int], members: dict[str, str] | None) -> None:
    (event,) = decoded(body).events
    assert event.deltas == deltas
    wire = body.get("distinct") or body["events"][0]["distinct"]
    assert event.distinct == (members or wire)


@pytest.mark.parametrize(
    ("distinct", "code"),
    [
        ({}, RejectCode.INVALID_DISTINCT),
        ({"viewers": ["u1"]}, RejectCode.INVALID_DISTINCT),  # one member per set and event: a string
        ({"viewers": 17}, RejectCode.INVALID_DISTINCT),
        ({"viewers": ""}, RejectCode.INVALID_DISTINCT),
        ({"": "u1"}, RejectCode.INVALID_DISTINCT),
        ({"viewers": "x" * (MAX_MEMBER_BYTES + 1)}, RejectCode.INVALID_DISTINCT),
        ({"viewers": "a\x1fb"}, RejectCode.INVALID_DISTINCT),  # U+001F separates the member item's sort key
        ({"a\x1fb": "u1"}, RejectCode.INVALID_DISTINCT),
        ({"s" * 256: "u1"}, RejectCode.INVALID_DISTINCT),
        ({f"s{i}": "u" for i in range(101)}, RejectCode.TOO_MANY_COUNTERS),
        ([1], RejectCode.INVALID_FIELD),
    ],
)
def test_a_bad_distinct_is_refused_with_its_reason(distinct: object, code: RejectCode) -> None:
    rejected = decode_message(json.dumps({"id": "a", "key": "v", "delta": 1, "distinct": distinct}))
    assert isinstance(rejected, Rejection), rejected
    assert rejected.code is code


def test_a_packed_message_carries_distinct_on_its_events_only() -> None:
    body = {"id": "a", "distinct": {"v": "u"}, "events": [{"key": "k", "delta": 1}]}
    rejected = decode_message(json.dumps(body))
    assert isinstance(rejected, Rejection)
    assert rejected.code is RejectCode.AMBIGUOUS_SHAPE


def test_members_are_part_of_the_content_and_old_digests_are_unchanged() -> None:
    plain = decoded({"id": "a", "key": "k", "delta": 1, "ts": 5})
    u1 = decoded({"id": "a", "key": "k", "delta": 1, "ts": 5, "distinct": {"viewers": "u1", "c": "fr"}})
    u1_reordered = decoded({"id": "a", "key": "k", "delta": 1, "ts": 5, "distinct": {"c": "fr", "viewers": "u1"}})
    u2 = decoded({"id": "a", "key": "k", "delta": 1, "ts": 5, "distinct": {"viewers": "u2", "c": "fr"}})
    gauge = decoded({"id": "a", "key": "k", "delta": 1, "ts": 5, "gauges": {"p": {"max": 1}}})
    both = decoded(
        {"id": "a", "key": "k", "delta": 1, "ts": 5, "gauges": {"p": {"max": 1}}, "distinct": {"viewers": "u1"}}
    )
    assert content_digest(u1) == content_digest(u1_reordered)
    assert len({content_digest(m) for m in (plain, u1, u2, gauge, both)}) == 5
    # An event without members digests as before members existed (pinned in test_digest).
    assert content_digest(Message("a", (CounterEvent("k", {"count": 1}, 5),))) == content_digest(plain)


# ------------------------------------------------------------------------------------ pre-aggregation
def member_message(mid: str, key: str, members: dict[str, str], ts: int | None = None) -> Message:
    body: dict[str, Any] = {"id": mid, "key": key, "distinct": members}
    if ts is not None:
        body["ts"] = ts
    return decoded(body)


HOUR = "h#2100-01-01T00:00Z"
DAY = "d#2100-01-01"
HOUR_EXPIRES = (TS + HOUR_MS + 2 * DAY_MS) // 1000


@pytest.mark.parametrize(
    ("messages", "now_ms", "expected"),
    [
        pytest.param(  # a member named by several messages is one entry; sets are apart
            [
                member_message("a", "v", {"viewers": "u1"}),
                member_message("b", "v", {"viewers": "u1", "countries": "fr"}),
                member_message("c", "v", {"viewers": "u2"}),
            ],
            TS,
            {
                MemberSet("v", ALL_TIME, "viewers"): {"u1", "u2"},
                MemberSet("v", ALL_TIME, "countries"): {"fr"},
            },
            id="repeats-collapse",
        ),
        pytest.param(  # with ts: all-time and every kept window (hour expires, day is kept)
            [member_message("a", "v", {"viewers": "u1"}, ts=TS + 5), member_message("b", "v", {"viewers": "u2"})],
            TS + 10,
            {
                MemberSet("v", ALL_TIME, "viewers"): {"u1", "u2"},
                MemberSet("v", HOUR, "viewers", HOUR_EXPIRES): {"u1"},
                MemberSet("v", DAY, "viewers"): {"u1"},
            },
            id="windows-from-ts-only",
        ),
        pytest.param(  # an hour window past its retention is never written again (the day is kept forever)
            [member_message("a", "v", {"viewers": "u1"}, ts=TS)],
            HOUR_EXPIRES * 1000,
            {MemberSet("v", ALL_TIME, "viewers"): {"u1"}, MemberSet("v", DAY, "viewers"): {"u1"}},
            id="expired-window-skipped",
        ),
    ],
)
def test_a_batch_names_each_member_once_per_key_window_and_set(
    messages: list[Message], now_ms: int, expected: dict[MemberSet, set[str]]
) -> None:
    batch = batch_members(messages, WINDOWS, now_ms)
    assert {s: set(members) for s, members in batch.members["v"].items()} == expected
    assert batch.sources == {"v": frozenset(m.message_id for m in messages)}


def test_a_packed_message_names_members_of_several_keys() -> None:
    message = decoded(
        {
            "id": "p",
            "events": [
                {"key": "v", "distinct": {"viewers": "u3"}},
                {"key": "v", "distinct": {"viewers": "u3"}},
                {"key": "cart", "deltas": {"orders": 1}, "distinct": {"buyers": "u3"}},
                {"key": "plain", "delta": 1},
            ],
        }
    )
    batch = batch_members([message])
    assert batch.members == {
        "v": {MemberSet("v", ALL_TIME, "viewers"): frozenset({"u3"})},
        "cart": {MemberSet("cart", ALL_TIME, "buyers"): frozenset({"u3"})},
    }
    assert batch.member_count == 2


def test_exact_distinct_is_the_size_of_each_set() -> None:
    seen = [("v", "all", "viewers", "u1"), ("v", "all", "viewers", "u1"), ("v", "all", "viewers", "u2")]
    assert exact_distinct([*seen, ("v", "all", "c", "fr")]) == {("v", "all", "viewers"): 2, ("v", "all", "c"): 1}


# --------------------------------------------------------------------------------------- item schema
def test_the_longest_member_item_key_fits_dynamodbs_key_limits() -> None:
    key = "k" * WIRE_LIMITS.max_key_bytes
    longest = member_key(key, "h#2100-01-01T00:00Z", "s" * 255, "ü" * (MAX_MEMBER_BYTES // 2))
    assert len(longest["pk"]["S"].encode()) <= 2048
    assert len(longest["sk"]["S"].encode()) <= 1024
    assert member_of_item(longest) == ("h#2100-01-01T00:00Z", "s" * 255, "ü" * (MAX_MEMBER_BYTES // 2))
    assert longest["sk"]["S"] != ALL_TIME  # never read as a counter item by top's scan


def test_distinct_counts_are_read_apart_from_counters() -> None:
    item = {"pk": {"S": "v"}, "sk": {"S": "all"}, "c#viewers": {"N": "9"}, "dc#viewers": {"N": "2"}}
    assert {name: str(v) for name, v in distinct_from_item(item).items()} == {"viewers": "2"}


# ----------------------------------------------------------------------------------------- producer
def test_the_producer_writes_members_the_decoder_reads() -> None:
    event = Event("video:1", {"count": 1}, ts=TS, id="e1", distinct={"viewers": "user-17", "countries": "fr"})
    body = single_message(event, "e1").body
    message = decode_message(body)
    assert isinstance(message, Message)
    assert message.events[0].distinct == {"viewers": "user-17", "countries": "fr"}


@pytest.mark.parametrize(
    "distinct", [{}, {"viewers": ""}, {"viewers": 17}, {"viewers": "x" * (MAX_MEMBER_BYTES + 1)}, {"v": "a\x1f"}]
)
def test_the_producer_refuses_what_the_consumer_would_dead_letter(distinct: Any) -> None:
    with pytest.raises(ValueError, match=r"distinct|member|set"):
        Event("video:1", {}, distinct=distinct)
