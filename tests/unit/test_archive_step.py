"""The archive step (``tally.post_commit.archive``): every counted message archived once per commit, after it.

A fake applier decides each message's fate (and names its commit); a fake writer plays S3. The DynamoDB
Local and moto tests (tests/integration/test_archive.py) run the same step through the production wiring.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from tally.commit.fates import ApplyOutcome
from tally.commit.retrying import RetryPolicy
from tally.config import Settings
from tally.core.archive import decode_records, object_key
from tally.core.ledger import Commit
from tally.core.limits import WireLimits
from tally.core.model import COUNTED_REFUSALS, RejectCode, Rejection, SourceRecord
from tally.core.windows import WindowSpec
from tally.errors import ConfigurationError, RetryableStoreError, StoreError
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.post_commit import post_commit_steps
from tests.support.pipeline import Landed, RecordingDeadLetterQueue

if TYPE_CHECKING:
    from collections.abc import Sequence

NOW_MS = 4_102_444_800_000
LATER_MS = NOW_MS + 250
SETTINGS = PipelineSettings(limits=WireLimits(), dedup_horizon_ms=35 * 86_400_000)
POLICY = RetryPolicy(base_delay_s=0.0, max_delay_s=0.0, max_attempts=4, reserve_ms=1_000)
EARLIER = Commit.of_marker(NOW_MS - 86_400_000, "b" * 32)


class Decides:
    """Stands in for the applier: ``applied`` commit now, ``before`` met a marker, ``refused`` and ``unapplied``
    as named; ``unnamed`` met a marker without its applied time. Its retry policy and sleep are what the pipeline
    builds the post-commit steps' attempt from (no waiting: the tests check fates, not time)."""

    policy = POLICY

    @staticmethod
    def sleep(_: float) -> None:
        return None

    def __init__(
        self,
        *,
        before: Sequence[str] = (),
        refused: Sequence[str] = (),
        unapplied: Sequence[str] = (),
        unnamed: Sequence[str] = (),
    ) -> None:
        self.before, self.refused, self.unapplied, self.unnamed = (
            set(before),
            set(refused),
            set(unapplied),
            set(unnamed),
        )

    def commit(self, messages: Sequence[Any], now_ms: int, remaining_ms: Any) -> Landed:
        ids = [m.message_id for m in messages]
        applied = frozenset(i for i in ids if i not in self.before | self.refused | self.unapplied | self.unnamed)
        commits = {i: Commit.of_marker(now_ms, None) for i in applied} | {i: EARLIER for i in self.before}
        return Landed(
            ApplyOutcome(
                applied=applied,
                already_applied=frozenset(self.before | self.unnamed),
                rejected={i: Rejection(RejectCode.BELOW_FLOOR, "refused") for i in self.refused},
                unapplied=frozenset(self.unapplied),
                commits=commits,
            )
        )


class Writer:
    """A fake S3: ``fail_for_now`` next puts raise RetryableStoreError (``lose``: after storing), ``refuse`` all
    raise StoreError."""

    def __init__(self, fail_for_now: int = 0, *, lose: bool = False, refuse: bool = False) -> None:
        self.fail_for_now, self.lose, self.refuse = fail_for_now, lose, refuse
        self.objects: dict[str, bytes] = {}
        self.puts: list[tuple[str, bytes]] = []

    def put(self, key: str, body: bytes) -> None:
        self.puts.append((key, body))
        if self.refuse:
            raise StoreError("AccessDenied: Access Denied")
        if self.fail_for_now:
            self.fail_for_now -= 1
            if self.lose:
                self.objects[key] = body
                raise RetryableStoreError("outcome unknown: read timeout")
            raise RetryableStoreError("SlowDown: Please reduce your request rate.")
        self.objects[key] = body


def record(n: int, key: str = "k", **extra: Any) -> SourceRecord:
    return SourceRecord(f"r{n}", json.dumps({"id": f"m{n}", "key": key, "delta": n, **extra}), NOW_MS - n)


def run(
    decides: Decides, writer: Writer | None, records: Sequence[SourceRecord], remaining: int = 60_000
) -> tuple[Any, RecordingDeadLetterQueue]:
    dlq = RecordingDeadLetterQueue()
    steps = post_commit_steps(WindowSpec(), archive=writer, clock=lambda: LATER_MS)
    pipeline = BatchPipeline(decides, dlq, SETTINGS, steps=steps)
    return pipeline.process(records, NOW_MS, lambda: remaining), dlq


