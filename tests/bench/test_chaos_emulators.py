"""The chaos run's emulated event sources and fault injector behave as AWS documents (no DynamoDB needed)."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from tally.core.decode import decode_message
from tally.core.defaults import parse_counter_defaults
from tally.core.model import Message
from tally_local.chaos.clock import Invocation, VirtualClock
from tally_local.chaos.config import SMOKE, DynamoDBFaultRates
from tally_local.chaos.dlq import DeadLetterStore, Letter
from tally_local.chaos.faults import LOST_CLAIM, DynamoDBChaos, FaultLog
from tally_local.chaos.harness import Tables, _needs_another_redrive, _redrive, _Run, wire_pipeline
from tally_local.chaos.kinesis import ShardConsumer, Stream
from tally_local.chaos.ledger import JepsenMonitor, Ledger, MessageTrail
from tally_local.chaos.patterns import STARTS, GaugeReading, expected_distinct, expected_gauges
from tally_local.chaos.sqs import Queue
from tally_local.chaos.workload import TRACER, Source, ValidMessage, generate
from tally_local.esm import BatchOutcome, function_error
from tally_local.kit.answers import transaction_items
from tally_local.kit.conflicts import InFlightTransactions

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal


def _queue(clock: VirtualClock, dead_letters: DeadLetterStore, *, expiry_rate: float = 0.0) -> Queue:
    return Queue(
        clock, dead_letters, FaultLog(), visibility_ms=420_000, max_receive_count=2, expiry_rate=expiry_rate, seed=1
    )


def test_sqs_failed_message_comes_back_after_the_visibility_timeout_then_moves_to_the_dlq() -> None:
    # GIVEN a queue with maxReceiveCount 2 and one message
    clock, dead_letters = VirtualClock(), DeadLetterStore()
    queue = _queue(clock, dead_letters)
    queue.send("body-1")
    started = clock.now_ms()

    # WHEN it is received and failed twice
    for _ in range(2):
        batch = queue.receive(10)
        assert batch is not None
        assert [entry["Body"] for entry in batch] == ["body-1"]
        queue.settle(batch, done=set())

    # THEN the second receive waited out the visibility timeout, and the third receive moves it to the DLQ
    assert clock.now_ms() - started >= 420_000
    assert queue.receive(10) is None
    assert [(letter.body, letter.code) for letter in dead_letters.letters()] == [("body-1", None)]


def test_sqs_done_message_is_deleted_and_visibility_expiry_hands_it_out_twice() -> None:
    # GIVEN a queue whose every receive lets the visibility timeout expire at once
    clock, dead_letters = VirtualClock(), DeadLetterStore()
    queue = _queue(clock, dead_letters, expiry_rate=1.0)
    queue.send("body-1")

    # WHEN two consumers receive before either answers
    first, second = queue.receive(10), queue.receive(10)

    # THEN both hold the same message; once one deletes it, the queue is empty
    assert first is not None
    assert second is not None
    assert first[0]["MessageId"] == second[0]["MessageId"]
    queue.settle(first, done={first[0]["MessageId"]})
    queue.settle(second, done=set())
    assert queue.receive(10) is None
    assert dead_letters.letters() == []


def test_an_sqs_receive_waits_for_the_other_consumers_answer_and_then_gets_the_message() -> None:
    # GIVEN a queue whose only message one consumer holds
    clock, dead_letters = VirtualClock(), DeadLetterStore()
    queue = _queue(clock, dead_letters)
    queue.send("body-1")
    held = queue.receive(10)
    assert held is not None
    received: list[list[dict[str, Any]] | None] = []
    waiting = threading.Thread(target=lambda: received.append(queue.receive(10)))

    # WHEN a second consumer receives meanwhile, and the first one fails the message
    waiting.start()
    queue.settle(held, done=set())
    waiting.join(timeout=10)

    # THEN the waiting receive got it, after the visibility timeout the virtual clock skipped
    assert not waiting.is_alive()
    assert [[entry["Body"] for entry in batch] for batch in received if batch] == [["body-1"]]


def _message(message_id: str, key: str) -> ValidMessage:
    return ValidMessage(message_id, "{}", key, 1, {key: {TRACER: Decimal(1)}})


def test_the_jepsen_monitor_reads_as_the_run_progresses_not_as_time_passes() -> None:
    # GIVEN a monitor whose least pause between reads is 1 ms, and a ledger nothing has moved yet
    ledger = Ledger()
    reads: list[str] = []
    read = threading.Event()

    def read_count(key: str) -> Decimal:
        reads.append(key)
        read.set()
        return ledger.acknowledged(key)

    with JepsenMonitor(ledger, ["k"], read_count, interval_s=0.001, seed=1) as monitor:
        # WHEN time passes with no invocation started or answered (a 1 ms timer would read about 50 times)
        time.sleep(0.05)
        # THEN nothing is read
        assert reads == []
        # AND WHEN a batch starts, then is answered, THEN each move of the ledger is followed by a read
        for move in (ledger.attempt, ledger.acknowledge):
            read.clear()
            move([_message("m-1", "k")])
            assert read.wait(10)
    assert len(reads) == monitor.reads == 2
    assert monitor.violations == []


@dataclass
class _ScriptedConsumer:
    """Answers each Kinesis invocation from a script; records the batches it was given."""

    script: list[Any]
    log: FaultLog = field(default_factory=FaultLog)
    batches: list[list[str]] = field(default_factory=list)
    trail: MessageTrail = field(default_factory=MessageTrail)

    def invoke_kinesis(self, event: dict[str, Any], record_ids: list[str]) -> BatchOutcome:
        self.batches.append(list(record_ids))
        answer = self.script.pop(0) if self.script else set()
        if answer == "error":
            return function_error(record_ids, "scripted")
        return BatchOutcome(frozenset(record_ids[i] for i in answer), whole_batch=False)


def _shard_consumer(script: list[Any], records: int, max_retries: int = 3) -> tuple[ShardConsumer, list[str]]:
    clock = VirtualClock()
    stream = Stream(1, clock)
    for index in range(records):
        stream.put(b"not a tally message", f"pk-{index}")
    consumer = ShardConsumer(
        shard=stream.shards[0],
        consumer=_ScriptedConsumer(script),  # type: ignore[arg-type]
        workload=generate(SMOKE.__class__(name="t", events=1, doomed=0), clock.now_ms()),
        ledger=Ledger(),
        clock=clock,
        batch_size=10,
        max_retries=max_retries,
        rewind_rate=0.0,
        rng=random.Random(1),
    )
    return consumer, [record["SequenceNumber"] for record in stream.shards[0].records]


@pytest.mark.parametrize(
    ("script", "expected_batches"),
    [
        # a partial failure checkpoints at the LOWEST reported record: it and everything after come again
        ([{3, 1}], [[0, 1, 2, 3], [1, 2, 3]]),
        # a function error bisects the batch; each half is retried on its own
        (["error"], [[0, 1, 2, 3], [0, 1], [2, 3]]),
        # a failing half is bisected again
        (["error", "error"], [[0, 1, 2, 3], [0, 1], [0], [1], [2, 3]]),
    ],
)
def test_kinesis_redelivers_from_the_lowest_failure_and_bisects_on_function_errors(
    script: list[Any], expected_batches: list[list[int]]
) -> None:
    # GIVEN a shard of four records and a function that answers as scripted
    shard_consumer, sequence_numbers = _shard_consumer(script, records=4)

    # WHEN the event source mapping delivers the shard
    shard_consumer.run()

    # THEN the batches are those Lambda's documented rules produce
    delivered = shard_consumer.consumer.batches  # type: ignore[attr-defined]
    assert delivered == [[sequence_numbers[i] for i in batch] for batch in expected_batches]


def test_kinesis_gives_up_a_batch_after_its_retries_and_replays_it_on_request() -> None:
    # GIVEN a function that always fails one record, and one retry allowed
    shard_consumer, sequence_numbers = _shard_consumer([{0}, {0}], records=2, max_retries=1)

    # WHEN the shard is delivered
    shard_consumer.run()

    # THEN the batch is given up after one retry, and the operator's replay delivers it again
    assert [[r["SequenceNumber"] for r in given] for given in shard_consumer.shard.given_up] == [sequence_numbers]
    shard_consumer.replay_given_up()
    assert shard_consumer.shard.given_up == []
    assert shard_consumer.consumer.batches[-1] == sequence_numbers  # type: ignore[attr-defined]


def test_kinesis_bisection_consumes_no_retry_so_only_the_culprit_is_given_up() -> None:
    # AWS: "Splitting a batch does not consume the retry quota." GIVEN four records, one retry, and a
    # function that fails every batch holding the second record
    shard_consumer, sequence_numbers = _shard_consumer(["error", "error", set(), "error", "error"], 4, max_retries=1)

    # WHEN the shard is delivered
    shard_consumer.run()

    # THEN the halves reach the culprit, which alone uses its retry and is given up; its neighbour counts
    delivered = shard_consumer.consumer.batches  # type: ignore[attr-defined]
    expected = [[0, 1, 2, 3], [0, 1], [0], [1], [1], [2, 3]]
    assert delivered == [[sequence_numbers[i] for i in batch] for batch in expected]
    assert [[r["SequenceNumber"] for r in given] for given in shard_consumer.shard.given_up] == [[sequence_numbers[1]]]


def _client_with(rates: DynamoDBFaultRates) -> tuple[Any, DynamoDBChaos]:
    client = boto3.client(
        "dynamodb",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    return client, DynamoDBChaos(client, rates, random.Random(1), FaultLog())


ONLY = {name: 0.0 for name in DynamoDBFaultRates.__dataclass_fields__}
PUT = {"Put": {"TableName": "t", "Item": {"id": {"S": "a"}}}}


@pytest.mark.parametrize(
    ("kind", "error_code", "reason"),
    [
        ("throttle_request", "ProvisionedThroughputExceededException", None),
        ("throttle_cancel", "TransactionCanceledException", "ThrottlingError"),
        ("conflict", "TransactionCanceledException", "TransactionConflict"),
    ],
)
def test_injected_store_errors_look_like_dynamodb_answers(kind: str, error_code: str, reason: str | None) -> None:
    # GIVEN a client whose every request draws the fault
    client, _ = _client_with(DynamoDBFaultRates(**(ONLY | {kind: 1.0})))

    # WHEN a transaction of three actions is sent (it never reaches the unreachable endpoint)
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=[PUT, PUT, PUT])

    # THEN botocore raises the service's error, with one cancellation reason per action when cancelled
    assert raised.value.response["Error"]["Code"] == error_code
    reasons = [r["Code"] for r in raised.value.response.get("CancellationReasons", [])]
    if reason is not None:
        assert sorted(reasons) == sorted([reason, "None", "None"])


def test_connect_failure_never_reaches_the_server_and_slow_shrinks_the_deadline() -> None:
    # GIVEN a client that fails to connect on every request
    client, chaos = _client_with(DynamoDBFaultRates(**(ONLY | {"connect_failure": 1.0})))

    # WHEN a request is made THEN botocore's connection error comes out at once
    with pytest.raises(EndpointConnectionError):
        client.get_item(TableName="t", Key={"id": {"S": "a"}})

    # AND a slow response leaves the invocation the remaining time it drew, at most twice the reserve
    invocation = Invocation(60_000)
    chaos.invocation = invocation
    invocation.slow_down(1_000)
    assert invocation.remaining_ms() <= 1_000


def _claim_transaction() -> dict[str, Any]:
    """A journal ``claim`` transaction as ``before-call`` sees it: the header's PREPARING check first."""
    check = {
        "ConditionCheck": {"TableName": "m", "Key": {}, "ExpressionAttributeValues": {":state": {"S": "PREPARING"}}}
    }
    return {"body": json.dumps({"TransactItems": [check, PUT]})}


