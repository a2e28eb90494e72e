"""After the counters' commit: each post-commit step leaves every message exactly one fate.

A step's write that can never succeed (DynamoDB refuses it for good, e.g. a key item at the 400 KB item
limit) must not fail the batch: its counters are committed, so a failed batch would be redelivered and
refused again on every delivery. Its messages are dead-lettered with a code that says which step refused
them; a step's write that may succeed later reports its messages failed (redelivered, written again).
"""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from tally.archive_writer import S3ArchiveWriter
from tally.commit.fates import ApplyOutcome
from tally.commit.retrying import DEFAULT_RETRY_POLICY, RetryPolicy
from tally.config import Settings
from tally.core.declarations import Declarations
from tally.core.ledger import Commit
from tally.core.limits import WireLimits
from tally.core.model import RejectCode, SourceRecord
from tally.core.windows import DAY_MS, WindowSpec, parse_window_spec
from tally.errors import RetryableStoreError, StoreError, WriteRejectedError
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.post_commit import post_commit_steps
from tally.runtime import wire_pipeline
from tally.store.distinct import DynamoDBDistinctStore
from tally.store.gauges import DynamoDBGaugeStore
from tally.store.schema import window_attribute
from tally.store.windows import DynamoDBWindowMover
from tally_local.template import load_template, table_definitions
from tests.support.pipeline import Landed, RecordingDeadLetterQueue
from tests.template.test_template import TEMPLATE_PATH

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tally.post_commit import PostCommitStep
    from tally.store.requests import Attempt

NOW_MS = 4_102_444_800_000
SETTINGS = PipelineSettings(limits=WireLimits(), dedup_horizon_ms=35 * 86_400_000)


class AppliesAll:
    """Stands in for the applier: every message commits. Its retry policy and sleep are the ones the pipeline builds
    the post-commit steps' ``attempt`` from; its sleep does not wait (the tests check fates, not time)."""

    def __init__(self, policy: RetryPolicy = DEFAULT_RETRY_POLICY, sleep: Any = None) -> None:
        self.policy = policy
        self.sleep = sleep or no_sleep

    def commit(self, messages: Sequence[Any], now_ms: int, remaining_ms: Any) -> Landed:
        applied = frozenset(m.message_id for m in messages)
        return Landed(ApplyOutcome(applied=applied, commits=dict.fromkeys(applied, Commit.of_marker(now_ms, None))))


