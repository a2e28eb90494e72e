"""What the chaos run found, reduced to deterministic reproductions (docs/reliability.md, "Findings"), and the
situations the run was taught to produce after a review found a defect it missed, each with its broken variant.

Each test states the behaviour tally should have. A test marked ``xfail(strict=True)`` reproduces a defect
that is not fixed yet: it fails today, and the day the fix lands it passes, which strict mode turns into a
failure so that the marker is removed.

Situations, each on a focused configuration (``tally_local.chaos.config.focused``) whose production run passes
with the situation drawn, and a variant with the fix undone (BROKEN on purpose) that fails it:

- ``EXPIRED_CLAIMS``: TTL deletes an expired marker between two requests of one invocation, among them between
  the read that found it naming a dead batch and the claim replacing it (``tally_local.chaos.expired_claims``);
  the variant reads such a claim's cancellation as a direct marker, as ``translate`` did.
- ``KINESIS_CRASHES``: invocations killed after half their journal claims, on Kinesis, Lambda retrying at every
  poll while the killed invocation's lease holds the records; with the template's defaults nothing may be given
  up; the variant is the template's former default, 10 retries.
- ``VIEWS``: events with dimensions counted under three views (per customer, per route, per both), under every
  fault of the smoke run, their ended windows moved during the run; each view item must equal the exact sum of its
  events and the views must partition their key; the variant writes views after the commit instead of in it.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from tally.core.items import make_item
from tally.core.ledger import Claim, MarkerMet, MarkersExistError
from tally.core.model import SourceRecord
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally.store.schema import counter_attribute, item_key
from tally_local.chaos.config import SMOKE, focused
from tally_local.chaos.harness import require_empty
from tally_local.chaos.workload import TRACER
from tally_local.esm import RetryCadence
from tests.support import chaos as chaos_support
from tests.support.chaos import assert_passes_unbroken, rewired, run_on, views_written_after_the_commit
from tests.support.counts import read_all
from tests.support.pipeline import make_pipeline, make_store
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tally.core.write import DirectWrite
    from tally_local.chaos.config import ChaosConfig
    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

# The chaos run archives to a moto server of its own (tally_local.chaos.archive).
pytestmark = [pytest.mark.integration, pytest.mark.moto]

NOW_MS = SENT_MS + 1_000


def test_two_messages_of_one_expired_journal_batch_are_claimed_again_together(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a journal batch that claimed two messages sharing a key, then died before committing
    # (an invocation killed at its deadline): its header is PREPARING and its lease has expired
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table, 35 * 86_400)
    journal.open("dead-batch", NOW_MS - 1, [Claim("m-1"), Claim("m-2")], NOW_MS - 60_000)
    pipeline, dead_letters = make_pipeline(store)
    records = [
        SourceRecord("r-1", '{"id":"m-1","key":"shared","delta":1}', SENT_MS),
        SourceRecord("r-2", '{"id":"m-2","key":"shared","delta":2}', SENT_MS),
    ]

    # WHEN both messages are redelivered in one batch
    result = pipeline.process(records, NOW_MS, lambda: 60_000)

    # THEN the dead batch is aborted, both messages are claimed again and counted once
    assert result.failed_record_ids == ()
    assert dead_letters.letters == []
    assert read_all(store, ["shared"]) == {"shared": {"count": Decimal(3)}}


# --- TTL deletes a marker between its read and the claim that replaces it -----------------------------------

EXPIRED_CLAIMS = focused(SMOKE, 20, expired_claims=3, archive=True)
"""Dead batches' claims met again while TTL sweeps just before a drawn request of the invocation, beside 20 plain
events: at this seed, 2 of the 3 sweeps fall between the read of a marker (an own one, a block's) and the claim
replacing it; one case alone already fails without the fix, three cost a few tenths of a second more."""


def _read_as_before_the_fix(exists: MarkersExistError) -> MarkersExistError:
    """The cancellation as ``translate`` read it before the fix: a marker gone reported like a direct marker."""
    return MarkersExistError({mid: exists.markers.get(mid, MarkerMet()) for mid in exists.message_ids})


class StoreReadingVanishedMarkersAsDirect(DynamoDBCounterStore):
    """BROKEN on purpose: a direct replacing marker's cancellation without a marker reads as a direct marker."""

    def write(self, write: DirectWrite) -> None:
        try:
            super().write(write)
        except MarkersExistError as exists:
            raise _read_as_before_the_fix(exists) from exists


class JournalReadingVanishedMarkersAsDirect(DynamoDBJournal):
    """BROKEN on purpose: a replacing journal claim's cancellation without a marker reads as a direct marker."""

    def open(self, batch_id: str, lease_until_ms: int, claims: Sequence[Claim], now_ms: int) -> None:
        try:
            super().open(batch_id, lease_until_ms, claims, now_ms)
        except MarkersExistError as exists:
            raise _read_as_before_the_fix(exists) from exists

    def claim(self, batch_id: str, claims: Sequence[Claim], now_ms: int) -> None:
        try:
            super().claim(batch_id, claims, now_ms)
        except MarkersExistError as exists:
            raise _read_as_before_the_fix(exists) from exists


_vanished_markers_read_as_direct = rewired(
    store_class=StoreReadingVanishedMarkersAsDirect, journal_class=JournalReadingVanishedMarkersAsDirect
)


def test_the_focused_expired_claims_run_passes_unbroken(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # WHEN the run the broken adapters below go through runs through the production wiring
    # THEN TTL swept between two requests, once just before a claim replacing the marker it deleted, and it passes
    assert_passes_unbroken(
        dynamodb_local,
        ddb_tables,
        EXPIRED_CLAIMS,
        ("situation.ttl_swept_between_requests", "situation.ttl_swept_between_a_marker_read_and_its_replacement"),
    )


def test_the_harness_catches_a_marker_ttl_deleted_before_its_replacement_settled_as_applied(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN adapters that read a replacing claim cancelled for want of a marker as one that met a direct marker,
    # with the archive off: on, its step hands back a message whose marker named no applied time (it cannot name
    # the commit), and the redelivery counts it, which hides this defect rather than shows it
    # WHEN TTL sweeps just before such a claim
    config = replace(EXPIRED_CLAIMS, archive=False)
    result = run_on(dynamodb_local, ddb_tables, config, pipeline_factory=_vanished_markers_read_as_direct)
    # THEN the message is settled as applied without its deltas (acknowledged, never counted, no letter), and the
    # run fails
    assert result.situations.get("situation.ttl_swept_between_a_marker_read_and_its_replacement", 0) > 0, (
        result.situations
    )
    assert any("reads 0, not 1" in problem for problem in result.expired_claim_problems), result.expired_claim_problems
    assert not result.passed


# --- crashes after a claim on Kinesis: no record given up ---------------------------------------------------

KINESIS_CRASHES = focused(
    SMOKE,
    10,
    archive=True,
    kinesis_big_messages=2,
    sqs_share=0.0,
    kinesis_shards=1,
    kinesis_batch_size=1,
    function_timeout_s=15,
    kinesis_retry_cadence=RetryCadence.EVERY_POLL.value,
    dynamodb=replace(SMOKE.dynamodb, kill_after_claim=0.5),
    redrives=0,
    extra_redrives=0,
)
"""Two big messages on Kinesis (journal units), half the claims killed before their commit, and Lambda retrying at
every poll, the fastest cadence its documentation allows (a 15 s function: its 75 s lease spends 75 retries). One
shard and one record a batch, so each crash's retries are that record's; no redrive: nothing is to be given up
(the variant's give-ups would otherwise be replayed within the lease, and given up again, for seconds)."""


def test_the_focused_kinesis_crashes_run_gives_nothing_up(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # WHEN invocations are killed after their claims on Kinesis, with the template's defaults (no retry count, 6 h
    # of record age)
    # THEN retries met the killed invocation's live lease, no record was ever given up, and the run passes
    assert_passes_unbroken(
        dynamodb_local,
        ddb_tables,
        KINESIS_CRASHES,
        ("outcome.killed_between_claim_and_commit", "situation.kinesis_invocations_held_by_a_lease"),
    )


def test_the_harness_catches_kinesis_records_given_up_after_a_crash(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN the template's former default: 10 retries of a failing Kinesis batch
    # WHEN an invocation is killed after its claim, and the records wait out its lease
    result = run_on(dynamodb_local, ddb_tables, replace(KINESIS_CRASHES, kinesis_max_retries=10))
    # THEN the retries are spent within the lease and a valid record is given up to the on-failure destination
    # (counted after the replay, but an operator's chore after an ordinary crash), and the run fails
    assert result.counts.get("outcome.killed_between_claim_and_commit", 0) > 0, result.counts
    assert result.verdict.valid_given_up > 0, result.verdict.examples


# --- 36-digit steps under a bound: refused by the bound, never for their condition's digits ---------------------

DIGIT_STEPS = focused(SMOKE, 60, digit_bound_steps=6, windows="minute,hour,day", archive=True)
"""Six messages stepping a ``seats:`` counter (bounded to [0, 40]) by a 36-digit amount, three of them packed with
an ordinary step on another seat, each right after a small step onto its seat: each must be refused by its bound,
whole. With minute windows (items of their own, which no bound conditions) the big step's window sums need 39 or 40
digits from a seat above 0, and DynamoDB refuses the request for that number before it looks at the bound."""


def test_a_36_digit_step_under_a_bound_is_refused_by_the_bound(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN steps whose condition compares the stored value with 40 minus the step (39 significant digits), WHEN
    # they run through the production pipeline under the smoke run's faults, THEN the bound refuses each
    assert_passes_unbroken(
        dynamodb_local, ddb_tables, DIGIT_STEPS, ("situation.bounded_36_digit_step_refused_by_its_bound",)
    )


def test_the_harness_catches_a_bound_condition_sent_with_its_exact_ends(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a store whose bound condition carries the ceiling minus a step as it is, whatever its digits
    monkeypatch.setattr("tally.core.bounds.storable_at_most", lambda value: value)
    monkeypatch.setattr("tally.core.bounds.storable_at_least", lambda value: value)
    # WHEN the 36-digit steps run
    result = run_on(dynamodb_local, ddb_tables, DIGIT_STEPS)
    # THEN DynamoDB refuses the condition's value (39 digits), the run's watch of DynamoDB's limits names those
    # requests, and the run fails (the messages themselves end refused by their bound: a bounded message refused
    # for a number is judged by the values its seat holds)
    assert any("39 significant digits" in request for request in result.requests_over_limits), result.verdict
    assert not result.passed


# --- a run's tables: empty, its own --------------------------------------------------------------------------

SESSION_KEYS = focused(SMOKE, 0, bounded_sessions=1)
"""One bounded session alone: its keys (``bs:0:0`` ...) are named alike whatever the seed."""


def test_a_chaos_run_refuses_tables_that_hold_items(dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables) -> None:
    # GIVEN tables another run wrote: a session key's count is on them
    ddb_tables.client.update_item(
        TableName=ddb_tables.counters_table,
        Key=item_key(make_item("bs:0:0")),
        UpdateExpression="ADD #c :one",
        ExpressionAttributeNames={"#c": counter_attribute(TRACER)},
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    # WHEN a run starts on them, THEN it refuses, naming the table, before judging that count as its own doubled
    with pytest.raises(ValueError, match=f"{ddb_tables.counters_table} holds items"):
        run_on(dynamodb_local, ddb_tables, SESSION_KEYS)


def test_each_run_a_test_makes_until_it_draws_what_it_needs_has_empty_tables(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN runs that write their tables and never draw what the test needs (a clean-clone CI run's seed 7 did not,
    # and seed 8 then ran on seed 7's tables: every key of its bounded session read as counted twice)
    tables_met: list[str] = []

    def run_writing(dynamodb_local: DynamoDBLocal, tables: DynamoDBTables, config: ChaosConfig) -> SimpleNamespace:
        del dynamodb_local, config
        require_empty(tables.client, (tables.counters_table, tables.markers_table))
        tables_met.append(tables.counters_table)
        tables.client.put_item(TableName=tables.counters_table, Item=item_key(make_item("bs:0:0")))
        return SimpleNamespace(passed=True, counts={}, verdict=SimpleNamespace())

    monkeypatch.setattr(chaos_support, "run_on", run_writing)
    # WHEN the test runs again with the next seed, up to its three runs
    with pytest.raises(AssertionError):  # the need is never drawn
        chaos_support.run_until_drawn(dynamodb_local, ddb_tables, SMOKE, ("situation.never_drawn",))
    # THEN each run found its tables empty: the test's own first, new ones after
    assert len(tables_met) == chaos_support.UNBROKEN_RUNS
    assert tables_met[0] == ddb_tables.counters_table
    assert len(set(tables_met)) == len(tables_met)


# --- views: counted in the commit of their event, never after it ----------------------------------------------

VIEWS = focused(SMOKE, 10, view_messages=5, archive=True)
"""Five messages on ``v:`` keys with dimensions (13 events: a third of the messages packed, half the events in the
previous day), among ten plain events, under the smoke run's faults: the smallest run whose broken variant below
still fails (measured: 14 runs of 14 failed it, with 3 to 12 of the 57 view groups wrong; without faults it passes)."""


def test_the_focused_views_run_passes_unbroken(dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables) -> None:
    # WHEN events with dimensions go through the production wiring under every fault
    # THEN every view item (all-time and per window, after moves) equals the sum of its events, the views partition
    # their keys, the archive recounts them, and faults hit the commits that carried them
    assert_passes_unbroken(
        dynamodb_local,
        ddb_tables,
        VIEWS,
        ("views_checked", "situation.window_move_transactions", "archive.counters_checked"),
    )


def test_the_harness_catches_views_written_after_the_commit(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    # GIVEN views taken out of their event's commit and written by a step after it (a plain ADD per view item)
    # WHEN answers are lost and invocations crash between the commit and that step
    result = run_on(dynamodb_local, ddb_tables, VIEWS, pipeline_factory=views_written_after_the_commit)
    # THEN some view item no longer equals the sum of its events, and the run fails
    assert result.verdict.views_wrong > 0, result.verdict.examples
    assert not result.passed
