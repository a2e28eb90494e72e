"""Unit tests for ``tally.core.digest``: which bodies are the same content under an id, and which are not.

The digest is stored on every marker, so its definition is a stored format: ``test_the_format_is_pinned``
fails if the encoding changes (old markers would then disagree with new digests of the same content).
"""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core.decode import decode_message
from tally.core.digest import DIGEST_BYTES, content_digest, short_digest
from tally.core.model import Message


def digest_of(body: str) -> bytes:
    message = decode_message(body)
    assert isinstance(message, Message), message
    return content_digest(message)


SAME: list[object] = [
    pytest.param('{"id":"a","key":"k","delta":1}', '{"id":"a","key":"k","deltas":{"count":1}}', id="delta-shorthand"),
    pytest.param('{"id":"a","key":"k","delta":1}', '{"id":"a","key":"k","delta":1.0}', id="1.0-is-1"),
    pytest.param('{"id":"a","key":"k","delta":10}', '{"id":"a","key":"k","delta":1E+1}', id="exponent"),
    pytest.param('{"id":"a","key":"k","delta":2.5}', '{"id":"a","key":"k","delta":2.500}', id="trailing-zeros"),
    pytest.param('{"id":"a","key":"k","delta":0.25}', '{"id":"a","key":"k","delta":25e-2}', id="fraction-exponent"),
    pytest.param('{"id":"a","key":"k","delta":0.0000001}', '{"id":"a","key":"k","delta":1E-7}', id="small-fraction"),
    pytest.param('{"id":"a","key":"k","delta":0}', '{"id":"a","key":"k","delta":-0.0}', id="zero"),
    pytest.param(
        '{"id":"a","key":"k","delta":12345678901234567890123456789012345678}',
        '{"id":"a","key":"k","delta":1.2345678901234567890123456789012345678E+37}',
        id="beyond-64-bits",
    ),
    pytest.param(
        '{"id":"a","key":"k","deltas":{"x":1,"y":2}}', '{"id":"a","key":"k","deltas":{"y":2,"x":1}}', id="counter-order"
    ),
    pytest.param(
        '{"id":"a","key":"k","deltas":{"x":1,"y":2.5}}',
        '{"id":"a","key":"k","deltas":{"y":25E-1,"x":1.0}}',
        id="several-counters-as-they-are-or-converted",
    ),
    pytest.param(
        '{"id":"a","key":"k","deltas":{"x":99999999999999999999,"y":0.5}}',
        '{"id":"a","key":"k","deltas":{"y":0.50,"x":9.9999999999999999999E+19}}',
        id="several-counters-beyond-64-bits",
    ),
    pytest.param(
        '{"id":"a","key":"k","delta":1,"ts":1767225600000}',
        '{"id":"a","key":"k","delta":1,"ts":"2026-01-01T01:00:00+01:00"}',
        id="ts-iso-or-ms",
    ),
    pytest.param(
        '{"id":"a","events":[{"key":"a","delta":1},{"key":"b","delta":2}]}',
        '{"id":"a","events":[{"key":"b","delta":2},{"key":"a","delta":1}]}',
        id="packed-event-order",
    ),
    pytest.param(
        '{"id":"a","key":"k","delta":1}', '{"id":"a","events":[{"key":"k","delta":1}]}', id="single-or-packed-of-one"
    ),
    pytest.param('{"id":"a","key":"k","delta":1}', '{ "key" : "k", "delta" : 1, "id" : "a" }', id="whitespace-order"),
    pytest.param('{"id":"a","key":"k","delta":1}', '{"id":"b","key":"k","delta":1}', id="the-id-is-not-content"),
]


@pytest.mark.parametrize(("first", "second"), SAME)
def test_the_same_events_spelled_differently_are_the_same_content(first: str, second: str) -> None:
    assert digest_of(first) == digest_of(second)


