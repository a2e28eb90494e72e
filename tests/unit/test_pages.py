"""The journal's increments pages: exact round trips, counter names once a page, view items named compactly, the
layout compressed, pages of every earlier shape readable."""

from __future__ import annotations

import json
import zlib
from decimal import Decimal
from typing import Any, Literal

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.core.decode import decode_message
from tally.core.items import SHARD_SEPARATOR, ItemKey, make_item, view_item_key, window_counter
from tally.core.model import Message
from tally.core.plan import MAX_JOURNAL_PAGE_BYTES, plan_apply_chunks
from tally.core.views import View
from tally.core.write_cost import planner_page_bytes
from tally.store.pages import decode_page, encode_page

PLAIN_PAGE = bytes.fromhex(
    "9395a3617069a3616c6c00c09192a5636f756e74a13395a3617069b36823323032362d31322d30325430383a30305a00ce6ab13b809192"
    "a5636f756e74a3312e3595a3686f74a3616c6c02c09192a16ea22d31"
)
"""A page without view items as the store wrote it before it listed counter names once a page: a list of rows."""
PLAIN_INCREMENTS = {
    "api": {"count": Decimal(3)},
    make_item("api", "h#2026-12-02T08:00Z", 0, 1_790_000_000): {"count": Decimal("1.5")},
    make_item("hot", "all", 2): {"n": Decimal(-1)},
}
VIEW_ROWS_PAGE = bytes.fromhex(
    "9295ba1f637573746f6d65722b726f7574651f6170691f63311f2f7231a3616c6c00c09192a5636f756e74a13295a3617069a3616c6c00c0"
    "9192a5636f756e74a132"
)
"""A page with a view item written before view groups: the view item's whole derived key in a row."""
VIEW_GROUPS_PAGE = bytes.fromhex(
    "82a16b9195a3617069a3616c6c00c09292a563616c6c73a13392ba1f6823323032362d31322d30325430383a30305a1f63616c6c73a133"
    "a1769194a8637573746f6d6572a361706992a563616c6c73a562797465739295a26331a3616c6c00c0919200a3312e3595a26332a361"
    "6c6c00c0929200a1329201a22d34"
)
"""A page with view groups written before counter names were listed once a page: its rows with their names (``k``),
its groups with theirs (``v``)."""
VIEW_GROUPS_INCREMENTS = {
    "api": {"calls": Decimal(3), window_counter("h#2026-12-02T08:00Z", "calls"): Decimal(3)},
    view_item_key("customer", "api", ("c1",)): {"calls": Decimal("1.5")},
    view_item_key("customer", "api", ("c2",)): {"calls": Decimal(2), "bytes": Decimal(-4)},
}
NAMED_PLAIN_PAGE = bytes.fromhex(
    "940292a5636f756e74a16e9396a3617069a3616c6c00c0910091a13396a3617069b36823323032362d31322d30325430383a30305a00ce6ab1"
    "3b80910091a3312e3596a3686f74a3616c6c02c0910191a22d3190"
)
"""``PLAIN_INCREMENTS`` as the store wrote them when pages listed their names once, before it compressed them."""
NAMED_VIEW_PAGE = bytes.fromhex(
    "940293a563616c6c73ba1f6823323032362d31322d30325430383a30305a1f63616c6c73a562797465739196a3617069a3616c6c00c09200"
    "0192a133a1339193a8637573746f6d6572a36170699296a26331a3616c6c00c0910091a3312e3596a26332a3616c6c00c092000292a132a2"
    "2d34"
)
"""``VIEW_GROUPS_INCREMENTS`` the same way."""


def layout(page: bytes) -> bytes:
    """A page's layout, decompressed (``tally.store.pages``: ``[3, zlib(layout)]``)."""
    version, compressed = msgspec.msgpack.decode(page)
    assert version == 3
    return zlib.decompress(compressed)


@pytest.mark.parametrize(
    ("page", "increments"),
    [
        (PLAIN_PAGE, PLAIN_INCREMENTS),
        (VIEW_GROUPS_PAGE, VIEW_GROUPS_INCREMENTS),
        (NAMED_PLAIN_PAGE, PLAIN_INCREMENTS),
        (NAMED_VIEW_PAGE, VIEW_GROUPS_INCREMENTS),
    ],
    ids=["rows", "rows and view groups", "names once", "names once and view groups"],
)
def test_a_page_written_before_it_was_compressed_still_reads(
    page: bytes, increments: dict[ItemKey, dict[str, Decimal]]
) -> None:
    # a journal batch another container left, finished by this one
    assert decode_page(page) == increments
    assert decode_page(encode_page(increments)) == increments


