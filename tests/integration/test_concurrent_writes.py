"""A round's key-disjoint direct transactions written concurrently, on DynamoDB Local.

The applier sends a round's direct chunks on a small thread pool (``TALLY_WRITE_CONCURRENCY``) and settles
their outcomes in plan order on its own thread. What must not change: the counts (the same as one at a
time, and exact), what a failed, lost or conflicted transaction means for its messages (handed back,
settled by its markers, retried), and recovery from an invocation killed with some transactions
committed and others not (the redelivery counts each message once).
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.bounds import parse_counter_bounds
from tally.core.model import SourceRecord
from tally.core.numbered_ids import marker_item
from tally.errors import RetryableStoreError
from tally.store.dynamodb import DynamoDBCounterStore
from tests.support.counts import nonzero, read_all
from tests.support.pipeline import TTL_DAYS, make_pipeline, plenty
from tests.support.tables import fresh_tables
from tests.support.workload import SENT_MS, Workload, generate

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tally.core.write import DirectWrite
    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 60_000
CONCURRENCY = 4


def _workload(seed: int = 16) -> Workload:
    # Single-event messages over many keys, no re-sends: many small units, so about ten direct chunks.
    return generate(seed=seed, messages=600, keys=300, packed_every=10**9, resend_rate=0.0)


class InstrumentedStore(DynamoDBCounterStore):
    """The real store, with a hook around each direct transaction and a count of those in flight at once."""

    def __init__(
        self, *args: Any, around: Callable[[DirectWrite, Callable[[], None]], None] | None = None, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self._around = around
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.chunks = 0

    def write(self, write: DirectWrite) -> None:
        with self._lock:
            self.in_flight += 1
            self.chunks += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self._around is None:
                super().write(write)
            else:
                self._around(write, lambda: super(InstrumentedStore, self).write(write))
        finally:
            with self._lock:
                self.in_flight -= 1


def _store(
    tables: DynamoDBTables, around: Callable[[DirectWrite, Callable[[], None]], None] | None = None
) -> InstrumentedStore:
    return InstrumentedStore(
        tables.client, tables.counters_table, tables.markers_table, TTL_DAYS * 86_400, around=around
    )


def _ids(write: DirectWrite) -> tuple[str, ...]:
    """The messages a transaction marks applied."""
    return tuple(claim.message_id for claim in write.claims)


def _items(write: DirectWrite) -> frozenset[object]:
    """Every item a transaction writes or checks: counter items, marker items, replaced batches' headers."""
    return frozenset(
        [("key", item.item) for item in write.items]
        + [("marker", marker_item(claim.message_id)) for claim in write.claims]
        + [("batch", batch) for batch in write.replaced]
    )


@pytest.fixture
def second_tables(dynamodb_local: DynamoDBLocal) -> Iterator[DynamoDBTables]:
    """Another pair of template tables on the same DynamoDB Local."""
    with fresh_tables(dynamodb_local) as tables:
        yield tables


def test_direct_transactions_overlap_and_count_as_one_at_a_time(
    ddb_tables: DynamoDBTables, second_tables: DynamoDBTables
) -> None:
    workload = _workload()

    def slowly(_: DirectWrite, send: Callable[[], None]) -> None:
        time.sleep(0.05)  # long enough for the pool's other threads to start theirs
        send()

    # GIVEN the same batch, one at a time on one pair of tables and concurrently on another
    sequential_store = _store(ddb_tables)
    sequential, _ = make_pipeline(sequential_store)
    concurrent_store = _store(second_tables, slowly)
    concurrent, _ = make_pipeline(concurrent_store, write_concurrency=CONCURRENCY)
    # WHEN each applies it
    one = sequential.process(workload.records, NOW_MS, plenty)
    many = concurrent.process(workload.records, NOW_MS, plenty)
    # THEN the transactions overlapped, and the outcomes and the counts are the same, and exact
    assert concurrent_store.chunks > CONCURRENCY
    assert sequential_store.most_in_flight == 1
    assert concurrent_store.most_in_flight > 1
    assert many.failed_record_ids == one.failed_record_ids == ()
    assert (many.figures["MessagesApplied"], many.figures["Transactions"]) == (
        one.figures["MessagesApplied"],
        one.figures["Transactions"],
    )
    assert read_all(concurrent_store, workload.expected) == read_all(sequential_store, workload.expected)
    assert read_all(concurrent_store, workload.expected) == nonzero(workload.expected)


def test_a_bounded_counter_keeps_its_chunks_one_at_a_time(ddb_tables: DynamoDBTables) -> None:
    """A bound is checked on the worst prefix of its messages in order: no overlap then."""
    workload = _workload(seed=19)
    store = _store(ddb_tables)
    pipeline, _ = make_pipeline(
        store, counter_bounds=parse_counter_bounds("key-1*#count>=-1000000"), write_concurrency=CONCURRENCY
    )
    result = pipeline.process(workload.records, NOW_MS, plenty)
    assert store.chunks > 1
    assert store.most_in_flight == 1
    assert result.failed_record_ids == ()
    assert read_all(store, workload.expected) == nonzero(workload.expected)


