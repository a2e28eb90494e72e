"""``CounterReader``: the one read path of tally's counters, for applications, the CLI and the HTTP endpoint.

Every read of a counter goes through here (``tally get``/``top``, the read endpoint, the counter store's
``read_counters``/``read_series``, which delegate): a hot key's shard items are summed, always all
``MAX_SHARDS`` of them (so a changed shard count never hides or doubles anything), in the exact decimal
context (``tally.core.numbers.EXACT``: Python's default context would round a sum to 28 digits). Reads are
strongly consistent: a count read right after a batch committed includes it.

Which DynamoDB calls, and so which IAM actions (``ReaderPolicy`` in template.yaml grants exactly these):

- ``get`` and ``get_many``: ``BatchGetItem``, one per 100 items (a hot key is 16 items), the keys
  DynamoDB leaves unprocessed asked again (``tally.store.requests.batch_get``);
- ``series``: one ``Query`` per partition (one, or 16 for a hot key) over the sort-key range of the
  windows, paginated, and for hour and day windows one ``BatchGetItem`` of the key's item(s), whose ``w#``
  attributes hold the windows not yet moved off them, and for hours one more ``Query`` per partition over
  the days they fall in, whose items keep ended hours as ``w#`` attributes;
- ``top``: a ``Scan`` of the whole counters table (paginated): its cost grows with the table, so it is
  for operators and batch jobs, never for a page view.

It needs boto3 and msgspec (through the item schema), not the Lambda function's Powertools or tenacity:
an application embeds it as it embeds the producer library. botocore's errors are translated once, here
and in ``batch_get``, into ``tally.errors.StoreError`` (``RetryableStoreError`` for throttling).
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from tally.config import COUNTERS_TABLE, HOT_KEYS, WINDOW_RETENTION, WINDOWS
from tally.core.items import SHARD_SEPARATOR, make_item
from tally.core.numbers import EXACT
from tally.core.sharding import MAX_SHARDS, HotKeys, parse_hot_keys
from tally.core.windows import DAY_MS, UNITS, WindowSpec, WindowUnit, parse_window_spec
from tally.errors import ConfigurationError, InvalidReadError
from tally.reader.requests import MAX_SERIES_WINDOWS, check_key, default_bounds, series_starts, window_unit
from tally.reader.results import Counters, OperatorRecord, Ranked, Series, Window
from tally.store.requests import batch_get, scan_all_time_items, translate
from tally.store.schema import (
    PARTITION_KEY,
    SORT_KEY,
    counters_from_item,
    distinct_from_item,
    gauges_from_item,
    item_key,
    open_windows_from_item,
    operators_from_item,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from mypy_boto3_dynamodb.client import DynamoDBClient

_ZERO: Final = Decimal(0)


def key_of_partition(partition_key: str) -> str:
    """The counter key of an item's partition key (a shard item's ``<key>\\x1f<n>`` -> ``<key>``)."""
    return partition_key.split(SHARD_SEPARATOR, 1)[0]


def add_into(total: dict[str, Decimal], counters: Mapping[str, Decimal]) -> None:
    """Add ``counters`` to ``total`` in ``EXACT``: 16 shards of 38 digits read back as DynamoDB keeps them."""
    for name, value in counters.items():
        total[name] = EXACT.add(total.get(name, _ZERO), value)


def largest(totals: Mapping[str, Mapping[str, Decimal]], n: int, counter: str | None = None) -> list[Ranked]:
    """The ``n`` largest counters (of one name, if given), largest first; ties in key, then name, order."""
    ranked = [
        Ranked(key, name, value)
        for key, counters in totals.items()
        for name, value in counters.items()
        if counter is None or name == counter
    ]
    ranked.sort(key=lambda row: (-row.value, row.key, row.counter))
    return ranked[:n]


def _kept(unit: WindowUnit, start_ms: int, now_ms: int) -> bool:
    """Whether a window is still within its retention: one past it reads as empty, whether TTL has deleted
    its item yet (AWS: typically within 2 days) or its counters still wait on the key's item."""
    expires = unit.expires_at_s(start_ms)
    return expires is None or expires * 1000 > now_ms