def test_claims_draw_the_lost_claim_whatever_the_rate_until_the_run_injected_one() -> None:
    # GIVEN two consumers of one run whose claims would lose their answer near the deadline one time in a million
    log = FaultLog()
    rates = DynamoDBFaultRates(**(ONLY | {"lost_claim_near_deadline": 1e-6}))
    first, second = (DynamoDBChaos(_client_with(rates)[0], rates, random.Random(1), log) for _ in range(2))

    # WHEN each sends claim transactions, before and after one of them was injected (a run makes few claims,
    # and a claim drawn may still not be injected: DynamoDB cancels it for a conflict first)
    before = [chaos._draw_claim_fault(_claim_transaction()) for chaos in (first, second)]
    log.add(LOST_CLAIM)
    after = [chaos._draw_claim_fault(_claim_transaction()) for chaos in (first, second)]

    # THEN every claim draws it until the run injected one; after that, they draw at the rate
    assert before == ["lost_claim_near_deadline"] * 2
    assert after == [None, None]
    # AND a run that does not draw the fault at all never gets it
    quiet_rates = DynamoDBFaultRates(**ONLY)
    quiet = DynamoDBChaos(_client_with(quiet_rates)[0], quiet_rates, random.Random(1), FaultLog())
    assert quiet._draw_claim_fault(_claim_transaction()) is None


