"""The one emulation of Lambda's event source mappings decides as AWS documents (pure, no services).

The local pollers, the chaos run and the tests' shard double all drive ``tally_local.esm``; these tests
pin its decisions, with the rule each follows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tally_local.esm import (
    RECORD_AGE_EXCEEDED,
    RETRY_ATTEMPTS_EXHAUSTED,
    BatchOutcome,
    Decision,
    KinesisRetryPolicy,
    RetryCadence,
    ShardBatch,
    SqsRedrive,
    function_error,
    invocation_outcome,
    read_response,
    records_within_payload,
    settle_sqs,
)
from tests.support.kinesis import ShardConsumer

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
IDS = ("a", "b", "c")


@pytest.mark.parametrize(
    ("response", "failed", "whole"),
    [
        (None, set(), False),
        ({}, set(), False),
        ({"batchItemFailures": None}, set(), False),
        ({"batchItemFailures": []}, set(), False),
        ({"batchItemFailures": [{"itemIdentifier": "b"}]}, {"b"}, False),
        ({"batchItemFailures": [{"itemIdentifier": "c"}, {"itemIdentifier": "a"}]}, {"a", "c"}, False),
        # Lambda fails the whole batch on anything it cannot read
        ({"batchItemFailures": [{"itemIdentifier": "zzz"}]}, set(IDS), True),
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, set(IDS), True),
        ({"batchItemFailures": [{"itemIdentifier": None}]}, set(IDS), True),
        ({"batchItemFailures": [{}]}, set(IDS), True),
        ({"batchItemFailures": ["b"]}, set(IDS), True),
        ({"batchItemFailures": "b"}, set(IDS), True),
        ("ok", set(IDS), True),
        ([], set(IDS), True),
    ],
)
def test_partial_batch_responses_are_read_as_lambda_documents(response: object, failed: set[str], whole: bool) -> None:
    outcome = read_response(response, IDS)
    assert outcome.failed == frozenset(failed)
    assert outcome.whole_batch is whole
    assert not outcome.errored  # an unreadable answer is not a function error: it is never bisected


def test_a_function_error_fails_the_whole_batch_and_only_it_may_bisect() -> None:
    outcome = function_error(IDS, "KeyError: 'x'")
    assert outcome == BatchOutcome(frozenset(IDS), whole_batch=True, reason="KeyError: 'x'", errored=True)
    assert invocation_outcome(error="boom", response=None, record_ids=IDS).errored


def test_without_report_batch_item_failures_the_answer_is_ignored() -> None:
    answer = {"batchItemFailures": [{"itemIdentifier": "b"}]}
    assert invocation_outcome(error=None, response=answer, record_ids=IDS, report_batch_item_failures=False).ok
    assert invocation_outcome(error=None, response=answer, record_ids=IDS).failed == {"b"}


def test_sqs_deletes_what_was_not_reported_and_the_rest_returns() -> None:
    # GIVEN a batch of three, one reported failed WHEN settled THEN two receipts are deleted
    settled = settle_sqs(read_response({"batchItemFailures": [{"itemIdentifier": "b"}]}, IDS), IDS)
    assert (settled.delete, settled.returning) == ({"a", "c"}, {"b"})
    # AND after a function error nothing is deleted
    assert settle_sqs(function_error(IDS, "boom"), IDS).delete == frozenset()


def test_sqs_redrive_policy_moves_a_message_on_the_receive_after_max_receive_count() -> None:
    redrive = SqsRedrive(visibility_timeout_ms=420_000, max_receive_count=5)
    assert [redrive.moves_to_dead_letters(count) for count in (0, 4, 5)] == [False, False, True]
    assert redrive.visible_again_ms(1_000) == 421_000


def records(count: int, *, arrived: datetime = NOW) -> list[dict[str, Any]]:
    """GetRecords records with sequence numbers whose text order differs from their numeric order."""
    return [
        {"SequenceNumber": str(5 + 7 * index), "Data": b"", "PartitionKey": "p", "ApproximateArrivalTimestamp": arrived}
        for index in range(count)
    ]


def drive(
    batch: list[dict[str, Any]], policy: KinesisRetryPolicy, answer: Any, now: datetime = NOW
) -> tuple[list[list[str]], list[Any]]:
    """Deliver ``batch``; ``answer(ids) -> BatchOutcome``. Returns every invocation's ids and the steps."""
    delivery, invocations, steps = ShardBatch(batch, policy), [], []
    while (part := delivery.next_part()) is not None:
        ids = [record["SequenceNumber"] for record in part]
        invocations.append(ids)
        steps.append(delivery.settle(answer(ids), now))
        assert len(invocations) < 100, "the batch never ends"
    return invocations, steps