class RefusingGauges:
    """A gauge store whose write for ``refused`` keys fails for good, and for ``throttled`` keys for now."""

    def __init__(self, refused: set[str], throttled: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.refused = refused
        self.throttled = throttled
        self.written: list[str] = []

    def write_gauges(self, key: str, slots: Mapping[Any, Any], attempt: Attempt) -> None:
        attempt(partial(self._write, key))

    def _write(self, key: str) -> None:
        if key in self.refused:
            raise WriteRejectedError("Item size has exceeded the maximum allowed size", number_range=False)
        if key in self.throttled:
            raise RetryableStoreError("throttled")
        self.written.append(key)


class FlakyGauges:
    """A gauge store whose first ``failures`` writes of each key fail for now (throttled, a lost answer)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: dict[str, int] = {}
        self.written: list[str] = []

    def write_gauges(self, key: str, slots: Mapping[Any, Any], attempt: Attempt) -> None:
        attempt(partial(self._write, key))

    def _write(self, key: str) -> None:
        self.attempts[key] = self.attempts.get(key, 0) + 1
        if self.attempts[key] <= self.failures:
            raise RetryableStoreError("throttled")
        self.written.append(key)


class RefusingMembers:
    """A distinct store that refuses every write for good (an error no retry can fix)."""

    def write_members(self, members: Mapping[str, Any], attempt: Any) -> Any:
        raise StoreError("ValidationException: Item size has exceeded the maximum allowed size")


def gauge_record(n: int, key: str) -> SourceRecord:
    body = {"id": f"m{n}", "key": key, "delta": 1, "gauges": {"peak": {"max": n}}}
    return SourceRecord(f"r{n}", json.dumps(body), NOW_MS)


def no_sleep(_: float) -> None:
    """Backoff without waiting: the tests check fates, not time."""


def test_a_gauge_write_that_fails_for_now_is_retried_within_the_invocation() -> None:
    # GIVEN a batch whose gauge writes each fail twice for now on every key (throttling, lost answers), as a
    # busy table answers: a batch of gauge messages makes many writes, so a batch whose every write must
    # succeed first time would be redelivered until the queue's redrive policy moved its messages away
    gauges = FlakyGauges(failures=2)
    dlq = RecordingDeadLetterQueue()
    steps = post_commit_steps(WindowSpec(), gauges=gauges)
    pipeline = BatchPipeline(AppliesAll(), dlq, SETTINGS, steps=steps)
    records = [gauge_record(n, f"g:{n % 4}") for n in range(8)]
    # WHEN it is processed (the counters commit)
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN every key's gauges are written within the invocation, under the commit's retry policy
    assert result.failed_record_ids == ()
    assert dlq.letters == []
    assert sorted(gauges.written) == ["g:0", "g:1", "g:2", "g:3"]
    assert set(gauges.attempts.values()) == {3}


def test_a_gauge_write_that_keeps_failing_for_now_reports_its_messages_failed_once_attempts_run_out() -> None:
    gauges = FlakyGauges(failures=100)
    dlq = RecordingDeadLetterQueue()
    steps = post_commit_steps(WindowSpec(), gauges=gauges)
    result = BatchPipeline(AppliesAll(), dlq, SETTINGS, steps=steps).process(
        [gauge_record(1, "g:1")], NOW_MS, lambda: 60_000
    )
    assert result.failed_record_ids == ("r1",)
    assert 1 < gauges.attempts["g:1"] <= 8


def test_a_gauge_write_refused_for_good_dead_letters_its_messages_and_settles_the_rest() -> None:
    # GIVEN a batch whose gauges on key "big" DynamoDB refuses for good, on "busy" for now, on "ok" not at all
    gauges = RefusingGauges(refused={"big"}, throttled={"busy"})
    dlq = RecordingDeadLetterQueue()
    steps = post_commit_steps(WindowSpec(), gauges=gauges)
    pipeline = BatchPipeline(AppliesAll(), dlq, SETTINGS, steps=steps)
    records = [gauge_record(1, "big"), gauge_record(2, "ok"), gauge_record(3, "busy"), gauge_record(4, "big")]
    # WHEN it is processed (the counters commit)
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN "big"'s messages are dead-lettered with a code naming the refused step, "busy"'s reported failed
    # (a retry can succeed), "ok"'s done: each record exactly one fate, and the batch does not fail
    assert dlq.codes() == {"r1": "gauge_refused", "r4": "gauge_refused"}
    assert "400" in dlq.letters[0].rejection.detail or "size" in dlq.letters[0].rejection.detail
    assert result.failed_record_ids == ("r3",)
    assert gauges.written == ["ok"]


def test_a_member_write_refused_for_good_dead_letters_the_messages_that_carry_members() -> None:
    # GIVEN a distinct store that refuses for good, and a batch with and without members
    dlq = RecordingDeadLetterQueue()
    steps = post_commit_steps(WindowSpec(), distinct=RefusingMembers())
    pipeline = BatchPipeline(AppliesAll(), dlq, SETTINGS, steps=steps)
    with_members = json.dumps({"id": "m1", "key": "page:a", "delta": 1, "distinct": {"viewers": "u1"}})
    plain = json.dumps({"id": "m2", "key": "page:a", "delta": 1})
    records = [SourceRecord("r1", with_members, NOW_MS), SourceRecord("r2", plain, NOW_MS)]
    # WHEN it is processed
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN the message with members is dead-lettered (members_refused), the other done; the batch succeeds
    assert dlq.codes() == {"r1": "members_refused"}
    assert result.failed_record_ids == ()


class ThrottledMemberTransactions:
    """A DynamoDB client for the distinct store: no member counted yet, and each member transaction
    throttled ``failures`` times before it commits (a busy table)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sends = 0

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        return {"Responses": {table: [] for table in request["RequestItems"]}, "UnprocessedKeys": {}}

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        self.sends += 1
        if self.sends <= self.failures:
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"}
            raise ClientError({"Error": error}, "TransactWriteItems")
        return {}


def member_record(n: int) -> SourceRecord:
    body = {"id": f"m{n}", "key": f"page:{n}", "delta": 1, "distinct": {"viewers": f"u{n}"}}
    return SourceRecord(f"r{n}", json.dumps(body), NOW_MS)


def test_a_member_transaction_that_fails_for_now_is_retried_under_the_commits_policy() -> None:
    # GIVEN a distinct store on a busy table: the batch's member transaction is throttled as many times as
    # the commit's retry policy allows retries (one attempt short of giving up)
    client = ThrottledMemberTransactions(failures=DEFAULT_RETRY_POLICY.max_attempts - 1)
    steps = post_commit_steps(WindowSpec(), distinct=DynamoDBDistinctStore(client, "counters"))  # type: ignore[arg-type]
    pipeline = BatchPipeline(AppliesAll(), RecordingDeadLetterQueue(), SETTINGS, steps=steps)
    # WHEN the batch is processed (the counters commit)
    result = pipeline.process([member_record(1), member_record(2)], NOW_MS, lambda: 60_000)
    # THEN its members are counted within the invocation, not left to a redelivery of the batch (which the
    # queue's redrive policy would move to the DLQ without a reason after a few such deliveries)
    assert result.failed_record_ids == ()
    assert client.sends == DEFAULT_RETRY_POLICY.max_attempts
    assert result.figures["MembersAdded"] == 2


def test_a_member_transaction_is_not_sent_inside_the_time_kept_for_reporting() -> None:
    # GIVEN a batch whose invocation has less time left than the commit's retry policy keeps for reporting
    client = ThrottledMemberTransactions(failures=0)
    steps = post_commit_steps(WindowSpec(), distinct=DynamoDBDistinctStore(client, "counters"))  # type: ignore[arg-type]
    pipeline = BatchPipeline(AppliesAll(), RecordingDeadLetterQueue(), SETTINGS, steps=steps)
    # WHEN it is processed
    result = pipeline.process([member_record(1)], NOW_MS, lambda: DEFAULT_RETRY_POLICY.reserve_ms - 1)
    # THEN no member transaction is sent, and the message is reported failed (its redelivery writes them)
    assert client.sends == 0
    assert result.failed_record_ids == ("r1",)


DAYS = parse_window_spec("day")
YESTERDAY = DAYS.unit("day").window_id(NOW_MS - NOW_MS % DAY_MS - DAY_MS)


class ThrottledMoves(ThrottledMemberTransactions):
    """A DynamoDB client for the window mover: every key item it reads holds yesterday's ``views`` (an ended
    window to move), and each move transaction is throttled ``failures`` times before it commits."""

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        ended = {window_attribute(YESTERDAY, "views"): {"N": "3"}}
        asked = request["RequestItems"].items()
        return {
            "Responses": {table: [{**key, **ended} for key in ask["Keys"]] for table, ask in asked},
            "UnprocessedKeys": {},
        }


def windowed_record(n: int) -> SourceRecord:
    body = {"id": f"v{n}", "key": f"page:{n}", "delta": 1, "ts": NOW_MS}
    return SourceRecord(f"r{n}", json.dumps(body), NOW_MS)


def moving_pipeline(client: ThrottledMoves, policy: RetryPolicy = DEFAULT_RETRY_POLICY) -> BatchPipeline:
    mover = DynamoDBWindowMover(client, "counters", DAYS, move_at_bytes=0)  # type: ignore[arg-type]
    steps = post_commit_steps(DAYS, mover=mover)
    settings = PipelineSettings(limits=WireLimits(), dedup_horizon_ms=35 * 86_400_000, declarations=Declarations(DAYS))
    return BatchPipeline(AppliesAll(policy), RecordingDeadLetterQueue(), settings, steps=steps)


def test_a_window_move_that_fails_for_now_is_retried_under_the_commits_policy() -> None:
    # GIVEN a key item holding an ended day, and a busy table: its move transaction is throttled as many
    # times as the commit's retry policy allows retries (one attempt short of giving up)
    client = ThrottledMoves(failures=DEFAULT_RETRY_POLICY.max_attempts - 1)
    # WHEN a batch writing the key is processed (the counters commit)
    result = moving_pipeline(client).process([windowed_record(1)], NOW_MS, lambda: 60_000)
    # THEN the ended day is moved within the invocation, under the same policy as every other post-commit write
    assert client.sends == DEFAULT_RETRY_POLICY.max_attempts
    assert result.figures["WindowsMoved"] == 1
    assert result.figures["WindowMovesLeft"] == 0
    assert result.figures["WindowMoveTransactions"] == DEFAULT_RETRY_POLICY.max_attempts
    assert result.failed_record_ids == ()


def test_a_window_move_is_not_sent_inside_the_time_the_policy_keeps_for_reporting() -> None:
    # GIVEN a policy that keeps 10 s for reporting, and an invocation with 5 s left after the commit
    policy = RetryPolicy(reserve_ms=10_000)
    client = ThrottledMoves(failures=0)
    # WHEN a batch writing a key item with an ended day is processed
    result = moving_pipeline(client, policy).process([windowed_record(1)], NOW_MS, lambda: 5_000)
    # THEN no move is sent (the day stays on the key item, read exactly, moved by a later batch); the
    # message's counters are committed, so it is not failed for that
    assert client.sends == 0
    assert result.figures["WindowsMoved"] == 0
    assert result.failed_record_ids == ()


def test_figures_are_one_mapping_of_metric_names() -> None:
    # GIVEN a batch of gauges written
    steps = post_commit_steps(WindowSpec(), gauges=RefusingGauges(set()))
    pipeline = BatchPipeline(AppliesAll(), RecordingDeadLetterQueue(), SETTINGS, steps=steps)
    # WHEN it is processed
    result = pipeline.process([gauge_record(1, "a"), gauge_record(2, "b")], NOW_MS, lambda: 60_000)
    # THEN its figures are named as the metrics are, the commit's and every step's alike
    assert result.figures["MessagesApplied"] == 2
    assert result.figures["GaugeWrites"] == 2
    assert result.figures["RecordsFailed"] == 0
    assert {"MembersAdded", "WindowsMoved", "RecordsHeldByLease", "IdConflicts"} <= set(result.figures)
    assert RejectCode.GAUGE_REFUSED == "gauge_refused"


METRICS = {
    # the names the handlers published before the figures became a mapping (dashboards and alarms use them)
    "RecordsReceived", "MessagesApplied", "EventsApplied", "DuplicatesInBatch", "DuplicatesAlreadyApplied",
    "PoisonRecords", "DeadLetterFailures", "Transactions", "TransactionRetries", "RecordsFailed", "JournalBatches",
    "RefusedChunks", "LateEvents", "MarkerReads", "IdConflicts", "RecordsHeldByLease", "GaugeWrites", "MemberReads",
    "MemberTransactions", "MembersAdded", "WindowItemsChecked", "WindowsMoved", "WindowMoveTransactions",
    "WindowMovesLeft",
}  # fmt: skip


def test_every_batch_reports_the_same_metric_names_whatever_it_carries() -> None:
    # GIVEN the default steps (no stores) and an empty batch, and a full one
    pipeline = BatchPipeline(AppliesAll(), RecordingDeadLetterQueue(), SETTINGS)
    empty = pipeline.process([], NOW_MS, lambda: 60_000)
    full = pipeline.process([gauge_record(1, "a")], NOW_MS, lambda: 60_000)
    # THEN both report every metric the handlers always published, plus the window items written, the writes
    # sent again for a threshold's crossing, the crossings spilled into pages and the archive's figures
    archive = {"ArchiveObjects", "ArchivedMessages", "ArchiveBytes"}
    assert (
        set(empty.figures)
        == set(full.figures)
        == METRICS | {"WindowItemsWritten", "ThresholdRewrites", "SpilledCrossings"} | archive
    )
    assert full.figures["PoisonRecords"] == 1  # no gauge store: refused, never dropped


# --- one rule for every post-commit step: nothing starts inside the time kept for reporting ---------------------


class Deadline:
    """The invocation's remaining time, which each AWS request spends (``per_request_ms``); sleeping spends it too."""

    def __init__(self, remaining_ms: int, per_request_ms: int = 0) -> None:
        self.remaining = remaining_ms
        self.per_request_ms = per_request_ms
        self.starts: list[tuple[str, int]] = []
        """(operation, remaining time when it started) of every AWS request, whatever its client."""

    def remaining_ms(self) -> int:
        return self.remaining

    def sleep(self, seconds: float) -> None:
        self.remaining -= round(seconds * 1000)

    def spend_on_requests(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every AWS request of any client (botocore's one funnel) is recorded and costs ``per_request_ms``."""
        send = BaseClient._make_api_call

        def timed(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
            self.starts.append((operation, self.remaining))
            self.remaining -= self.per_request_ms
            return send(client, operation, params)

        monkeypatch.setattr(BaseClient, "_make_api_call", timed)


class GaugeWrites:
    """A DynamoDB client for the gauge store: every conditional write succeeds."""

    def __init__(self) -> None:
        self.writes = 0

    def update_item(self, **_: Any) -> dict[str, Any]:
        self.writes += 1
        return {}


def test_gauge_writes_stop_before_the_time_kept_for_reporting_and_their_messages_go_back() -> None:
    # GIVEN a batch of 200 gauge keys, whose writes each take 50 ms, and 8.45 s left after the commit: writing
    # them all would end at -1.5 s, past the deadline (Lambda kills the invocation: the whole batch comes back)
    client = GaugeWrites()
    deadline = Deadline(8_450)

    class TimedGauges(DynamoDBGaugeStore):
        def _update(self, key: str, group: Sequence[Any]) -> bool:
            deadline.starts.append(("UpdateItem", deadline.remaining))
            deadline.remaining -= 50
            return super()._update(key, group)

    steps = post_commit_steps(WindowSpec(), gauges=TimedGauges(client, "counters"))  # type: ignore[arg-type]
    pipeline = BatchPipeline(AppliesAll(), RecordingDeadLetterQueue(), SETTINGS, steps=steps)
    records = [gauge_record(n, f"g:{n}") for n in range(200)]
    # WHEN it is processed
    result = pipeline.process(records, NOW_MS, deadline.remaining_ms)
    # THEN no write starts inside the time the commit's policy keeps for reporting: the messages whose gauges were
    # not written are reported failed (their redelivery writes them), the rest are done; the batch is answered
    reserve = DEFAULT_RETRY_POLICY.reserve_ms
    assert min(remaining for _, remaining in deadline.starts) >= reserve
    assert len(result.failed_record_ids) == 200 - client.writes > 0
    assert deadline.remaining > 0


DAY_BEFORE_MS = NOW_MS - DAY_MS
STEP_SETTINGS = Settings("counters", "markers", dlq_url=None, declarations=Declarations(parse_window_spec("hour,day")))
STEP_PIPELINE = PipelineSettings(
    limits=WireLimits(), dedup_horizon_ms=35 * 86_400_000, declarations=STEP_SETTINGS.declarations
)


ARCHIVE_BUCKET = "tally-step-archive"


def production_steps(client: Any) -> tuple[PostCommitStep, ...]:
    """The post-commit steps of the handlers' pipeline, in order, every store wired (``tally.runtime``), the
    archive's on an S3 client of the same account."""
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    archive = S3ArchiveWriter(s3, ARCHIVE_BUCKET)
    return wire_pipeline(client, RecordingDeadLetterQueue(), STEP_SETTINGS, archive=archive).steps


STEP_NAMES = [
    type(step).__name__
    for step in production_steps(
        boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    )
]
"""Every step of the pipeline's list, whatever is added to it later: each is held to the one rule below."""


def everything_a_step_serves() -> list[SourceRecord]:
    """A batch that gives every step work: gauges on six keys, distinct members, events of the day before (so
    their hour and day windows have ended by ``NOW_MS``, on key items the setup wrote), and counted messages for
    the archive (all of them)."""
    bodies: list[dict[str, Any]] = [
        {"id": f"g{n}", "key": f"g:{n}", "delta": 1, "gauges": {"peak": {"max": n}}} for n in range(6)
    ]
    bodies += [{"id": f"d{n}", "key": f"page:{n}", "delta": 1, "distinct": {"viewers": f"u{n}"}} for n in range(3)]
    bodies += [{"id": f"w{n}", "key": f"win:{n}", "delta": 1, "ts": DAY_BEFORE_MS} for n in range(3)]
    return [SourceRecord(f"r-{body['id']}", json.dumps(body), DAY_BEFORE_MS) for body in bodies]


@pytest.fixture
def served(mocked_aws: None) -> Any:
    """moto's tables of the template, where the handlers' pipeline counted ``everything_a_step_serves`` the day
    before (its windows still open then)."""
    client = boto3.client("dynamodb", region_name="us-east-1")
    definitions = table_definitions(load_template(TEMPLATE_PATH))
    definitions["CountersTable"].create(client, "counters")
    definitions["MarkersTable"].create(client, "markers")
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=ARCHIVE_BUCKET)
    result = wire_pipeline(client, RecordingDeadLetterQueue(), STEP_SETTINGS).process(
        everything_a_step_serves(), DAY_BEFORE_MS, lambda: 60_000
    )
    assert result.failed_record_ids == ()
    return client


@pytest.mark.parametrize("index", range(len(STEP_NAMES)), ids=STEP_NAMES)
def test_no_post_commit_step_starts_a_request_inside_the_time_kept_for_reporting(
    served: Any, monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    reserve = DEFAULT_RETRY_POLICY.reserve_ms

    def run_step(deadline: Deadline) -> Any:
        step = production_steps(served)[index]
        pipeline = BatchPipeline(AppliesAll(), RecordingDeadLetterQueue(), STEP_PIPELINE, steps=[step])
        with monkeypatch.context() as patched:
            deadline.spend_on_requests(patched)
            return pipeline.process(everything_a_step_serves(), NOW_MS, deadline.remaining_ms)

    # GIVEN the step with the batch that gives it work, and plenty of time: it makes requests (the test reaches it)
    plenty = Deadline(60_000)
    run_step(plenty)
    assert plenty.starts, f"{STEP_NAMES[index]} made no request: give it work in everything_a_step_serves"
    # WHEN the invocation has less than the reserve left after the commit
    short = Deadline(reserve - 1)
    result = run_step(short)
    # THEN the step starts no request at all, and the batch is answered (whatever it could not do goes back)
    assert short.starts == []
    assert set(result.failed_record_ids) <= {record.record_id for record in everything_a_step_serves()}
    # WHEN the time runs into the reserve while it works (each request takes a second)
    sinking = Deadline(reserve + 1_500, per_request_ms=1_000)
    run_step(sinking)
    # THEN no request starts inside the reserve
    assert all(remaining >= reserve for _, remaining in sinking.starts), sinking.starts
