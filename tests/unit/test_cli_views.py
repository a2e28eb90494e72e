"""``tally get KEY --by DIM``, ``tally top --view KEY[DIM]``, ``tally values KEY DIM``: a view's values in a window.

What it proves: each reads the view's items the store wrote (all-time, and one window with the ``w#`` part still on
the all-time item added to the moved window item), as a table for people and exact JSON for scripts; ``top`` ranks
by the counter asked for; ``values`` lists a dimension's values from a view holding it; and what cannot be asked is
a usage error naming why, before any read.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.core.items import CounterItem, view_item_key
from tally.store.schema import item_key
from tests.support.moto_function import counters_on_moto

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

DAY = "d#2026-11-24"


def view_item(view: str, values: tuple[str, ...], window: str = "all", **attributes: str) -> dict[str, Any]:
    primary = item_key(CounterItem(view_item_key(view, "api", values), window))
    return primary | {name: {"N": value} for name, value in attributes.items()}


@pytest.fixture
def views(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TALLY_COUNTER_VIEWS", "api*=customer,customer+route")
    monkeypatch.setenv("TALLY_WINDOWS", "hour,day")
    items = [
        # acme: 5 calls all-time, 3 of them on 2026-11-24 (2 moved to the day's item, 1 still on the all-time item)
        view_item("customer", ("acme",), **{"c#calls": "5", "w#" + DAY + "\x1fcalls": "1"}),
        view_item("customer", ("acme",), DAY, **{"c#calls": "2"}),
        view_item("customer", ("globex",), **{"c#calls": "9.5", "w#" + DAY + "\x1fcalls": "9.5"}),
        view_item("customer+route", ("acme", "/v1/users"), **{"c#calls": "5"}),
    ]
    with counters_on_moto(monkeypatch, items):
        yield


def run(*arguments: str) -> Any:
    return CliRunner().invoke(cli, list(arguments))


def test_get_by_prints_each_value_all_time_and_in_a_window_exactly(views: None) -> None:
    all_time = run("get", "api", "--by", "customer", "--json")
    day = run("get", "api", "--by", "customer", "--window", "day", "--at", "2026-11-24T12:00:00Z", "--json")
    table = run("get", "api", "--by", "customer+route")
    assert all_time.exit_code == 0, all_time.output
    assert json.loads(all_time.output, parse_float=Decimal) == {
        "key": "api",
        "view": "customer",
        "window": "all",
        "start": None,
        "rows": [
            {"dims": {"customer": "acme"}, "counters": {"calls": 5}},
            {"dims": {"customer": "globex"}, "counters": {"calls": Decimal("9.5")}},
        ],
    }
    assert json.loads(day.output, parse_float=Decimal)["rows"] == [
        {"dims": {"customer": "acme"}, "counters": {"calls": 3}},
        {"dims": {"customer": "globex"}, "counters": {"calls": Decimal("9.5")}},
    ]
    assert json.loads(day.output)["start"] == "2026-11-24T00:00:00Z"
    assert table.exit_code == 0, table.output
    assert "/v1/users" in table.output
    assert "route" in table.output


def test_top_view_ranks_the_values_by_the_counter(views: None) -> None:
    result = run("top", "--view", "api[customer]", "--window", "day", "--at", "2026-11-24T00:00:00Z", "--limit", "1")
    as_json = run("top", "--view", "api[customer]", "--counter", "calls", "--json", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert "globex" in result.output
    assert "acme" not in result.output
    assert [row["dims"]["customer"] for row in json.loads(as_json.output)["rows"]] == ["globex", "acme"]


def test_values_lists_a_dimensions_values_from_a_view_holding_it(views: None) -> None:
    assert json.loads(run("values", "api", "customer", "--json").output) == ["acme", "globex"]
    assert json.loads(run("values", "api", "route", "--json").output) == ["/v1/users"]  # from customer+route
    missing = run("values", "api", "region")
    assert missing.exit_code != 0
    assert "no view of 'api' has the dimension 'region'" in missing.output


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (["get", "api", "--by", "customer", "--at", "2026-11-24T00:00:00Z"], "give --window too"),
        (["get", "api", "--by", "customer", "--gauges"], "not with --gauges"),
        (["get", "api", "--at", "0"], "give --by"),
        (["get", "api", "--by", "cust omer"], "is not a view"),
        (["top", "--view", "api"], "expected KEY[DIM]"),
        (["top", "--window", "day"], "give --view"),
        (["top", "3", "--limit", "4"], "not two different numbers"),
    ],
)
def test_what_cannot_be_asked_is_refused_with_its_reason(views: None, arguments: list[str], reason: str) -> None:
    result = run(*arguments)
    assert result.exit_code != 0
    assert reason in result.output