def test_kinesis_checkpoints_at_the_lowest_reported_sequence_number_as_a_number() -> None:
    # GIVEN four records "5", "12", "19", "26"; the function reports "19" and "12" failed once
    batch = records(4)
    answers = iter([BatchOutcome(frozenset({"19", "12"}), whole_batch=False)])

    # WHEN delivered
    invocations, steps = drive(batch, KinesisRetryPolicy(), lambda ids: next(answers, BatchOutcome(frozenset(), False)))

    # THEN the retry starts at "12" (not "19", which sorts lower as text) with everything after it
    assert invocations == [["5", "12", "19", "26"], ["12", "19", "26"]]
    assert [(s.decision, s.checkpointed, s.redelivered) for s in steps] == [
        (Decision.RETRY, 1, 3),
        (Decision.DONE, 3, 0),
    ]


def test_kinesis_bisection_consumes_no_retry_the_culprit_alone_gets_them_all() -> None:
    # AWS: "Splitting a batch does not consume the retry quota." GIVEN eight records, the sixth of which
    # crashes the function, with two retries and bisection
    batch = records(8)
    culprit = batch[5]["SequenceNumber"]

    def crash_on_culprit(ids: list[str]) -> BatchOutcome:
        return function_error(ids, "crash") if culprit in ids else BatchOutcome(frozenset(), whole_batch=False)

    # WHEN delivered
    policy = KinesisRetryPolicy(maximum_retry_attempts=2, bisect_on_function_error=True)
    invocations, steps = drive(batch, policy, crash_on_culprit)

    # THEN halves down to the culprit, which is retried twice and given up alone (the local pollers' test)
    s = [record["SequenceNumber"] for record in batch]
    assert invocations == [s, s[:4], s[4:], s[4:6], s[4:5], [culprit], [culprit], [culprit], s[6:]]
    give_up = steps[7].give_up
    assert give_up is not None
    assert (give_up.first_sequence_number, give_up.last_sequence_number) == (culprit, culprit)
    assert (give_up.condition, give_up.invoke_count) == (RETRY_ATTEMPTS_EXHAUSTED, 3)
    assert sum(step.checkpointed for step in steps) == 8  # every record behind the checkpoint in the end
    assert [step.failures for step in steps] == [1, 0, 1, 2, 0, 1, 2, 3, 0]  # for the drivers' backoff


@pytest.mark.parametrize(
    ("policy", "outcome", "decision"),
    [
        # an unreadable answer fails the whole batch but is no function error: retried whole, never split
        (KinesisRetryPolicy(bisect_on_function_error=True), BatchOutcome(frozenset("x"), True), Decision.RETRY),
        (KinesisRetryPolicy(bisect_on_function_error=False), function_error(["x"], "e"), Decision.RETRY),
        (KinesisRetryPolicy(bisect_on_function_error=True), function_error(["x"], "e"), Decision.BISECT),
        # unlimited retries (the AWS default) never give up, however many there were
        (KinesisRetryPolicy(maximum_retry_attempts=-1), function_error(["x"], "e"), Decision.RETRY),
        (KinesisRetryPolicy(maximum_retry_attempts=0), function_error(["x"], "e"), Decision.GIVE_UP),
    ],
)
def test_kinesis_splits_only_on_function_errors_when_bisection_is_on(
    policy: KinesisRetryPolicy, outcome: BatchOutcome, decision: Decision
) -> None:
    delivery = ShardBatch(records(2), policy)
    assert delivery.settle(outcome, NOW).decision is decision