def test_the_smoke_load_opens_a_shard_with_a_unit_that_needs_a_second_claim() -> None:
    # GIVEN the smoke load
    workload = generate(SMOKE, 1_800_000_000_000)
    # WHEN its first Kinesis records per partition key are taken as a shard's first batch would be
    kinesis = [p for p in workload.publications if p.source is Source.KINESIS]
    first_key = kinesis[0].partition_key
    first_batch = [p for p in kinesis if p.partition_key == first_key][: SMOKE.kinesis_batch_size]
    # THEN they are one key's messages, each with an id of its own, more than one claim transaction holds
    keys = {key for p in first_batch for key in workload.by_body[p.body].sums}
    assert keys == {"claims:0"}
    assert len({workload.by_body[p.body].message_id for p in first_batch}) > 99


def test_an_extra_redrive_sends_back_only_the_letters_the_redrive_policy_moved() -> None:
    # GIVEN a DLQ holding a letter with a reason and one the redrive policy moved (no reason)
    run = _Run(SMOKE, client_factory=lambda: None, tables=Tables("c", "m"), pipeline_factory=wire_pipeline)  # type: ignore[arg-type, return-value]
    queue = _queue(run.clock, run.dead_letters)
    run.dead_letters.add(Letter("poison", "invalid_json", "arn"))
    run.dead_letters.add(Letter("moved", None, "arn"))

    # WHEN an extra redrive is made
    _redrive(run, queue, moved_only=True)

    # THEN only the moved letter goes back to the queue; the letter with a reason stays, not counted twice
    batch = queue.receive(10)
    assert batch is not None
    assert [entry["Body"] for entry in batch] == ["moved"]
    assert [letter.body for letter in run.dead_letters.letters()] == ["poison"]
    assert [letter.body for letter in run.dead_letters.ever()] == ["poison", "moved"]
    # AND an ordinary redrive sends back everything
    _redrive(run, queue)
    assert [letter.body for letter in run.dead_letters.letters()] == []


