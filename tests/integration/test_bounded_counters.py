"""On DynamoDB Local: bounded counters (a floor, a ceiling), exactly once.

A batch's net applies in one write when every step of its messages, in order, holds; otherwise its
messages are applied one by one and only those that would cross are dead-lettered (``below_floor``,
``above_ceiling``), never half applied, and a redriven one counts at most once. The sample events
(``events/*-bounded.json``) go through the SQS and Kinesis sources; the Hypothesis property checks that no
prefix of the applied order crosses the bound under any batching and duplication.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.commit.marker_reads import MarkerReadGate
from tally.core.bounds import Bound, parse_counter_bounds
from tally.core.defaults import parse_counter_defaults
from tally.core.model import SourceRecord
from tally.core.windows import parse_window_spec
from tally.reader import CounterReader
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.kit.faults import DynamoDBFaults
from tests.support.events import SAMPLES_SENT_MS, expected_samples, processed_twice
from tests.support.pipeline import make_pipeline, make_store
from tests.support.properties import on_emulator, sent_in_batches
from tests.support.threads import at_once

if TYPE_CHECKING:
    from decimal import Decimal

    from tally.core.bounds import CounterBounds
    from tally.core.defaults import CounterDefaults
    from tally.pipeline import BatchPipeline
    from tests.support.pipeline import RecordingDeadLetterQueue
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

SENT_MS = SAMPLES_SENT_MS
NOW_MS = SENT_MS + 1_000
EXPECTED = expected_samples("-bounded.json")
BOUNDS = parse_counter_bounds("stock:*#stock>=0;quota:*#calls<=10")
STARTS = parse_counter_defaults("stock:*#stock=start:5")


def bounded_pipeline(
    tables: DynamoDBTables,
    bounds: CounterBounds = BOUNDS,
    defaults: CounterDefaults = STARTS,
    **options: Any,
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    store = make_store(tables.client, tables.counters_table, tables.markers_table)
    return make_pipeline(store, counter_defaults=defaults, counter_bounds=bounds, **options)


def value_of(tables: DynamoDBTables, key: str, counter: str) -> Decimal | None:
    return CounterReader(tables.counters_table, client=tables.client).get(key).values.get(counter)


def record(message_id: str, key: str, **deltas: int) -> SourceRecord:
    body = json.dumps({"id": message_id, "key": key, "deltas": deltas})
    return SourceRecord(f"r-{message_id}", body, NOW_MS)


def test_a_batch_whose_every_prefix_holds_applies_in_one_transaction(ddb_tables: DynamoDBTables) -> None:
    # GIVEN stock starting at 5 with a floor of 0, and sales and a restock whose running sum never goes below -5
    pipeline, dlq = bounded_pipeline(ddb_tables)
    records = [record("a", "stock:1", stock=-3), record("b", "stock:1", stock=-2), record("c", "stock:1", stock=4)]
    records += [record("d", "stock:1", stock=-4)]
    # WHEN the batch is processed
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN its net applies in one transaction, down to exactly the floor
    assert result.failed_record_ids == ()
    assert not dlq.letters
    assert result.figures["Transactions"] == 1
    assert value_of(ddb_tables, "stock:1", "stock") == 0


def test_a_prefix_below_the_floor_refuses_only_the_message_that_crosses(ddb_tables: DynamoDBTables) -> None:
    # GIVEN stock at 5 (its start) and, in order, -3, -4, +6, -2: the net (-3) holds, the prefix 5-3-4 does not
    pipeline, dlq = bounded_pipeline(ddb_tables)
    records = [record("a", "stock:1", stock=-3), record("b", "stock:1", stock=-4), record("c", "stock:1", stock=6)]
    records += [record("d", "stock:1", stock=-2)]
    # WHEN the batch is processed
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN the messages are applied one by one in order: 5 -> 2, -4 refused, -> 8 -> 6
    assert result.failed_record_ids == ()
    assert value_of(ddb_tables, "stock:1", "stock") == 6
    assert [(letter.record.record_id, str(letter.rejection.code)) for letter in dlq.letters] == [("r-b", "below_floor")]
    assert dlq.letters[0].rejection.detail == "'stock:1'/'stock': value 2, amount -4, floor 0"
    assert result.figures["MessagesApplied"] == 3


def test_a_ceiling_refuses_the_message_that_would_cross_it(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a quota of at most 10 calls (no start: 0) and three messages of 4 calls, one of them two events
    pipeline, dlq = bounded_pipeline(ddb_tables)
    packed = json.dumps({"id": "b", "events": [{"key": "quota:t", "deltas": {"calls": 2}}] * 2})
    records = [record("a", "quota:t", calls=4), SourceRecord("r-b", packed, NOW_MS), record("c", "quota:t", calls=4)]
    # WHEN processed
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN the third is refused whole (a message is one step: its events apply together or not at all)
    assert result.failed_record_ids == ()
    assert value_of(ddb_tables, "quota:t", "calls") == 8
    assert [(letter.record.record_id, str(letter.rejection.code)) for letter in dlq.letters] == [
        ("r-c", "above_ceiling")
    ]
    assert "value 8, amount 4, ceiling 10" in dlq.letters[0].rejection.detail


def test_a_refused_message_is_never_half_applied(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a message that sells stock (bounded) and counts a view (unbounded), with an hourly window
    windows = parse_window_spec("hour", "hour=90")
    pipeline, dlq = bounded_pipeline(ddb_tables, windows=windows)
    body = json.dumps(
        {"id": "m", "events": [{"key": "stock:1", "deltas": {"stock": -9}}, {"key": "views", "deltas": {"n": 1}}]}
    )
    # WHEN it would take the stock below its floor
    result = pipeline.process([SourceRecord("r-m", body, NOW_MS)], NOW_MS, lambda: 60_000)
    # THEN none of its deltas is applied: not the view, not a window
    assert result.failed_record_ids == ()
    assert [str(letter.rejection.code) for letter in dlq.letters] == ["below_floor"]
    items = ddb_tables.client.scan(TableName=ddb_tables.counters_table)["Items"]
    assert items == []


def test_a_zero_net_chunk_still_checks_every_step(ddb_tables: DynamoDBTables) -> None:
    # GIVEN stock at 3 (a restock of -2 from its start of 5) and then -5, +5: the net is zero, the step -5 crosses
    pipeline, dlq = bounded_pipeline(ddb_tables)
    pipeline.process([record("x", "stock:1", stock=-2)], NOW_MS, lambda: 60_000)
    # WHEN both are one batch
    result = pipeline.process(
        [record("a", "stock:1", stock=-5), record("b", "stock:1", stock=5)], NOW_MS, lambda: 60_000
    )
    # THEN the -5 is refused (a ConditionCheck carried the step), the +5 applies
    assert result.failed_record_ids == ()
    assert [letter.record.record_id for letter in dlq.letters] == ["r-a"]
    assert value_of(ddb_tables, "stock:1", "stock") == 8


def test_a_refused_message_redriven_after_a_restock_counts_once(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a sale refused at the floor (stock 5, sale of 7)
    pipeline, dlq = bounded_pipeline(ddb_tables)
    sale = record("sale", "stock:1", stock=-7)
    pipeline.process([sale], NOW_MS, lambda: 60_000)
    assert [str(letter.rejection.code) for letter in dlq.letters] == ["below_floor"]
    # WHEN it is redriven before a restock (a new record id, the same body), then after one, then again
    redriven = SourceRecord("redrive-1", sale.body, NOW_MS)
    before = pipeline.process([redriven], NOW_MS, lambda: 60_000)
    pipeline.process([record("restock", "stock:1", stock=10)], NOW_MS, lambda: 60_000)
    after = pipeline.process([SourceRecord("redrive-2", sale.body, NOW_MS)], NOW_MS, lambda: 60_000)
    again = pipeline.process([SourceRecord("redrive-3", sale.body, NOW_MS)], NOW_MS, lambda: 60_000)
    # THEN it is refused again before the restock (no marker was written), applied after it, then a duplicate
    assert [str(letter.rejection.code) for letter in dlq.letters] == ["below_floor", "below_floor"]
    assert (
        before.figures["MessagesApplied"],
        after.figures["MessagesApplied"],
        again.figures["DuplicatesAlreadyApplied"],
    ) == (0, 1, 1)
    assert value_of(ddb_tables, "stock:1", "stock") == 8


def test_a_lost_response_of_a_fallback_transaction_counts_the_message_once(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a batch refused as a whole (5 -3 -4 +6) whose second single transaction's answer is lost
    pipeline, dlq = bounded_pipeline(ddb_tables)
    faults = DynamoDBFaults(ddb_tables.client)
    faults.pass_through(2)  # the batch's transaction (refused by the bound), the first single
    faults.lose_responses(1)  # the single of "b" is refused by DynamoDB, its answer lost: the retry is refused again
    faults.pass_through(1)
    faults.lose_responses(1)  # the single of "c" commits, its answer lost: the retry meets its marker
    records = [record("a", "stock:1", stock=-3), record("b", "stock:1", stock=-4), record("c", "stock:1", stock=6)]
    # WHEN processed, then the whole batch redelivered
    first = pipeline.process(records, NOW_MS, lambda: 60_000)
    after_first = value_of(ddb_tables, "stock:1", "stock")
    second = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN "a" and "c" count once, "b" is refused (it has no marker) until the stock allows it: its duplicate
    # delivery, at 8, applies it (a redrive of its dead letter is then a duplicate); nothing fails
    assert faults.injected == ["lose_response", "lose_response"]
    assert first.failed_record_ids == second.failed_record_ids == ()
    assert after_first == 8
    assert [letter.record.record_id for letter in dlq.letters] == ["r-b"]
    assert (second.figures["DuplicatesAlreadyApplied"], second.figures["MessagesApplied"]) == (2, 1)
    assert value_of(ddb_tables, "stock:1", "stock") == 4


@pytest.mark.parametrize("crash_after", [1, 2, 3, 4])
def test_an_invocation_killed_in_the_fallback_is_finished_by_the_redelivery(
    ddb_tables: DynamoDBTables, crash_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a batch refused as a whole (5: -3, -4, +6, -2, -9) whose invocation dies after its n-th transaction
    pipeline, dlq = bounded_pipeline(ddb_tables)
    amounts = [-3, -4, 6, -2, -9]
    records = [record(f"m{n}", "stock:1", stock=amount) for n, amount in enumerate(amounts)]
    real_write = DynamoDBCounterStore.write
    calls = []

    def dying(self: DynamoDBCounterStore, write: Any) -> None:
        calls.append(write)
        if len(calls) > crash_after:
            raise RuntimeError("the invocation died")
        real_write(self, write)

    monkeypatch.setattr(DynamoDBCounterStore, "write", dying)
    with pytest.raises(RuntimeError):
        pipeline.process(records, NOW_MS, lambda: 60_000)
    monkeypatch.setattr(DynamoDBCounterStore, "write", real_write)
    # WHEN the whole batch is redelivered
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN every message is applied once or refused, the value is the start plus the applied ones and within its
    # floor. (A refusal decided before the crash was never reported: the redelivery decides again, against the
    # value then. Killed after the restock was applied, -4 fits: 5 -3 +6 -2 -4 = 2.)
    refused = {letter.record.record_id for letter in dlq.letters}
    assert result.failed_record_ids == ()
    assert len(dlq.letters) == len(refused)
    applied = [amount for n, amount in enumerate(amounts) if f"r-m{n}" not in refused]
    value = value_of(ddb_tables, "stock:1", "stock")
    assert value == 5 + sum(applied)
    assert value is not None
    assert value >= 0
    assert value == {1: 6, 2: 6, 3: 6, 4: 2}[crash_after]


def test_a_transaction_conflict_on_a_bounded_write_is_retried_not_refused(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a bounded batch whose transactions are cancelled by conflicts twice (DynamoDB Local never raises them)
    pipeline, dlq = bounded_pipeline(ddb_tables)
    faults = DynamoDBFaults(ddb_tables.client)
    faults.cancel("TransactionConflict", count=2)
    records = [record("a", "stock:1", stock=-3), record("b", "stock:1", stock=-2)]
    # WHEN processed
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN the retry applies the batch: a conflict is not a bound's refusal
    assert faults.injected == ["cancel:TransactionConflict"] * 2
    assert result.failed_record_ids == ()
    assert not dlq.letters
    assert value_of(ddb_tables, "stock:1", "stock") == 0


def test_a_redelivered_copy_of_an_applied_message_is_never_refused_by_the_bound(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a sale that took the stock to its floor, with the marker pre-read off (the cancellation path)
    pipeline, dlq = bounded_pipeline(ddb_tables, marker_read_gate=MarkerReadGate(quiet_batches=0))
    sale = record("sale", "stock:1", stock=-5)
    pipeline.process([sale], NOW_MS, lambda: 60_000)
    # WHEN it is redelivered: its bound condition fails now (0 - 5 < 0) as well as its marker's
    result = pipeline.process([sale], NOW_MS, lambda: 60_000)
    # THEN it is a duplicate, not a refusal
    assert result.figures["DuplicatesAlreadyApplied"] == 1
    assert not dlq.letters
    assert value_of(ddb_tables, "stock:1", "stock") == 0


def test_a_redelivery_meeting_a_marker_keeps_the_source_order_of_the_rest(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a warm container that does not pre-read markers, transactions of at most 3 messages, and a sale
    # already applied (stock 5 -> 4)
    gate = MarkerReadGate(quiet_batches=0)
    pipeline, dlq = bounded_pipeline(ddb_tables, marker_read_gate=gate, max_actions=4)
    pipeline.process([record("a", "stock:1", stock=-1)], NOW_MS, lambda: 60_000)
    # WHEN a Kinesis-style redelivery brings it again, ahead of -4, +3 (its transaction) and -3 (the next one)
    records = [record("a", "stock:1", stock=-1), record("b", "stock:1", stock=-4), record("c", "stock:1", stock=3)]
    result = pipeline.process([*records, record("d", "stock:1", stock=-3)], NOW_MS, lambda: 60_000)
    # THEN the rest apply in the source's order, 4 -> 0 -> 3 -> 0: nothing is refused (out of order, d before b,
    # b would have met 1 and been refused)
    assert result.failed_record_ids == ()
    assert result.figures["DuplicatesAlreadyApplied"] == 1
    assert not dlq.letters
    assert value_of(ddb_tables, "stock:1", "stock") == 0


THIRTY_SIX_DIGITS = 123456789012345678901234567890123456


@pytest.mark.parametrize("side", ["floor", "ceiling"])
def test_a_36_digit_step_within_a_fractional_bound_is_counted(ddb_tables: DynamoDBTables, side: str) -> None:
    # GIVEN a floor of -0.125 (a ceiling of 0.125) and the counter twice a 36-digit amount above it (below it): a
    # write's condition compares the stored value with the bound minus the step, ``-0.125 + 123...456``, 39
    # significant digits, more than a Number holds
    sign = 1 if side == "floor" else -1
    bounds = parse_counter_bounds("acct:*#bal>=-0.125" if side == "floor" else "acct:*#bal<=0.125")
    pipeline, dlq = bounded_pipeline(ddb_tables, bounds, parse_counter_defaults(""))
    pipeline.process([record("fund", "acct:1", bal=sign * 2 * THIRTY_SIX_DIGITS)], NOW_MS, lambda: 60_000)
    # WHEN a storable 36-digit step toward the bound comes, which keeps it
    result = pipeline.process([record("spend", "acct:1", bal=-sign * THIRTY_SIX_DIGITS)], NOW_MS, lambda: 60_000)
    # THEN it counts exactly
    assert result.failed_record_ids == ()
    assert dlq.letters == []
    assert value_of(ddb_tables, "acct:1", "bal") == sign * THIRTY_SIX_DIGITS


@pytest.mark.parametrize("windows", ["", "minute,hour,day"])
@pytest.mark.parametrize("packed", [False, True], ids=["alone", "packed with a small step"])
@pytest.mark.parametrize("stored", [0, 17])
def test_a_step_past_its_ceiling_whose_sums_need_over_38_digits_is_refused_by_the_bound(
    ddb_tables: DynamoDBTables, stored: int, packed: bool, windows: str
) -> None:
    # GIVEN a seat bounded to [0, 40] at ``stored`` (and another at 5), its windows counted or not
    bounds = parse_counter_bounds("seats:*#taken>=0;seats:*#taken<=40")
    spec = parse_window_spec(windows) if windows else None
    pipeline, dlq = bounded_pipeline(ddb_tables, bounds, windows=spec)
    setup = [record("fill", "seats:1", taken=stored), record("fill-2", "seats:2", taken=5)]
    assert pipeline.process(setup, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # WHEN a step of 36 significant digits at 10^39 comes (alone, or packed with a step the other seat can take):
    # from any value but 0 its sum needs 39 or 40 digits (the all-time value's, and each window's: windows are not
    # bounded), which DynamoDB refuses before it looks at the condition (docs/aws-fidelity.md)
    events = ['{"key": "seats:1", "deltas": {"taken": 1.23456789012345678901234567890123456E+39}}']
    if packed:
        events.append('{"key": "seats:2", "deltas": {"taken": 1}}')
    body = '{"id": "big-step", "events": [' + ", ".join(events) + "]}"
    result = pipeline.process([SourceRecord("r-big-step", body, NOW_MS)], NOW_MS, lambda: 60_000)
    # THEN the bound refuses it, whole, whatever the stored value: the step leaves [0, 40] from every value in it
    assert result.failed_record_ids == ()
    assert [letter.rejection.code for letter in dlq.letters] == ["above_ceiling"], dlq.letters
    assert value_of(ddb_tables, "seats:1", "taken") == (stored or None)
    assert value_of(ddb_tables, "seats:2", "taken") == 5


def test_a_journal_sized_unit_on_a_bounded_key_goes_through_direct_transactions(ddb_tables: DynamoDBTables) -> None:
    # GIVEN 150 packed messages, each selling 1 of stock:1 (start 140) and counting 4 of 20 shared keys: without
    # the bound, the commit journal's case (one ADD per key for the whole unit)
    bounds = parse_counter_bounds("stock:1#stock>=0")
    defaults = parse_counter_defaults("stock:1#stock=start:140")
    pipeline, dlq = bounded_pipeline(ddb_tables, bounds=bounds, defaults=defaults)
    records = []
    for n in range(150):
        events = [{"key": "stock:1", "deltas": {"stock": -1}}]
        events += [{"key": f"k{(n + i) % 20}", "deltas": {"n": 1}} for i in range(4)]
        records.append(SourceRecord(f"r-{n}", json.dumps({"id": f"m{n}", "events": events}), NOW_MS))
    # WHEN processed
    result = pipeline.process(records, NOW_MS, lambda: 60_000)
    # THEN no journal batch: the messages apply in order down to the floor and the last 10 are refused whole
    assert result.figures["JournalBatches"] == 0
    assert result.failed_record_ids == ()
    assert value_of(ddb_tables, "stock:1", "stock") == 0
    assert [letter.record.record_id for letter in dlq.letters] == [f"r-{n}" for n in range(140, 150)]
    assert sum(value_of(ddb_tables, f"k{k}", "n") or 0 for k in range(20)) == 140 * 4
    # and the fallback costs one transaction for the 61 messages the stored value (61, from the cancellation's
    # ALL_OLD) lets through, plus one per refused message: 2 + 1 + 10, not one per message (2 + 71)
    assert result.figures["Transactions"] == 13


def test_concurrent_batches_on_one_bounded_key_never_cross_it(ddb_tables: DynamoDBTables) -> None:
    # GIVEN two invocations selling from the same stock (start 5) at once, 8 sales of 1 each
    results: list[Any] = []
    pipelines = [bounded_pipeline(ddb_tables) for _ in range(2)]

    def run(index: int) -> None:
        batch = [record(f"s{index}-{n}", "stock:1", stock=-1) for n in range(4)]
        results.append(pipelines[index][0].process(batch, NOW_MS, lambda: 60_000))

    at_once(run, [0, 1])
    # THEN 5 sales count and 3 are refused, whatever the interleaving: the stock ends at exactly 0
    refused = [letter for _, dlq in pipelines for letter in dlq.letters]
    assert all(not result.failed_record_ids for result in results)
    assert sum(result.figures["MessagesApplied"] for result in results) == 5
    assert len(refused) == 3
    assert {str(letter.rejection.code) for letter in refused} == {"below_floor"}
    assert value_of(ddb_tables, "stock:1", "stock") == 0


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_each_bounded_sample_counts_as_documented(ddb_tables: DynamoDBTables, event_file: str) -> None:
    # GIVEN a bounded sample event, read by its source, and the deployment's CounterBounds and CounterDefaults
    spec = EXPECTED[event_file]
    defaults = parse_counter_defaults(spec.get("counter_defaults", ""))
    pipeline, dlq = bounded_pipeline(ddb_tables, parse_counter_bounds(spec["counter_bounds"], None, defaults), defaults)
    # WHEN it is processed twice (a redelivery of the whole batch)
    first, second = processed_twice(pipeline, event_file, spec, NOW_MS)
    # THEN nothing fails; the counters and dead letters are as documented; the refused are refused again
    assert first.failed_record_ids == second.failed_record_ids == ()
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client)
    assert {key: {n: str(v) for n, v in reader.get(key).values.items()} for key in spec["counters"]} == spec["counters"]
    assert sorted(str(letter.rejection.code) for letter in dlq.letters) == sorted(spec["dead_letters"] * 2)


# ------------------------------------------------------------------------------------ Hypothesis property
AMOUNTS = st.integers(min_value=-4, max_value=4).filter(bool)


EXAMPLES = itertools.count()


def one_by_one(batches: list[list[tuple[str, int]]], start: int, bound: Bound) -> tuple[int, set[str]]:
    """The model: each batch's distinct messages not applied before, one by one in order, each refused if it
    would cross. (Any transaction's net applies only when every one of its steps holds, so it is this.)"""
    value, applied = start, set()
    for batch in batches:
        for message_id, amount in _first_copies(batch):
            if message_id not in applied and bound.refusal(value, amount) is None:
                value += amount
                applied.add(message_id)
    return value, applied


def _first_copies(batch: list[tuple[str, int]]) -> list[tuple[str, int]]:
    seen: dict[str, int] = {}
    for message_id, amount in batch:
        seen.setdefault(message_id, amount)
    return list(seen.items())


@on_emulator()
@given(
    amounts=st.lists(AMOUNTS, min_size=1, max_size=14),
    cuts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=14),
    repeats=st.lists(st.integers(min_value=0, max_value=13), max_size=4),
)
def test_no_prefix_of_the_applied_order_crosses_the_bound(
    ddb_tables: DynamoDBTables, amounts: list[int], cuts: list[int], repeats: list[int]
) -> None:
    # GIVEN a counter between 0 and 6 starting at 3, a run of messages cut into batches, some sent again later
    key = f"seat:{next(EXAMPLES)}"
    bounds = parse_counter_bounds("seat:*#taken>=0;seat:*#taken<=6")
    defaults = parse_counter_defaults("seat:*#taken=start:3")
    pipeline, dlq = bounded_pipeline(ddb_tables, bounds, defaults, max_actions=4)
    sent = [(f"{key}-{n}", amount) for n, amount in enumerate(amounts)]
    batches = sent_in_batches(sent, repeats, cuts)
    # WHEN every batch is processed, in order (several transactions each: at most 3 messages in one)
    values = []
    for batch in batches:
        result = pipeline.process([record(mid, key, taken=amount) for mid, amount in batch], NOW_MS, lambda: 60_000)
        assert result.failed_record_ids == ()
        values.append(value_of(ddb_tables, key, "taken"))
    # THEN the value never left [0, 6] and is what applying the distinct messages one by one gives: no step of
    # the applied order crossed the bound, each message applied at most once, the rest refused
    expected, applied = one_by_one(batches, 3, Bound(0, 6))
    assert all(value is None or 0 <= value <= 6 for value in values)
    assert (values[-1] if values[-1] is not None else 3) == expected
    assert expected == 3 + sum(amount for mid, amount in sent if mid in applied)
    refused = {letter.record.record_id for letter in dlq.letters}
    assert all(f"r-{mid}" in refused for mid, _ in sent if mid not in applied)
