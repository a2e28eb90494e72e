"""The chaos run catches a broken variant of each counter pattern (defined here, never in src/).

- gauges written only for the messages a batch applies now: a kill between the counters' commit and the
  gauge writes leaves the redelivery, which finds the markers, writing nothing;
- member items written without ``attribute_not_exists``: a member written twice (a lost answer sent again,
  two invocations racing) adds to its distinct count twice;
- a pipeline not told the deployment's bounds: a seat goes below 0 or above 40;
- a gauge or member write DynamoDB refuses for good escaping after the commit (as it once did): the batch
  fails on every delivery, its messages end in the DLQ without their step's code (or never leave a shard);
- gauge writes that fail for now left to a redelivery of the whole batch (as they once were): on a busy table a
  batch of gauge messages fails most deliveries, until the queue's redrive policy moves valid messages to the
  DLQ without a reason, however often the operator redrives.

Each runs on a focused configuration (``tally_local.chaos.config.focused``: the smoke faults over plain events plus
the one pattern section it needs), which ``test_each_focused_run_passes_unbroken`` runs through the production
wiring: it must pass, with the situation its variant needs drawn.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.sharding import parse_hot_keys
from tally.core.windows import parse_window_spec
from tally.errors import StoreError
from tally.post_commit import GaugeStep, MemberStep
from tally.store.distinct import DynamoDBDistinctStore
from tally.store.gauges import DynamoDBGaugeStore
from tally.store.requests import send_once
from tally_local.chaos.config import SMOKE, focused
from tests.support.chaos import assert_passes_unbroken, rewired, run_on, swap_step

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.commit.applier import Committed
    from tally.commit.fates import ApplyOutcome
    from tally.core.model import Message, Rejection
    from tally.pipeline import BatchPipeline
    from tally.post_commit import PostCommitStep, SettledBatch, StepResult
    from tally_local.chaos.config import ChaosConfig
    from tally_local.chaos.harness import Tables
    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

# The chaos run archives to a moto server of its own (tally_local.chaos.archive).
pytestmark = [pytest.mark.integration, pytest.mark.moto]


class GaugesOfNewMessagesOnly(GaugeStep):
    """BROKEN on purpose: gauges written for messages applied now, not for those a marker shows applied."""

    newly_applied: frozenset[str] = frozenset()

    def settle(self, batch: SettledBatch) -> StepResult:
        messages = [message for message in batch.messages if message.message_id in self.newly_applied]
        return super().settle(replace(batch, messages=messages))


def _write_gauges_of_new_messages_only(
    pipeline: BatchPipeline, client: DynamoDBClient, tables: Tables, config: ChaosConfig
) -> None:
    step = GaugesOfNewMessagesOnly(DynamoDBGaugeStore(client, tables.counters))
    swap_step(pipeline, step)
    applier = pipeline._applier
    commit = applier.commit

    def remembering(*args: Any, **kwargs: Any) -> Committed:
        committed = commit(*args, **kwargs)
        land = committed.land

        def landed() -> ApplyOutcome:
            outcome = land()
            step.newly_applied = outcome.applied
            return outcome

        committed.land = landed  # type: ignore[method-assign]
        return committed

    applier.commit = remembering  # type: ignore[method-assign]


_gauges_of_new_messages_only = rewired(_write_gauges_of_new_messages_only)


GAUGES = focused(
    SMOKE,
    200,
    gauge_messages=SMOKE.gauge_messages,
    kinesis_batch_size=25,
    dynamodb=replace(SMOKE.dynamodb, kill_before_gauges=0.5),
)
"""Gauge messages, and invocations killed between the counters' commit and the gauge writes. Small Kinesis
batches: at the smoke run's 250 records a busy machine's run once took all its records in 6 invocations, killed
none before its gauges, and the broken variant below went uncaught."""
DISTINCT = focused(SMOKE, 100, distinct_messages=100, dynamodb=replace(SMOKE.dynamodb, lost_response=0.3))
"""Distinct-count members, and lost answers (a member transaction sent again) at a high rate: the unconditioned
member items drifted 6 to 8 of the 8 distinct counts in each of 3 runs (200 messages: 8 in each of 3; 60 members
at 0.2: 0 in one run of 2)."""
BUSY_GAUGES = focused(
    SMOKE,
    100,
    gauge_messages=60,
    sqs_share=1.0,
    dynamodb=replace(SMOKE.dynamodb, connect_failure=0.1, lost_response=0.15, throttle_request=0.15),
)
"""Gauge messages from SQS on a busy table: two requests in five fail for now (a connection refused, a lost
answer, throttling), so a batch's many gauge writes rarely all succeed at a first attempt. The variant that tries
each write once left 9 to 12 valid messages in the DLQ in each of 3 runs at 60 gauge messages (4 to 6 at 30)."""
BOUNDED = focused(SMOKE, 200, bounded_messages=SMOKE.bounded_messages)
"""Messages stepping the ``seats:`` counters bounded to [0, 40]."""

FOCUSED: dict[str, tuple[ChaosConfig, tuple[str, ...]]] = {
    "gauges": (GAUGES, ("outcome.killed_before_gauges", "gauges_checked")),
    "distinct": (DISTINCT, ("ddb.lost_response", "distinct_checked")),
    "busy gauges": (BUSY_GAUGES, ("ddb.throttle_request", "ddb.lost_response", "gauges_checked")),
    "bounded": (BOUNDED, ("bounded_counted", "bounded_refused")),
}
"""The focused configuration of each broken variant below but the refused writes' (whose production run is a
test of its own), and what it must draw for the variant to be able to fail (``situations_missing``)."""


@pytest.mark.parametrize("name", sorted(FOCUSED))
def test_each_focused_run_passes_unbroken(dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables, name: str) -> None:
    # GIVEN the focused configuration a broken variant below runs on, WHEN it runs through the production pipeline,
    # THEN it drew the situation its variant needs, and every check holds: the run passes
    assert_passes_unbroken(dynamodb_local, ddb_tables, *FOCUSED[name])


def test_the_harness_catches_gauges_left_unwritten_after_a_kill(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN a pipeline that writes gauges only for messages it applies now (the naive
    # variant): a redelivery after a kill between the commit and the gauge writes finds the markers and
    # writes nothing
    # WHEN it runs under the smoke run's faults
    result = run_on(dynamodb_local, ddb_tables, GAUGES, pipeline_factory=_gauges_of_new_messages_only)

    # THEN the harness finds gauges that lack readings of counted messages, and fails the run
    assert result.unexpected_errors == ()
    assert result.counts.get("outcome.killed_before_gauges", 0) > 0
    assert result.verdict.gauges_wrong > 0
    assert not result.passed


class GaugeWritesTriedOnce(GaugeStep):
    """BROKEN on purpose: each gauge write sent once, a failure for now left to the batch's redelivery (a step
    sending around the batch's ``attempt``)."""

    def settle(self, batch: SettledBatch) -> StepResult:
        return super().settle(replace(batch, attempt=send_once))