class _EarlierViewPage(msgspec.Struct, frozen=True):
    k: list[tuple[str, str, int, int | None, list[tuple[str, str]]]] = msgspec.field(default_factory=list)
    v: list[tuple[str, str, list[str], list[tuple[str, str, int, int | None, list[tuple[int, str]]]]]] = msgspec.field(
        default_factory=list
    )


EARLIER_DECODERS = {
    # the released code's (tests/support/released.py): a list of rows
    "released": msgspec.msgpack.Decoder(list[tuple[str, str, int, int | None, list[tuple[str, str]]]]),
    # the code before names were listed once: that, or a map of rows and view groups (a map's unknown fields ignored)
    "view groups": msgspec.msgpack.Decoder(
        list[tuple[str, str, int, int | None, list[tuple[str, str]]]] | _EarlierViewPage
    ),
    # the code before pages were compressed (41e8fdb): names once, the layout in the page itself, led by 2
    "names once": msgspec.msgpack.Decoder(
        tuple[
            Literal[2],
            list[str],
            list[tuple[str, str, int, int | None, list[int], list[str]]],
            list[tuple[str, str, list[tuple[str, str, int, int | None, list[int], list[str]]]]],
        ]
    ),
}


@pytest.mark.parametrize("decoder", EARLIER_DECODERS.values(), ids=EARLIER_DECODERS.keys())
def test_code_written_before_pages_were_compressed_fails_on_such_a_page_rather_than_reading_it_empty(
    decoder: msgspec.msgpack.Decoder[Any],
) -> None:
    # a batch this code left, met by a container of earlier code during a deploy or after a rollback: were the page
    # read as no increments, that container would finish the batch by counting nothing
    for increments in (PLAIN_INCREMENTS, VIEW_GROUPS_INCREMENTS):
        with pytest.raises(msgspec.ValidationError):
            decoder.decode(encode_page(increments))


def test_a_page_written_before_view_groups_still_reads() -> None:
    assert decode_page(VIEW_ROWS_PAGE) == {
        view_item_key("customer+route", "api", ("c1", "/r1")): {"count": Decimal(2)},
        "api": {"count": Decimal(2)},
    }


def test_a_pages_counter_names_are_written_once_whatever_keys_carry_them() -> None:
    # GIVEN a chunk of 98 keys (a journal chunk's most), each with two counters and the hour's and day's riding on it
    names = ["units", "cost"]
    windowed = [*names, *(window_counter(w, n) for w in ("h#2026-12-02T08:00Z", "d#2026-12-02") for n in names)]
    increments = {
        f"usage:tenant-{i:04d}": dict(zip(windowed, [Decimal(i), Decimal(i) / 8] * 3, strict=True)) for i in range(98)
    }
    page = encode_page(increments)
    assert decode_page(page) == increments
    # THEN each name is in its layout once, and a key's row costs its key, its deltas and a byte a counter: 167 bytes
    # a key when each row spelled its names, under 70 now
    for name in windowed:  # each a msgpack string of under 32 bytes: its length in its first byte
        assert layout(page).count(bytes([0xA0 + len(name.encode())]) + name.encode()) == 1
    assert len(layout(page)) < 98 * 70
    # AND compressed, the page is under half its layout (the keys share a prefix, each window repeats the all-time
    # delta)
    assert len(page) < len(layout(page)) / 2


def test_a_page_of_a_chunk_cut_at_the_planners_most_fits_in_an_item() -> None:
    # GIVEN chunks the planner cuts at its bound on a page (MAX_JOURNAL_PAGE_BYTES, by page_entry_bytes), of the
    # counters that bound fits worst: every name distinct and short, every delta a 45-character number
    widest = Decimal("-1.2345678901234567890123456789012345678E-120")
    increments = {f"k{i}": {f"{j}x{i}": widest for j in range(500)} for i in range(40)}
    chunks = plan_apply_chunks(increments)
    assert max(map(planner_page_bytes, chunks)) > 0.98 * MAX_JOURNAL_PAGE_BYTES  # at the planner's most
    # THEN each page, as the store encodes it, fits in a DynamoDB item (400 KB) with room for its key and lease
    for chunk in chunks:
        assert len(encode_page(chunk)) < 400 * 1024 - 1024


