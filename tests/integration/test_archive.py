"""The archive through the production pipeline, on DynamoDB Local and moto's S3: every counted message archived,
once per commit at read, whatever fails between the commit and the archive write.

Each test ends with the recount of what the bucket holds (``tally.audit.recount``) against what the counters
table holds: the check the chaos run makes after every run.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tally.core.model import SourceRecord
from tally.core.numbered_ids import numbered_id
from tally.core.windows import parse_window_spec
from tally.reader.store_view import read_counters, read_series
from tally_local.chaos.ttl import sweep_expired
from tally_local.kit.faults import KilledBeforeWrite, ObjectFaults
from tests.support.archive import ArchiveBucket
from tests.support.pipeline import FAST_RETRIES, make_pipeline, make_store, plenty

if TYPE_CHECKING:
    from collections.abc import Sequence
    from decimal import Decimal

    from tally.store.dynamodb import DynamoDBCounterStore
    from tests.support.tables import DynamoDBTables

NOW_MS = 1_796_169_600_000  # 2026-12-01T00:00:00Z
HOUR_MS = 3_600_000
DAY_MS = 86_400_000


def single(n: int, key: str = "k", delta: int = 1) -> SourceRecord:
    return SourceRecord(f"r{n}", json.dumps({"id": f"m{n}", "key": key, "delta": delta}), NOW_MS - 100)


def packed(n: int, keys: int) -> SourceRecord:
    """A message of ``keys`` keys: more than one transaction holds, so a journal batch commits it."""
    events = [{"key": f"p:{i:03d}", "delta": 1} for i in range(keys)]
    return SourceRecord(f"r{n}", json.dumps({"id": f"m{n}", "events": events}), NOW_MS - 100)


def stored(store: DynamoDBCounterStore, keys: Sequence[str]) -> dict[str, dict[str, Decimal]]:
    return {key: dict(values) for key in keys if (values := read_counters(store, key))}


def assert_recount_matches(bucket: ArchiveBucket, store: DynamoDBCounterStore) -> None:
    """Every counter the archive recounts is what the table holds, and nothing it holds is missing."""
    result = bucket.recount()
    assert result.inexact == {}
    assert result.digest_mismatches == ()
    keys = sorted(result.counters)
    assert stored(store, keys) == {key: dict(values) for key, values in result.counters.items()}


@pytest.fixture
def bucket(moto_endpoint: str) -> ArchiveBucket:
    return ArchiveBucket.on(moto_endpoint)


@pytest.mark.parametrize("path", ["direct", "journal"])
def test_a_crash_between_the_commit_and_the_archive_write_is_repaired_by_the_redelivery(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket, path: str
) -> None:
    # GIVEN an invocation that commits its batch, then dies before its archive write is sent
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, archive=bucket.writer)
    records = [single(1), single(2, "j")] if path == "direct" else [packed(1, 150)]
    faults = ObjectFaults(bucket.client)
    faults.kill()
    with pytest.raises(KilledBeforeWrite):
        pipeline.process(records, NOW_MS, plenty)
    assert bucket.objects() == 0
    # WHEN the source redelivers the batch (with a message it had not delivered before)
    result = pipeline.process([*records, single(3)], NOW_MS + 60_000, plenty)
    # THEN every message is archived: the repaired ones under the commit that counted them, not this one
    assert result.failed_record_ids == ()
    archived = {record.id: record for record in bucket.records()}
    assert sorted(archived) == sorted({"m1", "m2", "m3"} if path == "direct" else {"m1", "m3"})
    assert archived["m1"].counted_here is False
    assert archived["m1"].committed_ms == NOW_MS
    if path == "journal":
        assert len(archived["m1"].commit) == 22  # the journal batch's id (UNFENCED_BATCH_ID_BYTES, in hex)
    else:
        assert archived["m1"].commit == f"direct-{NOW_MS}"
    assert archived["m3"].counted_here is True
    assert_recount_matches(bucket, store)


@pytest.mark.parametrize("path", ["direct", "numbered", "journal"])
def test_a_message_without_ts_archived_only_by_a_later_resend_is_placed_where_its_commit_placed_it(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket, path: str
) -> None:
    # GIVEN hour and day windows, and an invocation that commits messages without ts received at 23:59:59.900, then
    # dies before its archive write (a message of its own marker, numbered messages sharing a block, a journal batch)
    windows = parse_window_spec("hour,day")
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, archive=bucket.writer, windows=windows)
    bodies = {
        "direct": [{"id": "m1", "key": "k", "delta": 1}, {"id": "m2", "key": "j", "delta": 2}],
        "numbered": [
            {"id": numbered_id("0123456789abcdef0123456789abcdef", seq), "key": "k", "delta": seq} for seq in (3, 4)
        ],
        "journal": [{"id": "m1", "events": [{"key": f"p:{i:03d}", "delta": 1} for i in range(150)]}],
    }[path]
    records = [SourceRecord(f"r{n}", json.dumps(body), NOW_MS - 100) for n, body in enumerate(bodies)]
    faults = ObjectFaults(bucket.client)
    faults.kill()
    with pytest.raises(KilledBeforeWrite):
        pipeline.process(records, NOW_MS, plenty)
    # WHEN the producer re-sends them: new source records, received two hours later, on the next day
    later = NOW_MS + 2 * HOUR_MS
    resent = [SourceRecord(f"again-{record.record_id}", record.body, later - 100) for record in records]
    result = pipeline.process(resent, later, plenty)
    # THEN the re-sends archive them with the receive time that placed them, from their markers
    assert result.failed_record_ids == ()
    archived = bucket.records()
    assert {(record.counted_here, record.received_ms, record.placed_ms) for record in archived} == {
        (False, later - 100, NOW_MS - 100)
    }
    # AND the recount places every window where the table holds it: none is left unjudged
    recounted = bucket.recount(windows)
    assert recounted.unplaced == {}
    assert recounted.windows
    for key, recounted_windows in recounted.windows.items():
        for unit in windows.units:
            series = read_series(store, key, unit, NOW_MS - DAY_MS, later + HOUR_MS)
            held = {unit.window_id(start): values for start, values in series if values}
            assert held == {
                window: values for window, values in recounted_windows.items() if window.startswith(unit.prefix + "#")
            }
            assert list(held) == [unit.window_id(unit.start_ms(NOW_MS - 100))]
    assert_recount_matches(bucket, store)


def test_a_lost_answer_on_the_archive_write_writes_the_same_object_again(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket
) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, archive=bucket.writer)
    faults = ObjectFaults(bucket.client)
    faults.lose_responses()
    result = pipeline.process([single(1), single(2)], NOW_MS, plenty)
    # THEN the write is sent again within the invocation, to the same key: one object, nothing handed back
    assert result.failed_record_ids == ()
    assert faults.sent == 2
    assert bucket.objects() == 1
    assert_recount_matches(bucket, store)


def test_a_write_s3_keeps_throttling_hands_the_records_back_and_their_redelivery_archives_them(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket
) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, archive=bucket.writer)
    faults = ObjectFaults(bucket.client)
    faults.refuse("SlowDown", 503, count=FAST_RETRIES.max_attempts)
    first = pipeline.process([single(1), single(2)], NOW_MS, plenty)
    assert sorted(first.failed_record_ids) == ["r1", "r2"]  # counted, not archived: back to the source
    assert (bucket.objects(), dlq.letters) == (0, [])
    again = pipeline.process([single(1), single(2)], NOW_MS + 60_000, plenty)
    assert again.failed_record_ids == ()
    assert {(r.id, r.counted_here) for r in bucket.records()} == {("m1", False), ("m2", False)}
    assert_recount_matches(bucket, store)


def test_a_duplicate_adds_a_copy_that_the_recount_drops(ddb_tables: DynamoDBTables, bucket: ArchiveBucket) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, archive=bucket.writer)
    pipeline.process([single(1, delta=5)], NOW_MS, plenty)
    pipeline.process([single(1, delta=5)], NOW_MS + 1_000, plenty)  # a re-send: its marker says counted
    records = bucket.records()
    assert [(r.id, r.commit) for r in records] == [("m1", f"direct-{NOW_MS}")] * 2
    assert bucket.recount().messages == 1
    assert_recount_matches(bucket, store)


def test_an_id_reused_with_other_content_is_not_archived(ddb_tables: DynamoDBTables, bucket: ArchiveBucket) -> None:
    # GIVEN an id counted with one content, then sent with another (a producer's bug)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, archive=bucket.writer)
    pipeline.process([single(1, "k", 1)], NOW_MS, plenty)
    reused = SourceRecord("r1-reused", json.dumps({"id": "m1", "key": "other", "delta": 9}), NOW_MS)
    pipeline.process([reused], NOW_MS + 1_000, plenty)
    # THEN the other content is dead-lettered and never archived: the archive holds what counts
    assert dlq.codes() == {"r1-reused": "id_conflict"}
    assert [event.key for record in bucket.records() for event in record.events] == ["k"]
    assert_recount_matches(bucket, store)
    assert stored(store, ["other"]) == {}


def test_a_resend_past_the_horizon_is_archived_twice_and_counts_twice(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket
) -> None:
    # GIVEN a message without ts counted 40 days ago, whose marker TTL has since deleted
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, _ = make_pipeline(store, archive=bucket.writer, clock=lambda: NOW_MS)
    past = NOW_MS - 40 * DAY_MS
    pipeline.process([single(1, delta=3)], past, plenty)
    assert sweep_expired(ddb_tables.client, ddb_tables.markers_table, NOW_MS // 1000) >= 1
    # WHEN it is sent again now (a copy kept elsewhere and redriven)
    pipeline.process([single(1, delta=3)], NOW_MS, plenty)
    # THEN it is counted twice by design, and the archive keeps both countings (two commits)
    assert sorted(r.commit for r in bucket.records()) == sorted([f"direct-{past}", f"direct-{NOW_MS}"])
    assert stored(store, ["k"]) == {"k": {"count": 6}}
    assert_recount_matches(bucket, store)


def test_a_bucket_that_does_not_exist_dead_letters_the_counted_messages_and_a_redrive_archives_them(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket
) -> None:
    # GIVEN a function whose archive bucket is missing (S3 refuses for good: NoSuchBucket)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    broken = ArchiveBucket(bucket.client, bucket.bucket + "-missing")
    pipeline, dlq = make_pipeline(store, archive=broken.writer)
    result = pipeline.process([single(1)], NOW_MS, plenty)
    # THEN the batch does not fail forever: the message counts and is dead-lettered as archive_refused
    assert result.failed_record_ids == ()
    assert dlq.codes() == {"r1": "archive_refused"}
    # AND once the bucket is there, its redrive (a new delivery, its marker met) archives it
    fixed, _ = make_pipeline(store, archive=bucket.writer)
    assert fixed.process([single(1)], NOW_MS + DAY_MS, plenty).failed_record_ids == ()
    assert_recount_matches(bucket, store)


def test_a_counted_copy_behind_its_ids_other_content_in_one_batch_is_archived(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket
) -> None:
    # GIVEN an id counted with one content by an invocation that died before its archive write
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store, archive=bucket.writer)
    faults = ObjectFaults(bucket.client)
    faults.kill()
    with pytest.raises(KilledBeforeWrite):
        pipeline.process([single(1, "k", 1)], NOW_MS, plenty)
    assert bucket.objects() == 0
    # WHEN its redelivery comes in one batch behind the same id with other content (a producer's bug), first
    reused = SourceRecord("r1-reused", json.dumps({"id": "m1", "key": "k", "delta": 9}), NOW_MS)
    result = pipeline.process([reused, single(1, "k", 1)], NOW_MS + 60_000, plenty)
    # THEN the other content is dead-lettered, and the counted copy is archived (or handed back to be): never
    # reported done with its counting missing from the archive
    assert dlq.codes() == {"r1-reused": "id_conflict"}
    if "r1" not in result.failed_record_ids:
        assert [(r.id, r.commit, r.counted_here) for r in bucket.records()] == [("m1", f"direct-{NOW_MS}", False)]
        assert [event.deltas for record in bucket.records() for event in record.events] == [{"count": 1}]
    else:
        assert pipeline.process([single(1, "k", 1)], NOW_MS + 120_000, plenty).failed_record_ids == ()
    assert_recount_matches(bucket, store)
