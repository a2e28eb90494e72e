"""In the pure core: views, from their declaration to the items an event counts in.

What it proves: ``CounterViews`` parses strictly; an event's ``dims`` decode strictly, each refusal with its own
code (``invalid_dimension``, ``too_many_dimensions``, ``unknown_dimension``, ``missing_dimension``,
``key_too_long``); dims are content (the digest) without changing the digest of an event without them; the
derivation counts an event in its key and once in each declared view, windows and all; every other declaration
names a view's items with a view pattern, never a published key's; and, as properties over any keys, views and
values, a view item's key is never a publishable key nor another view item's key, its stored primary key never
another item's, and an event counts into each of its views exactly once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core import views
from tally.core.aggregate import message_totals
from tally.core.bounds import parse_counter_bounds
from tally.core.decode import decode_message
from tally.core.defaults import parse_counter_defaults
from tally.core.digest import content_digest
from tally.core.items import (
    SHARD_SEPARATOR,
    CounterItem,
    item_label,
    make_item,
    view_item_key,
    view_parts,
    window_counter,
)
from tally.core.limits import MAX_DIMENSION_VALUE_BYTES, MAX_VIEW_DIMENSIONS, WIRE_LIMITS
from tally.core.model import CounterEvent, Message, RejectCode, Rejection
from tally.core.resets import operator_stamp, reset_items
from tally.core.sharding import parse_hot_keys
from tally.core.thresholds import parse_counter_thresholds
from tally.core.views import NO_VIEWS, View, parse_counter_views
from tally.core.windows import parse_window_spec
from tally.store.schema import counter_item_of, item_key, member_key

VIEWS = parse_counter_views("api*=customer,route,customer+route;usage:*=region")
TS = 4_102_444_800_000  # 2100-01-01T00:00Z
ACME = {"customer": "acme", "route": "/v1/users"}


def decoded(body: dict[str, Any], views: Any = VIEWS) -> Message | Rejection:
    return decode_message(json.dumps(body), WIRE_LIMITS, views=views)


def event(body: dict[str, Any]) -> CounterEvent:
    message = decoded(body)
    assert isinstance(message, Message), message
    (only,) = message.events
    return only


# ------------------------------------------------------------------------------------------ declaration
def test_a_declaration_names_views_per_key_pattern() -> None:
    rule = VIEWS.rule_for("api")
    assert rule is not None
    assert [view.name for view in rule.views] == ["customer", "route", "customer+route"]
    assert rule.dimensions == {"customer", "route"}
    assert VIEWS.rule_for("usage:acme") is not None
    assert VIEWS.rule_for("page:/home") is None
    assert parse_counter_views("x=b+a").rules[0].views == (View(("a", "b")),)  # a view is a set of dimensions
    assert parse_counter_views("") == NO_VIEWS


@pytest.mark.parametrize(
    "text",
    [
        "api",  # no views
        "api=",
        "=customer",
        "api=cust omer",
        "api=customer+customer",
        "api=a+b+c+d",  # more than MAX_VIEW_DIMENSIONS
        "api=customer,customer",
        "api=" + ",".join(f"d{n}" for n in range(9)),  # more than MAX_VIEWS
        "api[customer]=route",  # views of a view
    ],
)
def test_a_malformed_declaration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="counter view"):
        parse_counter_views(text)
    assert MAX_VIEW_DIMENSIONS == 3


# --------------------------------------------------------------------------------------------- decoding
def test_dims_decode_on_single_and_packed_events() -> None:
    assert event({"id": "a", "key": "api", "delta": 1, "dims": ACME}).dims == ACME
    packed = decoded({"id": "p", "events": [{"key": "api", "delta": 1, "dims": ACME}, {"key": "page", "delta": 2}]})
    assert isinstance(packed, Message)
    assert [e.dims for e in packed.events] == [ACME, None]
    assert event({"id": "a", "key": "page", "delta": 1}).dims is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"key": "api", "delta": 1}, RejectCode.MISSING_DIMENSION),  # api's views need customer and route
        ({"key": "api", "delta": 1, "dims": {"customer": "acme"}}, RejectCode.MISSING_DIMENSION),
        ({"key": "api", "delta": 1, "dims": {**ACME, "region": "eu"}}, RejectCode.UNKNOWN_DIMENSION),
        ({"key": "page", "delta": 1, "dims": {"customer": "acme"}}, RejectCode.UNKNOWN_DIMENSION),  # no views
        ({"key": "api", "delta": 1, "dims": {}}, RejectCode.INVALID_DIMENSION),
        ({"key": "api", "delta": 1, "dims": ["acme"]}, RejectCode.INVALID_DIMENSION),
        ({"key": "api", "delta": 1, "dims": {"customer": 7, "route": "/"}}, RejectCode.INVALID_DIMENSION),
        ({"key": "api", "delta": 1, "dims": {"customer": ["a", "b"], "route": "/"}}, RejectCode.INVALID_DIMENSION),
        ({"key": "api", "delta": 1, "dims": {"customer": "", "route": "/"}}, RejectCode.INVALID_DIMENSION),
        ({"key": "api", "delta": 1, "dims": {"customer": "a\x1fb", "route": "/"}}, RejectCode.INVALID_DIMENSION),
        (
            {"key": "api", "delta": 1, "dims": {"customer": "é" * (MAX_DIMENSION_VALUE_BYTES // 2 + 1), "route": "/"}},
            RejectCode.INVALID_DIMENSION,
        ),
        ({"key": "api", "delta": 1, "dims": {"cust omer": "a", "route": "/"}}, RejectCode.INVALID_DIMENSION),
        ({"key": "api", "delta": 1, "dims": {f"d{n}": "v" for n in range(9)}}, RejectCode.TOO_MANY_DIMENSIONS),
    ],
)
def test_bad_dims_are_refused_each_with_its_code(body: dict[str, Any], code: RejectCode) -> None:
    refused = decoded({"id": "a", **body})
    assert isinstance(refused, Rejection), refused
    assert refused.code is code, refused


def test_a_key_too_long_for_its_views_partition_key_is_refused() -> None:
    long_names = [name * 64 for name in "abc"]
    views = parse_counter_views("k*=" + "+".join(long_names))
    dims = dict.fromkeys(long_names, "v")
    fits = decoded({"id": "a", "key": "k" * (2048 - 8 - 194), "delta": 1, "dims": dims}, views)
    assert isinstance(fits, Message)
    refused = decoded({"id": "a", "key": "k" * (2048 - 8 - 194 + 1), "delta": 1, "dims": dims}, views)
    assert isinstance(refused, Rejection)
    assert refused.code is RejectCode.KEY_TOO_LONG
    assert len(item_key(view_item_key(View.of(long_names).name, "k" * 1846, ("v",) * 3))["pk"]["S"]) + 3 <= 2048


def test_a_packed_message_carries_dims_on_its_events_only() -> None:
    refused = decoded({"id": "p", "dims": ACME, "events": [{"key": "api", "delta": 1, "dims": ACME}]})
    assert isinstance(refused, Rejection)
    assert refused.code is RejectCode.AMBIGUOUS_SHAPE
    refused = decoded({"id": "p", "events": [{"key": "api", "delta": 1, "dims": ACME}, {"key": "api", "delta": 1}]})
    assert isinstance(refused, Rejection)
    assert refused.code is RejectCode.MISSING_DIMENSION
    assert "$.events[1]" in refused.detail


def test_without_a_declaration_dims_are_refused_never_ignored() -> None:
    refused = decoded({"id": "a", "key": "api", "delta": 1, "dims": ACME}, views=NO_VIEWS)
    assert isinstance(refused, Rejection)
    assert refused.code is RejectCode.UNKNOWN_DIMENSION


def test_dims_are_content_and_leave_other_digests_alone() -> None:
    plain = Message("a", (CounterEvent("api", {"count": 1}),))
    with_dims = Message("a", (CounterEvent("api", {"count": 1}, dims=ACME),))
    other = Message("a", (CounterEvent("api", {"count": 1}, dims={**ACME, "customer": "globex"}),))
    reordered = Message("a", (CounterEvent("api", {"count": 1}, dims=dict(reversed(ACME.items()))),))
    assert len({content_digest(plain), content_digest(with_dims), content_digest(other)}) == 3
    assert content_digest(reordered) == content_digest(with_dims)
    # Dims beside members and readings never meet an event's shape without them.
    members = Message("a", (CounterEvent("api", {"count": 1}, distinct={"customer": "acme"}),))
    assert content_digest(members) != content_digest(with_dims)
    correction = Message("c", (CounterEvent("api", {"count": -1}, correction=True, dims=ACME),))
    assert content_digest(correction) != content_digest(
        Message("c", (CounterEvent("api", {"count": -1}, correction=True),))
    )


# ------------------------------------------------------------------------------------------- derivation
def key_of(view: str, values: tuple[str, ...], key: str = "api") -> str:
    return view_item_key(view, key, values)


def test_an_event_counts_in_its_key_and_once_in_each_view() -> None:
    message = decoded({"id": "a", "key": "api", "deltas": {"calls": 2}, "dims": ACME})
    assert isinstance(message, Message)
    totals = message_totals(message, views=VIEWS).totals
    assert totals == {
        "api": {"calls": 2},
        key_of("customer", ("acme",)): {"calls": 2},
        key_of("route", ("/v1/users",)): {"calls": 2},
        key_of("customer+route", ("acme", "/v1/users")): {"calls": 2},
    }


def test_a_packed_message_nets_its_view_items_like_keys() -> None:
    events = [{"key": "api", "delta": 1, "dims": {"customer": c, "route": "/"}} for c in ("a", "b", "a", "a")]
    message = decoded({"id": "p", "events": events})
    assert isinstance(message, Message)
    totals = message_totals(message, views=VIEWS).totals
    assert totals[key_of("customer", ("a",))] == {"count": 3}
    assert totals[key_of("customer", ("b",))] == {"count": 1}
    assert totals[key_of("route", ("/",))] == {"count": 4}
    assert len(totals) == 1 + 2 + 1 + 2


def test_views_count_in_every_window_their_key_does() -> None:
    windows = parse_window_spec("minute,hour,day")
    message = decoded({"id": "a", "key": "usage:1", "delta": 1, "ts": TS, "dims": {"region": "eu"}})
    assert isinstance(message, Message)
    totals = message_totals(message, windows, 0, TS, VIEWS).totals
    view = view_item_key("region", "usage:1", ("eu",))
    for key in ("usage:1", view):
        assert totals[key] == {
            "count": 1,
            window_counter("h#2100-01-01T00:00Z", "count"): 1,
            window_counter("d#2100-01-01", "count"): 1,
        }
        assert totals[CounterItem(key, "m#2100-01-01T00:00Z", 0, None)] == {"count": 1}


def test_a_reset_sets_the_one_item_its_dims_name_and_a_correction_counts_like_an_event() -> None:
    reset = decoded({"id": "r", "key": "api", "reset": {"calls": 0}, "dims": {"customer": "acme"}})
    assert isinstance(reset, Message)
    stamp = operator_stamp(reset, 0, VIEWS)
    assert stamp is not None
    assert reset_items(stamp) == {key_of("customer", ("acme",)): {"calls": 0}}
    assert message_totals(reset, views=VIEWS).sets == {key_of("customer", ("acme",)): {"calls": 0}}
    plain = decoded({"id": "r", "key": "api", "reset": {"calls": 0}})
    assert isinstance(plain, Message)
    assert message_totals(plain, views=VIEWS).sets == {"api": {"calls": 0}}
    partial = decoded({"id": "r", "key": "api", "reset": {"calls": 0}, "dims": {"customer": "a", "region": "eu"}})
    assert isinstance(partial, Rejection)
    assert partial.code is RejectCode.INVALID_RESET
    correction = decoded({"id": "c", "key": "api", "deltas": {"calls": -1}, "correction": True, "dims": ACME})
    assert isinstance(correction, Message)
    net = message_totals(correction, views=VIEWS)
    assert len(net.totals) == 4
    assert net.stamp is not None
    assert net.stamp.key == "api"


# ------------------------------------------------------------------------------------- view patterns
def test_every_declaration_names_view_items_with_a_view_pattern() -> None:
    acme = key_of("customer", ("acme",))
    acme_route = key_of("customer+route", ("acme", "/v1/users"))
    hot = parse_hot_keys("api[customer]=8,api[customer,route]=4", VIEWS)
    assert hot.shards_for(acme) == 8
    assert hot.shards_for(acme_route) == 4
    assert hot.shards_for("api") == 1
    bounds = parse_counter_bounds("api[customer=acme]#calls<=5;api[customer]#calls<=1000", views=VIEWS)
    assert bounds.bounds(acme)["calls"].ceiling == 5  # the first matching rule wins, as for keys
    assert bounds.bounds(key_of("customer", ("globex",)))["calls"].ceiling == 1000
    assert not bounds.bounds("api")
    assert not bounds.bounds(acme_route)
    defaults = parse_counter_defaults("api[customer=acme]#credits=start:100", views=VIEWS)
    assert defaults.starts(acme) == {"credits": 100}
    assert defaults.starts(key_of("customer", ("globex",))) == {}
    prefix = parse_counter_bounds("api[customer=acme,route=/v1/*]#calls<=9", views=VIEWS)
    assert prefix.bounds(acme_route)["calls"].ceiling == 9
    assert not prefix.bounds(key_of("customer+route", ("acme", "/v2/x")))
    usage = parse_counter_thresholds("usage:*[region]#count@day>=10", views=VIEWS, windows=parse_window_spec("day"))
    assert usage.thresholds(view_item_key("region", "usage:9", ("eu",)), "day")
    assert not usage.thresholds("usage:9", "day")


def test_a_view_pattern_spells_a_view_as_declared_too() -> None:
    # a view of several dimensions is declared and read as customer+route: a pattern may spell it so as well
    # (without a value, as api[customer,route]), rather than read it as a key that happens to end in "]"
    acme_route = key_of("customer+route", ("acme", "/v1/users"))
    assert parse_hot_keys("api[customer+route]=4", VIEWS).shards_for(acme_route) == 4
    assert parse_counter_bounds("api[customer+route]#calls<=7", views=VIEWS).bounds(acme_route)["calls"].ceiling == 7


def test_a_key_pattern_never_matches_a_view_item() -> None:
    bounds = parse_counter_bounds("api*#calls<=10;api#calls<=10", views=VIEWS)
    assert bounds.bounds("api")
    assert not bounds.bounds(key_of("customer", ("acme",)))


@pytest.mark.parametrize(
    "text",
    [
        "api[region]#calls<=1",  # region is a view of usage:*, not of api
        "api[customer=acme,route]#calls<=1",  # every value or none
        "usage:*[region=eu]#calls<=1",  # values need an exact key
        "api[customer=a*b]#calls<=1",
        "api[customer,customer]#calls<=1",
    ],
)
def test_a_view_pattern_naming_no_declared_view_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="view pattern"):
        parse_counter_bounds(text, views=VIEWS)


def test_a_key_ending_in_brackets_stays_a_key_without_views() -> None:
    assert parse_counter_bounds("list[0]#n>=0").bounds("list[0]")


def test_a_hot_view_and_a_bounded_view_meet_as_for_keys() -> None:
    hot = parse_hot_keys("api[customer]=4", VIEWS)
    with pytest.raises(ValueError, match="hot key"):
        parse_counter_bounds("api[customer=acme]#calls<=5", hot, views=VIEWS)
    parse_counter_bounds("api[route]#calls<=5", hot, views=VIEWS)  # another view: no overlap


def test_labels_read_as_people_write_them() -> None:
    assert item_label(key_of("customer+route", ("acme", "/v1/users"))) == "api[customer=acme,route=/v1/users]"
    assert (
        item_label(make_item(key_of("customer", ("acme",)), "d#2026-11-22", 3))
        == "api[customer=acme]@d#2026-11-22#shard3"
    )


# ---------------------------------------------------------------------------------------------- properties
names = st.from_regex(r"[A-Za-z0-9_-]{1,6}", fullmatch=True)
texts = st.text(st.characters(blacklist_characters="\x1f", blacklist_categories=("Cs",)), min_size=1, max_size=8)
views_ = st.lists(names, min_size=1, max_size=3, unique=True).map(View.of)


@given(
    key=texts,
    first=st.tuples(views_, st.lists(texts, min_size=3, max_size=3)),
    second=st.tuples(views_, st.lists(texts, min_size=3, max_size=3)),
    other_key=texts,
    publishable=texts,
)
def test_a_view_item_key_is_never_another_item_key(
    key: str,
    first: tuple[View, list[str]],
    second: tuple[View, list[str]],
    other_key: str,
    publishable: str,
) -> None:
    """A derived key is never a published key, and two derive the same key only from the same (view, key,
    values); so do the primary keys the store gives them, among themselves and beside every other kind of item
    (a key's, a shard's, a window's, a distinct member's)."""
    (view_a, values_a), (view_b, values_b) = first, second
    values_a, values_b = values_a[: len(view_a.dims)], values_b[: len(view_b.dims)]
    a = view_item_key(view_a.name, key, tuple(values_a))
    b = view_item_key(view_b.name, other_key, tuple(values_b))
    assert a != publishable
    assert SHARD_SEPARATOR not in publishable
    assert (a == b) == ((view_a, key, values_a) == (view_b, other_key, values_b))
    parts = view_parts(a)
    assert parts is not None
    assert (parts.view, parts.key, list(parts.values)) == (view_a.name, key, values_a)
    for window in ("all", "d#2026-11-22"):
        for shard in (0, 3):
            stored_a = item_key(make_item(a, window, shard))
            assert counter_item_of(stored_a) == CounterItem(a, window, shard)
            others = [
                item_key(make_item(b, window, shard)),
                item_key(make_item(publishable, window, shard)),
                item_key(make_item(key, window, shard)),
                member_key(key, window, "customer", values_a[0]),
            ]
            for other in others[1:]:
                assert stored_a != other
            assert (stored_a == others[0]) == (a == b)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["api", "api:v2", "usage:1"]),
            st.sampled_from(["acme", "globex", "a/b"]),
            st.sampled_from(["/v1/users", "/", "x,y"]),
            st.integers(-5, 5),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_each_event_counts_into_each_declared_view_exactly_once(
    rows: list[tuple[str, str, str, int]],
) -> None:
    """Whatever the events, each view item holds exactly the sum of the events of its key with its values, the
    views partition their key's total, and a finer view sums to its coarser ones."""
    views = parse_counter_views("api*=customer,route,customer+route;usage:*=customer")
    events = []
    for key, customer, route, delta in rows:
        dims = {"customer": customer, "route": route} if key.startswith("api") else {"customer": customer}
        events.append({"key": key, "delta": delta, "dims": dims})
    message = decode_message(json.dumps({"id": "p", "events": events}), WIRE_LIMITS, views=views)
    assert isinstance(message, Message)
    totals = message_totals(message, views=views).totals

    def value(item: str) -> int:
        return int(totals.get(item, {}).get("count", 0))

    for key in {row[0] for row in rows}:
        assert value(key) == sum(d for k, _, _, d in rows if k == key)
        rule = views.rule_for(key)
        assert rule is not None
        for view in rule.views:
            for customer, route in {(c, r) for k, c, r, _ in rows if k == key}:
                dims = {"customer": customer, "route": route}
                expected = sum(
                    d
                    for k, c, r, d in rows
                    if k == key and all({"customer": c, "route": r}[n] == dims[n] for n in view.dims)
                )
                assert value(view_item_key(view.name, key, tuple(dims[n] for n in view.dims))) == expected
            by_customer = sum(
                value(view_item_key("customer", key, (c,))) for c in {c for k, c, _, _ in rows if k == key}
            )
            assert by_customer == sum(d for k, _, _, d in rows if k == key)
        if key.startswith("api"):
            for customer in {c for k, c, _, _ in rows if k == key}:
                finer = sum(
                    value(view_item_key("customer+route", key, (customer, r)))
                    for r in {r for k, c, r, _ in rows if k == key and c == customer}
                )
                assert finer == value(view_item_key("customer", key, (customer,)))
    view_items = [item for item in totals if isinstance(item, str) and view_parts(item) is not None]
    assert all(isinstance(item, str) for item in totals)
    assert len(view_items) == len(set(view_items))


def test_every_code_a_dims_problem_names_is_a_dead_letter_code() -> None:
    codes = {views.INVALID_DIMENSION, views.TOO_MANY_DIMENSIONS, views.UNKNOWN_DIMENSION, views.MISSING_DIMENSION}
    codes |= {views.KEY_TOO_LONG, views.INVALID_RESET}
    assert codes <= {code.value for code in RejectCode}