def test_an_extra_redrive_replays_kinesis_ranges_given_up_again_in_the_last_replay() -> None:
    # GIVEN a run after its last redrive: the DLQ holds nothing the redrive policy moved, but a shard holds a range
    # Kinesis gave up again while it was replayed (the lease that held it had not ended)
    run = _Run(SMOKE, client_factory=lambda: None, tables=Tables("c", "m"), pipeline_factory=wire_pipeline)  # type: ignore[arg-type, return-value]
    workload = generate(SMOKE, 1_800_000_000_000)
    stream = Stream(1, run.clock)
    stream.shards[0].given_up.append([{"SequenceNumber": "1"}])
    last = SMOKE.redrives
    # WHEN the run asks whether another redrive is due THEN it is, as an operator replays a given-up range
    assert _needs_another_redrive(run, workload, SMOKE, stream, redrives=last)
    assert run.log.count("producer.dlq_extra_redrives") == 1
    # AND not once the extra redrives are spent, nor with nothing given up
    assert not _needs_another_redrive(run, workload, SMOKE, stream, redrives=last + SMOKE.extra_redrives)
    stream.shards[0].given_up.clear()
    assert not _needs_another_redrive(run, workload, SMOKE, stream, redrives=last)


def test_the_workload_is_reproducible_from_its_seed() -> None:
    # GIVEN two workloads from one seed and one base time WHEN generated THEN they are identical
    first, second = generate(SMOKE, 1_800_000_000_000), generate(SMOKE, 1_800_000_000_000)
    assert first == second
    assert first.events >= SMOKE.events
    assert len(first.poison) > 0
    assert sum(message.doomed for message in first.valid.values()) == SMOKE.doomed + SMOKE.precision_doomed
    assert len(first.precision_doomed) == SMOKE.precision_doomed > 0


