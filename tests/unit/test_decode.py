"""Unit tests for ``tally.core.decode``: the wire format, accepted shapes and every rejection code."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tally.core.decode import DEFAULT_COUNTER, decode_message
from tally.core.limits import WireLimits
from tally.core.model import CounterEvent, Message, RejectCode, Rejection
from tally.core.numbers import checked_canonical

if TYPE_CHECKING:
    from tally.core.numbers import Number

JAN_1_2024_UTC_MS = 1_704_067_200_000
"""2024-01-01T00:00:00Z in epoch milliseconds."""
HOUR_MS = 3_600_000

THIRTY_EIGHT_NINES = "9" * 38


def single(
    key: str = "page:home",
    deltas: dict[str, Number] | None = None,
    ts_ms: int | None = None,
    mid: str = "m-1",
) -> Message:
    """The message one single-event body decodes to."""
    return Message(mid, (CounterEvent(key, {DEFAULT_COUNTER: 1} if deltas is None else deltas, ts_ms),))


def body(**fields: object) -> str:
    """A JSON body from fields whose values are already JSON text (so number literals stay verbatim)."""
    return "{" + ", ".join(f"{json.dumps(name)}: {text}" for name, text in fields.items()) + "}"


def event(key: str = "page:home", delta: str = "1", mid: str = "m-1") -> str:
    return body(id=json.dumps(mid), key=json.dumps(key), delta=delta)


def assert_same_message(actual: Message | Rejection, expected: Message) -> None:
    """Equal, and every delta has the expected type: int for integer literals, Decimal otherwise.

    Decimal equality is exact, so ``Decimal("0.1")`` never equals the float-derived ``Decimal(0.1)``; the
    representation (trailing zeros, exponent) is not part of the contract, so it is not compared.
    """
    assert isinstance(actual, Message), actual
    assert actual == expected
    for got, want in zip(actual.events, expected.events, strict=True):
        assert list(got.deltas) == list(want.deltas)
        for name, value in want.deltas.items():
            assert type(got.deltas[name]) is type(value), name


# --- accepted shapes -----------------------------------------------------------------------------------

BOUNDARY_LIMITS = WireLimits(max_id_bytes=512, max_key_bytes=1024)
"""Smaller id and key limits than the deployed ones (``WIRE_LIMITS``), so the boundary cases stay short."""

ACCEPTED: list[object] = [
    # shapes
    pytest.param('{"id": "m-1", "key": "page:home", "delta": 1}', single(), id="single-delta"),
    pytest.param(b'{"id": "m-1", "key": "page:home", "delta": 1}', single(), id="single-delta-bytes-body"),
    pytest.param('  {"id":"m-1","key":"page:home","delta":1}\n', single(), id="surrounding-whitespace"),
    pytest.param(
        '{"id": "m-1", "key": "page:home", "deltas": {"views": 1, "revenue": 49.99}}',
        single(deltas={"views": 1, "revenue": Decimal("49.99")}),
        id="single-deltas",
    ),
    pytest.param(
        '{"id": "m-1", "key": "page:home", "deltas": {"count": 3}}',
        single(deltas={"count": 3}),
        id="deltas-count-same-as-delta",
    ),
    pytest.param(
        '{"id": "m-1", "key": "page:home", "delta": 1, "ts": 1704067200000}',
        single(ts_ms=JAN_1_2024_UTC_MS),
        id="field-order-free-ts-last",
    ),
    pytest.param(
        '{"ts": 0, "delta": 1, "key": "page:home", "id": "m-1"}',
        single(ts_ms=0),
        id="field-order-free-ts-epoch-zero",
    ),
    pytest.param(
        '{"id": "pack-1", "events": [{"key": "a", "delta": 1}, '
        '{"key": "b", "deltas": {"views": 2, "revenue": 0.5}, "ts": "2024-01-01T00:00:00Z"}, '
        '{"key": "a", "delta": -1}]}',
        Message(
            "pack-1",
            (
                CounterEvent("a", {"count": 1}),
                CounterEvent("b", {"views": 2, "revenue": Decimal("0.5")}, JAN_1_2024_UTC_MS),
                CounterEvent("a", {"count": -1}),
            ),
        ),
        id="packed",
    ),
    pytest.param(
        b'{"id": "pack-1", "events": [{"key": "a", "delta": 1}]}',
        Message("pack-1", (CounterEvent("a", {"count": 1}),)),
        id="packed-one-event-bytes-body",
    ),
    # numbers
    pytest.param(event(delta="-3"), single(deltas={"count": -3}), id="negative-int"),
    pytest.param(event(delta="-0"), single(deltas={"count": 0}), id="minus-zero-int"),
    pytest.param(event(delta="-0.0"), single(deltas={"count": Decimal("-0.0")}), id="minus-zero-decimal"),
    pytest.param(event(delta="0.1"), single(deltas={"count": Decimal("0.1")}), id="tenth-from-literal-text"),
    pytest.param(event(delta="-2.50"), single(deltas={"count": Decimal("-2.50")}), id="negative-decimal-kept"),
    pytest.param(event(delta="1e3"), single(deltas={"count": Decimal("1E+3")}), id="exponent-1e3"),
    pytest.param(event(delta="1E+3"), single(deltas={"count": Decimal("1E+3")}), id="exponent-1E+3"),
    pytest.param(event(delta="2.5e-3"), single(deltas={"count": Decimal("0.0025")}), id="exponent-negative"),
    pytest.param(event(delta="1E+100"), single(deltas={"count": Decimal("1E+100")}), id="1E+100"),
    pytest.param(event(delta="1E-130"), single(deltas={"count": Decimal("1E-130")}), id="smallest-non-zero"),
    pytest.param(
        event(delta="9.9999999999999999999999999999999999999E+125"),
        single(deltas={"count": Decimal("9.9999999999999999999999999999999999999E+125")}),
        id="largest-38-digit-decimal",
    ),
    pytest.param(event(delta=THIRTY_EIGHT_NINES), single(deltas={"count": 10**38 - 1}), id="38-digit-int"),
    pytest.param(
        event(delta="-" + THIRTY_EIGHT_NINES),
        single(deltas={"count": -(10**38) + 1}),
        id="minus-38-digit-int",
    ),
    pytest.param(event(delta="1" + "0" * 38), single(deltas={"count": 10**38}), id="10**38-trailing-zeros"),
    pytest.param(event(delta="1" + "0" * 125), single(deltas={"count": 10**125}), id="10**125-int-beyond-uint64"),
    pytest.param(
        event(delta="1234567890123456789.0123456789012345678"),
        single(deltas={"count": Decimal("1234567890123456789.0123456789012345678")}),
        id="38-digit-decimal",
    ),
    pytest.param(
        event(delta="0.000000000000000000000000000000000000000000001234567890123456789012345678901234567"),
        single(deltas={"count": Decimal("1.234567890123456789012345678901234567E-45")}),
        id="leading-zeros-do-not-count",
    ),
    pytest.param(
        event(delta="1.500000000000000000000000000000000000000000000"),
        single(deltas={"count": Decimal("1.500000000000000000000000000000000000000000000")}),
        id="trailing-zeros-do-not-count",
    ),
    pytest.param(event(delta="0E-2000"), single(deltas={"count": Decimal(0)}), id="zero-exponent-2000-below"),
    pytest.param(
        event(delta="0E+999999999"),
        single(deltas={"count": Decimal(0)}),
        id="zero-exponent-far-above",
    ),
    pytest.param(
        event(delta="0E-9999999999"),
        single(deltas={"count": Decimal(0)}),
        id="zero-exponent-far-below",
    ),
    pytest.param(
        event(delta="1." + "0" * 1500),
        single(deltas={"count": Decimal(1)}),
        id="one-with-1500-trailing-zeros",
    ),
    pytest.param(
        event(delta="1" + "0" * 1500 + "E-1500"),
        single(deltas={"count": Decimal(1)}),
        id="one-as-1501-digit-coefficient",
    ),
    # timestamps
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts='"2024-01-01T00:00:00Z"'),
        single(ts_ms=JAN_1_2024_UTC_MS),
        id="ts-iso-z",
    ),
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts='"2024-01-01T00:00:00+00:00"'),
        single(ts_ms=JAN_1_2024_UTC_MS),
        id="ts-iso-plus-zero",
    ),
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts='"2024-01-01T00:00:00+05:30"'),
        single(ts_ms=JAN_1_2024_UTC_MS - 5 * HOUR_MS - HOUR_MS // 2),
        id="ts-iso-plus-0530",
    ),
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts='"2024-01-01T00:00:00-08:00"'),
        single(ts_ms=JAN_1_2024_UTC_MS + 8 * HOUR_MS),
        id="ts-iso-minus-0800",
    ),
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts='"2024-01-01T05:30:00.250+05:30"'),
        single(ts_ms=JAN_1_2024_UTC_MS + 250),
        id="ts-iso-millis-and-offset",
    ),
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts='"2024-01-01T00:00:00.999999Z"'),
        single(ts_ms=JAN_1_2024_UTC_MS + 999),
        id="ts-iso-sub-millisecond-cut-not-rounded",
    ),
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts='"1970-01-01T00:00:00Z"'),
        single(ts_ms=0),
        id="ts-iso-epoch",
    ),
    pytest.param(
        body(id='"m-1"', key='"page:home"', delta="1", ts="253402300799999"),
        single(ts_ms=253_402_300_799_999),
        id="ts-epoch-max",
    ),
    # strings and limits
    pytest.param(event(key="ключ:главная"), single(key="ключ:главная"), id="unicode-key"),
    pytest.param(event(key="页面/首页 🚀"), single(key="页面/首页 🚀"), id="cjk-emoji-key"),
    pytest.param(event(key="页面/首页 🚀").encode(), single(key="页面/首页 🚀"), id="cjk-emoji-key-bytes-utf8-body"),
    pytest.param('{"id": "m-1", "key": "\\ud83d\\ude80", "delta": 1}', single(key="🚀"), id="escaped-surrogate-pair"),
    pytest.param('{"id": "m-1", "key": "a\\"b\\\\c\\u00e9", "delta": 1}', single(key='a"b\\cé'), id="escapes-in-key"),
    pytest.param(
        r'{"id": "m-1", "key": "\\ud800", "delta": 1}',
        single(key="\\ud800"),
        id="escaped-backslash-then-ud800",
    ),
    pytest.param(event(key="a" * 1024), single(key="a" * 1024), id="key-1024-ascii-bytes"),
    pytest.param(event(key="é" * 512), single(key="é" * 512), id="key-1024-bytes-2-byte-chars"),
    pytest.param(event(key="a" * 1020 + "🚀"), single(key="a" * 1020 + "🚀"), id="key-1024-bytes-4-byte-end"),
    pytest.param(event(key="🚀" * 256), single(key="🚀" * 256), id="key-1024-bytes-all-4-byte"),
    pytest.param(event(mid="i" * 512), single(mid="i" * 512), id="id-512-bytes"),
    pytest.param(event(mid="€" * 170 + "ab"), single(mid="€" * 170 + "ab"), id="id-512-bytes-3-byte-chars"),
    pytest.param(
        body(id='"m-1"', key='"k"', deltas="{" + json.dumps("n" * 255) + ": 1}"),
        single(key="k", deltas={"n" * 255: 1}),
        id="counter-name-255-bytes",
    ),
    pytest.param(
        body(id='"m-1"', key='"k"', deltas=json.dumps({f"c{i}": i for i in range(100)})),
        single(key="k", deltas={f"c{i}": i for i in range(100)}),
        id="100-counters",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), ACCEPTED)
def test_decode_accepts(raw: str | bytes, expected: Message) -> None:
    # GIVEN a well-formed body
    # WHEN it is decoded
    decoded = decode_message(raw, BOUNDARY_LIMITS)
    # THEN it is the expected message, with ints as int and decimals as the exact Decimal of the literal
    assert_same_message(decoded, expected)


def test_delta_is_shorthand_for_deltas_count() -> None:
    # GIVEN the same event written with delta and with deltas {"count": ...}
    short = '{"id": "m-1", "key": "k", "delta": 2.5}'
    long = '{"id": "m-1", "key": "k", "deltas": {"count": 2.5}}'
    # WHEN both are decoded
    # THEN they are the same message
    assert decode_message(short) == decode_message(long)


def test_packed_message_with_many_events_within_the_default_limit() -> None:
    # GIVEN a packed message of exactly the default maximum of 10 000 events
    raw = json.dumps({"id": "big", "events": [{"key": f"k{i % 7}", "delta": 1} for i in range(10_000)]})
    # WHEN it is decoded
    decoded = decode_message(raw)
    # THEN every event is kept
    assert isinstance(decoded, Message)
    assert len(decoded.events) == 10_000


# --- rejections ----------------------------------------------------------------------------------------

SMALL = WireLimits(max_id_bytes=4, max_key_bytes=4, max_counter_name_bytes=4, max_counters_per_event=2,
                     max_events_per_message=2)  # fmt: skip

REJECTED: list[object] = [
    # malformed_json
    pytest.param("", None, RejectCode.MALFORMED_JSON, id="empty-body"),
    pytest.param(b"", None, RejectCode.MALFORMED_JSON, id="empty-bytes-body"),
    pytest.param("{", None, RejectCode.MALFORMED_JSON, id="truncated"),
    pytest.param('{"id": "m-1", "key": "k", "delta": 1', None, RejectCode.MALFORMED_JSON, id="unclosed"),
    pytest.param('{"id": "m-1", "key": "k", "delta": 1}}', None, RejectCode.MALFORMED_JSON, id="trailing"),
    pytest.param("{'id': 'm-1'}", None, RejectCode.MALFORMED_JSON, id="single-quotes"),
    pytest.param(event(delta="NaN"), None, RejectCode.MALFORMED_JSON, id="nan-literal"),
    pytest.param(event(delta="Infinity"), None, RejectCode.MALFORMED_JSON, id="infinity-literal"),
    pytest.param(event(delta="-Infinity"), None, RejectCode.MALFORMED_JSON, id="minus-infinity-literal"),
    pytest.param(event(delta="01"), None, RejectCode.MALFORMED_JSON, id="leading-zero-literal"),
    pytest.param(event(delta="+1"), None, RejectCode.MALFORMED_JSON, id="plus-sign-literal"),
    pytest.param(event(delta=".5"), None, RejectCode.MALFORMED_JSON, id="bare-fraction-literal"),
    pytest.param(event(delta="1."), None, RejectCode.MALFORMED_JSON, id="bare-point-literal"),
    pytest.param(event(delta="0x10"), None, RejectCode.MALFORMED_JSON, id="hex-literal"),
    pytest.param(b"\xff", None, RejectCode.MALFORMED_JSON, id="invalid-utf8-outside-strings"),
    pytest.param(b'\xef\xbb\xbf{"id": "m-1"}', None, RejectCode.MALFORMED_JSON, id="utf8-bom"),
    # lone_surrogate
    pytest.param('{"id": "m-1", "key": "\ud800", "delta": 1}', None, RejectCode.LONE_SURROGATE, id="str-high"),
    pytest.param('{"id": "m-1", "key": "\udfff", "delta": 1}', None, RejectCode.LONE_SURROGATE, id="str-low"),
    pytest.param("\ud800", None, RejectCode.LONE_SURROGATE, id="str-body-not-even-json"),
    pytest.param(r'{"id": "m-1", "key": "\ud800", "delta": 1}', None, RejectCode.LONE_SURROGATE, id="esc-high"),
    pytest.param(r'{"id": "m-1", "key": "\udc00", "delta": 1}', None, RejectCode.LONE_SURROGATE, id="esc-low"),
    pytest.param(rb'{"id": "m-1", "key": "x\ud800y", "delta": 1}', None, RejectCode.LONE_SURROGATE, id="esc-in-bytes"),
    pytest.param(
        r'{"id": "m-1", "key": "\ud800\ud800", "delta": 1}',
        None,
        RejectCode.LONE_SURROGATE,
        id="esc-two-highs",
    ),
    pytest.param(r'{"id": "\ud800", "key": "k", "delta": 1}', None, RejectCode.LONE_SURROGATE, id="esc-in-id"),
    pytest.param(
        r'{"id": "m-1", "events": [{"key": "\ud800", "delta": 1}]}',
        None,
        RejectCode.LONE_SURROGATE,
        id="esc-in-packed-event",
    ),
    pytest.param(
        r'{"id": "m-1", "key": "\\ud800"',
        None,
        RejectCode.MALFORMED_JSON,
        id="truncated-body-with-escaped-backslash-then-ud800",
    ),
    # invalid_field: wrong types, unknown fields, not an object
    pytest.param("[1]", None, RejectCode.INVALID_FIELD, id="array-body"),
    pytest.param("null", None, RejectCode.INVALID_FIELD, id="null-body"),
    pytest.param('"m-1"', None, RejectCode.INVALID_FIELD, id="string-body"),
    pytest.param('{"id": 1, "key": "k", "delta": 1}', None, RejectCode.INVALID_FIELD, id="id-int"),
    pytest.param('{"id": null, "key": "k", "delta": 1}', None, RejectCode.INVALID_FIELD, id="id-null"),
    pytest.param('{"id": "m-1", "key": 7, "delta": 1}', None, RejectCode.INVALID_FIELD, id="key-int"),
    pytest.param('{"id": "m-1", "key": ["k"], "delta": 1}', None, RejectCode.INVALID_FIELD, id="key-array"),
    pytest.param('{"id": "m-1", "key": "k", "deltas": [1]}', None, RejectCode.INVALID_FIELD, id="deltas-array"),
    pytest.param('{"id": "m-1", "key": "k", "delta": 1, "ts": 1.5}', None, RejectCode.INVALID_FIELD, id="ts-float"),
    pytest.param('{"id": "m-1", "key": "k", "delta": 1, "ts": true}', None, RejectCode.INVALID_FIELD, id="ts-bool"),
    pytest.param('{"id": "m-1", "events": {"key": "k"}}', None, RejectCode.INVALID_FIELD, id="events-object"),
    pytest.param('{"id": "m-1", "events": [1]}', None, RejectCode.INVALID_FIELD, id="event-not-object"),
    pytest.param('{"id": "m-1", "key": "k", "detla": 1}', None, RejectCode.INVALID_FIELD, id="unknown-field-typo"),
    pytest.param(
        '{"id": "m-1", "key": "k", "delta": 1, "extra": null}',
        None,
        RejectCode.INVALID_FIELD,
        id="unknown-field",
    ),
    pytest.param(
        '{"id": "m-1", "events": [{"id": "e", "key": "k", "delta": 1}]}',
        None,
        RejectCode.INVALID_FIELD,
        id="id-inside-event",
    ),
    pytest.param(
        '{"id": "m-1", "events": [{"key": "k", "delta": 1, "events": []}]}',
        None,
        RejectCode.INVALID_FIELD,
        id="nested-events",
    ),
    # missing_id / id_too_long
    pytest.param('{"key": "k", "delta": 1}', None, RejectCode.MISSING_ID, id="no-id"),
    pytest.param('{"id": "", "key": "k", "delta": 1}', None, RejectCode.MISSING_ID, id="empty-id"),
    pytest.param('{"events": [{"key": "k", "delta": 1}]}', None, RejectCode.MISSING_ID, id="packed-no-id"),
    pytest.param(event(mid="i" * 513), None, RejectCode.ID_TOO_LONG, id="id-513-bytes"),
    pytest.param(event(mid="é" * 256 + "a"), None, RejectCode.ID_TOO_LONG, id="id-513-bytes-2-byte-chars"),
    pytest.param(event(mid="a🚀"), SMALL, RejectCode.ID_TOO_LONG, id="id-small-limit-multibyte-boundary"),
    # missing_key / key_too_long
    pytest.param('{"id": "m-1"}', None, RejectCode.MISSING_KEY, id="id-only"),
    pytest.param('{"id": "m-1", "delta": 1}', None, RejectCode.MISSING_KEY, id="no-key"),
    pytest.param('{"id": "m-1", "key": "", "delta": 1}', None, RejectCode.MISSING_KEY, id="empty-key"),
    pytest.param('{"id": "m-1", "events": [{"delta": 1}]}', None, RejectCode.MISSING_KEY, id="packed-no-key"),
    pytest.param(event(key="a" * 1025), None, RejectCode.KEY_TOO_LONG, id="key-1025-ascii"),
    pytest.param(event(key="é" * 512 + "a"), None, RejectCode.KEY_TOO_LONG, id="key-1025-bytes-2-byte-chars"),
    pytest.param(event(key="a" * 1021 + "🚀"), None, RejectCode.KEY_TOO_LONG, id="key-1025-bytes-4-byte-end"),
    pytest.param(event(key="€" * 342), None, RejectCode.KEY_TOO_LONG, id="key-1026-bytes-3-byte-chars"),
    pytest.param(event(key="🚀" * 256 + "a"), None, RejectCode.KEY_TOO_LONG, id="key-1025-bytes-all-4-byte"),
    pytest.param(event(key="a🚀"), SMALL, RejectCode.KEY_TOO_LONG, id="key-small-limit-multibyte-boundary"),
    pytest.param(
        '{"id": "m-1", "events": [{"key": "k", "delta": 1}, {"key": "abcde", "delta": 1}]}',
        SMALL,
        RejectCode.KEY_TOO_LONG,
        id="packed-second-key-too-long",
    ),
    # invalid_counter_name
    pytest.param('{"id": "m-1", "key": "k", "deltas": {"": 1}}', None, RejectCode.INVALID_COUNTER_NAME, id="empty"),
    pytest.param(
        body(id='"m-1"', key='"k"', deltas="{" + json.dumps("n" * 256) + ": 1}"),
        None,
        RejectCode.INVALID_COUNTER_NAME,
        id="counter-name-256-bytes",
    ),
    pytest.param(
        body(id='"m-1"', key='"k"', deltas="{" + json.dumps("é" * 128) + ": 1}"),
        None,
        RejectCode.INVALID_COUNTER_NAME,
        id="counter-name-256-bytes-2-byte-chars",
    ),
    pytest.param(
        '{"id": "m", "key": "k", "deltas": {"a🚀": 1}}',
        SMALL,
        RejectCode.INVALID_COUNTER_NAME,
        id="small-limit",
    ),
    # missing_delta
    pytest.param('{"id": "m-1", "key": "k"}', None, RejectCode.MISSING_DELTA, id="no-delta"),
    pytest.param('{"id": "m-1", "key": "k", "deltas": {}}', None, RejectCode.MISSING_DELTA, id="empty-deltas"),
    pytest.param('{"id": "m-1", "key": "k", "ts": 0}', None, RejectCode.MISSING_DELTA, id="ts-but-no-delta"),
    pytest.param('{"id": "m-1", "events": [{"key": "k"}]}', None, RejectCode.MISSING_DELTA, id="packed-no-delta"),
    # ambiguous_shape
    pytest.param(
        '{"id": "m-1", "key": "k", "delta": 1, "deltas": {"views": 1}}',
        None,
        RejectCode.AMBIGUOUS_SHAPE,
        id="delta-and-deltas",
    ),
    pytest.param(
        '{"id": "m-1", "events": [{"key": "k", "delta": 1, "deltas": {"v": 1}}]}',
        None,
        RejectCode.AMBIGUOUS_SHAPE,
        id="packed-event-delta-and-deltas",
    ),
    pytest.param(
        '{"id": "m-1", "key": "k", "events": [{"key": "k", "delta": 1}]}',
        None,
        RejectCode.AMBIGUOUS_SHAPE,
        id="packed-with-top-level-key",
    ),
    pytest.param(
        '{"id": "m-1", "delta": 1, "events": [{"key": "k", "delta": 1}]}',
        None,
        RejectCode.AMBIGUOUS_SHAPE,
        id="packed-with-top-level-delta",
    ),
    pytest.param(
        '{"id": "m-1", "deltas": {"v": 1}, "events": [{"key": "k", "delta": 1}]}',
        None,
        RejectCode.AMBIGUOUS_SHAPE,
        id="packed-with-top-level-deltas",
    ),
    pytest.param(
        '{"id": "m-1", "ts": 0, "events": [{"key": "k", "delta": 1}]}',
        None,
        RejectCode.AMBIGUOUS_SHAPE,
        id="packed-with-top-level-ts",
    ),
    pytest.param(
        '{"id": "m-1", "key": "k", "events": []}',
        None,
        RejectCode.AMBIGUOUS_SHAPE,
        id="shape-checked-before-empty",
    ),
    # invalid_number
    pytest.param(event(delta="true"), None, RejectCode.INVALID_NUMBER, id="true"),
    pytest.param(event(delta="false"), None, RejectCode.INVALID_NUMBER, id="false"),
    pytest.param(event(delta='"1"'), None, RejectCode.INVALID_NUMBER, id="string-one"),
    pytest.param(event(delta='"NaN"'), None, RejectCode.INVALID_NUMBER, id="string-nan"),
    pytest.param(event(delta='"1e3"'), None, RejectCode.INVALID_NUMBER, id="string-exponent"),
    pytest.param(event(delta="null"), None, RejectCode.INVALID_NUMBER, id="null"),
    pytest.param(event(delta='{"n": 1}'), None, RejectCode.INVALID_NUMBER, id="object"),
    pytest.param(event(delta="[1]"), None, RejectCode.INVALID_NUMBER, id="array"),
    pytest.param(
        '{"id": "m-1", "key": "k", "deltas": {"views": 1, "revenue": "49.99"}}',
        None,
        RejectCode.INVALID_NUMBER,
        id="deltas-string",
    ),
    pytest.param(
        '{"id": "m-1", "key": "k", "deltas": {"views": true}}',
        None,
        RejectCode.INVALID_NUMBER,
        id="deltas-bool",
    ),
    pytest.param(
        '{"id": "m-1", "events": [{"key": "k", "delta": null}]}',
        None,
        RejectCode.INVALID_NUMBER,
        id="packed-null",
    ),
    # number_out_of_range
    pytest.param(event(delta="1" + "0" * 37 + "1"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="39-digit-int"),
    pytest.param(event(delta="-" + "9" * 39), None, RejectCode.NUMBER_OUT_OF_RANGE, id="minus-39-digit-int"),
    pytest.param(
        event(delta="1.00000000000000000000000000000000000001"),
        None,
        RejectCode.NUMBER_OUT_OF_RANGE,
        id="39-digit-decimal",
    ),
    pytest.param(event(delta="1E+126"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="1E+126"),
    pytest.param(event(delta="10e125"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="10e125"),
    pytest.param(event(delta="-1E+126"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="minus-1E+126"),
    pytest.param(event(delta="1e400"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="beyond-float-range"),
    pytest.param(event(delta="9.9E-131"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="below-1E-130"),
    pytest.param(event(delta="-1E-131"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="minus-below-1E-130"),
    pytest.param(event(delta="1" + "0" * 126), None, RejectCode.NUMBER_OUT_OF_RANGE, id="int-1E+126"),
    pytest.param(event(delta="9" * 200), None, RejectCode.NUMBER_OUT_OF_RANGE, id="int-200-digits"),
    pytest.param(event(delta="1" * 5000), None, RejectCode.NUMBER_OUT_OF_RANGE, id="int-5000-digits"),
    pytest.param(event(delta="1" * 5000 + ".5"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="decimal-5000-digits"),
    pytest.param(event(delta="1e999999999999999999"), None, RejectCode.NUMBER_OUT_OF_RANGE, id="decimal-max-emax"),
    pytest.param(
        '{"id": "m-1", "key": "k", "deltas": {"ok": 1, "big": 1E+200}}',
        None,
        RejectCode.NUMBER_OUT_OF_RANGE,
        id="deltas-one-out-of-range",
    ),
    # invalid_ts
    pytest.param(body(id='"m"', key='"k"', delta="1", ts="-1"), None, RejectCode.INVALID_TS, id="epoch-negative"),
    pytest.param(
        body(id='"m"', key='"k"', delta="1", ts="253402300800000"),
        None,
        RejectCode.INVALID_TS,
        id="epoch-past-9999",
    ),
    pytest.param(body(id='"m"', key='"k"', delta="1", ts="1" + "0" * 30), None, RejectCode.INVALID_TS, id="epoch-huge"),
    pytest.param(
        body(id='"m"', key='"k"', delta="1", ts='"2024-01-01T00:00:00"'),
        None,
        RejectCode.INVALID_TS,
        id="naive",
    ),
    pytest.param(
        body(id='"m"', key='"k"', delta="1", ts='"2024-01-01"'),
        None,
        RejectCode.INVALID_TS,
        id="naive-date-only",
    ),
    pytest.param(body(id='"m"', key='"k"', delta="1", ts='"yesterday"'), None, RejectCode.INVALID_TS, id="not-iso"),
    pytest.param(body(id='"m"', key='"k"', delta="1", ts='""'), None, RejectCode.INVALID_TS, id="empty-string"),
    pytest.param(
        body(id='"m"', key='"k"', delta="1", ts='"1704067200000"'),
        None,
        RejectCode.INVALID_TS,
        id="epoch-as-string",
    ),
    pytest.param(
        body(id='"m"', key='"k"', delta="1", ts='"2024-01-01T00:00:00+24:00"'),
        None,
        RejectCode.INVALID_TS,
        id="offset-out-of-range",
    ),
    pytest.param(
        body(id='"m"', key='"k"', delta="1", ts='"1969-12-31T23:59:59.999Z"'),
        None,
        RejectCode.INVALID_TS,
        id="before-epoch",
    ),
    pytest.param(
        body(id='"m"', key='"k"', delta="1", ts='"9999-12-31T23:59:59-01:00"'),
        None,
        RejectCode.INVALID_TS,
        id="after-9999-in-utc",
    ),
    pytest.param(
        '{"id": "m", "events": [{"key": "k", "delta": 1, "ts": "2024-13-01T00:00:00Z"}]}',
        None,
        RejectCode.INVALID_TS,
        id="packed-event-bad-month",
    ),
    # empty_message / too_many_events / too_many_counters
    pytest.param('{"id": "m-1", "events": []}', None, RejectCode.EMPTY_MESSAGE, id="no-events"),
    pytest.param(
        json.dumps({"id": "m", "events": [{"key": "k", "delta": 1}] * 3}),
        SMALL,
        RejectCode.TOO_MANY_EVENTS,
        id="3-events-limit-2",
    ),
    pytest.param(
        json.dumps({"id": "m", "events": [{"key": "k", "delta": 1}] * 10_001}),
        None,
        RejectCode.TOO_MANY_EVENTS,
        id="10001-events-default-limit",
    ),
    pytest.param(
        '{"id": "m", "key": "k", "deltas": {"a": 1, "b": 2, "c": 3}}',
        SMALL,
        RejectCode.TOO_MANY_COUNTERS,
        id="3-counters-limit-2",
    ),
    pytest.param(
        body(id='"m-1"', key='"k"', deltas=json.dumps({f"c{i}": 1 for i in range(101)})),
        None,
        RejectCode.TOO_MANY_COUNTERS,
        id="101-counters-default-limit",
    ),
    pytest.param(
        '{"id": "m", "events": [{"key": "k", "delta": 1}, {"key": "k", "deltas": {"a": 1, "b": 2, "c": 3}}]}',
        SMALL,
        RejectCode.TOO_MANY_COUNTERS,
        id="packed-event-too-many-counters",
    ),
]


@pytest.mark.parametrize(("raw", "limits", "code"), REJECTED)
def test_decode_rejects(raw: str | bytes, limits: WireLimits | None, code: RejectCode) -> None:
    # GIVEN a body that can never count
    # WHEN it is decoded
    decoded = decode_message(raw, BOUNDARY_LIMITS if limits is None else limits)
    # THEN a Rejection with the expected code and a human-readable detail is returned (not raised)
    assert isinstance(decoded, Rejection), decoded
    assert decoded.code == code, decoded.detail
    assert decoded.detail


# --- hostile bodies: each once let an exception escape decode_message or got the wrong code ----------

HOSTILE_BODIES: list[object] = [
    pytest.param(
        b'{"id": "m-1", "key": "\xff", "delta": 1}',
        {RejectCode.MALFORMED_JSON},
        id="invalid-utf8-inside-string",
    ),
    pytest.param(
        b'{"\xc3": 1}',
        {RejectCode.MALFORMED_JSON},
        id="truncated-utf8-in-field-name",
    ),
    pytest.param(
        b'{"id": "m-1", "key": "\xed\xa0\x80", "delta": 1}',
        {RejectCode.MALFORMED_JSON, RejectCode.LONE_SURROGATE},
        id="utf8-encoded-surrogate",
    ),
    pytest.param(
        event(delta="1e1000000000000000000"),
        {RejectCode.NUMBER_OUT_OF_RANGE},
        id="exponent-beyond-decimal-emax",
    ),
    pytest.param(
        event(delta="-1e99999999999999999999999"),
        {RejectCode.NUMBER_OUT_OF_RANGE},
        id="negative-exponent-beyond-decimal-emax",
    ),
    pytest.param(
        event(delta="0e1000000000000000000"),
        {RejectCode.NUMBER_OUT_OF_RANGE},
        id="zero-exponent-beyond-decimal-emax",
    ),
    pytest.param(
        r'{"id":"m-1","key":"k","deltas":{"\ud800":1}}',
        {RejectCode.LONE_SURROGATE},
        id="escaped-lone-high-surrogate-near-end-of-body-counter-name",
    ),
    pytest.param(
        r'{"id":"m-1","delta":1,"key":"\ud800"}',
        {RejectCode.LONE_SURROGATE},
        id="escaped-lone-high-surrogate-near-end-of-body-key",
    ),
    pytest.param(
        r'{"id":"m-1","delta":1,"key":"\ud800"}    ',
        {RejectCode.LONE_SURROGATE},
        id="same-with-trailing-spaces-is-classified-right",
    ),
]


@pytest.mark.parametrize(("raw", "codes"), HOSTILE_BODIES)
def test_decode_rejects_hostile_bodies_with_the_right_code(raw: str | bytes, codes: set[RejectCode]) -> None:
    # GIVEN a hostile body
    # WHEN it is decoded
    decoded = decode_message(raw)
    # THEN it is rejected (returned, never raised) with the code the wire format documents
    assert isinstance(decoded, Rejection), decoded
    assert decoded.code in codes, decoded


# --- property (b): decode never raises -----------------------------------------------------------------

FIELD_NAMES = ["id", "key", "delta", "deltas", "ts", "events", "count", "views", "x"]

JSON_VALUES: st.SearchStrategy[object] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**45), 10**45)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["2024-01-01T00:00:00Z", "2024-01-01T00:00:00+05:30", "2024-01-01", "m-1", ""]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=4), children, max_size=5)
    ),
    max_leaves=20,
)


def _never_raises(raw: str | bytes) -> None:
    decoded = decode_message(raw, WireLimits(max_key_bytes=8, max_counters_per_event=3))
    assert isinstance(decoded, Message | Rejection)


@given(raw=st.text())
@example(raw="\ud800")
@example(raw='{"id": "m", "key": "k", "delta": 1}')
def test_decode_never_raises_on_arbitrary_text(raw: str) -> None:
    # GIVEN any str body (lone surrogates included)
    # WHEN it is decoded
    # THEN a Message or a Rejection comes back
    _never_raises(raw)


@given(raw=st.text().map(lambda text: text.encode("utf-8", "surrogatepass")))
def test_decode_never_raises_on_text_encoded_bytes(raw: bytes) -> None:
    # GIVEN any bytes body that is text encoded as UTF-8 (encoded surrogates included)
    # WHEN it is decoded
    # THEN a Message or a Rejection comes back
    _never_raises(raw)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON_VALUES, as_bytes=st.booleans())
def test_decode_never_raises_on_arbitrary_json(value: object, as_bytes: bool) -> None:
    # GIVEN any JSON document, biased towards the wire format's field names
    raw = json.dumps(value)
    # WHEN it is decoded (as str or bytes)
    # THEN a Message or a Rejection comes back
    _never_raises(raw.encode() if as_bytes else raw)


@given(raw=st.binary())
@example(raw=b'{"\xff": 1}')
@example(raw=b'{"id": "m", "key": "\xed\xa0\x80", "delta": 1}')
def test_decode_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    # GIVEN any bytes body
    # WHEN it is decoded
    # THEN a Message or a Rejection comes back
    _never_raises(raw)


# Decimal literals as JSON writes them: sign, integer part, fraction, optional exponent. Lengths straddle
# the float hook's 38-character fast path, so both of its sides are exercised.
DECIMAL_LITERALS = st.builds(
    lambda sign, whole, fraction, exponent: f"{sign}{whole}.{fraction}{exponent}",
    st.sampled_from(["", "-"]),
    st.sampled_from(["0"]) | st.from_regex(r"[1-9][0-9]{0,40}", fullmatch=True),
    st.from_regex(r"[0-9]{1,45}", fullmatch=True),
    st.sampled_from(["", "e5", "E-3", "e+130", "e-170", "e0"]),
)


@given(literal=DECIMAL_LITERALS)
@example(literal="0.00")
@example(literal="-0.0")
@example(literal="10.0")
@example(literal="1.50")
@example(literal="9" * 36 + ".9")  # 38 characters, 37 digits: the longest fast-path literal
@example(literal="9" * 37 + ".9")  # 39 characters, 38 digits: the general path, still storable
@example(literal="9" * 38 + ".9")  # 39 digits: not storable
def test_every_decimal_literal_decodes_as_the_general_check_says(literal: str) -> None:
    # GIVEN a decimal literal, and what the general number check makes of its exact value
    problem, expected = checked_canonical(Decimal(literal))
    # WHEN it is decoded as a delta
    decoded = decode_message(body(id='"m-1"', key='"k"', delta=literal))
    # THEN it is refused exactly when the general check refuses it, and otherwise it is the same
    # value in the same form, digit for digit (a plain Decimal, no trailing fraction zeros)
    if problem is not None:
        assert isinstance(decoded, Rejection)
        assert decoded.code is RejectCode.NUMBER_OUT_OF_RANGE
        return
    assert isinstance(decoded, Message)
    value = decoded.events[0].deltas[DEFAULT_COUNTER]
    assert type(value) is Decimal
    assert value.as_tuple() == expected.as_tuple()
