"""Exactly-once counting against DynamoDB Local, under the faults the AWS path can produce.

Every test checks counters against a reference computed independently of tally's code. Faults are
injected at the botocore layer (src/tally_local/kit/faults.py), so the adapter and applier are the production
code, unmodified.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest

from tally.commit.applier import RetryPolicy
from tally.core.model import SourceRecord
from tally.errors import StoreError
from tally.reader.store_view import read_counters
from tally.sources.sqs import records_from_event
from tally_local.kit.faults import DynamoDBFaults
from tests.support.counts import nonzero, read_all
from tests.support.events import load_event
from tests.support.pipeline import make_pipeline, make_store, plenty
from tests.support.threads import at_once
from tests.support.workload import SENT_MS, generate

if TYPE_CHECKING:
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 60_000


SAMPLES = [
    ("sqs-single.json", {"page:/home": {"count": Decimal(2)}, "page:/pricing": {"count": Decimal(1)}}),
    (
        "sqs-counters.json",
        {"shop:42": {"orders": Decimal(1), "revenue": Decimal("0.01"), "units": Decimal(1)}},
    ),
    (
        "sqs-packed.json",
        {
            "usage:acme": {"api_calls": Decimal(12), "cost": Decimal("1.2")},
            "usage:globex": {"count": Decimal(5)},
            "usage:initech": {"count": Decimal(7)},
        },
    ),
    ("sqs-duplicates.json", {"likes:post-9": {"count": Decimal(2)}}),
    ("sqs-poison.json", {"stock:sku-1": {"count": Decimal(8)}}),
]


@pytest.mark.parametrize(("event_file", "expected"), SAMPLES, ids=[name for name, _ in SAMPLES])
def test_sample_events_count_exactly(
    ddb_tables: DynamoDBTables, event_file: str, expected: dict[str, dict[str, Decimal]]
) -> None:
    # GIVEN the sample event file WHEN it is processed twice (a redelivery of the whole batch)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    records = records_from_event(load_event(event_file))
    first = pipeline.process(records, NOW_MS, plenty)
    second = pipeline.process(records, NOW_MS, plenty)
    # THEN the counters equal the documented values, once
    assert read_all(store, expected) == expected
    assert first.failed_record_ids == ()
    assert second.failed_record_ids == ()
    assert second.figures["MessagesApplied"] == 0


@pytest.mark.parametrize("numbered", [False, True], ids=["own-markers", "block-markers"])
def test_a_workload_redelivered_in_overlapping_batches_counts_each_message_once(
    ddb_tables: DynamoDBTables, numbered: bool
) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    workload = generate(seed=7, messages=400, keys=15, numbered=numbered)
    records = workload.records
    # Batches of 100 with every batch redelivered, then a sliding window overlapping every boundary.
    for start in range(0, len(records), 100):
        batch = records[start : start + 100]
        assert pipeline.process(batch, NOW_MS, plenty).failed_record_ids == ()
        assert pipeline.process(batch, NOW_MS, plenty).figures["MessagesApplied"] == 0
    for start in range(50, len(records), 100):
        assert pipeline.process(records[start : start + 100], NOW_MS, plenty).figures["MessagesApplied"] == 0
    assert read_all(store, workload.expected) == nonzero(workload.expected)
    assert dlq.letters == []


@pytest.mark.parametrize("numbered", [False, True], ids=["own-markers", "block-markers"])
def test_lost_response_after_commit_does_not_double_count(ddb_tables: DynamoDBTables, numbered: bool) -> None:
    # GIVEN a store whose first transaction commits on the server but whose response is lost
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    workload = generate(seed=11, messages=60, keys=5, resend_rate=0, numbered=numbered)
    faults.lose_responses(1)
    # WHEN the batch is processed (the applier retries the "failed" transaction)
    result = pipeline.process(workload.records, NOW_MS, plenty)
    # THEN the retry found the markers of the committed transaction and applied nothing twice
    assert faults.injected == ["lose_response"]
    assert result.failed_record_ids == ()
    assert result.figures["DuplicatesAlreadyApplied"] > 0
    assert read_all(store, workload.expected) == nonzero(workload.expected)


@pytest.mark.parametrize("numbered", [False, True], ids=["own-markers", "block-markers"])
def test_responses_lost_until_attempts_run_out_then_redelivery_counts_once(
    ddb_tables: DynamoDBTables, numbered: bool
) -> None:
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, policy=RetryPolicy(base_delay_s=0.001, max_delay_s=0.01, max_attempts=1))
    workload = generate(seed=12, messages=30, keys=4, resend_rate=0, numbered=numbered)
    faults.lose_responses(1)
    first = pipeline.process(workload.records, NOW_MS, plenty)
    # The first chunk committed but looked failed: its records are reported for redelivery ...
    assert first.failed_record_ids
    second = pipeline.process([r for r in workload.records if r.record_id in first.failed_record_ids], NOW_MS, plenty)
    # ... and the redelivery finds them applied.
    assert second.failed_record_ids == ()
    assert second.figures["MessagesApplied"] == 0
    assert read_all(store, workload.expected) == nonzero(workload.expected)


@pytest.mark.parametrize("numbered", [False, True], ids=["own-markers", "block-markers"])
def test_crash_after_commit_with_whole_batch_redelivered(ddb_tables: DynamoDBTables, numbered: bool) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    workload = generate(seed=13, messages=150, keys=10, numbered=numbered)
    pipeline.process(workload.records, NOW_MS, plenty)  # committed; the function "crashes" before replying
    again = pipeline.process(workload.records, NOW_MS, plenty)
    assert again.figures["MessagesApplied"] == 0
    assert again.figures["DuplicatesAlreadyApplied"] == len({r.body for r in workload.records})
    assert read_all(store, workload.expected) == nonzero(workload.expected)


@pytest.mark.parametrize("numbered", [False, True], ids=["own-markers", "block-markers"])
def test_same_batch_processed_twice_concurrently(
    ddb_tables: DynamoDBTables, dynamodb_local: object, numbered: bool
) -> None:
    workload = generate(seed=14, messages=300, keys=6, numbered=numbered)
    stores = [
        make_store(client, ddb_tables.counters_table, ddb_tables.markers_table)
        for client in (ddb_tables.client, dynamodb_local.client())
    ]  # type: ignore[attr-defined]
    pipelines = [make_pipeline(store)[0] for store in stores]
    barrier = threading.Barrier(2)
    results = []

    def run(index: int) -> None:
        barrier.wait()
        results.append(pipelines[index].process(workload.records, NOW_MS, plenty))

    at_once(run, [0, 1])
    # A message claimed by the other invocation's batch (PREPARING, live lease) is reported for
    # redelivery rather than waited for; the redelivery finds it applied.
    failed = {record_id for result in results for record_id in result.failed_record_ids}
    redelivered = [record for record in workload.records if record.record_id in failed]
    again = pipelines[0].process(redelivered, NOW_MS, plenty)
    assert again.failed_record_ids == ()
    assert again.figures["MessagesApplied"] == 0
    distinct = len({r.body for r in workload.records})
    assert sum(result.figures["MessagesApplied"] for result in results) == distinct
    assert read_all(stores[0], workload.expected) == nonzero(workload.expected)


def test_producer_resend_in_a_new_message_is_not_counted_again(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    body = '{"id":"invoice-9","key":"revenue:eu","deltas":{"amount":12.50,"count":1}}'
    first = SourceRecord("sqs-message-1", body, SENT_MS)
    resend = SourceRecord("sqs-message-2", body, SENT_MS + 5_000)  # new MessageId, same producer id
    assert pipeline.process([first], NOW_MS, plenty).figures["MessagesApplied"] == 1
    second = pipeline.process([resend], NOW_MS, plenty)
    assert (
        second.figures["MessagesApplied"],
        second.figures["DuplicatesAlreadyApplied"],
        second.failed_record_ids,
    ) == (0, 1, ())
    assert read_counters(store, "revenue:eu") == {"amount": Decimal("12.50"), "count": Decimal(1)}


@pytest.mark.parametrize("numbered", [False, True], ids=["own-markers", "block-markers"])
@pytest.mark.parametrize("reason", ["ThrottlingError", "TransactionConflict", "ProvisionedThroughputExceeded"])
def test_throttling_and_conflict_cancellations_are_retried(
    ddb_tables: DynamoDBTables, reason: str, numbered: bool
) -> None:
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    workload = generate(seed=15, messages=80, keys=8, numbered=numbered)
    faults.cancel(reason, count=3)
    result = pipeline.process(workload.records, NOW_MS, plenty)
    assert result.figures["TransactionRetries"] == 3
    assert result.failed_record_ids == ()
    assert read_all(store, workload.expected) == nonzero(workload.expected)


@pytest.mark.parametrize(
    "code", ["ProvisionedThroughputExceededException", "ThrottlingException", "InternalServerError"]
)
def test_whole_request_throttling_is_retried(ddb_tables: DynamoDBTables, code: str) -> None:
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    workload = generate(seed=16, messages=40, keys=8)
    faults.fail(code, count=2)
    result = pipeline.process(workload.records, NOW_MS, plenty)
    assert (result.figures["TransactionRetries"], result.failed_record_ids) == (2, ())
    assert read_all(store, workload.expected) == nonzero(workload.expected)


@pytest.mark.parametrize("numbered", [False, True], ids=["own-markers", "block-markers"])
def test_persistent_throttling_reports_exactly_the_unapplied_records(
    ddb_tables: DynamoDBTables, numbered: bool
) -> None:
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, policy=RetryPolicy(base_delay_s=0.001, max_delay_s=0.01, max_attempts=3))
    workload = generate(seed=17, messages=250, keys=40, resend_rate=0, packed_every=1000, numbered=numbered)
    faults.cancel("ThrottlingError", count=3)  # the first chunk never gets through
    result = pipeline.process(workload.records, NOW_MS, plenty)
    # Numbered messages sharing blocks form one unit with the keys they touch (tally.core.plan), so the
    # throttled transaction can hold every message of the batch: then all of them come back.
    most = len(workload.records) + 1 if numbered else len(workload.records)
    assert 0 < len(result.failed_record_ids) < most
    # WHEN only the reported records are redelivered THEN everything is counted exactly once
    redelivered = [r for r in workload.records if r.record_id in set(result.failed_record_ids)]
    assert pipeline.process(redelivered, NOW_MS, plenty).failed_record_ids == ()
    assert read_all(store, workload.expected) == nonzero(workload.expected)


def test_no_attempt_starts_when_the_invocation_is_out_of_time(ddb_tables: DynamoDBTables) -> None:
    faults = DynamoDBFaults(ddb_tables.client)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    workload = generate(seed=18, messages=20, keys=3)
    result = pipeline.process(workload.records, NOW_MS, lambda: 500)
    assert sorted(result.failed_record_ids) == sorted(r.record_id for r in workload.records)
    assert faults.calls == 0
    assert read_all(store, workload.expected) == {}


def test_poison_records_go_to_the_dead_letter_queue_and_good_ones_count(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    records = records_from_event(load_event("sqs-poison.json"))
    result = pipeline.process(records, NOW_MS, plenty)
    assert result.failed_record_ids == ()
    assert sorted(dlq.codes().values()) == sorted(
        ["malformed_json", "invalid_number", "number_out_of_range", "missing_id", "invalid_field"]
    )
    assert read_counters(store, "stock:sku-1") == {"count": Decimal(8)}


def test_poison_the_dead_letter_queue_refuses_is_reported_for_redelivery(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    records = records_from_event(load_event("sqs-poison.json"))
    dlq.refuse = {records[1].record_id}
    result = pipeline.process(records, NOW_MS, plenty)
    assert result.failed_record_ids == (records[1].record_id,)


def test_a_message_older_than_the_marker_ttl_is_dead_lettered_not_applied(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    old_ts = NOW_MS - 36 * 86_400_000
    record = SourceRecord("r-old", f'{{"id":"old-1","key":"k","delta":1,"ts":{old_ts}}}', SENT_MS)
    result = pipeline.process([record], NOW_MS, plenty)
    assert result.failed_record_ids == ()
    assert dlq.codes() == {"r-old": "too_old"}
    assert read_counters(store, "k") == {}


# What `sam local generate-event` makes (SAM CLI 1.x): SQS SentTimestamp 2018-04-09, Kinesis arrival 2015-04-09.
SAM_CLI_SQS_SENT_MS = 1_523_232_000_000
SAM_CLI_KINESIS_ARRIVAL_MS = 1_428_537_600_000


@pytest.mark.parametrize("received_ms", [SAM_CLI_SQS_SENT_MS, SAM_CLI_KINESIS_ARRIVAL_MS])
def test_an_old_source_timestamp_proves_nothing_and_the_message_counts(
    ddb_tables: DynamoDBTables, received_ms: int
) -> None:
    # GIVEN a message without ts whose source timestamp is years old: what the SAM CLI generates, and what
    # no real queue or stream can hold (SQS keeps a message 14 days; a redrive resets SentTimestamp)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    record = SourceRecord("r-sam", '{"id": "a", "key": "k", "delta": 1}', received_ms)
    # WHEN it is processed, twice (the second is a redelivery)
    for _ in range(2):
        result = pipeline.process([record], NOW_MS, plenty)
        assert result.failed_record_ids == ()
    # THEN it counts once, and nothing is dead-lettered
    assert dlq.codes() == {}
    assert read_counters(store, "k") == {"count": Decimal(1)}


def test_a_redriven_message_with_an_old_ts_is_refused_whatever_its_fresh_source_timestamp(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN a message redriven today (fresh SentTimestamp) whose events happened 36 days ago: it may have
    # been applied 36 days ago, and its marker (35 days) may be gone
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    old_ts = NOW_MS - 36 * 86_400_000
    record = SourceRecord("r-redriven", f'{{"id":"redriven-1","key":"k","delta":1,"ts":{old_ts}}}', NOW_MS - 1_000)
    result = pipeline.process([record], NOW_MS, plenty)
    assert result.failed_record_ids == ()
    assert dlq.codes() == {"r-redriven": "too_old"}
    assert read_counters(store, "k") == {}


def test_a_packed_message_is_as_young_as_its_newest_event(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a packed message holding a 40-day-old event and one of an hour ago: it was created after its
    # newest event, so it is at most an hour old and every marker it could have left is still there
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    old_ts, recent_ts = NOW_MS - 40 * 86_400_000, NOW_MS - 3_600_000
    body = (
        f'{{"id":"pack-old-new","events":[{{"key":"k","delta":1,"ts":{old_ts}}},'
        f'{{"key":"k","delta":2,"ts":{recent_ts}}}]}}'
    )
    result = pipeline.process([SourceRecord("r-pack", body, SAM_CLI_SQS_SENT_MS)], NOW_MS, plenty)
    assert result.failed_record_ids == ()
    assert dlq.codes() == {}
    assert read_counters(store, "k") == {"count": Decimal(3)}


def test_markers_carry_the_ttl_horizon(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    pipeline.process([SourceRecord("r1", '{"id":"ttl-1","key":"k","delta":1}', SENT_MS)], NOW_MS, plenty)
    marker = store.read_marker("ttl-1")
    assert marker is not None
    assert marker.applied_at_ms == NOW_MS
    assert marker.expires_at_s == NOW_MS // 1000 + 35 * 86_400


def test_a_counter_dynamodb_refuses_dead_letters_only_the_culprit(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a counter already near the top of DynamoDB's Number range
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    seed = SourceRecord("r0", '{"id":"big-0","key":"huge","delta":9E+125}', SENT_MS)
    assert pipeline.process([seed], NOW_MS, plenty).figures["MessagesApplied"] == 1
    # WHEN a batch would push it past 9.99E+125, alongside innocent messages in the same transaction
    records = [
        SourceRecord("r1", '{"id":"ok-1","key":"small","delta":1}', SENT_MS),
        SourceRecord("r2", '{"id":"big-1","key":"huge","delta":9E+125}', SENT_MS),
        SourceRecord("r3", '{"id":"ok-2","key":"small","delta":2}', SENT_MS),
    ]
    result = pipeline.process(records, NOW_MS, plenty)
    # THEN only the culprit is dead-lettered, with the reason, and the rest is counted
    assert result.failed_record_ids == ()
    assert dlq.codes() == {"r2": "counter_out_of_range"}
    assert read_counters(store, "small") == {"count": Decimal(3)}
    assert read_counters(store, "huge") == {"count": Decimal("9E+125")}


def test_a_missing_table_fails_the_whole_batch_instead_of_dropping_it(ddb_tables: DynamoDBTables) -> None:
    store = make_store(ddb_tables.client, "no-such-table", ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    with pytest.raises(StoreError):
        pipeline.process([SourceRecord("r1", '{"id":"x","key":"k","delta":1}', SENT_MS)], NOW_MS, plenty)
    assert dlq.letters == []


def test_an_applied_message_redelivered_when_its_counter_is_full_is_not_dead_lettered(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN a message applied once, and a counter that later sits at the top of the Number range
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    applied = SourceRecord("r1", '{"id":"m-1","key":"huge","delta":5E+125}', SENT_MS)
    pipeline.process([applied], NOW_MS, plenty)
    pipeline.process([SourceRecord("r2", '{"id":"m-2","key":"huge","delta":4.9E+125}', SENT_MS)], NOW_MS, plenty)
    # WHEN the first message is redelivered (DynamoDB checks the range before the marker condition)
    result = pipeline.process([SourceRecord("r3", applied.body, SENT_MS)], NOW_MS, plenty)
    # THEN it is recognised as applied, not dead-lettered, and nothing changes
    assert (result.figures["DuplicatesAlreadyApplied"], result.failed_record_ids, dlq.letters) == (1, (), [])
    assert read_counters(store, "huge") == {"count": Decimal("9.9E+125")}


def test_re_sends_are_found_by_reading_markers_first_so_no_transaction_is_wasted(
    ddb_tables: DynamoDBTables,
) -> None:
    # GIVEN 100 applied single-event messages, then a batch of 50 of them re-sent plus 50 new ones
    cancelled: list[int] = []
    ddb_tables.client.meta.events.register(
        "after-call.dynamodb.TransactWriteItems",
        lambda http_response, **_: cancelled.append(1) if http_response.status_code != 200 else None,
    )
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store)
    bodies = [f'{{"id":"s-{i}","key":"k-{i % 7}","delta":1}}' for i in range(150)]
    pipeline.process([SourceRecord(f"a{i}", b, SENT_MS) for i, b in enumerate(bodies[:100])], NOW_MS, plenty)
    # WHEN the mixed batch is processed
    result = pipeline.process([SourceRecord(f"b{i}", b, SENT_MS) for i, b in enumerate(bodies[50:])], NOW_MS, plenty)
    # THEN the re-sends were settled by the read, and no transaction was cancelled (wasting its writes)
    assert (result.figures["DuplicatesAlreadyApplied"], result.figures["MessagesApplied"], cancelled) == (50, 50, [])
    assert sum(read_counters(store, f"k-{i}")["count"] for i in range(7)) == 150
