"""The audit, its repairs and voids through the production pipeline, on DynamoDB Local and moto's S3.

Each correction the audit's commands plan (``tally audit --fix``, ``tally void``) goes through the pipeline as the
message it would be published as (``Event.correct`` under its planned id), so these tests hold the whole loop:
archive -> recount -> judgement -> correction -> count -> archive -> audit again.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from tally.audit.auditor import Auditor, AuditReport, AuditSettings
from tally.audit.compare import Scope, Verdict
from tally.audit.recount import countings
from tally.audit.repairs import plan_repairs
from tally.audit.voids import VoidRefused, plan_void
from tally.core.archive import archive_record, encode_records, object_key
from tally.core.decode import decode_message
from tally.core.digest import content_digest
from tally.core.items import item_label, view_item_key
from tally.core.ledger import BatchState, Commit
from tally.core.limits import WIRE_LIMITS
from tally.core.model import Message, SourceRecord
from tally.core.sharding import parse_hot_keys
from tally.core.views import NO_VIEWS, CounterViews, parse_counter_views
from tally.core.windows import DAY_MS, HOUR_MS, parse_window_spec
from tally.producer import Event
from tally.producer.wire import single_message
from tally.reader import CounterReader
from tally.store.journal import landed_batches
from tally.store.schema import HEADER_STATE, LEDGER_ID, header_id, item_key
from tally.store.windows import DynamoDBWindowMover
from tally_local.chaos.ttl import sweep_expired
from tally_local.kit.faults import KilledBeforeWrite, ObjectFaults
from tests.support.archive import PREFIX, ArchiveBucket
from tests.support.pipeline import make_pipeline, make_store, plenty

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from decimal import Decimal

    from tally.audit.auditor import Landings
    from tally.audit.corrections import PlannedCorrection
    from tally.pipeline import BatchPipeline
    from tally.store.dynamodb import DynamoDBCounterStore
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = 1_796_169_600_000  # 2026-12-02T00:00:00Z
SPEC = parse_window_spec("hour,day")
HOT = parse_hot_keys("hot=4")


@pytest.fixture
def bucket(moto_endpoint: str) -> ArchiveBucket:
    return ArchiveBucket.on(moto_endpoint)


def body(message_id: str, key: str, delta: int | str = 1, **fields: Any) -> str:
    return json.dumps({"id": message_id, "key": key, "delta": delta, **fields})


class Counted:
    """The pipeline with its archive, and the audit of both."""

    def __init__(self, tables: DynamoDBTables, bucket: ArchiveBucket, views: CounterViews = NO_VIEWS) -> None:
        self.tables, self.bucket, self.views = tables, bucket, views
        self.store: DynamoDBCounterStore = make_store(tables.client, tables.counters_table, tables.markers_table)
        self.pipeline: BatchPipeline
        self.pipeline, self.dlq = make_pipeline(
            self.store, archive=bucket.writer, windows=SPEC, hot_keys=HOT, views=views
        )
        self.sent = 0

    def count(self, *bodies: str, at_ms: int = NOW_MS) -> None:
        records = []
        for text in bodies:
            self.sent += 1
            records.append(SourceRecord(f"r{self.sent}", text, at_ms - 50))
        assert self.pipeline.process(records, at_ms, plenty).failed_record_ids == ()
        assert self.dlq.codes() == {}

    def publish(self, corrections: Sequence[PlannedCorrection], at_ms: int = NOW_MS + DAY_MS) -> None:
        """As ``tally void`` / ``tally audit --fix`` publish them: one ``Event.correct`` message each."""
        events = [
            Event.reset_to(c.key, dict(c.deltas), id=c.message_id, ts=c.ts_ms)
            if c.reset
            else Event.correct(c.key, dict(c.deltas), id=c.message_id, ts=c.ts_ms)
            for c in corrections
        ]
        bodies = [single_message(event, event.id or "").body for event in events]
        self.count(*(b.decode() for b in bodies), at_ms=at_ms)

    def auditor(
        self,
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], object] | None = None,
        landings: Landings | None = None,
        **settings: Any,
    ) -> Auditor:
        reader = CounterReader(
            self.tables.counters_table, client=self.tables.client, hot_keys=HOT, windows=SPEC, views=self.views
        )
        options = {"settle_s": 0.05, "attempts": 2, "tolerance_ms": 1, "views": self.views, **settings}
        return Auditor(
            self.bucket.client,
            self.bucket.bucket,
            PREFIX,
            reader,
            AuditSettings(SPEC, **options),
            **({} if clock is None else {"clock": clock}),
            **({} if sleep is None else {"sleep": sleep}),
            landings=landings,
        )

    def audit(
        self,
        clock: Callable[[], int] | None = None,
        sleep: Callable[[float], object] | None = None,
        landings: Landings | None = None,
        **settings: Any,
    ) -> AuditReport:
        return self.auditor(clock, sleep, landings, **settings).run()

    def value(self, key: str, counter: str = "count") -> Decimal:
        return (
            CounterReader(self.tables.counters_table, client=self.tables.client, hot_keys=HOT).get(key).value(counter)
        )


def verdicts(report: AuditReport) -> dict[Verdict, int]:
    found: dict[Verdict, int] = {}
    for finding in report.findings:
        found[finding.verdict] = found.get(finding.verdict, 0) + 1
    return found


@pytest.fixture
def counted(ddb_tables: DynamoDBTables, bucket: ArchiveBucket) -> Counted:
    return Counted(ddb_tables, bucket)


def test_every_value_of_a_counted_archive_is_exact(counted: Counted) -> None:
    # GIVEN every kind of counting: single and packed messages, a hot key, gauges, distinct members, windows by ts
    # and by receive time, a correction, a reset, and a re-delivered batch
    ts = NOW_MS - 3 * HOUR_MS
    batch = [
        body("a", "page:/", 2, ts=ts),
        body("b", "hot", 5),
        '{"id": "c", "events": [{"key": "page:/", "delta": 1}, {"key": "hot", "deltas": {"bytes": 1.50}}]}',
        body("d", "sensor", 1, gauges={"peak": {"max": 7}, "last": {"latest": 3}}, ts=ts),
        body("e", "page:/", 1, distinct={"viewers": "u1"}, ts=ts),
        json.dumps({"id": "f", "key": "page:/", "deltas": {"count": -1}, "correction": True}),
    ]
    counted.count(*batch)
    counted.count(*batch, at_ms=NOW_MS + 1_000)  # the whole batch again: duplicates
    counted.count(
        json.dumps({"id": "g", "key": "stock", "reset": {"n": 10}}), body("h", "stock", 2), at_ms=NOW_MS + 2_000
    )
    # WHEN the archive is audited against the table
    report = counted.audit()
    # THEN every value is exact: all-time, hour and day windows, gauges, distinct counts, on every key
    assert verdicts(report) == {Verdict.EXACT: len(report.findings)}
    assert report.keys == 4
    assert {f.slot.kind for f in report.findings} == {"counter", "gauge", "distinct"}
    assert report.countings == 8
    assert (report.recounted_twice, report.reused_ids, report.digest_mismatches) == ((), (), ())
    # AND recounted in two processes (shares of keys), the audit finds the same
    split = counted.audit(processes=2)
    assert [(f.slot, f.stored, f.recounted, f.verdict) for f in split.findings] == [
        (f.slot, f.stored, f.recounted, f.verdict) for f in report.findings
    ]


def test_view_items_are_recounted_and_a_hand_edit_of_one_is_drift_never_repaired_by_a_correction(
    ddb_tables: DynamoDBTables, bucket: ArchiveBucket
) -> None:
    # GIVEN events with dimensions counted under two views, in their hours and days, after a reset of a view item
    counted = Counted(ddb_tables, bucket, parse_counter_views("api=customer,customer+route"))
    ts = NOW_MS - 3 * HOUR_MS
    counted.count(
        body("a", "api", 2, ts=ts, dims={"customer": "acme", "route": "/a"}),
        body("b", "api", 3, dims={"customer": "acme", "route": "/b"}),
        json.dumps({"id": "e", "key": "api", "reset": {"count": 10}, "dims": {"customer": "bolt"}}),
        body("c", "api", 5, ts=ts, dims={"customer": "bolt", "route": "/a"}),
        body("d", "other", 1),
    )
    # WHEN audited
    report = counted.audit()
    # THEN every value of every view item is recounted and exact, beside the keys' own
    assert verdicts(report) == {Verdict.EXACT: len(report.findings)}
    acme = view_item_key("customer", "api", ("acme",))
    bolt = view_item_key("customer", "api", ("bolt",))
    recounted = {(f.slot.key, f.slot.window): f.recounted for f in report.findings if f.slot.name == "count"}
    assert recounted[(acme, "all")] == 5
    assert recounted[(bolt, "all")] == 15
    assert report.keys == 2 + 2 + 3  # api, other; two customers; three (customer, route) pairs
    # AND the same in two processes (a view item in its key's share)
    split = counted.audit(processes=2)
    assert [(f.slot, f.recounted) for f in split.findings] == [(f.slot, f.recounted) for f in report.findings]
    # WHEN a view item's all-time value is edited by hand
    counted.tables.client.update_item(
        TableName=counted.tables.counters_table,
        Key=item_key(acme),
        UpdateExpression="ADD #c :d",
        ExpressionAttributeNames={"#c": "c#count"},
        ExpressionAttributeValues={":d": {"N": "-1"}},
    )
    # THEN the audit finds that drift on the view item, named as people write it, and plans no correction for it
    drifted = counted.audit()
    ((drift),) = drifted.with_verdict(Verdict.DRIFT)
    assert (item_label(drift.slot.key), drift.slot.window, drift.difference) == ("api[customer=acme]", "all", 1)
    plan = plan_repairs(drifted.findings, spec=SPEC, now_ms=NOW_MS)
    assert plan.corrections == ()
    assert [(u.key, u.name) for u in plan.unrepairable] == [(acme, "count")]


def test_a_hand_edit_is_drift_and_fix_twice_repairs_once(counted: Counted) -> None:
    counted.count(body("a", "k", 3, ts=NOW_MS - HOUR_MS), body("b", "k", 4))
    # GIVEN someone edits the all-time value by hand
    counted.tables.client.update_item(
        TableName=counted.tables.counters_table,
        Key={"pk": {"S": "k"}, "sk": {"S": "all"}},
        UpdateExpression="ADD #c :d",
        ExpressionAttributeNames={"#c": "c#count"},
        ExpressionAttributeValues={":d": {"N": "-2"}},
    )
    # WHEN audited
    report = counted.audit()
    # THEN it is drift, stored against recounted, read twice (a drift is looked at again before it is reported)
    (drift,) = report.with_verdict(Verdict.DRIFT)
    assert (drift.slot.key, drift.slot.window, drift.stored, drift.recounted) == ("k", "all", 5, 7)
    assert report.reads == 2
    # WHEN --fix plans its repair twice (a second run before the first one's repair is counted), and both go out:
    # the windows are exact and days are kept forever, so the all-time value alone is reset to what it recounts
    first = plan_repairs(report.findings, spec=SPEC, now_ms=report.started_ms, generations=report.repair_generations())
    second = plan_repairs(report.findings, spec=SPEC, now_ms=report.started_ms + 60_000)
    assert [(c.key, dict(c.deltas), c.reset) for c in first.corrections] == [("k", {"count": 7}, True)]
    assert [c.message_id for c in first.corrections] == [c.message_id for c in second.corrections]
    counted.publish(first.corrections)
    counted.publish(second.corrections, at_ms=NOW_MS + DAY_MS + 1_000)
    # THEN the counter is repaired once, and the audit finds nothing left (the repair is not recounted)
    assert counted.value("k") == 7
    after = counted.audit()
    assert verdicts(after) == {Verdict.EXACT: len(after.findings)}
    assert len(after.repairs) == 2  # the archive holds the repair (and its duplicate's copy), set aside
    assert plan_repairs(after.findings, spec=SPEC, now_ms=after.started_ms).corrections == ()


def test_a_lost_event_is_repaired_by_a_correction_in_its_windows(counted: Counted) -> None:
    counted.count(body("a", "k", 3, ts=NOW_MS - HOUR_MS), body("b", "k", 4, ts=NOW_MS))
    # GIVEN the key item loses "a" everywhere (its ADD undone by hand: all-time and its open windows)
    counted.tables.client.update_item(
        TableName=counted.tables.counters_table,
        Key={"pk": {"S": "k"}, "sk": {"S": "all"}},
        UpdateExpression="ADD #c :d, #h :d, #d :d",
        ExpressionAttributeNames={
            "#c": "c#count",
            "#h": "w#h#2026-12-01T23:00Z\x1fcount",
            "#d": "w#d#2026-12-01\x1fcount",
        },
        ExpressionAttributeValues={":d": {"N": "-3"}},
    )
    report = counted.audit()
    assert {(f.slot.window, f.stored, f.recounted) for f in report.with_verdict(Verdict.DRIFT)} == {
        ("all", 4, 7),
        ("h#2026-12-01T23:00Z", 0, 3),
        ("d#2026-12-01", 0, 3),
    }
    plan = plan_repairs(report.findings, spec=SPEC, now_ms=report.started_ms)
    assert [(dict(c.deltas), c.ts_ms, c.reset) for c in plan.corrections] == [({"count": 3}, NOW_MS - HOUR_MS, False)]
    counted.publish(plan.corrections)
    after = counted.audit()
    assert verdicts(after) == {Verdict.EXACT: len(after.findings)}


def test_void_twice_voids_once_and_a_third_time_is_refused(counted: Counted) -> None:
    counted.count(
        body("a", "k", 3), json.dumps({"id": "m", "events": [{"key": "k", "delta": 4}, {"key": "j", "delta": 1}]})
    )
    found = countings(counted.bucket.records())
    plan = plan_void("m", [c for c in found if c.record.id == "m"], archived_ids={c.record.id for c in found})
    counted.publish(plan.corrections)
    counted.publish(plan.corrections, at_ms=NOW_MS + DAY_MS + 5_000)  # voided again (a retry of the command)
    assert (counted.value("k"), counted.value("j")) == (3, 0)
    found = countings(counted.bucket.records())
    with pytest.raises(VoidRefused, match="already voided"):
        plan_void("m", [c for c in found if c.record.id == "m"], archived_ids={c.record.id for c in found})
    report = counted.audit()
    assert verdicts(report) == {Verdict.EXACT: len(report.findings)}


def test_a_void_of_a_message_whose_window_has_moved_takes_it_out_of_that_window(counted: Counted) -> None:
    # GIVEN a message in an hour of yesterday, whose windows have since moved off the key's item
    hour = NOW_MS - DAY_MS + 5 * HOUR_MS
    counted.count(body("old", "k", 6, ts=hour + 1), body("other", "k", 1, ts=hour + 2))
    DynamoDBWindowMover(counted.tables.client, counted.tables.counters_table, SPEC).close_all(NOW_MS + HOUR_MS)
    key_item = counted.tables.client.get_item(
        TableName=counted.tables.counters_table, Key={"pk": {"S": "k"}, "sk": {"S": "all"}}
    )["Item"]
    assert not [name for name in key_item if name.startswith("w#")]  # moved to window items
    reader = CounterReader(counted.tables.counters_table, client=counted.tables.client, windows=SPEC)
    assert reader.series("k", "hour", hour, hour).windows[0].values == {"count": 7}
    # WHEN it is voided
    found = countings(counted.bucket.records())
    counted.publish(plan_void("old", [c for c in found if c.record.id == "old"]).corrections)
    # THEN its hour and day lose exactly it, wherever they are now, and the audit agrees
    assert reader.series("k", "hour", hour, hour).windows[0].values == {"count": 1}
    assert reader.series("k", "day", hour, hour).windows[0].values == {"count": 1}
    report = counted.audit()
    assert verdicts(report) == {Verdict.EXACT: len(report.findings)}


def test_resends_past_the_horizon_stay_twice_and_an_id_reused_with_other_content_is_reported(counted: Counted) -> None:
    past = NOW_MS - 40 * DAY_MS
    counted.count(body("p", "k", 3), body("q", "k", 1), at_ms=past)
    assert sweep_expired(counted.tables.client, counted.tables.markers_table, NOW_MS // 1000) >= 2
    # WHEN "p" is re-sent unchanged and "q" reused for other content, past the marker horizon: both count again
    counted.count(body("p", "k", 3), body("q", "j", 9))
    report = counted.audit()
    # THEN nothing drifted (the archive holds both countings of each), and the audit names them
    assert verdicts(report) == {Verdict.EXACT: len(report.findings)}
    assert counted.value("k") == 7
    assert (report.recounted_twice, report.reused_ids) == (("p",), ("q",))


def test_drift_while_an_archive_write_is_missing_is_pending_on_dead_letters_and_gone_once_archived(
    counted: Counted,
) -> None:
    # GIVEN a batch committed whose invocation died before its archive write (redelivery pending)
    counted.count(body("a", "k", 1))
    ObjectFaults(counted.bucket.client).kill()
    with pytest.raises(KilledBeforeWrite):
        counted.pipeline.process([SourceRecord("late", body("b", "k", 2), NOW_MS)], NOW_MS + 1_000, plenty)
    # WHEN audited: the table holds more than the archive says
    drifted = counted.audit()
    assert next((f.slot.window, f.stored, f.recounted) for f in drifted.with_verdict(Verdict.DRIFT)) == ("all", 3, 1)
    # AND with its message in the dead-letter queue, that drift is pending, not drift
    pending = Auditor(
        counted.bucket.client,
        counted.bucket.bucket,
        PREFIX,
        CounterReader(counted.tables.counters_table, client=counted.tables.client, hot_keys=HOT, windows=SPEC),
        AuditSettings(SPEC, settle_s=0.05, attempts=1, tolerance_ms=1),
        waiting=lambda keys: dict.fromkeys(keys, 1),
    ).run()
    assert {f.verdict for f in pending.findings if f.slot.key == "k"} >= {Verdict.PENDING}
    assert not pending.with_verdict(Verdict.DRIFT)
    # WHEN the redelivery archives it
    counted.pipeline.process([SourceRecord("late", body("b", "k", 2), NOW_MS)], NOW_MS + 60_000, plenty)
    report = counted.audit()
    assert verdicts(report) == {Verdict.EXACT: len(report.findings)}


def test_an_audit_racing_live_traffic_never_reports_drift(counted: Counted) -> None:
    # GIVEN keys counted, and a producer that keeps counting into some of them while the audit runs
    counted.count(*(body(f"seed-{n}", f"k{n % 5}", 1) for n in range(50)))
    stop = threading.Event()
    sent = [0]

    def traffic() -> None:
        while not stop.is_set():
            n = sent[0]
            now = time.time_ns() // 1_000_000  # the invocation's clock, as the auditor's: one machine
            counted.count(body(f"live-{n}", f"k{n % 3}", 1), body(f"live-hot-{n}", "hot", 2), at_ms=now)
            sent[0] += 1

    producer = threading.Thread(target=traffic, daemon=True)
    producer.start()
    try:
        report = counted.audit(settle_s=0.01, attempts=2, tolerance_ms=50, keys_per_read=1)
    finally:
        stop.set()
        producer.join(timeout=30)
    # THEN no value is drift: what raced the read is unsettled, the rest exact
    assert sent[0] > 0
    assert set(verdicts(report)) <= {Verdict.EXACT, Verdict.UNSETTLED}, report.with_verdict(Verdict.DRIFT)
    # AND once the traffic stops, everything is exact
    quiet = counted.audit()
    assert verdicts(quiet) == {Verdict.EXACT: len(quiet.findings)}


def test_an_audit_right_after_the_last_counting_waits_until_it_settles(counted: Counted) -> None:
    # GIVEN keys counted just now (their archive records written within the clocks' tolerance of the audit's
    # first read, so that read cannot tell whether it holds them)
    now = time.time_ns() // 1_000_000
    counted.count(*(body(f"recent-{n}", f"k{n % 4}", 1) for n in range(20)), at_ms=now)
    # WHEN audited at once, with a pause between looks shorter than that tolerance; the auditor's clock stands at the
    # countings' instant and moves only by what the auditor sleeps, so however slow the machine (a loaded CI run's
    # counting and first read outlasted the tolerance on a clock that ran at its pace: that read was already settled)
    # the first read begins within the tolerance of every archive write
    auditor_ms = [now]

    def sleep(seconds: float) -> None:
        # rounded, not truncated: the auditor sleeps a whole number of ms as seconds, and 1001 / 1000 * 1000 is
        # 1000.99...: a truncated wait starts the second read 1 ms short, where it still cannot place the countings
        auditor_ms[0] += round(seconds * 1000)

    report = counted.audit(lambda: auditor_ms[0], sleep, settle_s=0.01, attempts=2, tolerance_ms=1_000)
    # THEN the second look waits until the tolerance has passed and every value is exact, not unsettled
    assert verdicts(report) == {Verdict.EXACT: len(report.findings)}, report.with_verdict(Verdict.UNSETTLED)
    assert report.reads == 2


FENCED_BATCH = "0011223344556677" + "0000002a"
"""A fenced journal batch's id: the commit of the record written before its deltas landed."""