def _gauge_writes_tried_once(
    pipeline: BatchPipeline, client: DynamoDBClient, tables: Tables, config: ChaosConfig
) -> None:
    swap_step(pipeline, GaugeWritesTriedOnce(DynamoDBGaugeStore(client, tables.counters)))


_gauges_tried_once = rewired(_gauge_writes_tried_once)


def test_the_harness_catches_gauge_writes_left_to_redelivery_on_a_busy_table(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN a pipeline that tries each key's gauge write once, leaving a failure for now to the batch's redelivery
    # WHEN gauge messages arrive from SQS while a quarter of DynamoDB's requests fail for now
    result = run_on(dynamodb_local, ddb_tables, BUSY_GAUGES, pipeline_factory=_gauges_tried_once)
    # THEN the redrive policy moves valid messages to the DLQ without a reason, redrive after redrive, and the
    # harness fails the run
    assert result.unexpected_errors == ()
    assert result.verdict.valid_in_dlq > 0, result.verdict.examples
    assert not result.passed


class MembersWithoutConditions(DynamoDBDistinctStore):
    """BROKEN on purpose: member items are Put without ``attribute_not_exists``, so a member written twice
    (a lost answer sent again, two invocations racing) adds to the count twice."""

    def _actions(self, shards: Mapping[str, int], pending: Sequence[Any]) -> list[dict[str, Any]]:
        actions = super()._actions(shards, pending)
        for action in actions:
            put = action.get("Put")
            if put is not None:
                put.pop("ConditionExpression")
                put.pop("ExpressionAttributeNames")
        return actions


def _write_members_without_conditions(
    pipeline: BatchPipeline, client: DynamoDBClient, tables: Tables, config: ChaosConfig
) -> None:
    store = MembersWithoutConditions(client, tables.counters, parse_hot_keys(config.hot_keys))
    swap_step(pipeline, MemberStep(store, parse_window_spec(config.windows, config.window_retention)))


_members_without_conditions = rewired(_write_members_without_conditions)


_unbounded = rewired(wired_from=lambda config: replace(config, counter_bounds=""))
"""BROKEN on purpose: the pipeline is not told the bounds (the check still knows them)."""


def test_the_harness_catches_distinct_counts_that_drift(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN member items written without their condition, under lost answers at a high rate
    # WHEN it runs
    result = run_on(dynamodb_local, ddb_tables, DISTINCT, pipeline_factory=_members_without_conditions)
    # THEN some distinct count is more than its members, and the run fails; by the counts alone: the variant
    # itself raises nothing (a variant whose override no longer fits the store it overrides fails every
    # batch with members, leaves every distinct count unwritten, and proves nothing)
    assert result.unexpected_errors == ()
    assert result.verdict.distinct_wrong > 0
    assert not result.passed


def test_the_harness_catches_a_bound_crossed(dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables) -> None:
    # GIVEN a pipeline that enforces no bound WHEN the bounded messages run
    result = run_on(dynamodb_local, ddb_tables, BOUNDED, pipeline_factory=_unbounded)
    # THEN some seat ends outside [0, 40] and the run fails
    assert result.unexpected_errors == ()
    assert result.verdict.bound_violations > 0
    assert not result.passed


class RefusalsEscaping:
    """BROKEN on purpose: a post-commit step whose write DynamoDB refuses for good raises after the commit
    (the pipeline before each step settled its messages), so the batch fails on every delivery."""

    def __init__(self, step: PostCommitStep) -> None:
        self._step = step

    def admit(self, message: Message) -> Rejection | None:
        return self._step.admit(message)

    def settle(self, batch: SettledBatch) -> StepResult:
        result = self._step.settle(batch)
        if result.refused:
            raise StoreError(next(iter(result.refused.values())).detail)
        return result


def _let_refusals_escape(pipeline: BatchPipeline, client: DynamoDBClient, tables: Tables, config: ChaosConfig) -> None:
    pipeline._steps = tuple(RefusalsEscaping(step) for step in pipeline._steps)


REFUSING = focused(SMOKE, 100, gauge_messages=20, distinct_messages=20, refused_keys=1, sqs_share=1.0)
"""The smoke faults with one ``g:`` and one ``page:`` key whose gauge and member writes are refused for good,
from SQS only. Under the broken variant their batches fail on every delivery until the redrive policy moves
them to the DLQ, and every redrive sends them round again: from Kinesis too, a shard bisects and retries each
such batch ten times per pass (the broken variant's test took 65 s at the smoke run's sources and load);
whether the batch fails is the pipeline's doing, the same for both sources (the smoke run meets refused keys
from both)."""


def test_writes_refused_for_good_after_the_commit_leave_each_message_one_fate(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN the production wiring, and gauge and member writes DynamoDB refuses for good on two keys
    # WHEN the run's load meets them under the smoke faults
    result = run_on(dynamodb_local, ddb_tables, REFUSING)
    # THEN every message on them counts and is in the DLQ with its step's code, and the run passes
    assert result.faults.get("ddb.refused_for_good_gauges", 0) > 0
    assert result.faults.get("ddb.refused_for_good_members", 0) > 0
    verdict = result.verdict
    assert verdict.step_refused > 0
    assert verdict.step_refused_in_dlq == verdict.step_refused, verdict.examples
    assert (verdict.gauges_wrong, verdict.distinct_wrong, verdict.lost_events, verdict.doubled_events) == (0, 0, 0, 0)
    assert result.passed, verdict.examples


def test_the_harness_catches_a_refused_post_commit_write_that_fails_its_batch(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN post-commit steps that let a write DynamoDB refuses for good escape after the commit
    config = REFUSING
    # WHEN the run's refused keys meet them
    result = run_on(dynamodb_local, ddb_tables, config, pipeline_factory=rewired(_let_refusals_escape))
    # THEN their messages are not in the DLQ with their step's code (their batches failed until the redrive
    # policy or the shard gave up), and the run fails
    assert result.faults.get("ddb.refused_for_good_gauges", 0) > 0
    assert result.verdict.step_refused_in_dlq < result.verdict.step_refused
    assert not result.passed
