"""In the pure core and the item schema: corrections and resets (tables and properties)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core.aggregate import MessageTotals, message_totals
from tally.core.decode import decode_message
from tally.core.defaults import parse_counter_defaults
from tally.core.digest import content_digest
from tally.core.items import CounterItem, window_counter
from tally.core.limits import MAX_OPERATOR_COUNTERS, UPDATE_EXPRESSION_MAX_BYTES
from tally.core.model import CounterEvent, Message, RejectCode, Rejection
from tally.core.resets import (
    OperatorKind,
    OperatorStamp,
    commit_segments,
    operator_segments,
    operator_stamp,
    reset_items,
)
from tally.core.sharding import MAX_SHARDS, parse_hot_keys
from tally.core.windows import parse_window_spec
from tally.store.actions import Role, add_update
from tally.store.schema import operators_from_item
from tests.support.reference import expected_values

TS = 4_102_444_800_000


# ------------------------------------------------------------------------------------------- decoding
@pytest.mark.parametrize(
    ("body", "event"),
    [
        ('{"id":"a","key":"k","reset":{"stock":100}}', CounterEvent("k", {}, None, reset={"stock": 100})),
        (
            '{"id":"a","key":"k","reset":{"stock":0,"sold":1.50},"ts":4102444800000}',
            CounterEvent("k", {}, TS, reset={"stock": 0, "sold": Decimal("1.5")}),
        ),
        ('{"id":"a","key":"k","reset":{"x":-2E+3}}', CounterEvent("k", {}, None, reset={"x": -2000})),
        ('{"id":"a","key":"k","delta":-3,"correction":true}', CounterEvent("k", {"count": -3}, None, correction=True)),
        (
            '{"id":"a","key":"k","deltas":{"stock":2,"sold":-1},"correction":true}',
            CounterEvent("k", {"stock": 2, "sold": -1}, None, correction=True),
        ),
    ],
)
def test_resets_and_corrections_decode_exactly(body: str, event: CounterEvent) -> None:
    decoded = decode_message(body)
    assert isinstance(decoded, Message)
    assert decoded.events == (event,)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"id":"a","key":"k","reset":{"stock":1},"delta":1}', RejectCode.INVALID_RESET),
        ('{"id":"a","key":"k","reset":{"stock":1},"deltas":{"sold":1}}', RejectCode.INVALID_RESET),
        ('{"id":"a","key":"k","reset":{"stock":1},"correction":true}', RejectCode.INVALID_RESET),
        ('{"id":"a","key":"k","reset":{"stock":1},"gauges":{"g":{"max":1}}}', RejectCode.INVALID_RESET),
        ('{"id":"a","key":"k","reset":{}}', RejectCode.INVALID_RESET),
        ('{"id":"a","key":"k","delta":1,"correction":false}', RejectCode.INVALID_RESET),
        ('{"id":"a","key":"k","correction":true}', RejectCode.MISSING_DELTA),
        ('{"id":"a","events":[{"key":"k","reset":{"stock":1}}]}', RejectCode.INVALID_RESET),
        ('{"id":"a","events":[{"key":"k","delta":1,"correction":true}]}', RejectCode.INVALID_RESET),
        ('{"id":"a","reset":{"stock":1},"events":[{"key":"k","delta":1}]}', RejectCode.AMBIGUOUS_SHAPE),
        ('{"id":"a","key":"k","reset":{"stock":"1"}}', RejectCode.INVALID_NUMBER),
        ('{"id":"a","key":"k","reset":{"stock":true}}', RejectCode.INVALID_NUMBER),
        ('{"id":"a","key":"k","reset":{"stock":1E+200}}', RejectCode.NUMBER_OUT_OF_RANGE),
        ('{"id":"a","key":"k","reset":{"":1}}', RejectCode.INVALID_COUNTER_NAME),
        ('{"id":"a","key":"k","reset":[1]}', RejectCode.INVALID_FIELD),
        ('{"id":"a","key":"k","delta":1,"correction":"yes"}', RejectCode.INVALID_FIELD),
    ],
)
def test_a_bad_reset_or_correction_is_refused_with_its_reason(body: str, code: RejectCode) -> None:
    rejection = decode_message(body)
    assert isinstance(rejection, Rejection)
    assert rejection.code is code


def test_an_operator_message_names_at_most_twenty_counters() -> None:
    names = [f"c{n}" for n in range(MAX_OPERATOR_COUNTERS + 1)]
    reset = '{"id":"a","key":"k","reset":{' + ",".join(f'"{n}":1' for n in names) + "}}"
    correction = '{"id":"a","key":"k","correction":true,"deltas":{' + ",".join(f'"{n}":1' for n in names) + "}}"
    for body in (reset, correction):
        rejection = decode_message(body)
        assert isinstance(rejection, Rejection)
        assert rejection.code is RejectCode.INVALID_RESET


def test_a_reset_counts_no_default_delta_and_a_correction_needs_its_own() -> None:
    defaults = parse_counter_defaults("stock:*#stock=delta:-1")
    reset = decode_message('{"id":"a","key":"stock:1","reset":{"stock":5}}', defaults=defaults)
    assert isinstance(reset, Message)
    assert reset.events[0].deltas == {}
    correction = decode_message('{"id":"a","key":"stock:1","correction":true}', defaults=defaults)
    assert isinstance(correction, Rejection)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ('{"id":"a","key":"k","reset":{"n":100}}', '{"id":"a","key":"k","deltas":{"n":100}}'),
        ('{"id":"a","key":"k","reset":{"n":100}}', '{"id":"a","key":"k","reset":{"n":101}}'),
        ('{"id":"a","key":"k","delta":1,"correction":true}', '{"id":"a","key":"k","delta":1}'),
        ('{"id":"a","key":"k","reset":{"n":1}}', '{"id":"a","key":"k","gauges":{"n":{"max":1}}}'),
    ],
)
def test_resets_and_corrections_are_their_own_content(one: str, other: str) -> None:
    first, second = decode_message(one), decode_message(other)
    assert isinstance(first, Message)
    assert isinstance(second, Message)
    assert content_digest(first) != content_digest(second)


def test_the_same_reset_spelled_otherwise_is_the_same_content() -> None:
    first = decode_message('{"id":"a","key":"k","reset":{"n":1,"m":2.0}}')
    second = decode_message('{"key":"k","reset":{"m":2,"n":1E+0},"id":"a"}')
    assert isinstance(first, Message)
    assert isinstance(second, Message)
    assert content_digest(first) == content_digest(second)


# ---------------------------------------------------------------------------------------- aggregation
def decoded(body: str) -> Message:
    message = decode_message(body)
    assert isinstance(message, Message)
    return message


def test_a_reset_adds_nothing_and_sets_the_all_time_item_only() -> None:
    windows = parse_window_spec("hour,day")
    totals = message_totals(decoded('{"id":"a","key":"k","reset":{"n":7},"ts":4102444800000}'), windows, TS, TS)
    assert totals.totals == {}
    assert totals.sets == {"k": {"n": 7}}
    assert totals.stamp == OperatorStamp(OperatorKind.RESET, "k", "a", TS, {"n": 7})
    assert totals.is_operator
    assert totals.event_count == 1


def test_a_correction_counts_in_its_windows_and_is_stamped_when_the_source_accepted_it() -> None:
    windows = parse_window_spec("hour")
    totals = message_totals(decoded('{"id":"a","key":"k","delta":-2,"correction":true}'), windows, TS + 5, TS + 5)
    hour = windows.unit("hour").window_id(windows.unit("hour").start_ms(TS + 5))
    assert totals.totals == {"k": {"count": -2, window_counter(hour, "count"): -2}}  # the hour rides on the key
    assert totals.sets == {}
    assert totals.stamp == OperatorStamp(OperatorKind.CORRECTION, "k", "a", TS + 5, {"count": -2})


def test_ordinary_messages_carry_no_operator_part() -> None:
    totals = message_totals(decoded('{"id":"a","key":"k","delta":1}'))
    assert not totals.is_operator
    assert totals.sets == {}
    assert operator_stamp(decoded('{"id":"a","events":[{"key":"k","delta":1},{"key":"j","delta":1}]}'), 0) is None


@pytest.mark.parametrize(("hot", "items"), [("", 1), ("k=4", MAX_SHARDS), ("other=4", 1)])
def test_a_reset_on_a_hot_key_sets_every_shard_a_read_sums(hot: str, items: int) -> None:
    stamp = OperatorStamp(OperatorKind.RESET, "k", "a", TS, {"n": 7, "m": 1})
    sets = reset_items(stamp, parse_hot_keys(hot))
    assert len(sets) == items
    assert sets["k"] == {"n": 7, "m": 1}
    assert all(values == {"n": 0, "m": 0} for item, values in sets.items() if item != "k")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], []),
        ([False, False], [[0, 1]]),
        ([True], [[0]]),
        ([False, True, False], [[0], [1], [2]]),
        ([True, True, False, False, True], [[0], [1], [2, 3], [4]]),
    ],
)
def test_each_operator_message_is_a_segment_of_its_own_in_order(flags: list[bool], expected: list[list[int]]) -> None:
    assert operator_segments(list(range(len(flags))), flags) == expected


def totals(mid: str, *keys: str, op: OperatorKind | None = None) -> MessageTotals:
    stamp = OperatorStamp(op, keys[0], mid, TS, {"n": 1}) if op is not None else None
    touched = {} if op is OperatorKind.RESET else {key: {"n": 1} for key in keys}
    return MessageTotals(mid, touched, 1, stamp=stamp)


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ([totals("a", "k"), totals("b", "j")], [["a", "b"]]),
        ([totals("a", "k"), totals("R", "k", op=OperatorKind.RESET), totals("c", "k")], [["a"], ["R"], ["c"]]),
        # Messages on keys no operator touches join the first segment, wherever they were
        ([totals("a", "k"), totals("R", "k", op=OperatorKind.RESET), totals("b", "j")], [["b", "a"], ["R"]]),
        ([totals("R", "k", op=OperatorKind.RESET), totals("b", "j"), totals("c", "k")], [["b"], ["R"], ["c"]]),
        # A message on an operator's key and another key is ordered; corrections too
        (
            [
                totals("a", "j", "k"),
                totals("C", "k", op=OperatorKind.CORRECTION),
                totals("b", "j"),
                totals("R", "k", op=OperatorKind.RESET),
                totals("c", "x", "k"),
            ],
            [["b", "a"], ["C"], ["R"], ["c"]],
        ),
        ([totals("R", "k", op=OperatorKind.RESET), totals("S", "k", op=OperatorKind.RESET)], [["R"], ["S"]]),
        ([totals("w", "k")], [["w"]]),
    ],
)
def test_only_messages_sharing_a_key_with_an_operator_are_ordered_around_it(
    batch: list[MessageTotals], expected: list[list[str]]
) -> None:
    assert [[m.message_id for m in segment] for segment in commit_segments(batch)] == expected


def test_a_window_or_shard_item_orders_by_its_key() -> None:
    window = MessageTotals("w", {CounterItem("k", "h#1", 0, 9): {"n": 1}}, 1)
    reset = totals("R", "k", op=OperatorKind.RESET)
    assert [[m.message_id for m in s] for s in commit_segments([reset, window])] == [["R"], ["w"]]


def message(
    mid: str, key: str, *, deltas: dict[str, Any] | None = None, reset: dict[str, Any] | None = None
) -> Message:
    return Message(mid, (CounterEvent(key, deltas or {}, None, reset=reset),))


def test_the_model_applies_messages_one_by_one() -> None:
    messages = [
        message("1", "k", deltas={"n": 5, "m": 1}),
        message("2", "k", reset={"n": 100}),
        message("3", "k", deltas={"n": Decimal("-0.5")}),
        message("4", "j", reset={"n": 0}),
    ]
    assert expected_values(messages) == {"k": {"n": Decimal("99.5"), "m": 1}, "j": {"n": 0}}


@given(st.lists(st.integers(-5, 5), min_size=1, max_size=20), st.integers(0, 19), st.integers(-50, 50))
def test_a_reset_anywhere_leaves_its_value_plus_what_follows(deltas: list[int], at: int, value: int) -> None:
    position = min(at, len(deltas))
    messages = [message(str(n), "k", deltas={"n": d}) for n, d in enumerate(deltas)]
    messages.insert(position, message("r", "k", reset={"n": value}))
    assert expected_values(messages)["k"]["n"] == value + sum(deltas[position:])


# ----------------------------------------------------------------------------------------- the item schema
def test_a_reset_is_one_set_and_its_record_in_one_action() -> None:
    stamp = OperatorStamp(OperatorKind.RESET, "k", "op-1", TS, {"stock": 100})
    (action, role) = add_update("counters", "k", {}, sets={"stock": 100}, stamp=stamp)
    update = action["Update"]
    assert update["UpdateExpression"] == "SET #r0 = :r0, #ra0 = :op_at, #ri0 = :op_id, #rv0 = :r0"
    assert update["ExpressionAttributeNames"] == {
        "#r0": "c#stock",
        "#ra0": "reset_at#stock",
        "#ri0": "reset_id#stock",
        "#rv0": "reset_to#stock",
    }
    assert update["ExpressionAttributeValues"] == {
        ":r0": {"N": "100"},
        ":op_at": {"N": str(TS)},
        ":op_id": {"S": "op-1"},
    }
    assert role == Role("add", item="k")


def test_a_correction_adds_from_its_start_and_records_itself_in_the_same_action() -> None:
    stamp = OperatorStamp(OperatorKind.CORRECTION, "stock:1", "op-2", TS, {"stock": -2})
    starts = parse_counter_defaults("stock:*#stock=start:100").starts("stock:1")
    (action, _) = add_update("counters", "stock:1", {"stock": -2}, starts, stamp=stamp)
    update = action["Update"]
    assert update["UpdateExpression"] == (
        "SET #c0 = if_not_exists(#c0, :s0) + :v0, #ra0 = :op_at, #ri0 = :op_id, #rv0 = :r0"
    )
    assert update["ExpressionAttributeNames"]["#ra0"] == "corrected_at#stock"
    assert update["ExpressionAttributeValues"][":r0"] == {"N": "-2"}


def test_a_shard_is_set_without_a_record() -> None:
    (action, _) = add_update("counters", CounterItem("k", "all", 3), {}, sets={"n": 0})
    assert action["Update"]["UpdateExpression"] == "SET #r0 = :r0"


def test_the_largest_operator_write_fits_dynamodbs_expression_limit() -> None:
    names = {f"counter-{n}": 1 for n in range(MAX_OPERATOR_COUNTERS)}
    starts = dict.fromkeys(names, 5)
    for kind, sets in ((OperatorKind.RESET, names), (OperatorKind.CORRECTION, None)):
        stamp = OperatorStamp(kind, "k", "op", TS, names)
        (action, _) = add_update("counters", "k", {} if sets else names, starts, sets=sets, stamp=stamp)
        assert len(action["Update"]["UpdateExpression"].encode()) < UPDATE_EXPRESSION_MAX_BYTES


def test_records_are_read_back_by_kind() -> None:
    item = {
        "c#stock": {"N": "97"},
        "reset_at#stock": {"N": str(TS)},
        "reset_id#stock": {"S": "op-1"},
        "reset_to#stock": {"N": "100"},
        "corrected_at#stock": {"N": str(TS + 1)},
        "corrected_id#stock": {"S": "op-2"},
        "corrected_by#stock": {"N": "-3"},
        "max#stock": {"N": "100"},
    }
    assert operators_from_item(item) == {
        "reset": {"stock": (TS, "op-1", Decimal(100))},
        "correction": {"stock": (TS + 1, "op-2", Decimal(-3))},
    }