def test_a_counting_archived_before_its_batch_landed_is_unsettled_until_its_header_says_landed(
    counted: Counted,
) -> None:
    # GIVEN key k counted, and a fenced batch committed (its header FENCED) whose item writes have not landed: the
    # records of its two messages (one of k, one of a key the table does not hold yet) were written beside them, a
    # minute before the audit
    counted.count(*(body(f"seed-{n}", "k", 1) for n in range(3)))
    tables, now = counted.tables, time.time_ns() // 1_000_000
    header = {LEDGER_ID: {"S": header_id(FENCED_BATCH)}}
    tables.client.put_item(TableName=tables.markers_table, Item={**header, HEADER_STATE: {"S": BatchState.FENCED}})

    def archive_beside_the_landing(*, flagged: bool) -> None:
        written = []
        for seq, key in enumerate(("k", "fresh")):
            text = body(f"landing-{key}", key, 5, ts=now - 60_000)
            message = decode_message(text, WIRE_LIMITS)
            assert isinstance(message, Message)
            written.append(
                archive_record(
                    message,
                    Commit.of_marker(now - 60_000, FENCED_BATCH),
                    SourceRecord(f"r-landing-{key}", text, now - 60_050),
                    digest=content_digest(message),
                    archived_ms=now - 59_990,
                    delivery="beside",
                    seq=seq,
                    counted_here=True,
                    before_landing=flagged,
                )
            )
        name = object_key(PREFIX, written[0].archived_ms, "beside")
        counted.bucket.client.put_object(Bucket=counted.bucket.bucket, Key=name, Body=encode_records(written))

    def landings(batch_ids: Collection[str]) -> set[str]:
        return landed_batches(tables.client, tables.markers_table, batch_ids)

    archive_beside_the_landing(flagged=True)
    # WHEN audited while the batch is FENCED, THEN the values it touches are unsettled, never drift, the new key's
    # too (neither the table nor the recount before the read holds it: it is reported, not left out)
    fenced = counted.audit(landings=landings, attempts=1)  # judged on its first read, not only on a second look
    assert Verdict.DRIFT not in verdicts(fenced), fenced.with_verdict(Verdict.DRIFT)
    assert {f.slot.key for f in fenced.with_verdict(Verdict.UNSETTLED)} == {"k", "fresh"}
    assert fenced.not_landed == (FENCED_BATCH,)
    # AND without a markers table to read headers from, the same
    blind = counted.audit()
    assert Verdict.DRIFT not in verdicts(blind)
    assert {f.slot.key for f in blind.with_verdict(Verdict.UNSETTLED)} == {"k", "fresh"}
    assert blind.not_landed == (FENCED_BATCH,)
    # WHEN the header says DONE (or is gone: expired), THEN the landing is placed before the read, and the deltas
    # the table lacks are drift
    tables.client.put_item(TableName=tables.markers_table, Item={**header, HEADER_STATE: {"S": BatchState.DONE}})
    done = counted.audit(landings=landings)
    assert {f.slot.key for f in done.with_verdict(Verdict.DRIFT)} == {"k", "fresh"}
    assert done.not_landed == ()
    tables.client.delete_item(TableName=tables.markers_table, Key=header)
    assert {f.slot.key for f in counted.audit(landings=landings).with_verdict(Verdict.DRIFT)} == {"k", "fresh"}
    # AND the same records written without saying so, their batch FENCED again: drift while the deltas are landing
    # (what an audit would report, and --fix "repair", if the writer did not flag it)
    tables.client.put_item(TableName=tables.markers_table, Item={**header, HEADER_STATE: {"S": BatchState.FENCED}})
    for listed in counted.bucket.client.list_objects_v2(Bucket=counted.bucket.bucket)["Contents"]:
        if listed["Key"].endswith("-beside.jsonl.gz"):
            counted.bucket.client.delete_object(Bucket=counted.bucket.bucket, Key=listed["Key"])
    archive_beside_the_landing(flagged=False)
    assert {f.slot.key for f in counted.audit(landings=landings).with_verdict(Verdict.DRIFT)} == {"k", "fresh"}


