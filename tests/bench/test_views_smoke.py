"""``bench.views`` at a tiny size: every load counts exactly (each view read back by a ``Query``), and its cost has
the shape docs/explanation/views.md says: published one event a message, three views cost less than the three
keys published by hand (a marker share per event instead of four); packed, the same items are written either way
(the meter's bill per class of item says so), and the whole bill is priced beside the write units."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.metered_load import measure_each
from bench.views import LOADS, measure

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration

EVENTS = 200
CUSTOMERS = 10


def test_views_cost_less_than_the_same_keys_published_by_hand(dynamodb_local: DynamoDBLocal) -> None:
    rows = measure_each(dynamodb_local, LOADS, measure, EVENTS, CUSTOMERS)
    assert all(row["exact"] for row in rows.values()), rows
    cost = {name: row["write_units_per_event"] for name, row in rows.items()}
    assert cost["0 views, single"] < cost["1 view, single"] < cost["3 views, single"] < cost["3 keys by hand, single"]
    assert rows["3 keys by hand, single"]["messages"] == 4 * rows["3 views, single"]["messages"] == 4 * EVENTS
    assert rows["3 keys by hand, packed"]["messages"] == rows["3 views, packed"]["messages"]
    assert cost["3 views, packed"] <= cost["3 keys by hand, packed"]
    # the same items either way: each view's items cost what the hand keys of its family cost, and the markers alike
    views, by_hand = rows["3 views, packed"]["by_class"], rows["3 keys by hand, packed"]["by_class"]
    for family in ("customer", "route", "customer+route"):
        assert views[f"view item, {family}"]["write_units"] == by_hand[f"hand key, {family}"]["write_units"]
    assert views["marker block (numbered ids)"] == by_hand["marker block (numbered ids)"]
    # and the whole bill (DynamoDB, Lambda, SQS) is priced for every load, views never dearer than keys by hand
    for mode in ("single", "packed"):
        assert 0 < rows[f"3 views, {mode}"]["usd_per_million"] <= rows[f"3 keys by hand, {mode}"]["usd_per_million"]
    assert (
        rows["3 keys by hand, single"]["sqs_requests_per_million"]
        == 4 * rows["3 views, single"]["sqs_requests_per_million"]
    )