def test_the_pattern_messages_decode_to_their_reference() -> None:
    # GIVEN the smoke load's pattern messages (start values, default deltas, gauges)
    workload = generate(SMOKE, 1_800_000_000_000)
    defaults = parse_counter_defaults(SMOKE.counter_defaults)
    kinds = ("-stock-", "-gauge-", "-bounded-", "-distinct-", "-reset-")
    patterns = [m for m in workload.valid.values() if any(kind in m.message_id for kind in kinds)]
    sizes = (
        SMOKE.stock_messages,
        SMOKE.gauge_messages,
        SMOKE.bounded_messages + 2 * SMOKE.digit_bound_steps,  # each 36-digit step behind a small step on its seat
        SMOKE.distinct_messages,
    )
    assert len(patterns) == sum(sizes) + SMOKE.reset_messages
    readings: list[GaugeReading] = []
    members: list[tuple[str, str, str]] = []
    for message in patterns:
        # WHEN tally's decoder reads each body with the run's declared defaults
        decoded = decode_message(message.body, defaults=defaults)
        # THEN it is valid, and its deltas (defaults filled in) and gauges are the reference's
        assert isinstance(decoded, Message), (message.body, decoded)
        sums: dict[str, dict[str, object]] = {}
        for event in decoded.events:
            for name, delta in event.deltas.items():
                sums.setdefault(event.key, {})
                sums[event.key][name] = sums[event.key].get(name, 0) + delta  # type: ignore[operator]
            for name, gauge in (event.gauges or {}).items():
                value = gauge.value if isinstance(gauge.value, str) else Decimal(gauge.value)
                readings.append(GaugeReading(event.key, name, gauge.kind.value, value, event.ts_ms or 0))
            members += [(event.key, name, member) for name, member in (event.distinct or {}).items()]
        if message.level_step is not None:  # a reset or a delta of level: judged by the fold, not summed
            event = decoded.events[0]
            key, kind, amount = message.level_step
            assert (event.key, event.reset or event.deltas.get("level")) == (
                key,
                {"level": amount} if kind == "reset" else amount,
            )
            sums.get(key, {}).pop("level", None)
            sums = {k: v for k, v in sums.items() if v}
        assert sums == message.sums
    assert expected_gauges(readings) == workload.expected_gauges
    assert expected_distinct(members) == workload.expected_distinct
    # AND bounded messages are kept out of the reference (a bound may refuse them), and some name two keys
    bounded = [m for m in patterns if m.bounded]
    assert len(bounded) == SMOKE.bounded_messages + 2 * SMOKE.digit_bound_steps
    assert not {key for m in bounded for key in m.sums} & set(workload.expected)
    assert any(len(m.sums) == 2 for m in bounded)
    # AND every reset-pattern message goes to Kinesis only, and the reference folds them in publication order
    resets = {m.body for m in patterns if m.level_step is not None}
    assert {p.source for p in workload.publications if p.body in resets} == {Source.KINESIS}
    assert any(m.level_step[1] == "reset" for m in patterns if m.level_step is not None)
    assert set(workload.expected_levels) == {m.level_step[0] for m in patterns if m.level_step is not None}
    # AND some events named no delta, some carried only gauges, and each started counter adds its start once
    assert any('"deltas"' not in m.body for m in patterns if "-stock-" in m.message_id)
    stocks = {key: counters for key, counters in workload.expected.items() if key.startswith("stock:")}
    assert stocks
    summed = {key: sum((m.sums.get(key, {}).get("stock", 0) for m in patterns), 0) for key in stocks}
    assert all(stocks[key]["stock"] == summed[key] + STARTS["stock:"]["stock"] for key in stocks)
    assert {"max", "min", "latest"} <= {kind for table in workload.expected_gauges.values() for kind in table}


class _Rolls(random.Random):
    """A random source that answers ``random()`` from a fixed list (the draws a test needs)."""

    def __init__(self, rolls: list[float]) -> None:
        super().__init__(1)
        self._rolls = rolls

    def random(self) -> float:
        return self._rolls.pop(0)