class CounterReader:
    """Reads the counters table of one deployment.

    ``hot_keys`` and ``windows`` are the deployment's ``HotKeys`` and ``Windows`` parameters (a
    ``HotKeys``/``WindowSpec`` or their text): which keys are spread over shard items, and which windows
    are counted (a series of another window is refused rather than answered with zeros; without
    ``windows`` any of minute, hour, day may be asked for). The client is built when none is given.
    """

    def __init__(
        self,
        counters_table: str,
        *,
        client: DynamoDBClient | None = None,
        hot_keys: HotKeys | str = "",
        windows: WindowSpec | str | None = None,
        max_series_windows: int = MAX_SERIES_WINDOWS,
    ) -> None:
        if not counters_table:
            raise ConfigurationError("the counters table's name is empty")
        self.counters_table = counters_table
        self.client: DynamoDBClient = client if client is not None else boto3.client("dynamodb")
        self.hot_keys = parse_hot_keys(hot_keys) if isinstance(hot_keys, str) else hot_keys
        self.windows = parse_window_spec(windows) if isinstance(windows, str) else windows
        self.max_series_windows = max_series_windows

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, client: DynamoDBClient | None = None
    ) -> CounterReader:
        """From the variables the template gives its functions (and ``tally stack --env`` prints):
        ``TALLY_COUNTERS_TABLE``, ``TALLY_HOT_KEYS``, ``TALLY_WINDOWS`` (with ``TALLY_WINDOW_RETENTION``, past
        which a window reads empty)."""
        env = os.environ if environ is None else environ
        windows = env.get(WINDOWS)
        if not env.get(COUNTERS_TABLE):
            raise ConfigurationError(f"missing environment variable(s): {COUNTERS_TABLE}")
        try:
            return cls(
                env[COUNTERS_TABLE],
                client=client,
                hot_keys=env.get(HOT_KEYS, ""),
                windows=None if windows is None else parse_window_spec(windows, env.get(WINDOW_RETENTION, "")),
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from exc

    # ------------------------------------------------------------------------------------------- reads
    def get(self, key: str) -> Counters:
        """The all-time counters of ``key``."""
        return self.get_many([key])[key]

    def get_many(self, keys: Iterable[str]) -> dict[str, Counters]:
        """The all-time counters of each key, in the order given (a key asked twice is read once)."""
        wanted = list(dict.fromkeys(check_key(key) for key in keys))
        item_keys = [
            item_key(make_item(key, shard=shard))
            for key in wanted
            for shard in (range(MAX_SHARDS) if self.hot_keys.is_hot(key) else range(1))
        ]
        totals: dict[str, dict[str, Decimal]] = {key: {} for key in wanted}
        gauges: dict[str, dict[str, dict[str, Decimal | str]]] = {}
        operators: dict[str, dict[str, dict[str, OperatorRecord]]] = {}
        distinct: dict[str, dict[str, Decimal]] = {key: {} for key in wanted}
        for item in batch_get(self.client, self.counters_table, item_keys):
            partition = item[PARTITION_KEY]["S"]
            add_into(totals[key_of_partition(partition)], counters_from_item(item))
            add_into(distinct[key_of_partition(partition)], distinct_from_item(item))  # a hot key's on its shards
            if partition in totals:  # gauges and operator records live on the key's own item, never a shard
                gauges[partition] = gauges_from_item(item)
                operators[partition] = {
                    kind: {name: OperatorRecord(*record) for name, record in records.items()}
                    for kind, records in operators_from_item(item).items()
                }
        return {
            key: Counters(key, totals[key], gauges.get(key, {}), distinct[key], operators.get(key, {}))
            for key in wanted
        }

    def series(
        self,
        key: str,
        window: str,
        from_ms: int | None = None,
        to_ms: int | None = None,
        *,
        now_ms: int | None = None,
    ) -> Series:
        """Every ``window`` of ``key`` from the one holding ``from_ms`` to the one holding ``to_ms``
        (epoch milliseconds; default: the 24 windows up to now), with no gaps."""
        check_key(key)
        unit = window_unit(window, self.windows)
        clock = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        start_ms, end_ms = default_bounds(unit, from_ms, to_ms, clock)
        starts = series_starts(unit, start_ms, end_ms, self.max_series_windows)
        first, last = unit.window_id(starts[0]), unit.window_id(starts[-1])
        found: dict[str, dict[str, Decimal]] = {}
        members: dict[str, dict[str, Decimal]] = {}
        shards = range(MAX_SHARDS) if self.hot_keys.is_hot(key) else range(1)
        for shard in shards:
            partition = item_key(make_item(key, shard=shard))[PARTITION_KEY]
            for item in self._query(partition, first, last):
                add_into(found.setdefault(item[SORT_KEY]["S"], {}), counters_from_item(item))
                add_into(members.setdefault(item[SORT_KEY]["S"], {}), distinct_from_item(item))
        if unit.on_key_item:
            # Windows not yet moved off the key's item(s) (``tally.store.windows``): one BatchGetItem of them;
            # and ended hours kept on their day's item (a ``Query`` of the days they fall in, per partition).
            wanted = {unit.window_id(start) for start in starts}
            key_items = [item_key(make_item(key, shard=shard)) for shard in shards]
            holders = list(batch_get(self.client, self.counters_table, key_items))
            if unit.duration_ms < DAY_MS:
                day = WindowUnit("day", UNITS["day"][0], DAY_MS, None)
                first_day, last_day = day.window_id(day.start_ms(starts[0])), day.window_id(day.start_ms(starts[-1]))
                for shard in shards:
                    partition = item_key(make_item(key, shard=shard))[PARTITION_KEY]
                    holders.extend(self._query(partition, first_day, last_day))
            for item in holders:
                for window_id, counters in open_windows_from_item(item).items():
                    if window_id in wanted:
                        add_into(found.setdefault(window_id, {}), counters)
        windows = tuple(
            Window(start, found.get(unit.window_id(start), {}), members.get(unit.window_id(start), {}))
            if _kept(unit, start, clock)
            else Window(start, {}, {})
            for start in starts
        )
        return Series(key, unit.name, windows)

    def top(self, n: int = 10, counter: str | None = None) -> list[Ranked]:
        """The ``n`` largest all-time counters (of one name, if given): a ``Scan`` of the whole table."""
        if n < 1:
            raise InvalidReadError("top needs n >= 1")
        return largest(self.all_time_totals(), n, counter)

    def all_time_totals(self) -> dict[str, dict[str, Decimal]]:
        """Every key's all-time counters, shards summed (a ``Scan``; window items are read and skipped)."""
        totals: dict[str, dict[str, Decimal]] = {}
        for item in scan_all_time_items(self.client, self.counters_table):
            add_into(totals.setdefault(key_of_partition(item[PARTITION_KEY]["S"]), {}), counters_from_item(item))
        return totals

    # ----------------------------------------------------------------------------------------- DynamoDB
    def _query(self, partition: Mapping[str, Any], first: str, last: str) -> Iterator[Mapping[str, Any]]:
        kwargs: dict[str, Any] = {
            "TableName": self.counters_table,
            "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last",
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#sk": SORT_KEY},
            "ExpressionAttributeValues": {":pk": partition, ":first": {"S": first}, ":last": {"S": last}},
            "ConsistentRead": True,
        }
        while True:
            try:
                response = self.client.query(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc) from exc
            yield from response.get("Items", [])
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