def test_a_time_ranged_audit_compares_only_the_windows_in_range(counted: Counted) -> None:
    counted.count(body("a", "k", 1, ts=NOW_MS - 2 * DAY_MS), body("b", "k", 2, ts=NOW_MS))
    report = counted.audit(scope=Scope(all_time=False, since_ms=NOW_MS - DAY_MS))
    assert {f.slot.window for f in report.findings} == {"h#2026-12-02T00:00Z", "d#2026-12-02"}
    assert verdicts(report) == {Verdict.EXACT: 2}


def test_states_read_every_window_wherever_it_is(counted: Counted) -> None:
    hour = NOW_MS - DAY_MS
    counted.count(body("a", "hot", 1, ts=hour), body("b", "hot", 2, ts=NOW_MS), body("c", "hot", 4, ts=hour + HOUR_MS))
    DynamoDBWindowMover(counted.tables.client, counted.tables.counters_table, SPEC).close_all(NOW_MS + HOUR_MS)
    reader = CounterReader(counted.tables.counters_table, client=counted.tables.client, hot_keys=HOT, windows=SPEC)
    (state,) = reader.states(["hot"]).values()
    assert state.values == {"count": 7}
    assert state.windows == {
        "h#2026-12-01T00:00Z": {"count": 1},
        "h#2026-12-01T01:00Z": {"count": 4},
        "d#2026-12-01": {"count": 5},
        "h#2026-12-02T00:00Z": {"count": 2},
        "d#2026-12-02": {"count": 2},
    }
