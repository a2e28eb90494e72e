"""``tally.reader``: the one read path (applications, ``tally get``/``top``, the HTTP endpoint), on moto.

One key, many keys (one ``BatchGetItem`` per 100 items), a series of windows, the top N; hot-key shards
summed, exact decimals, input checked before anything is sent.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest

from tally.core.windows import HOUR_MS
from tally.errors import ConfigurationError, InvalidReadError
from tally.reader import CounterReader, Counters, Ranked, Window, check_key, largest, parse_time_ms
from tally.reader.dynamodb import key_of_partition
from tally_local.kit.calls import RECORDER
from tally_local.template import load_template, table_definitions
from tests.support.imports import loaded_by

TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
DAY0 = 4_102_444_800_000  # 2100-01-01T00:00Z


@pytest.mark.parametrize(
    ("partition", "key"),
    [("page:/home", "page:/home"), ("page:/home\x1f3", "page:/home"), ("a\x1f12", "a"), ("", "")],
)
def test_shard_items_belong_to_their_key(partition: str, key: str) -> None:
    assert key_of_partition(partition) == key


TOTALS = {
    "a": {"count": Decimal(5), "revenue": Decimal("99.5")},
    "b": {"count": Decimal(7)},
    "c": {"count": Decimal(5), "revenue": Decimal("0.1")},
}


@pytest.mark.parametrize(
    ("n", "counter", "expected"),
    [
        (2, "count", [("b", "count", "7"), ("a", "count", "5")]),
        (10, "revenue", [("a", "revenue", "99.5"), ("c", "revenue", "0.1")]),
        (3, None, [("a", "revenue", "99.5"), ("b", "count", "7"), ("a", "count", "5")]),
        (5, "nothing", []),
    ],
)
def test_largest_counters_first_ties_in_key_order(
    n: int, counter: str | None, expected: list[tuple[str, str, str]]
) -> None:
    assert largest(TOTALS, n, counter) == [Ranked(k, c, Decimal(v)) for k, c, v in expected]


@pytest.fixture
def dynamodb(mocked_aws: None) -> Any:
    client = boto3.client("dynamodb")
    client.create_table(**table_definitions(load_template(TEMPLATE))["CountersTable"].create_table_kwargs("c"))
    return client


def put(client: Any, pk: str, sk: str, **counters: str) -> None:
    item = {"pk": {"S": pk}, "sk": {"S": sk}} | {f"c#{name}": {"N": value} for name, value in counters.items()}
    client.put_item(TableName="c", Item=item)


def test_all_time_totals_sum_shards_and_skip_windows(dynamodb: Any) -> None:
    # GIVEN a plain key, a hot key written to its base item and two shards, and window items
    put(dynamodb, "plain", "all", count="3", revenue="0.30")
    put(dynamodb, "plain", "h#2026-11-22T03:00Z", count="3")
    put(dynamodb, "hot", "all", count="1")
    put(dynamodb, "hot\x1f2", "all", count="10")
    put(dynamodb, "hot\x1f7", "all", count="100", revenue="1")
    put(dynamodb, "hot\x1f7", "d#2026-11-22", count="100")
    # WHEN the table is read for tally top and the demo
    totals = CounterReader("c", client=dynamodb).all_time_totals()
    # THEN each key appears once, with its shards summed and no window counted
    assert totals == {
        "plain": {"count": Decimal(3), "revenue": Decimal("0.30")},
        "hot": {"count": Decimal(111), "revenue": Decimal(1)},
    }
    assert CounterReader("c", client=dynamodb).top(1) == [Ranked("hot", "count", Decimal(111))]


def test_get_sums_every_shard_of_a_hot_key_and_reads_zero_for_the_unknown(dynamodb: Any) -> None:
    # GIVEN a hot key on its base item and a shard the current HotKeys no longer writes to (N went down)
    put(dynamodb, "hot", "all", count="1")
    put(dynamodb, "hot\x1f15", "all", count="0.30000000000000000000000000000000000001")
    reader = CounterReader("c", client=dynamodb, hot_keys="hot=2")
    # WHEN read THEN every one of the 16 possible shards is summed, exactly
    assert reader.get("hot") == Counters("hot", {"count": Decimal("1.30000000000000000000000000000000000001")})
    # AND a key nobody counted is zero, not an error
    assert reader.get("never").value("count") == Decimal(0)
    assert reader.get("never").values == {}
    # AND without HotKeys the shards are not read (the deployment's HotKeys must be given)
    assert CounterReader("c", client=dynamodb).get("hot").value() == Decimal(1)


def test_get_many_asks_one_batch_get_item_per_100_items(dynamodb: Any) -> None:
    # GIVEN 150 plain keys and 2 hot keys (16 items each): 182 items
    for i in range(150):
        put(dynamodb, f"k{i:03d}", "all", count=str(i))
    put(dynamodb, "hot:a\x1f3", "all", count="7")
    reader = CounterReader("c", client=dynamodb, hot_keys="hot:*=4")
    keys = [f"k{i:03d}" for i in range(150)] + ["hot:a", "hot:b", "k000"]
    # WHEN they are read together
    with RECORDER.capture() as calls:
        found = reader.get_many(keys)
    # THEN two BatchGetItem calls (100 + 82 items), every key answered once, in the order asked
    assert [call.operation for call in calls] == ["BatchGetItem", "BatchGetItem"]
    assert list(found) == keys[:-1]
    assert found["k149"].value() == Decimal(149)
    assert found["hot:a"].values == {"count": Decimal(7)}
    assert found["hot:b"].values == {}


def test_a_series_has_every_window_in_order_shards_summed(dynamodb: Any) -> None:
    put(dynamodb, "site", "h#2100-01-01T00:00Z", count="2")
    put(dynamodb, "site\x1f3", "h#2100-01-01T00:00Z", count="0.5")
    put(dynamodb, "site", "h#2100-01-01T02:00Z", count="1")
    put(dynamodb, "site", "d#2100-01-01", count="9")
    reader = CounterReader("c", client=dynamodb, hot_keys="site=4", windows="hour,day")
    series = reader.series("site", "hour", DAY0 + 5, DAY0 + 3 * HOUR_MS)
    assert (series.key, series.window) == ("site", "hour")
    assert series.windows == (
        Window(DAY0, {"count": Decimal("2.5")}),
        Window(DAY0 + HOUR_MS, {}),
        Window(DAY0 + 2 * HOUR_MS, {"count": Decimal(1)}),
        Window(DAY0 + 3 * HOUR_MS, {}),
    )
    assert series.windows[0].start == "2100-01-01T00:00:00Z"
    # Without bounds: the 24 windows up to now
    default = reader.series("site", "hour", now_ms=DAY0 + 23 * HOUR_MS)
    assert len(default.windows) == 24
    assert default.windows[0].start_ms == DAY0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.get(""), "empty"),
        (lambda r: r.get("x" * 2001), "2001 bytes"),
        (lambda r: r.get("é" * 1001), "2002 bytes"),
        (lambda r: r.get("a\x1f1"), "U\\+001F"),
        (lambda r: r.get("\ud800"), "lone surrogate"),
        (lambda r: r.series("k", "week", 0, 1), "unknown window"),
        (lambda r: r.series("k", "minute", 0, 1), "not counted here"),
        (lambda r: r.series("k", "hour", 2 * HOUR_MS, 0), "from is after to"),
        (lambda r: r.series("k", "hour", 0, 10_000 * HOUR_MS), "10001 hour windows"),
        (lambda r: r.series("k", "day", 0, 253_402_300_800_000), "outside"),
        (lambda r: r.top(0), "n >= 1"),
    ],
)
def test_what_cannot_be_answered_is_refused_before_any_call(dynamodb: Any, call: Any, message: str) -> None:
    reader = CounterReader("c", client=dynamodb, windows="hour,day")
    with RECORDER.capture() as calls, pytest.raises(InvalidReadError, match=message):
        call(reader)
    assert calls == []


def test_check_key_accepts_what_a_producer_may_count() -> None:
    assert check_key("x" * 2000) == "x" * 2000
    assert check_key("page:/home?q=1#top 🙂") == "page:/home?q=1#top 🙂"


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("4102444800000", DAY0),
        ("2100-01-01T00:00:00Z", DAY0),
        ("2100-01-01T01:00:00+01:00", DAY0),
        ("2100-01-01T00:00:00.0019Z", DAY0 + 1),
    ],
)
def test_times_are_epoch_ms_or_iso_with_an_offset(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


@pytest.mark.parametrize("text", ["2100-01-01T00:00:00", "yesterday", "-5", "1e3", "253402300800000", "٣"])
def test_a_naive_or_unreadable_time_is_refused(text: str) -> None:
    with pytest.raises(InvalidReadError):
        parse_time_ms(text)


def test_from_environment_reads_the_functions_variables(dynamodb: Any) -> None:
    reader = CounterReader.from_environment(
        {"TALLY_COUNTERS_TABLE": "c", "TALLY_HOT_KEYS": "hot=4", "TALLY_WINDOWS": "day"}, client=dynamodb
    )
    assert (reader.counters_table, reader.hot_keys.is_hot("hot"), [u.name for u in reader.windows.units]) == (
        "c",
        True,
        ["day"],
    )
    # AND the windows' retention, past which a window reads empty (it may still wait on the key's item)
    kept = CounterReader.from_environment(
        {"TALLY_COUNTERS_TABLE": "c", "TALLY_WINDOWS": "hour", "TALLY_WINDOW_RETENTION": "hour=2"}, client=dynamodb
    )
    assert kept.windows is not None
    assert kept.windows.unit("hour").retention_ms == 2 * 86_400_000
    with pytest.raises(ConfigurationError, match="TALLY_COUNTERS_TABLE"):
        CounterReader.from_environment({}, client=dynamodb)
    with pytest.raises(ConfigurationError, match="bad hot key"):
        CounterReader.from_environment({"TALLY_COUNTERS_TABLE": "c", "TALLY_HOT_KEYS": "x=99"}, client=dynamodb)


def test_the_library_needs_no_lambda_dependencies() -> None:
    # Embedded in applications: importing it must not pull in the Lambda function's or the CLI's libraries.
    assert loaded_by("import tally.reader", ("aws_lambda_powertools", "tenacity", "click", "rich", "yaml")) == []