def test_kinesis_gives_up_records_older_than_the_maximum_record_age() -> None:
    # GIVEN records that arrived two minutes ago and a maximum record age of 60 s
    delivery = ShardBatch(records(3, arrived=NOW - timedelta(minutes=2)), KinesisRetryPolicy(maximum_record_age_s=60))

    # WHEN the second one is reported failed THEN the range from it is given up for its age
    step = delivery.settle(BatchOutcome(frozenset({"12"}), whole_batch=False), NOW)
    assert step.decision is Decision.GIVE_UP
    assert step.give_up is not None
    assert (step.give_up.condition, len(step.give_up.records), step.checkpointed) == (RECORD_AGE_EXCEEDED, 2, 3)
    assert delivery.next_part() is None


def test_the_tests_shard_double_drives_the_same_decisions() -> None:
    # GIVEN the tests' shard double (tests/support/kinesis.py), one retry, and a handler that crashes on
    # every batch holding the second of four records
    batch = records(4)
    culprit = batch[1]["SequenceNumber"]

    def handler(event: dict[str, Any]) -> object:
        if any(record["kinesis"]["sequenceNumber"] == culprit for record in event["Records"]):
            raise RuntimeError("crash")
        return {"batchItemFailures": []}

    consumer = ShardConsumer(handler, "arn:aws:kinesis:us-east-1:123456789012:stream/s", "shardId-0", max_retries=1)

    # WHEN it runs THEN the split consumed no retry: only the culprit is given up, after its one retry
    consumer.run(batch)
    s = [record["SequenceNumber"] for record in batch]
    assert consumer.invocations == [s, s[:2], s[:1], [culprit], [culprit], s[2:]]
    assert [(g.first_sequence_number, g.last_sequence_number) for g in consumer.given_up] == [(culprit, culprit)]


@pytest.mark.parametrize(
    ("sizes", "limit", "fits"),
    [
        ([], 100, 0),
        ([10, 10, 10], 1_000, 3),  # all fit
        ([40, 40, 40], 100, 2),  # '{"Records": []}' is 15: 15 + 40 + 2 + 40 = 97; + 2 + 40 = 139 > 100
        ([40, 43], 100, 2),  # 15 + 40 + 2 + 43 = 100: the limit itself is allowed
        ([40, 44], 100, 1),  # 101: one byte over
        ([200], 100, 1),  # a record alone is always delivered (none can exceed Lambda's limit)
    ],
)
def test_a_batch_is_cut_where_the_event_json_would_pass_the_payload_limit(
    sizes: list[int], limit: int, fits: int
) -> None:
    # GIVEN records of these JSON sizes WHEN cut to Lambda's payload THEN the leading ones that fit remain
    assert records_within_payload(sizes, limit) == fits


def test_the_cut_counts_the_event_as_json_dumps_writes_it() -> None:
    # GIVEN records whose event JSON is exactly at the limit THEN all fit, and one byte less cuts one
    import json  # noqa: PLC0415

    records = [{"body": "x" * 50}, {"body": "y" * 60}]
    sizes = [len(json.dumps(record)) for record in records]
    event = len(json.dumps({"Records": records}))
    assert records_within_payload(sizes, event) == 2
    assert records_within_payload(sizes, event - 1) == 1


def test_kinesis_retries_come_at_the_next_poll_then_back_off_to_a_minute() -> None:
    # GIVEN a part failing again and again, with unlimited retries
    delivery = ShardBatch(records(1), KinesisRetryPolicy())
    # WHEN each failure is settled THEN the mapping waits a poll (1 s), doubling with each failure in a row, at most
    # a minute (the model: AWS documents the poll rate and no backoff)
    waits = [delivery.settle(function_error(["10"], "e"), NOW).retry_after_ms for _ in range(9)]
    assert waits == [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000]
    # AND after a success or a give-up it moves on at once
    assert delivery.settle(BatchOutcome(frozenset(), whole_batch=False), NOW).retry_after_ms == 0
    given_up = ShardBatch(records(1), KinesisRetryPolicy(maximum_retry_attempts=0))
    assert given_up.settle(function_error(["10"], "e"), NOW).retry_after_ms == 0
    # AND at the fastest cadence AWS's documentation allows, every failure waits one poll
    every_poll = ShardBatch(records(1), KinesisRetryPolicy(cadence=RetryCadence.EVERY_POLL))
    assert {every_poll.settle(function_error(["10"], "e"), NOW).retry_after_ms for _ in range(9)} == {1_000}