DIFFERENT: list[object] = [
    pytest.param('{"id":"a","key":"k","delta":1}', '{"id":"a","key":"k","delta":2}', id="value"),
    pytest.param('{"id":"a","key":"k","delta":1}', '{"id":"a","key":"j","delta":1}', id="key"),
    pytest.param('{"id":"a","key":"k","delta":1}', '{"id":"a","key":"k","deltas":{"views":1}}', id="counter-name"),
    pytest.param(
        '{"id":"a","key":"k","delta":1}', '{"id":"a","key":"k","deltas":{"count":1,"x":0}}', id="zero-counter"
    ),
    pytest.param(
        '{"id":"a","key":"k","delta":1}', '{"id":"a","key":"k","delta":1,"ts":1767225600000}', id="ts-or-none"
    ),
    pytest.param(
        '{"id":"a","key":"k","delta":1,"ts":1767225600000}',
        '{"id":"a","key":"k","delta":1,"ts":1767225600001}',
        id="ts-by-a-millisecond",
    ),
    pytest.param('{"id":"a","key":"k","delta":0.1}', '{"id":"a","key":"k","delta":0.10000000001}', id="decimal-digit"),
    pytest.param('{"id":"a","key":"k","delta":1}', '{"id":"a","key":"k","delta":-1}', id="sign"),
    pytest.param(
        '{"id":"a","events":[{"key":"k","delta":1},{"key":"k","delta":1}]}',
        '{"id":"a","key":"k","delta":2}',
        id="two-events-are-not-one-merged",
    ),
    pytest.param(
        '{"id":"a","events":[{"key":"k","delta":1},{"key":"k","delta":1}]}',
        '{"id":"a","events":[{"key":"k","delta":1}]}',
        id="event-multiplicity",
    ),
    pytest.param(
        '{"id":"a","events":[{"key":"k","deltas":{"x":1}},{"key":"j","deltas":{"y":1}}]}',
        '{"id":"a","events":[{"key":"k","deltas":{"y":1}},{"key":"j","deltas":{"x":1}}]}',
        id="counters-stay-with-their-key",
    ),
]


@pytest.mark.parametrize(("first", "second"), DIFFERENT)
def test_other_events_are_other_content(first: str, second: str) -> None:
    assert digest_of(first) != digest_of(second)


def test_the_format_is_pinned() -> None:
    # GIVEN a packed message with an int, a decimal, a big int and a ts
    body = (
        '{"id":"a","events":[{"key":"k","deltas":{"count":1,"amount":49.99},"ts":1767225600000},'
        '{"key":"j","delta":123456789012345678901234567890}]}'
    )
    # THEN its digest is the one markers already store: a change here needs a new marker attribute
    assert digest_of(body).hex() == PINNED
    assert len(digest_of(body)) == DIGEST_BYTES
    assert short_digest(digest_of(body)) == PINNED[:12]
    assert short_digest(None) == "none"


PINNED = "a0348b25f0df8386b12847bf270ef790"


# --- property: spelling never matters, content always does ------------------------------------------

NUMBERS = st.one_of(
    st.integers(-(10**38) + 1, 10**38 - 1),
    st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-(10**9), max_value=10**9),
)
EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "ключ"]),
        st.dictionaries(st.sampled_from(["count", "x", "y"]), NUMBERS, min_size=1, max_size=3),
        st.one_of(st.none(), st.integers(0, 2_000_000_000_000)),
    ),
    min_size=1,
    max_size=6,
)


def spell(value: int | Decimal, style: int) -> str:
    """One of several literals for the same number."""
    exact = Decimal(value)
    if style == 0:
        return str(value) if isinstance(value, int) else format(exact, "f")
    if style == 1:
        return format(exact, "f") + ("" if "." in format(exact, "f") else ".") + "000"
    return f"{exact:E}" if exact.adjusted() < 30 else str(exact)


def body(events: list[tuple[str, dict[str, int | Decimal], int | None]], rng: random.Random) -> str:
    parts = []
    for key, deltas, ts in rng.sample(events, len(events)):
        names = rng.sample(sorted(deltas), len(deltas))
        counters = ",".join(f'"{name}":{spell(deltas[name], rng.randrange(3))}' for name in names)
        ts_part = "" if ts is None else f',"ts":{ts}'
        parts.append(f'{{"key":{json.dumps(key)},"deltas":{{{counters}}}{ts_part}}}')
    return '{"id":"m","events":[' + ",".join(parts) + "]}"


@given(events=EVENTS, seed=st.integers(0, 2**32))
def test_any_spelling_of_the_same_events_has_one_digest(
    events: list[tuple[str, dict[str, int | Decimal], int | None]], seed: int
) -> None:
    # GIVEN the same events written twice, in random order, with random number spellings
    rng = random.Random(seed)
    # THEN both have one digest
    assert digest_of(body(events, rng)) == digest_of(body(events, rng))


@given(events=EVENTS, seed=st.integers(0, 2**32), change=st.integers(1, 10**6))
def test_changing_one_delta_changes_the_digest(
    events: list[tuple[str, dict[str, int | Decimal], int | None]], seed: int, change: int
) -> None:
    # GIVEN the same events, except one delta of one event moved by a non-zero amount
    rng = random.Random(seed)
    key, deltas, ts = events[0]
    name = sorted(deltas)[0]
    changed = [(key, {**deltas, name: deltas[name] + change}, ts), *events[1:]]
    if abs(Decimal(changed[0][1][name])) >= 10**38:
        return  # not a valid delta any more
    # THEN the digests differ
    assert digest_of(body(events, rng)) != digest_of(body(changed, rng))
