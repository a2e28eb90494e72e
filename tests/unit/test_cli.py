"""``tally get``: a table for people, exactly a JSON object for scripts."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from tally.cli.main import cli, counters_json
from tests.support.moto_function import counters_on_moto

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def counters(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with counters_on_moto(
        monkeypatch,
        [
            {
                "pk": {"S": "shop:42"},
                "sk": {"S": "all"},
                "c#revenue": {"N": "0.1"},
                "c#orders": {"N": "3"},
                "max#peak_basket": {"N": "4.5"},
                "latest#lastPurchaseAt": {"S": "2026-11-24T20:00:00Z"},
                "latest_order#lastPurchaseAt": {"B": b"\x00" * 24},
                "dc#buyers": {"N": "2"},
            },
            {  # the hour window 2026-11-24T20:00Z: 1 buyer in it
                "pk": {"S": "shop:42"},
                "sk": {"S": "h#2026-11-24T20:00Z"},
                "c#orders": {"N": "1"},
                "dc#buyers": {"N": "1"},
            },
        ],
        markers_table=True,
    ):
        yield


def test_get_json_prints_exactly_an_object_of_counter_to_exact_value(counters: None) -> None:
    result = CliRunner().invoke(cli, ["get", "shop:42", "--json"])
    assert result.exit_code == 0, result.output
    assert result.output == '{"orders":3,"revenue":0.1}\n'
    assert json.loads(result.output, parse_float=Decimal) == {"orders": 3, "revenue": Decimal("0.1")}


def test_get_prints_a_table(counters: None) -> None:
    result = CliRunner().invoke(cli, ["get", "shop:42"])
    assert result.exit_code == 0, result.output
    assert "revenue" in result.output
    assert "0.1" in result.output


def test_get_gauges_prints_each_kind_and_name_exactly(counters: None) -> None:
    # GIVEN a key with counters and gauges WHEN its gauges are asked for, as JSON and as a table
    as_json = CliRunner().invoke(cli, ["get", "shop:42", "--gauges", "--json"])
    table = CliRunner().invoke(cli, ["get", "shop:42", "--gauges"])
    plain = CliRunner().invoke(cli, ["get", "shop:42", "--json"])
    # THEN the JSON is kind -> name -> value (numbers exact, a latest text as a string); counters unchanged
    assert as_json.output == '{"latest":{"lastPurchaseAt":"2026-11-24T20:00:00Z"},"max":{"peak_basket":4.5}}\n'
    assert "peak_basket" in table.output
    assert "4.5" in table.output
    assert plain.output == '{"orders":3,"revenue":0.1}\n'


def test_get_distinct_prints_each_sets_count_all_time_and_per_window(counters: None) -> None:
    # GIVEN a key with a distinct count beside its counters
    # WHEN its distinct counts are asked for, all-time and per hour, as JSON and as tables
    as_json = CliRunner().invoke(cli, ["get", "shop:42", "--distinct", "--json"])
    table = CliRunner().invoke(cli, ["get", "shop:42", "--distinct"])
    hours = ["--window", "hour", "--from", "2026-11-24T19:00Z", "--to", "2026-11-24T20:00Z"]
    series = CliRunner().invoke(cli, ["get", "shop:42", "--distinct", "--json", *hours])
    series_table = CliRunner().invoke(cli, ["get", "shop:42", "--distinct", *hours])
    plain = CliRunner().invoke(cli, ["get", "shop:42", "--json"])
    # THEN set -> members, exactly; the counters' answer is unchanged
    assert as_json.output == '{"buyers":2}\n'
    assert "buyers" in table.output
    assert "distinct counts" in table.output
    assert series.output == (
        '[{"start":"2026-11-24T19:00:00Z","distinct":{}},{"start":"2026-11-24T20:00:00Z","distinct":{"buyers":1}}]\n'
    )
    assert "buyers" in series_table.output
    assert plain.output == '{"orders":3,"revenue":0.1}\n'


def test_get_of_an_unknown_key_is_an_empty_object(counters: None) -> None:
    assert CliRunner().invoke(cli, ["get", "nope", "--json"]).output == "{}\n"


def test_get_without_configuration_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_COUNTERS_TABLE", raising=False)
    monkeypatch.delenv("TALLY_MARKERS_TABLE", raising=False)
    result = CliRunner().invoke(cli, ["get", "k"])
    assert result.exit_code != 0
    assert "TALLY_COUNTERS_TABLE" in result.output


def test_counters_json_never_goes_through_float() -> None:
    assert counters_json({"x": Decimal("0.30000000000000000000000000000000000001")}) == (
        b'{"x":0.30000000000000000000000000000000000001}'
    )
