"""Unit tests for ``tally.core.aggregate``, and the end-to-end property of the pure core.

The property: for any batch of message bodies, decode -> deduplicate -> message_totals -> plan_transactions
adds, over all transactions, exactly the sum of the distinct (first-seen) messages' events, each message in
exactly one transaction with all of its deltas, every transaction within the action limit. The reference
sum is computed independently with ``fractions.Fraction`` from the generated literals.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tally.core.aggregate import (
    Deduplicated,
    MessageTotals,
    copy_conflict,
    deduplicate,
    merge_totals,
    message_totals,
)
from tally.core.decode import decode_message
from tally.core.digest import content_digest, short_digest
from tally.core.ledger import content_conflict
from tally.core.model import CounterEvent, IdConflict, Message, RejectCode, Rejection
from tally.core.plan import plan_transactions
from tests.support.properties import independently_storable

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tally.core.aggregate import Totals
    from tally.core.numbers import Number


def msg(message_id: str, *events: tuple[str, Mapping[str, Number]]) -> Message:
    """A decoded message from (key, deltas) pairs."""
    return Message(message_id, tuple(CounterEvent(key, dict(deltas)) for key, deltas in events))


# --- deduplicate ---------------------------------------------------------------------------------------

DEDUPLICATE: list[object] = [
    pytest.param([], (), {}, id="empty"),
    pytest.param(["a"], (0,), {}, id="one"),
    pytest.param(["a", "b", "c"], (0, 1, 2), {}, id="distinct"),
    pytest.param(["a", "a"], (0,), {1: 0}, id="redelivered"),
    pytest.param(["a", "a", "b", "a"], (0, 2), {1: 0, 3: 0}, id="first-wins-every-repeat-points-at-it"),
    pytest.param(["b", "a", "b", "a", "c"], (0, 1, 4), {2: 0, 3: 1}, id="interleaved"),
]


@pytest.mark.parametrize(("ids", "unique", "duplicate_of"), DEDUPLICATE)
def test_deduplicate_keeps_first_message_of_each_id(
    ids: list[str], unique: tuple[int, ...], duplicate_of: dict[int, int]
) -> None:
    # GIVEN a batch whose messages carry these ids, each id with one content
    batch = [msg(mid, ("k", {"count": len(mid)})) for mid in ids]
    # WHEN it is deduplicated
    result = deduplicate(batch)
    # THEN the first position of each id is kept, in input order, and every repeat points at it
    assert result == Deduplicated(unique, duplicate_of, {})


CONFLICTS: list[object] = [
    pytest.param([("a", 1), ("a", 2)], (0,), {}, {1: 0}, id="other-content"),
    pytest.param([("a", 1), ("a", 2), ("a", 1), ("a", 2)], (0,), {2: 0}, {1: 0, 3: 0}, id="judged-against-the-first"),
    pytest.param([("a", 1), ("b", 1), ("b", 3), ("a", 1)], (0, 1), {3: 0}, {2: 1}, id="per-id"),
]


@pytest.mark.parametrize(("copies", "unique", "duplicate_of", "conflict_of"), CONFLICTS)
def test_deduplicate_tells_a_reused_id_from_a_duplicate(
    copies: list[tuple[str, int]], unique: tuple[int, ...], duplicate_of: dict[int, int], conflict_of: dict[int, int]
) -> None:
    # GIVEN a batch where some ids come with other content (id, delta)
    batch = [msg(mid, ("k", {"count": delta})) for mid, delta in copies]
    # WHEN it is deduplicated
    result = deduplicate(batch)
    # THEN the first copy of each id is kept; a repeat with the first's content is a duplicate, any other
    # content a conflict with the first
    assert result == Deduplicated(unique, duplicate_of, conflict_of)


def test_a_conflicting_copy_is_judged_against_what_counts_under_its_id() -> None:
    # GIVEN the first copy of an id (delta 1) and copies with delta 5 and delta 1
    first, other, same = (msg("a", ("k", {"count": n})) for n in (1, 5, 1))
    counted_elsewhere = IdConflict(RejectCode.ID_CONFLICT, "", content_digest(other))
    # WHEN the first copy was applied (or refused for another reason), THEN other content is a conflict
    conflict = copy_conflict(first, other, None)
    assert conflict is not None
    assert conflict.code is RejectCode.ID_CONFLICT
    assert conflict.counted == content_digest(first)
    assert short_digest(content_digest(first)) in conflict.detail
    assert short_digest(content_digest(other)) in conflict.detail
    assert copy_conflict(first, same, None) is None
    assert copy_conflict(first, other, Rejection(RejectCode.COUNTER_OUT_OF_RANGE, "")) is not None
    # WHEN the first copy was itself a conflict with what a marker counts (delta 5), THEN a copy with the
    # marker's content is a duplicate, and the first copy's content a conflict
    assert copy_conflict(first, other, counted_elsewhere) is None
    assert copy_conflict(first, same, counted_elsewhere) is not None


def test_an_unknown_digest_on_either_side_matches_anything() -> None:
    # GIVEN digests that differ, and ones that are unknown (an old marker; a message built without one)
    one, two = b"\x01" * 16, b"\x02" * 16
    # THEN only two known, different digests conflict
    assert content_conflict(one, two, where="its marker") is not None
    assert content_conflict(one, one, where="its marker") is None
    assert content_conflict(None, two, where="its marker") is None
    assert content_conflict(one, b"", where="its marker") is None


# --- message_totals ------------------------------------------------------------------------------------

MESSAGE_TOTALS: list[object] = [
    pytest.param(msg("m", ("k", {"count": 1})), {"k": {"count": 1}}, id="single"),
    pytest.param(msg("m", ("k", {"count": 2}), ("k", {"count": 3})), {"k": {"count": 5}}, id="same-key-same-counter"),
    pytest.param(
        msg("m", ("k", {"views": 1}), ("k", {"revenue": Decimal("49.99")})),
        {"k": {"views": 1, "revenue": Decimal("49.99")}},
        id="same-key-other-counters",
    ),
    pytest.param(
        msg("m", ("a", {"count": 1}), ("b", {"count": -1}), ("a", {"count": 2})),
        {"a": {"count": 3}, "b": {"count": -1}},
        id="several-keys",
    ),
    pytest.param(msg("m", ("k", {"count": 1}), ("k", {"count": -1})), {"k": {"count": 0}}, id="zero-net-is-kept-here"),
    pytest.param(msg("m", *[("k", {"count": Decimal("0.1")})] * 10), {"k": {"count": Decimal("1.0")}}, id="tenths"),
    pytest.param(
        msg("m", ("k", {"count": 1}), ("k", {"count": Decimal("0.5")})),
        {"k": {"count": Decimal("1.5")}},
        id="int-plus-decimal",
    ),
    pytest.param(
        msg("m", ("k", {"count": 10**38 - 1}), ("k", {"count": 10**38 - 1})),
        {"k": {"count": 2 * 10**38 - 2}},
        id="unstorable-net-is-still-exact",
    ),
]


@pytest.mark.parametrize(("message", "expected"), MESSAGE_TOTALS)
def test_message_totals_nets_events_per_key_and_counter(message: Message, expected: Totals) -> None:
    # GIVEN a decoded message
    # WHEN its events are netted
    result = message_totals(message)
    # THEN each key's counters hold the exact net delta, ints staying ints, and the events are counted
    assert result == MessageTotals(message.message_id, expected, len(message.events), digest=content_digest(message))
    for key, counters in expected.items():
        for name, value in counters.items():
            assert type(result.totals[key][name]) is type(value)


def test_message_totals_does_not_alias_event_deltas() -> None:
    # GIVEN a message whose first event's deltas would be summed into
    message = msg("m", ("k", {"count": 1}), ("k", {"count": 2}))
    # WHEN it is netted
    message_totals(message)
    # THEN the decoded events are untouched
    assert message.events[0].deltas == {"count": 1}


def test_merge_totals_sums_parts_without_mutating_them() -> None:
    # GIVEN net-delta maps of three messages
    parts: list[Totals] = [
        {"a": {"count": 1}},
        {"a": {"count": 2, "views": 1}, "b": {"count": Decimal("0.5")}},
        {"b": {"count": Decimal("-0.5")}},
    ]
    snapshot = json.dumps(parts, default=str)
    # WHEN they are merged
    merged = merge_totals(parts)
    # THEN the counters are summed exactly and the parts are left as they were
    assert merged == {"a": {"count": 3, "views": 1}, "b": {"count": Decimal("0.0")}}
    assert json.dumps(parts, default=str) == snapshot


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(
            '{"id": "m", "events": [{"key": "k", "delta": 0E+999999999}, {"key": "k", "delta": 0E+999999999}]}',
            id="zeros-huge-exponent",
        ),
        pytest.param(
            '{"id": "m", "events": [{"key": "k", "delta": 0E-2000}, {"key": "k", "delta": 1}]}',
            id="zero-tiny-exponent",
        ),
        pytest.param(
            '{"id": "m", "events": [{"key": "k", "delta": 1.' + "0" * 1500 + '}, {"key": "k", "delta": 1}]}',
            id="trailing-zeros",
        ),
    ],
)
def test_message_totals_of_accepted_message_never_raises(raw: str) -> None:
    # GIVEN a packed message of storable deltas, decoded
    message = decode_message(raw)
    assert isinstance(message, Message)
    # WHEN its events are netted
    result = message_totals(message)
    # THEN the exact net comes back (instead of a decimal signal failing the whole batch)
    exact = sum((Fraction(event.deltas["count"]) for event in message.events), Fraction(0))
    assert Fraction(result.totals["k"]["count"]) == exact


# --- property (a): the pure core adds exactly the distinct events --------------------------------------


@dataclass(frozen=True)
class Literal:
    """A JSON number literal and its exact value."""

    text: str
    value: Fraction
    is_int: bool


@dataclass(frozen=True)
class WireEvent:
    key: str
    deltas: tuple[tuple[str, Literal], ...]
    shorthand: bool
    ts: str | None

    def fields(self) -> list[str]:
        fields = [f'"key": {json.dumps(self.key)}']
        if self.shorthand:
            fields.append(f'"delta": {self.deltas[0][1].text}')
        else:
            pairs = ", ".join(f"{json.dumps(name)}: {literal.text}" for name, literal in self.deltas)
            fields.append(f'"deltas": {{{pairs}}}')
        if self.ts is not None:
            fields.append(f'"ts": {self.ts}')
        return fields


@dataclass(frozen=True)
class WireMessage:
    message_id: str
    events: tuple[WireEvent, ...]
    packed: bool
    as_bytes: bool

    def body(self) -> str | bytes:
        head = f'"id": {json.dumps(self.message_id)}'
        if self.packed:
            events = ", ".join("{" + ", ".join(event.fields()) + "}" for event in self.events)
            text = f'{{{head}, "events": [{events}]}}'
        else:
            text = "{" + ", ".join([head, *self.events[0].fields()]) + "}"
        return text.encode() if self.as_bytes else text


def _point_text(mantissa: int, exponent: int) -> str:
    """``mantissa * 10**exponent`` written with a decimal point and no exponent."""
    sign = "-" if mantissa < 0 else ""
    if exponent >= 0:
        return f"{sign}{abs(mantissa) * 10**exponent}.0"
    digits = str(abs(mantissa)).rjust(-exponent + 1, "0")
    return f"{sign}{digits[:exponent]}.{digits[exponent:]}"


KEYS = ["k1", "k2", "ключ", "🚀", "a/b:c"]
NAMES = ["count", "views", "revenue"]
TIMESTAMPS = [None, "1704067200000", '"2024-01-01T00:00:00+05:30"']


def wire_messages(exponents: st.SearchStrategy[int]) -> st.SearchStrategy[WireMessage]:
    """Messages with ids from a small alphabet (so repeats happen), keys and counters from small sets, and
    deltas as int, exponent and decimal-point literals of up to 10 digits. Strategies are built once here:
    building them inside each draw makes generation several times slower."""
    mantissas = st.integers(-(10**10) + 1, 10**10 - 1)
    forms = st.sampled_from(["int", "exponent", "point", "minus-zero"])
    zeros = st.sampled_from([Literal("-0", Fraction(0), True), Literal("-0.0", Fraction(0), False)])
    markers = st.sampled_from(["e", "E", "e+", "E+"])

    @st.composite
    def literals(draw: st.DrawFn) -> Literal:
        mantissa = draw(mantissas)
        form = draw(forms)
        if form == "int":
            return Literal(str(mantissa), Fraction(mantissa), is_int=True)
        if form == "minus-zero":
            return draw(zeros)
        exponent = draw(exponents)
        value = Fraction(mantissa) * Fraction(10) ** exponent
        if form == "exponent":
            marker = draw(markers) if exponent >= 0 else draw(markers)[0]
            return Literal(f"{mantissa}{marker}{exponent}", value, is_int=False)
        return Literal(_point_text(mantissa, exponent), value, is_int=False)

    literal = literals()
    keys = st.sampled_from(KEYS)
    stamps = st.sampled_from(TIMESTAMPS)
    counter_maps = st.dictionaries(st.sampled_from(NAMES), literal, min_size=1, max_size=3)

    @st.composite
    def wire_events(draw: st.DrawFn) -> WireEvent:
        key, ts = draw(keys), draw(stamps)
        if draw(st.booleans()):
            return WireEvent(key, (("count", draw(literal)),), shorthand=True, ts=ts)
        return WireEvent(key, tuple(draw(counter_maps).items()), shorthand=False, ts=ts)

    event_lists = st.lists(wire_events(), min_size=1, max_size=4)
    ids = st.sampled_from("abcdefg")

    @st.composite
    def messages(draw: st.DrawFn) -> WireMessage:
        events = tuple(draw(event_lists))
        packed = len(events) > 1 or draw(st.booleans())
        return WireMessage(draw(ids), events, packed, as_bytes=draw(st.booleans()))

    return messages()


Reference = dict[str, dict[str, Fraction]]


def reference_totals(message: WireMessage) -> tuple[Reference, dict[tuple[str, str], bool]]:
    """Net deltas per key and counter, and whether every contribution to each was an int literal."""
    totals: Reference = defaultdict(lambda: defaultdict(Fraction))
    all_ints: dict[tuple[str, str], bool] = {}
    for wire_event in message.events:
        for name, literal in wire_event.deltas:
            totals[wire_event.key][name] += literal.value
            slot = (wire_event.key, name)
            all_ints[slot] = all_ints.get(slot, True) and literal.is_int
    return {key: dict(counters) for key, counters in totals.items()}, all_ints


def expected_rejection(reference: Reference, max_actions: int) -> RejectCode | None:
    if len(reference) > max_actions - 1:
        return RejectCode.TOO_MANY_KEYS
    if any(not independently_storable(total) for counters in reference.values() for total in counters.values()):
        return RejectCode.NUMBER_OUT_OF_RANGE
    return None


def as_fractions(totals: Totals) -> Reference:
    return {key: {name: Fraction(value) for name, value in counters.items()} for key, counters in totals.items()}


def nonzero(totals: Reference) -> Reference:
    kept = {key: {name: v for name, v in counters.items() if v} for key, counters in totals.items()}
    return {key: counters for key, counters in kept.items() if counters}


def add_reference(into: Reference, part: Reference) -> None:
    for key, counters in part.items():
        for name, value in counters.items():
            into.setdefault(key, {})
            into[key][name] = into[key].get(name, Fraction(0)) + value


def check_deduplication(messages: Sequence[Message], distinct: Deduplicated, first_ids: Sequence[str]) -> None:
    """``distinct`` keeps the first message of each id (``first_ids``, in order), a later copy with the same
    content is its duplicate and one with other content a conflict."""
    assert [messages[position].message_id for position in distinct.unique] == list(first_ids)
    for position, original in distinct.duplicate_of.items():
        assert messages[position].message_id == messages[original].message_id
        assert original < position
        assert content_digest(messages[position]) == content_digest(messages[original])
    for position, original in distinct.conflict_of.items():
        assert messages[position].message_id == messages[original].message_id
        assert content_digest(messages[position]) != content_digest(messages[original])
    assert len(distinct.unique) + len(distinct.duplicate_of) + len(distinct.conflict_of) == len(messages)


def check_pipeline(batch: Sequence[WireMessage], max_actions: int) -> set[RejectCode]:
    """Run the pure core over ``batch`` and check it against the independent reference; return the codes
    of the messages the planner rejected."""
    # GIVEN the first message of each id, with its reference totals and expected fate
    first: dict[str, WireMessage] = {}
    for wire in batch:
        first.setdefault(wire.message_id, wire)
    references = {mid: reference_totals(wire) for mid, wire in first.items()}
    fates = {mid: expected_rejection(reference, max_actions) for mid, (reference, _) in references.items()}

    # WHEN the batch is decoded, deduplicated, netted and planned
    decoded = [decode_message(wire.body()) for wire in batch]
    assert all(isinstance(message, Message) for message in decoded), decoded
    messages = [message for message in decoded if isinstance(message, Message)]
    distinct = deduplicate(messages)
    netted = [message_totals(messages[position]) for position in distinct.unique]
    plan = plan_transactions(netted, max_actions)

    # THEN deduplication kept exactly the first message of each id
    check_deduplication(messages, distinct, list(first))
    # AND each message's totals are its exact net deltas
    for totals in netted:
        assert as_fractions(totals.totals) == references[totals.message_id][0]
        assert totals.event_count == len(first[totals.message_id].events)
    # AND exactly the messages that cannot be written are rejected, with the right code
    assert {mid: rejection.code for mid, rejection in plan.rejected.items()} == {
        mid: code for mid, code in fates.items() if code is not None
    }
    # AND every other message is in exactly one chunk, in batch order
    planned = [mid for chunk in plan.chunks for mid in chunk.message_ids]
    assert planned == [mid for mid, code in fates.items() if code is None]
    grand_total: Reference = {}
    for chunk in plan.chunks:
        # AND each chunk respects the action limit
        assert chunk.messages
        assert len(chunk.messages) + len(chunk.increments) <= max_actions
        assert chunk.action_count == len(chunk.messages) + len(chunk.increments)
        assert chunk.event_count == sum(len(first[mid].events) for mid in chunk.message_ids)
        # AND carries exactly the non-zero net deltas of its own messages (markers travel with deltas)
        expected: Reference = {}
        all_ints: dict[tuple[str, str], bool] = {}
        for mid in chunk.message_ids:
            reference, ints = references[mid]
            add_reference(expected, reference)
            for slot, is_int in ints.items():
                all_ints[slot] = all_ints.get(slot, True) and is_int
        assert as_fractions(chunk.increments) == nonzero(expected)
        for key, counters in chunk.increments.items():
            for name, value in counters.items():
                # AND every increment is storable, an int exactly when only int literals went into it
                assert independently_storable(Fraction(value))
                assert (type(value) is int) == all_ints[(key, name)], (key, name, value)
        add_reference(grand_total, as_fractions(chunk.increments))
    for before, after in itertools.pairwise(plan.chunks):
        keys_before = {key for message in before.messages for key in message.totals}
        new_keys = set(after.messages[0].totals) - keys_before
        if len(before.messages) + 1 + len(keys_before) + len(new_keys) <= max_actions:
            event("a chunk was closed early to keep a net delta storable")
    for rejected_code in {rejection.code for rejection in plan.rejected.values()}:
        event(f"rejected: {rejected_code}")
    # AND over all chunks, the increments are the sum of the distinct, writable messages
    batch_total: Reference = {}
    for mid, code in fates.items():
        if code is None:
            add_reference(batch_total, references[mid][0])
    assert nonzero(grand_total) == nonzero(batch_total)
    return {rejection.code for rejection in plan.rejected.values()}


MAX_ACTIONS = st.one_of(st.integers(2, 10), st.just(100))


@given(
    batch=st.lists(wire_messages(st.integers(-12, 12)), max_size=14),
    max_actions=MAX_ACTIONS,
)
def test_core_adds_exactly_the_distinct_events(batch: list[WireMessage], max_actions: int) -> None:
    # GIVEN a batch with repeated ids, ints and 10-digit decimals whose sums always fit 38 digits
    # WHEN it goes through the pure core
    codes = check_pipeline(batch, max_actions)
    # THEN (checked inside) the increments are exactly the distinct events; nothing is out of range
    assert codes <= {RejectCode.TOO_MANY_KEYS}


WIDE_EXPONENTS = st.one_of(st.integers(-20, 20), st.sampled_from([-130, -100, -45, -30, 30, 45, 100, 116]))


@given(batch=st.lists(wire_messages(WIDE_EXPONENTS), max_size=14), max_actions=MAX_ACTIONS)
def test_core_adds_exactly_the_distinct_events_near_the_number_limits(
    batch: list[WireMessage], max_actions: int
) -> None:
    # GIVEN a batch whose nets can exceed 38 digits or 9.99E+125, alone or only when combined
    # WHEN it goes through the pure core
    # THEN (checked inside) unwritable messages are rejected, combinations that would overflow are split
    # into separate chunks, and the increments are exactly the distinct writable events
    check_pipeline(batch, max_actions)
