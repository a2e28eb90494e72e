"""Broken variants of the series read during window moves and of markers past their horizon, under the chaos harness (``tally_local.chaos.window_reads``,
``tally_local.chaos.horizon``): the run must fail when either fix is undone.

- a reader whose series makes the three requests of the code before the fix (window items, key items, the
  days that keep hours), with nothing telling it a window move committed between them;
- a journal whose missing header fails the batch (``StoreError``), as ``CommitProtocol.resolve`` did before
  the fix, so that a block marker naming a batch TTL deleted fails its batch on every delivery.

Each runs on a focused configuration (``tally_local.chaos.config.focused``), ``WINDOW_READS`` and ``HORIZON``,
whose production runs are checked here. A read spanning a move shows the three-request read wrong only when
the moved windows held acknowledged counts (a key's first batch moves windows nothing acknowledged yet): the
focused window run caught it in 9 seeds of 10 (4 s each), so the broken reader gets up to three seeds.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.windows import WindowUnit, parse_window_spec, unit_named
from tally.errors import StoreError
from tally.reader.dynamodb import CounterReader, add_into
from tally.store.journal import DynamoDBJournal
from tally.store.requests import batch_get
from tally.store.schema import header_id, open_windows_from_item
from tally_local.chaos.config import SMOKE, focused
from tests.support.chaos import rewired, run_on, situations_missing

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from decimal import Decimal

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.core.ledger import BatchRecord
    from tally_local.chaos.config import ChaosConfig
    from tally_local.chaos.harness import Tables
    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

# The chaos run archives to a moto server of its own (tally_local.chaos.archive).
pytestmark = [pytest.mark.integration, pytest.mark.moto]


class ThreeRequestSeries(CounterReader):
    """BROKEN on purpose: the series read of three requests (window items, then key items, then the days
    keeping hours), which a window move committing between two requests makes count a window 0 or 2 times."""

    def _series_beside_moves(
        self,
        unit: WindowUnit,
        starts: Sequence[int],
        partitions: Sequence[Mapping[str, Any]],
        key_items: Sequence[Mapping[str, Any]],
    ) -> tuple[dict[str, dict[str, Decimal]], dict[str, dict[str, Decimal]]]:
        found, members = self._window_items(partitions, unit.window_id(starts[0]), unit.window_id(starts[-1]))
        # Windows not yet moved off the key's item(s) (``tally.store.windows``): one BatchGetItem of them;
        # and ended hours kept on their day's item (a ``Query`` of the days they fall in, per partition).
        wanted = {unit.window_id(start) for start in starts}
        holders = list(batch_get(self.client, self.counters_table, key_items))
        if unit.name == "hour":
            day = unit_named("day")
            first_day, last_day = day.window_id(day.start_ms(starts[0])), day.window_id(day.start_ms(starts[-1]))
            for partition in partitions:
                holders.extend(self._query(partition, first_day, last_day))
        for item in holders:
            for window_id, counters in open_windows_from_item(item).items():
                if window_id in wanted:
                    add_into(found.setdefault(window_id, {}), counters)
        return found, members


def three_request_reader(client: DynamoDBClient, tables: Tables, config: ChaosConfig) -> CounterReader:
    spec = parse_window_spec(config.windows, config.window_retention)
    return ThreeRequestSeries(tables.counters, client=client, hot_keys=config.hot_keys, windows=spec)


class JournalFailingOnMissingHeaders(DynamoDBJournal):
    """BROKEN on purpose: a missing journal header fails the batch, as ``resolve`` once did."""

    def read(self, batch_id: str) -> BatchRecord | None:
        record = super().read(batch_id)
        if record is None:
            raise StoreError(f"journal header of batch {batch_id} is missing")
        return record


_journal_failing_on_missing_headers = rewired(journal_class=JournalFailingOnMissingHeaders)


class JournalWhoseHeadersVanish(DynamoDBJournal):
    """Stands for an emulator running TTL on its own (DynamoDB Local does, on a table with TTL on): each header
    is deleted as soon as its batch is done, before the run's own sweep."""

    def finish(self, batch_id: str) -> None:
        super().finish(batch_id)
        self._vanish(batch_id)

    def mark_done(self, batch_id: str, now_ms: int) -> None:
        super().mark_done(batch_id, now_ms)  # a fenced batch's DONE
        self._vanish(batch_id)

    def _vanish(self, batch_id: str) -> None:
        # On a thread of its own: the IAM contract attributes a call to the product's frames on the calling
        # thread's stack, and this deletion is not the function's (TTL's, which needs no grant).
        deletion = threading.Thread(
            target=self._client.delete_item,
            kwargs={"TableName": self._markers, "Key": {"id": {"S": header_id(batch_id)}}},
        )
        deletion.start()
        deletion.join()