def test_a_view_item_is_named_by_its_values_once_its_view_and_key_are_written() -> None:
    # 50 customers of one key, each item with its all-time counter and the hour's and day's riding on it: the view
    # and the key once, each item by its value. Shorter than the same counts published as keys of their own
    # (api/customer=c<i>, which a producer without views sends) by each hand key's "api/customer=" (13 bytes) less a
    # few; the counter names are once a page in both.
    names = ["calls", window_counter("h#2026-12-02T08:00Z", "calls"), window_counter("d#2026-12-02", "calls")]
    views = {view_item_key("customer", "api", (f"c{i}",)): dict.fromkeys(names, Decimal(i + 1)) for i in range(50)}
    by_hand = {f"api/customer=c{i}": dict.fromkeys(names, Decimal(i + 1)) for i in range(50)}
    assert decode_page(encode_page(views)) == views
    assert len(layout(encode_page(views))) <= len(layout(encode_page(by_hand))) - 50 * 10
    # one counter and no window: the same
    views = {view_item_key("customer", "api", (f"c{i}",)): {"calls": Decimal(i + 1)} for i in range(50)}
    by_hand = {f"api/customer=c{i}": {"calls": Decimal(i + 1)} for i in range(50)}
    assert len(layout(encode_page(views))) <= len(layout(encode_page(by_hand))) - 50 * 10


def test_a_groups_items_may_each_have_counters_of_their_own() -> None:
    increments = {
        view_item_key("route", "api", ("/a",)): {"calls": Decimal(1)},
        view_item_key("route", "api", ("/b",)): {"bytes": Decimal("2.5"), "calls": Decimal(3)},
        make_item(view_item_key("route", "api", ("/a",)), "d#2026-12-02", 2, 1_790_000_000): {"bytes": Decimal(-4)},
        "api": {"calls": Decimal(4), "bytes": Decimal("2.5")},
    }
    assert decode_page(encode_page(increments)) == increments


def test_a_key_spelling_a_view_items_values_stays_its_own_item() -> None:
    # a published key equal to a view item's values, its label, or its view's name: four items, four rows
    increments = {
        "c1": {"count": Decimal(1)},
        "api[customer=c1]": {"count": Decimal(2)},
        "customer": {"count": Decimal(3)},
        view_item_key("customer", "api", ("c1",)): {"count": Decimal(4)},
        view_item_key("customer", "c1", ("api",)): {"count": Decimal(5)},
    }
    assert decode_page(encode_page(increments)) == increments


@pytest.mark.parametrize(
    "key",
    ["\x1fcustomer\x1fapi\x1fc1", "api\x1fv\x1fcustomer", "api\x1f3", "c1\x1f/r1"],
    ids=["item", "partition", "shard", "values"],
)
def test_a_published_key_that_spells_another_items_name_stays_refused(key: str) -> None:
    # a view item's key, a view's partition, a shard's, a group row's values: none reaches a page as a key
    body = json.dumps({"id": "m", "key": key, "delta": 1})
    rejection = decode_message(body)
    assert not isinstance(rejection, Message)
    assert rejection.code == "invalid_key"


# ---------------------------------------------------------------------------------------------- properties
texts = st.text(
    st.characters(blacklist_characters=SHARD_SEPARATOR, blacklist_categories=("Cs",)), min_size=1, max_size=6
)
views = st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,4}", fullmatch=True), min_size=1, max_size=3, unique=True).map(View.of)


# Built once, not at each draw (a strategy built in a draw is validated and analysed again every time).
WINDOW_IDS = st.sampled_from(("all", "h#2026-12-02T08:00Z", "d#2026-12-02"))
EXPIRES = st.none() | st.integers(0, 2**40)
SHARDS = st.integers(0, 8)


@st.composite
def item_keys(draw: st.DrawFn) -> ItemKey:
    key = draw(texts)
    if draw(st.booleans()):
        view = draw(views)
        key = view_item_key(view.name, key, tuple(draw(texts) for _ in view.dims))
    window = draw(WINDOW_IDS)
    expires = None if window == "all" else draw(EXPIRES)
    return make_item(key, window, draw(SHARDS), expires)


numbers = st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**30), max_value=10**30)


@given(st.dictionaries(item_keys(), st.dictionaries(texts, numbers, min_size=1, max_size=3), max_size=30))
def test_every_page_reads_back_exactly(increments: dict[ItemKey, dict[str, Decimal]]) -> None:
    """Any mix of keys', shards', windows' and view items' increments reads back as written: no two items merge,
    every delta exact."""
    assert decode_page(encode_page(increments)) == increments