@pytest.mark.integration
def test_a_fault_stays_with_its_request_when_requests_overlap(dynamodb_local: DynamoDBLocal) -> None:
    """The applier now sends a round's transactions from several threads on one client:
    a request's fault must not be dropped or moved to another request in flight at the same time."""
    admin = dynamodb_local.client()
    table = f"chaos-{uuid.uuid4().hex[:8]}"
    admin.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client = dynamodb_local.client()
    # GIVEN the first request drawing a lost response and the second none
    DynamoDBChaos(client, DynamoDBFaultRates(**(ONLY | {"lost_response": 0.5})), _Rolls([0.0, 0.99]), FaultLog())
    first_waiting, second_drawn = threading.Event(), threading.Event()

    def hold_the_first(**_: Any) -> None:
        # the first request is sent only once the second has drawn its fault
        if threading.current_thread().name == "first":
            first_waiting.set()
            assert second_drawn.wait(10)
        else:
            second_drawn.set()

    client.meta.events.register("before-send.dynamodb.GetItem", hold_the_first)
    outcomes: dict[str, str] = {}

    def get() -> None:
        name = threading.current_thread().name
        try:
            client.get_item(TableName=table, Key={"id": {"S": name}})
            outcomes[name] = "answered"
        except ReadTimeoutError:
            outcomes[name] = "lost"

    first = threading.Thread(target=get, name="first")
    first.start()
    assert first_waiting.wait(10)  # the first has drawn its fault and waits to be sent
    second = threading.Thread(target=get, name="second")
    second.start()
    for thread in (first, second):
        thread.join(30)
    admin.delete_table(TableName=table)
    # THEN the first request's response is lost and the second's is not
    assert outcomes == {"first": "lost", "second": "answered"}


def _transaction(*keys: str) -> dict[str, Any]:
    """botocore's request parameters of a transaction updating counter items ``keys``."""
    actions = [
        {"Update": {"TableName": "counters", "Key": {"pk": {"S": key}, "sk": {"S": "all"}}, "UpdateExpression": "x"}}
        for key in keys
    ]
    return {"body": json.dumps({"TransactItems": actions}).encode()}


def test_transactions_in_flight_on_one_item_conflict_as_on_dynamodb() -> None:
    """DynamoDB cancels a transaction that writes an item another transaction in flight writes; DynamoDB
    Local never does, so the chaos run answers it."""
    in_flight = InFlightTransactions()
    # GIVEN one consumer's transaction in flight on a and b
    token, conflicted = in_flight.enter(1, transaction_items(_transaction("a", "b")))
    assert token is not None
    assert conflicted is None
    # THEN another consumer's on c goes, its one on b is cancelled on that action, and so is the same
    # consumer's (the applier's own doing: recorded to fail the run)
    assert in_flight.enter(2, transaction_items(_transaction("c")))[1] is None
    assert in_flight.enter(2, transaction_items(_transaction("x", "b")))[1] == 1
    assert in_flight.self_overlaps == []
    assert in_flight.enter(1, transaction_items(_transaction("b")))[1] == 0
    assert len(in_flight.self_overlaps) == 1
    # AND once the first is answered, b is free again
    in_flight.leave(token)
    assert in_flight.enter(2, transaction_items(_transaction("b")))[1] is None


def test_a_conflict_answer_reaches_the_code_as_dynamodb_words_it() -> None:
    # GIVEN two clients sharing the run's in-flight transactions, the first with a transaction held in flight
    in_flight = InFlightTransactions()
    client, _ = _client_with(DynamoDBFaultRates(**ONLY))
    DynamoDBChaos(client, DynamoDBFaultRates(**ONLY), random.Random(1), FaultLog(), in_flight)
    held = in_flight.enter(99, transaction_items(_transaction("a")))[0]
    assert held is not None
    update = {
        "Update": {"TableName": "counters", "Key": {"pk": {"S": "a"}, "sk": {"S": "all"}}, "UpdateExpression": "x"}
    }
    # WHEN the second sends a transaction on the same item
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=[update])
    # THEN it is cancelled with TransactionConflict, never sent
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in raised.value.response["CancellationReasons"]] == ["TransactionConflict"]
