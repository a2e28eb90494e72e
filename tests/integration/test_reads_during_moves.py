"""A series read while a window move commits, on DynamoDB Local.

A series of hour, day or month windows adds what is still on the key's item(s) to what moved to window items
(``tally.store.windows``). The reader makes several requests; a move that commits between two of them
must never make a window count zero times or twice. Each test injects the move before the reader's n-th
request, for every n the read makes, so that every interleaving of one move with one read is tried.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.model import SourceRecord
from tally.core.sharding import parse_hot_keys
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_spec
from tally.errors import RetryableStoreError
from tally.reader.dynamodb import CounterReader
from tally.store.schema import WINDOW_MOVES
from tally.store.windows import DynamoDBWindowMover
from tests.support.pipeline import make_pipeline, make_store, plenty

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

DAY0 = 4_102_444_800_000  # 2100-01-01T00:00Z
H = HOUR_MS
WINDOWS = parse_window_spec("hour,day,month", "hour=90,day=0")
NEXT_DAY = DAY0 + DAY_MS + 5 * 60_000
NEXT_MONTH = DAY0 + 31 * DAY_MS + 5 * 60_000  # January has ended


def count(tables: DynamoDBTables, key: str, hot: str = "") -> None:
    """Count 5 on ``key`` in hour 3 of DAY0 (and so in DAY0 and its month), left on the key's item(s)."""
    store = make_store(tables.client, tables.counters_table, tables.markers_table)
    pipeline, _ = make_pipeline(store, windows=WINDOWS, hot_keys=parse_hot_keys(hot), move_windows=False)
    records = [
        SourceRecord(f"{key}-{n}", f'{{"id":"{key}-{n}","key":"{key}","delta":1,"ts":{DAY0 + 3 * H + n}}}', DAY0)
        for n in range(5)
    ]
    result = pipeline.process(records, DAY0 + 3 * H + 10, plenty)
    assert result.failed_record_ids == ()


def move_all(tables: DynamoDBTables, now_ms: int = NEXT_DAY) -> Callable[[], None]:
    """The move of every ended window off every key item (``tally windows close`` at ``now_ms``)."""

    def close() -> None:
        mover = DynamoDBWindowMover(tables.client, tables.counters_table, WINDOWS)
        moved.append(mover.close_all(now_ms).windows)

    def move() -> None:
        # On a thread of its own, as another container's move would be (and so that the IAM contract
        # does not take the mover's calls for the reader's).
        thread = threading.Thread(target=close)
        thread.start()
        thread.join()
        assert moved[-1] > 0

    moved: list[int] = []
    return move


def before_request(client: DynamoDBClient, nth: int, action: Callable[[], None]) -> list[str]:
    """Run ``action`` just before the ``nth`` request ``client`` sends; returns the operations sent."""
    sent: list[str] = []

    def before(model: Any, **_: Any) -> None:
        sent.append(model.name)
        if len(sent) == nth:
            action()

    client.meta.events.register("before-call.dynamodb", before)
    return sent


def requests_of_a_read(
    dynamodb_local: DynamoDBLocal, tables: DynamoDBTables, window: str, hot: str, now_ms: int
) -> int:
    """How many requests a quiet series read of ``window`` makes (on a key nothing is counted on)."""
    client = dynamodb_local.client()
    sent = before_request(client, 0, lambda: None)
    reader = CounterReader(tables.counters_table, client=client, hot_keys=hot, windows=WINDOWS)
    reader.series("k-quiet", window, DAY0, DAY0 + DAY_MS - 1, now_ms=now_ms)
    return len(sent)


@pytest.mark.parametrize(
    ("window", "hot"),
    [("day", ""), ("hour", ""), ("month", ""), ("day", "k*=4"), ("hour", "k*=4"), ("month", "k*=4")],
)
def test_a_series_read_counts_each_window_once_whatever_request_a_move_commits_before(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables, window: str, hot: str
) -> None:
    now = NEXT_MONTH if window == "month" else NEXT_DAY  # the window has ended: the move takes it
    requests = requests_of_a_read(dynamodb_local, ddb_tables, window, hot, now)
    assert requests >= 2
    # One more position than a quiet read makes: a read that starts over makes more requests.
    for nth in range(1, requests + 2):
        # GIVEN 5 counted in hour 3 of a day, still on the key's item(s), and a read on its own client
        key = f"k{window}{nth}"
        count(ddb_tables, key, hot)
        client = dynamodb_local.client()
        # WHEN the move of the ended hour and day (and month) commits just before the read's nth request
        before_request(client, nth, move_all(ddb_tables, now))
        reader = CounterReader(ddb_tables.counters_table, client=client, hot_keys=hot, windows=WINDOWS)
        series = reader.series(key, window, DAY0, DAY0 + DAY_MS - 1, now_ms=now)
        # THEN the window holding the 5 reads 5, and every other reads nothing
        found = {w.start_ms: w.values.get("count", Decimal(0)) for w in series.windows if w.values}
        start = DAY0 + 3 * H if window == "hour" else DAY0
        assert found == {start: Decimal(5)}, f"move before request {nth}"


def test_a_read_that_moves_keep_interrupting_fails_as_retryable_instead_of_guessing(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN a key whose item another writer's moves keep changing between every two of the reader's requests
    count(ddb_tables, "busy")

    def bump() -> None:
        thread = threading.Thread(
            target=ddb_tables.client.update_item,
            kwargs={
                "TableName": ddb_tables.counters_table,
                "Key": {"pk": {"S": "busy"}, "sk": {"S": "all"}},
                "UpdateExpression": "ADD #moves :one",
                "ExpressionAttributeNames": {"#moves": WINDOW_MOVES},
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            },
        )
        thread.start()
        thread.join()

    client = dynamodb_local.client()
    client.meta.events.register("before-call.dynamodb.BatchGetItem", lambda **_: bump())
    reader = CounterReader(ddb_tables.counters_table, client=client, windows=WINDOWS)

    # WHEN it is read, THEN the read gives up after MAX_SERIES_ATTEMPTS as retryable (the endpoint's 503)
    with pytest.raises(RetryableStoreError, match="window moves kept committing"):
        reader.series("busy", "day", DAY0, DAY0 + DAY_MS - 1, now_ms=NEXT_DAY)
    # AND once they stop, the same read is exact
    quiet = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, windows=WINDOWS)
    assert quiet.series("busy", "day", DAY0, DAY0, now_ms=NEXT_DAY).windows[0].values == {"count": Decimal(5)}