def test_every_counted_message_is_archived_under_its_commit_and_nothing_else() -> None:
    # GIVEN a batch: two messages counted now, one counted before (its marker met), one refused, one handed
    # back, and a copy of m1 in the same batch
    writer = Writer()
    records = [record(1), record(2), record(3), record(4), record(5), record(1)]
    result, _ = run(Decides(before=["m3"], refused=["m4"], unapplied=["m5"]), writer, records)
    # THEN one object holds exactly the counted messages, each once, under its commit, in source order
    ((key, body),) = writer.objects.items()
    archived = decode_records(body)
    assert [(r.id, r.commit, r.counted_here, r.seq) for r in archived] == [
        ("m1", f"direct-{NOW_MS}", True, 0),
        ("m2", f"direct-{NOW_MS}", True, 1),
        ("m3", EARLIER.commit, False, 2),
    ]
    assert {r.archived_ms for r in archived} == {LATER_MS}
    assert [r.record_id for r in archived] == ["r1", "r2", "r3"]
    assert key == object_key("events/", LATER_MS, archived[0].delivery)
    assert [event.deltas for r in archived for event in r.events] == [{"count": 1}, {"count": 2}, {"count": 3}]
    # AND only the handed-back message comes back; the figures say what was written
    assert result.failed_record_ids == ("r5",)
    assert (result.figures["ArchiveObjects"], result.figures["ArchivedMessages"]) == (1, 3)
    assert result.figures["ArchiveBytes"] == len(body)


def test_a_write_that_fails_for_now_is_retried_within_the_invocation() -> None:
    writer = Writer(fail_for_now=2)
    result, _ = run(Decides(), writer, [record(1), record(2)])
    assert result.failed_record_ids == ()
    assert len(writer.objects) == 1
    assert len(writer.puts) == 3


def test_a_lost_answer_is_written_again_under_the_same_key_with_the_same_bytes() -> None:
    writer = Writer(fail_for_now=1, lose=True)
    result, _ = run(Decides(), writer, [record(1)])
    assert result.failed_record_ids == ()
    assert len({key for key, _ in writer.puts}) == 1
    assert len({body for _, body in writer.puts}) == 1
    assert len(writer.objects) == 1


def test_a_write_that_keeps_failing_reports_every_archived_message_failed() -> None:
    # GIVEN S3 throttling every attempt: the counters are committed, the archive is not
    writer = Writer(fail_for_now=100)
    result, dlq = run(Decides(before=["m2"]), writer, [record(1), record(2)])
    # THEN both records come back (their redelivery meets the markers and archives them then), none is lost
    assert result.failed_record_ids == ("r1", "r2")
    assert dlq.letters == []
    assert writer.objects == {}
    assert len(writer.puts) == POLICY.max_attempts


def test_a_write_refused_for_good_dead_letters_the_messages_as_counted_refusals() -> None:
    writer = Writer(refuse=True)
    result, dlq = run(Decides(), writer, [record(1), record(2)])
    assert result.failed_record_ids == ()
    assert dlq.codes() == {"r1": "archive_refused", "r2": "archive_refused"}
    assert RejectCode.ARCHIVE_REFUSED in COUNTED_REFUSALS  # a redrive is sent, meets the marker, archives
    assert len(writer.puts) == 1


def test_no_write_starts_inside_the_time_kept_for_reporting() -> None:
    writer = Writer()
    result, _ = run(Decides(), writer, [record(1)], remaining=POLICY.reserve_ms - 1)
    assert writer.puts == []
    assert result.failed_record_ids == ("r1",)


def test_a_marker_met_without_its_commit_is_left_to_a_redelivery() -> None:
    writer = Writer()
    result, _ = run(Decides(unnamed=["m2"]), writer, [record(1), record(2)])
    assert [r.id for body in writer.objects.values() for r in decode_records(body)] == ["m1"]
    assert result.failed_record_ids == ("r2",)


@pytest.mark.parametrize("writer", [None, Writer()])
def test_a_batch_that_counted_nothing_writes_nothing(writer: Writer | None) -> None:
    result, _ = run(Decides(refused=["m1"]), writer, [record(1)])
    assert result.figures["ArchiveObjects"] == 0
    assert writer is None or writer.puts == []


def test_the_archive_off_archives_nothing_and_fails_nothing() -> None:
    result, _ = run(Decides(unnamed=["m1"]), None, [record(1)])
    assert result.failed_record_ids == ()


def test_the_settings_name_the_bucket_and_a_prefix_that_ends_with_a_slash() -> None:
    base = {"TALLY_COUNTERS_TABLE": "c", "TALLY_MARKERS_TABLE": "m", "TALLY_DLQ_URL": "q"}
    assert Settings.from_env(base).archive_bucket is None  # unset or empty: the archive is off
    assert Settings.from_env(base | {"TALLY_ARCHIVE_BUCKET": ""}).archive_bucket is None
    on = Settings.from_env(base | {"TALLY_ARCHIVE_BUCKET": "b", "TALLY_ARCHIVE_PREFIX": "tally/events/"})
    assert (on.archive_bucket, on.archive_prefix) == ("b", "tally/events/")
    assert Settings.from_env(base | {"TALLY_ARCHIVE_BUCKET": "b"}).archive_prefix == "events/"
    for bad in ("events", "/events/"):
        with pytest.raises(ConfigurationError, match="TALLY_ARCHIVE_PREFIX"):
            Settings.from_env(base | {"TALLY_ARCHIVE_PREFIX": bad})