_journal_whose_headers_vanish = rewired(journal_class=JournalWhoseHeadersVanish)


WINDOW_READS = focused(SMOKE, 100, window_messages=300)
"""Window messages whose hours and day the consumers move while the monitor reads them."""


def test_the_focused_window_reads_run_passes_unbroken(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # WHEN the library's reader reads series while the consumers move windows, some moves between its requests
    result = run_on(dynamodb_local, ddb_tables, WINDOW_READS)
    # THEN every window it read was within the ledger's bounds
    assert result.situations.get("situation.series_reads_spanning_a_move", 0) > 0, result.situations
    assert not result.series_read_violations, result.series_read_violations[:5]
    assert result.passed, result.verdict.examples


def test_the_harness_catches_series_reads_that_miss_window_moves(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN a series read that never reads the key items again, reading win: keys while the consumers move
    # WHEN it reads under the same harness and faults, during the moves (up to three seeds: see the docstring)
    results = []
    for seed in (WINDOW_READS.seed, 1, 2):
        results.append(
            run_on(dynamodb_local, ddb_tables, replace(WINDOW_READS, seed=seed), reader_factory=three_request_reader)
        )
        if results[-1].series_read_violations:
            break

    # THEN some read counted a window zero times or twice, and the run fails
    caught = results[-1]
    assert caught.situations.get("situation.series_reads_spanning_a_move", 0) > 0
    assert caught.series_read_violations, [result.situations for result in results]
    assert not caught.passed


HORIZON = focused(SMOKE, 100, horizon_sessions=SMOKE.horizon_sessions)
"""Numbered sessions whose old journal headers a TTL sweep deletes, then old and reused ids past their horizon."""


def test_the_focused_horizon_run_passes_unbroken(dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables) -> None:
    # WHEN the run the broken journal below goes through runs through the production pipeline
    result = run_on(dynamodb_local, ddb_tables, HORIZON)
    # THEN it swept headers and met the ids past their horizon, and passes
    assert not situations_missing(result, ("situation.ttl_headers_swept", "situation.ttl_ids_reused")), result.counts
    assert result.passed, (result.verdict.examples, result.past_horizon_problems)


def test_the_harness_catches_block_markers_whose_batch_ttl_deleted_failing_their_batch(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN a journal that fails the batch when a marker's header is gone
    # WHEN the run sweeps TTL and meets old and reused numbered ids past their horizon
    result = run_on(dynamodb_local, ddb_tables, HORIZON, pipeline_factory=_journal_failing_on_missing_headers)

    # THEN their batches fail on every delivery, and the run fails
    assert result.situations.get("situation.ttl_headers_swept", 0) > 0, (
        result.situations,
        result.past_horizon_problems,
    )
    assert any("still failing" in problem for problem in result.past_horizon_problems), result.past_horizon_problems
    assert not result.passed


def test_the_harness_says_when_something_else_deleted_the_headers_it_was_to_sweep(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN headers deleted behind the run's back, before its own TTL sweep
    result = run_on(dynamodb_local, ddb_tables, HORIZON, pipeline_factory=_journal_whose_headers_vanish)
    # THEN the run says its case was not built, and fails
    assert result.situations.get("situation.ttl_headers_swept", 0) == 0, result.situations
    assert any("left no journal header" in problem for problem in result.past_horizon_problems), (
        result.past_horizon_problems
    )
    assert not result.passed