@pytest.mark.parametrize("fault", ["throttled through every retry", "conflict once", "lost response"])
def test_a_fault_in_one_concurrent_transaction_is_handled_as_one_at_a_time(
    ddb_tables: DynamoDBTables, fault: str
) -> None:
    workload = _workload(seed=17)
    victim: list[tuple[str, ...]] = []
    tries: dict[tuple[str, ...], int] = {}
    lock = threading.Lock()

    def faulty(write: DirectWrite, send: Callable[[], None]) -> None:
        ids = _ids(write)
        with lock:
            if not victim:
                victim.append(ids)  # the first chunk any thread sends
            attempt = tries[ids] = tries.get(ids, 0) + 1
        if ids != victim[0]:
            send()
        elif fault == "throttled through every retry":
            raise RetryableStoreError("throttled")
        elif fault == "conflict once" and attempt == 1:
            raise RetryableStoreError("TransactionConflict")
        elif fault == "lost response" and attempt == 1:
            send()
            raise RetryableStoreError("read timeout after the commit")
        else:
            send()

    store = _store(ddb_tables, faulty)
    pipeline, _ = make_pipeline(store, write_concurrency=CONCURRENCY)
    first = pipeline.process(workload.records, NOW_MS, plenty)
    handed_back = set(first.failed_record_ids)
    if fault == "throttled through every retry":
        # only the victim's messages come back; never an empty response while something failed
        assert len(handed_back) == len(victim[0]) > 0
        assert first.figures["MessagesApplied"] == len(workload.records) - len(victim[0])
    else:
        assert handed_back == set()
        assert first.figures["MessagesApplied"] + first.figures["DuplicatesAlreadyApplied"] == len(workload.records)
    # WHEN the source redelivers the batch THEN each message counts once
    store_after = _store(ddb_tables)
    again, _ = make_pipeline(store_after, write_concurrency=CONCURRENCY)
    second = again.process(workload.records, NOW_MS, plenty)
    assert second.failed_record_ids == ()
    assert second.figures["MessagesApplied"] == len(handed_back)
    assert read_all(store_after, workload.expected) == nonzero(workload.expected)


class Killed(Exception):
    """The invocation dies (a timeout, an out-of-memory kill) while transactions are in flight."""


def test_a_kill_with_some_transactions_committed_is_recovered_exactly_once(ddb_tables: DynamoDBTables) -> None:
    workload = _workload(seed=18)
    sent: list[tuple[str, ...]] = []
    lock = threading.Lock()

    def killed_at_the_third(write: DirectWrite, send: Callable[[], None]) -> None:
        with lock:
            sent.append(_ids(write))
            number = len(sent)
        if number == 3:
            raise Killed
        send()

    store = _store(ddb_tables, killed_at_the_third)
    pipeline, _ = make_pipeline(store, write_concurrency=2)
    with pytest.raises(Killed):
        pipeline.process(workload.records, NOW_MS, plenty)
    # some transactions committed and some did not
    markers = ddb_tables.client.scan(TableName=ddb_tables.markers_table, Select="COUNT")["Count"]
    assert 0 < markers < len(workload.records)
    # WHEN the source redelivers the whole batch THEN the committed ones are settled by their markers
    store_after = _store(ddb_tables)
    again, _ = make_pipeline(store_after, write_concurrency=2)
    second = again.process(workload.records, NOW_MS, plenty)
    assert second.failed_record_ids == ()
    assert second.figures["DuplicatesAlreadyApplied"] == markers
    assert second.figures["MessagesApplied"] == len(workload.records) - markers
    assert read_all(store_after, workload.expected) == nonzero(workload.expected)


class ItemOverlapStore(InstrumentedStore):
    """Records every pair of transactions in flight at once that write the same item, key or marker.

    AWS cancels one of two overlapping transactions on the same item (``TransactionConflict``); DynamoDB Local
    runs them one after the other and says nothing, so the overlap itself is what this checks.
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.flying: list[frozenset[object]] = []
        self.overlaps: list[frozenset[object]] = []
        super().__init__(*args, around=self._watch, **kw)

    def _watch(self, write: DirectWrite, send: Callable[[], None]) -> None:
        items = _items(write)
        with self._lock:
            self.overlaps.extend(items & other for other in self.flying if items & other)
            self.flying.append(items)
        try:
            time.sleep(0.05)  # long enough for the pool's other threads to start theirs
            send()
        finally:
            with self._lock:
                self.flying.remove(items)


def test_chunks_of_one_split_unit_never_overlap(ddb_tables: DynamoDBTables) -> None:
    """A unit too large for one transaction is split into direct chunks that share its keys (and block
    marker items): written at once, they would conflict on AWS. Seen failing before the fix: the two chunks
    of the hub unit were in flight together."""
    # GIVEN 60 messages that all touch "hub" (one unit of 121 actions: two direct chunks sharing "hub"),
    # and 60 independent small messages that can overlap with them
    records = [
        SourceRecord(
            f"hub-{i}",
            json.dumps({"id": f"hub-{i}", "events": [{"key": "hub", "delta": 1}, {"key": f"spoke-{i}", "delta": 1}]}),
            SENT_MS,
        )
        for i in range(60)
    ] + [
        SourceRecord(f"solo-{i}", json.dumps({"id": f"solo-{i}", "key": f"solo-{i}", "delta": 1}), SENT_MS)
        for i in range(60)
    ]
    store = ItemOverlapStore(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, TTL_DAYS * 86_400)
    pipeline, _ = make_pipeline(store, write_concurrency=CONCURRENCY)
    # WHEN the batch is applied concurrently
    result = pipeline.process(records, NOW_MS, plenty)
    # THEN something overlapped, but never two transactions on one item, and the counts are exact
    assert result.failed_record_ids == ()
    assert store.most_in_flight > 1
    assert store.overlaps == []
    expected = {"hub": {"count": 60}} | {f"spoke-{i}": {"count": 1} for i in range(60)}
    expected |= {f"solo-{i}": {"count": 1} for i in range(60)}
    assert read_all(store, expected) == expected
