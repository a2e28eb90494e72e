"""``tally notifications list`` and the reader library's ``NotificationReader``, on moto: every recorded crossing,
oldest first, as a table for people and as JSON (exact numbers) for scripts."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.core.thresholds import Crossing, Direction
from tally.errors import ConfigurationError
from tally.reader import NotificationReader
from tally.store.notifications import notification_item
from tally_local.template import load_template, table_definitions

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
CROSSINGS = [
    Crossing(
        "b" * 32, "usage:t", "calls", 1000, Direction.RISING, "m-9", Decimal(1050), Decimal(1050), 2_000, "d#1970-01-01"
    ),
    Crossing("a" * 32, "stock:1", "stock", 10, Direction.FALLING, "s-2", Decimal("9.5"), Decimal("9.5"), 1_000),
]


@pytest.fixture
def table(mocked_aws: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    dynamodb = boto3.client("dynamodb")
    dynamodb.create_table(**table_definitions(load_template(TEMPLATE))["NotificationsTable"].create_table_kwargs("n"))
    for crossing in CROSSINGS:
        dynamodb.put_item(TableName="n", Item=notification_item(crossing, 10**10))
    monkeypatch.setenv("TALLY_NOTIFICATIONS_TABLE", "n")
    return dynamodb


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_reader_lists_crossings_oldest_first_and_filters(table: Any) -> None:
    reader = NotificationReader.from_environment(client=table)
    assert [c.notification_id for c in reader.list()] == ["a" * 32, "b" * 32]
    assert [c.message_id for c in reader.list(key="usage:t")] == ["m-9"]
    assert [c.message_id for c in reader.list(counter="stock", since_ms=1_000)] == ["s-2"]
    assert reader.list(since_ms=3_000) == []
    (first, _) = reader.list()
    assert (first.level, first.direction, first.value, first.at_ms) == (10, Direction.FALLING, Decimal("9.5"), 1_000)


def test_the_reader_needs_a_table() -> None:
    with pytest.raises(ConfigurationError, match="TALLY_NOTIFICATIONS_TABLE"):
        NotificationReader.from_environment({})


def test_list_prints_a_table_and_exact_json(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # not a terminal: the table is never cut
    result = run("notifications", "list")
    assert result.exit_code == 0, result.output
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in result.output.splitlines() if "│" in line]
    assert rows == [  # every column --json has, but the id and the step value
        ["1970-01-01T00:00:01.000Z", "stock:1", "stock", "all", "10", "falling", "9.5", "s-2"],
        ["1970-01-01T00:00:02.000Z", "usage:t", "calls", "d#1970-01-01", "1000", "rising", "1050", "m-9"],
    ]
    listed = json.loads(run("notifications", "list", "--json", "--key", "stock:1").output, parse_float=Decimal)
    assert listed == [
        {
            "notification_id": "a" * 32,
            "key": "stock:1",
            "counter": "stock",
            "level": 10,
            "direction": "falling",
            "window": "all",
            "value": Decimal("9.5"),
            "step_value": Decimal("9.5"),
            "message_id": "s-2",
            "at": 1_000,
            "time": "1970-01-01T00:00:01.000Z",
        }
    ]


def test_list_without_a_table_says_how_to_give_one(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_NOTIFICATIONS_TABLE")
    result = run("notifications", "list")
    assert result.exit_code == 2
    assert "--stack NAME" in result.output
