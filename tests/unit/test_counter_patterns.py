"""In the pure core: start values, default deltas, gauges (tables and a property)."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.config import Settings
from tally.core.aggregate import message_totals
from tally.core.decode import decode_message
from tally.core.defaults import CounterRule, parse_counter_defaults
from tally.core.digest import content_digest
from tally.core.gauges import GaugeValue, batch_gauges, latest_order, supersedes
from tally.core.items import CounterItem
from tally.core.limits import UPDATE_EXPRESSION_MAX_BYTES
from tally.core.model import CounterEvent, Gauge, GaugeKind, Message, RejectCode, Rejection
from tally.core.patterns import KeyPattern
from tally.core.sharding import parse_hot_keys
from tally.errors import ConfigurationError
from tally.store.actions import add_update
from tally.store.expressions import (
    MAX_EXPRESSION_OPERATORS,
    add_expression,
    counter_limit_for,
    counters_per_add,
    gauge_expressions,
    gauges_per_update,
)
from tally.store.schema import gauges_from_item

if TYPE_CHECKING:
    from tally.core.numbers import Number

TS = 4_102_444_800_000
DEFAULTS = parse_counter_defaults("stock:*#stock=start:100,delta:-1;views:*#count=delta:1;stock:gold#stock=start:5")


# ---------------------------------------------------------------------------------- declarations
@pytest.mark.parametrize(
    ("text", "rules"),
    [
        ("", ()),
        ("views:*#count=delta:1", (CounterRule(KeyPattern("views:*"), "count", None, 1),)),
        ("a#b#c=start:1.50", (CounterRule(KeyPattern("a#b"), "c", Decimal("1.5"), None),)),  # the last # splits
        ("k#n=start:-2,delta:0.25", (CounterRule(KeyPattern("k"), "n", -2, Decimal("0.25")),)),
        (
            "k#n=start:1E+2; v#c=delta:1",
            (CounterRule(KeyPattern("k"), "n", 100, None), CounterRule(KeyPattern("v"), "c", None, 1)),
        ),
    ],
)
def test_declarations_parse_into_plain_rules(text: str, rules: tuple[CounterRule, ...]) -> None:
    parsed = parse_counter_defaults(text).rules
    assert parsed == rules
    assert all(type(rule.start) is int for rule in parsed if rule.start in (-2, 100))


@pytest.mark.parametrize(
    "text",
    [
        "views:*",  # no counter, no settings
        "views:*#count",  # no settings
        "#count=delta:1",  # no pattern
        "views:*#=delta:1",  # no counter
        "v#c=delta:x",  # not a number
        "v#c=delta:NaN",
        "v#c=delta:0",  # counts nothing
        "v#c=step:1",  # unknown setting
        "v#c=delta:1,delta:2",  # twice
        "v#c=start:" + "1" * 39,  # 39 significant digits
        "v#c=",
    ],
)
def test_a_malformed_declaration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="counter default"):
        parse_counter_defaults(text)


@pytest.mark.parametrize(
    ("hot", "declared", "refused"),
    [
        ("page:/home=4", "page:/home#count=start:10", True),
        ("page:*=4", "page:/home#count=start:10", True),
        ("page:/home=4", "page:*#count=start:10", True),
        ("p*=4", "page:*#count=start:10", True),
        ("page:*=4", "p*#count=start:10", True),
        ("page:/home=4", "page:/about#count=start:10", False),
        ("page:*=4", "shop:*#count=start:10", False),
        ("page:*=4", "page:*#count=delta:1", False),  # a default delta alone is fine on a hot key
    ],
)
def test_a_start_value_on_a_hot_key_is_refused(hot: str, declared: str, refused: bool) -> None:
    hot_keys = parse_hot_keys(hot)
    if refused:
        with pytest.raises(ValueError, match="hot key"):
            parse_counter_defaults(declared, hot_keys)
    else:
        parse_counter_defaults(declared, hot_keys)


@pytest.mark.parametrize(
    ("key", "deltas", "starts"),
    [
        ("stock:sku-1", {"stock": -1}, {"stock": 100}),
        ("stock:gold", {"stock": -1}, {"stock": 100}),  # the first matching rule wins, per counter
        ("views:/a", {"count": 1}, {}),
        ("other", {}, {}),
    ],
)
def test_each_key_gets_its_first_matching_rule_per_counter(
    key: str, deltas: dict[str, Number], starts: dict[str, Number]
) -> None:
    assert DEFAULTS.default_deltas(key) == deltas
    assert DEFAULTS.starts(key) == starts


# ------------------------------------------------------------------------------- default deltas
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"id":"a","key":"views:/home"}', {"count": 1}),
        ('{"id":"a","key":"stock:sku-1"}', {"stock": -1}),
        ('{"id":"a","key":"stock:sku-1","delta":5}', {"count": 5}),  # an explicit delta wins
        ('{"id":"a","key":"stock:sku-1","deltas":{"stock":-3}}', {"stock": -3}),
        ('{"id":"a","events":[{"key":"views:/x"},{"key":"views:/y","delta":2}]}', None),
    ],
)
def test_an_event_without_delta_counts_its_default(body: str, expected: dict[str, Number] | None) -> None:
    decoded = decode_message(body, defaults=DEFAULTS)
    assert isinstance(decoded, Message)
    if expected is None:
        assert [dict(event.deltas) for event in decoded.events] == [{"count": 1}, {"count": 2}]
    else:
        assert dict(decoded.events[0].deltas) == expected


@pytest.mark.parametrize(
    "body",
    ['{"id":"a","key":"other"}', '{"id":"a","key":"views:/x","deltas":{}}', '{"id":"a","events":[{"key":"x"}]}'],
)
def test_without_a_default_an_omitted_delta_is_still_missing(body: str) -> None:
    decoded = decode_message(body, defaults=DEFAULTS)
    assert isinstance(decoded, Rejection)
    assert decoded.code is RejectCode.MISSING_DELTA


def test_the_default_is_part_of_the_content_digest() -> None:
    # An omitted delta and the same delta written out are the same content: a re-send is a duplicate.
    omitted = decode_message('{"id":"a","key":"views:/x"}', defaults=DEFAULTS)
    spelled = decode_message('{"id":"a","key":"views:/x","deltas":{"count":1}}', defaults=DEFAULTS)
    assert isinstance(omitted, Message)
    assert isinstance(spelled, Message)
    assert content_digest(omitted) == content_digest(spelled)


# ------------------------------------------------------------------------------------ start values
def test_a_started_counter_is_set_from_its_start_in_the_same_action() -> None:
    (action, _) = add_update("counters", "stock:sku-1", {"stock": -2, "sold": 2}, DEFAULTS.starts("stock:sku-1"))
    update = action["Update"]
    assert update["UpdateExpression"] == "ADD #c1 :v1 SET #c0 = if_not_exists(#c0, :s0) + :v0"
    assert update["ExpressionAttributeNames"] == {"#c0": "c#stock", "#c1": "c#sold"}
    assert update["ExpressionAttributeValues"] == {":v0": {"N": "-2"}, ":s0": {"N": "100"}, ":v1": {"N": "2"}}


def test_windows_and_shards_count_from_zero() -> None:
    for other in (CounterItem("stock:1", "h#2100-01-01T00Z", 0, 99), CounterItem("stock:1", "all", 3)):
        (action, _) = add_update("counters", other, {"stock": 1}, DEFAULTS.starts("stock:1"))
        assert "if_not_exists(#c0" not in action["Update"]["UpdateExpression"]


def test_the_counter_limit_leaves_room_for_start_clauses() -> None:
    limit = counter_limit_for(DEFAULTS)
    started = limit("stock:1")
    assert started == counters_per_add("x", started=True) < counters_per_add("x")
    assert limit("views:/a") == counters_per_add("views:/a")
    expression = add_expression(started, sets_expiry=False, started=started)
    assert len(expression.encode()) <= UPDATE_EXPRESSION_MAX_BYTES
    assert (
        len(add_expression(started + 1, sets_expiry=False, started=started + 1).encode()) > UPDATE_EXPRESSION_MAX_BYTES
    )
    assert counter_limit_for(parse_counter_defaults("views:*#count=delta:1")) is counters_per_add


# ------------------------------------------------------------------------------------------ gauges
def gauge_body(gauges: dict[str, object], ts: int | None = TS, **extra: object) -> str:
    fields: dict[str, object] = {"id": "g", "key": "shop:42", "gauges": gauges, **extra}
    if ts is not None:
        fields["ts"] = ts
    return json.dumps(fields)


@pytest.mark.parametrize(
    ("gauges", "expected"),
    [
        ({"peak": {"max": 17}}, {"peak": Gauge(GaugeKind.MAX, 17)}),
        ({"low": {"min": -1.50}}, {"low": Gauge(GaugeKind.MIN, Decimal("-1.5"))}),
        (
            {"lastPurchaseAt": {"latest": "2100-01-01T00:00:00Z"}},
            {"lastPurchaseAt": Gauge(GaugeKind.LATEST, "2100-01-01T00:00:00Z")},
        ),
        ({"price": {"latest": 9.99}}, {"price": Gauge(GaugeKind.LATEST, Decimal("9.99"))}),
    ],
)
def test_gauges_decode_exactly(gauges: dict[str, object], expected: dict[str, Gauge]) -> None:
    decoded = decode_message(gauge_body(gauges))
    assert isinstance(decoded, Message)
    (event,) = decoded.events
    assert event.gauges == expected
    assert dict(event.deltas) == {}  # gauges only: no counter moves, no item in the totals
    assert message_totals(decoded).totals == {}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (gauge_body({"last": {"latest": "x"}}, ts=None), RejectCode.INVALID_GAUGE),  # latest needs a ts
        (gauge_body({"peak": {"mean": 1}}), RejectCode.INVALID_GAUGE),
        (gauge_body({"peak": {"max": 1, "min": 0}}), RejectCode.INVALID_GAUGE),
        (gauge_body({"peak": 3}), RejectCode.INVALID_GAUGE),
        (gauge_body({}), RejectCode.INVALID_GAUGE),
        (gauge_body({"": {"max": 1}}), RejectCode.INVALID_GAUGE),
        (gauge_body({"peak": {"max": "3"}}), RejectCode.INVALID_NUMBER),
        (gauge_body({"peak": {"max": True}}), RejectCode.INVALID_NUMBER),
        (gauge_body({"peak": {"latest": None}}), RejectCode.INVALID_NUMBER),
        (gauge_body({"last": {"latest": "é" * 600}}), RejectCode.INVALID_GAUGE),
        (gauge_body({f"g{i}": {"max": i} for i in range(101)}), RejectCode.TOO_MANY_COUNTERS),
        ('{"id":"g","key":"k","gauges":{"p":{"max":1E+200}}}', RejectCode.NUMBER_OUT_OF_RANGE),
        ('{"id":"g","gauges":{"p":{"max":1}},"events":[{"key":"k","delta":1}]}', RejectCode.AMBIGUOUS_SHAPE),
        ('{"id":"g","key":"k","gauges":[1]}', RejectCode.INVALID_FIELD),
    ],
)
def test_a_bad_gauge_is_refused_with_its_reason(body: str, code: RejectCode) -> None:
    decoded = decode_message(body)
    assert isinstance(decoded, Rejection), decoded
    assert decoded.code is code


def test_gauges_are_part_of_the_content_and_old_digests_are_unchanged() -> None:
    plain = decode_message('{"id":"a","key":"k","delta":1,"ts":5}')
    with_max = decode_message('{"id":"a","key":"k","delta":1,"ts":5,"gauges":{"p":{"max":1}}}')
    with_max_spelled = decode_message('{"id":"a","key":"k","delta":1,"ts":5,"gauges":{"p":{"max":1.0}}}')
    with_text = decode_message('{"id":"a","key":"k","delta":1,"ts":5,"gauges":{"p":{"latest":"1"}}}')
    with_number = decode_message('{"id":"a","key":"k","delta":1,"ts":5,"gauges":{"p":{"latest":1}}}')
    messages = [plain, with_max, with_max_spelled, with_text, with_number]
    assert all(isinstance(m, Message) for m in messages)
    digests = [content_digest(m) for m in messages if isinstance(m, Message)]
    assert digests[1] == digests[2]  # 1 and 1.0 are one value
    assert len({digests[0], digests[1], digests[3], digests[4]}) == 4
    # The format of an event without gauges is pinned elsewhere (test_digest); here: not changed by gauges.
    assert content_digest(Message("a", (CounterEvent("k", {"count": 1}, 5),))) == digests[0]


def reading(mid: str, key: str, kind: str, name: str, value: object, *, ts: int = TS) -> Message:
    decoded = decode_message(json.dumps({"id": mid, "key": key, "ts": ts, "gauges": {name: {kind: value}}}))
    assert isinstance(decoded, Message)
    return decoded


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([reading("a", "k", "max", "p", 3), reading("b", "k", "max", "p", 7), reading("c", "k", "max", "p", 5)], 7),
        ([reading("a", "k", "min", "p", 3), reading("b", "k", "min", "p", -7), reading("c", "k", "min", "p", 5)], -7),
        (
            [
                reading("a", "k", "latest", "p", "new", ts=TS + 1),
                reading("b", "k", "latest", "p", "old", ts=TS),
                reading("c", "k", "latest", "p", "older", ts=TS - 1),
            ],
            "new",
        ),
    ],
)
def test_a_batch_keeps_one_reading_per_key_and_gauge(messages: list[Message], expected: object) -> None:
    batch = batch_gauges(messages)
    ((_slot, value),) = batch.updates["k"].items()
    assert value.value == expected
    assert batch.sources == {"k": frozenset({"a", "b", "c"})}


def test_latest_ties_break_the_same_way_in_any_order() -> None:
    tied = [reading(f"m{i}", "k", "latest", "p", f"v{i}") for i in range(8)]
    winners = {
        batch_gauges(random.Random(seed).sample(tied, len(tied))).updates["k"][GaugeKind.LATEST, "p"]
        for seed in range(20)
    }
    assert len(winners) == 1


def test_latest_order_compares_time_first_as_unsigned_bytes() -> None:
    early = latest_order(255, "z", "a")
    late = latest_order(256, "a", "a")
    assert early < late
    assert early[:8] == (255).to_bytes(8, "big")
    assert supersedes(GaugeKind.LATEST, GaugeValue("a", late), GaugeValue("a", early))
    assert not supersedes(GaugeKind.MAX, GaugeValue(Decimal("1.0")), GaugeValue(1))  # equal: no write needed


def test_gauge_writes_fit_dynamodbs_expression_limits() -> None:
    most = gauges_per_update()
    update, condition = gauge_expressions(["latest"] * most)
    assert len(update.encode()) <= UPDATE_EXPRESSION_MAX_BYTES
    assert len(condition.encode()) <= UPDATE_EXPRESSION_MAX_BYTES
    assert most * 4 <= MAX_EXPRESSION_OPERATORS
    assert gauge_expressions(["max", "min", "latest"]) == (
        "SET #g0 = :g0, #g1 = :g1, #g2 = :g2, #o2 = :o2",
        "(attribute_not_exists(#g0) OR #g0 < :g0) AND (attribute_not_exists(#g1) OR #g1 > :g1)"
        " AND (attribute_not_exists(#o2) OR #o2 < :o2)",
    )


def test_gauges_are_read_back_by_kind() -> None:
    item = {
        "pk": {"S": "k"},
        "c#count": {"N": "1"},
        "max#p": {"N": "7"},
        "latest#l": {"S": "x"},
        "latest_order#l": {"B": b"1"},
    }
    assert gauges_from_item(item) == {"max": {"p": Decimal(7)}, "latest": {"l": "x"}}


# ------------------------------------------------------------------------------ the core property
readings = st.lists(
    st.tuples(
        st.integers(0, 5),  # message number
        st.sampled_from(["k1", "k2"]),
        st.sampled_from(["max", "min", "latest"]),
        st.integers(-5, 5),  # value
        st.integers(0, 3),  # ts offset
    ),
    min_size=1,
    max_size=12,
)


@given(readings, st.randoms(use_true_random=False), st.integers(1, 4))
def test_batched_readings_keep_what_the_distinct_messages_say(
    spec: list[tuple[int, str, str, int, int]], rng: random.Random, batches: int
) -> None:
    # GIVEN messages of gauge readings, each delivered 1 to 3 times, in any order, in any batches
    events: dict[int, list[dict[str, object]]] = {}
    for number, key, kind, value, ts in spec:
        events.setdefault(number, []).append({"key": key, "ts": TS + ts, "gauges": {kind: {kind: value}}})
    messages = []
    for number, evs in events.items():
        decoded = decode_message(json.dumps({"id": f"m{number}", "events": evs}))
        assert isinstance(decoded, Message)
        messages.append(decoded)
    deliveries = [m for m in messages for _ in range(rng.randint(1, 3))]
    rng.shuffle(deliveries)
    # WHEN each batch is reduced and "stored" by the rule the store's condition applies
    stored: dict[tuple[str, GaugeKind, str], GaugeValue] = {}
    for start in range(batches):
        batch = batch_gauges(deliveries[start::batches])
        for key, slots in batch.updates.items():
            for (kind, name), best in slots.items():
                known = stored.get((key, kind, name))
                if known is None or supersedes(kind, best, known):
                    stored[key, kind, name] = best
    # THEN what is stored is the max, min and latest (by ts, then the tie-break) over the distinct messages
    expected: dict[tuple[str, GaugeKind, str], object] = {}
    for kind_name in ("max", "min", "latest"):
        kind = GaugeKind(kind_name)
        for key in ("k1", "k2"):
            values = [
                (TS + ts, f"m{number}", value) for number, k, kd, value, ts in spec if k == key and kd == kind_name
            ]
            if not values:
                continue
            if kind is GaugeKind.MAX:
                expected[key, kind, kind_name] = max(v for _, _, v in values)
            elif kind is GaugeKind.MIN:
                expected[key, kind, kind_name] = min(v for _, _, v in values)
            else:
                expected[key, kind, kind_name] = max(values, key=lambda t: latest_order(t[0], t[1], t[2]))[2]
    assert {slot: best.value for slot, best in stored.items()} == expected


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ({"TALLY_COUNTER_DEFAULTS": "v#c=delta:x"}, "not a number"),
        ({"TALLY_COUNTER_DEFAULTS": "page:*#count=start:5", "TALLY_HOT_KEYS": "page:/home=4"}, "hot key"),
    ],
)
def test_the_function_refuses_a_declaration_it_cannot_honour(environment: dict[str, str], message: str) -> None:
    base = {"TALLY_COUNTERS_TABLE": "c", "TALLY_MARKERS_TABLE": "m", "TALLY_DLQ_URL": "q"}
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env({**base, **environment})
    assert Settings.from_env({**base, "TALLY_COUNTER_DEFAULTS": "v#c=delta:2"}).declarations.defaults.default_deltas(
        "v"
    ) == {"c": 2}
