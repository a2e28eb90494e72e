"""On DynamoDB Local: corrections and resets, exactly once, in source order.

The sample events (``events/*-resets.json``) through the SQS and Kinesis sources and the production
pipeline; resets at every position of a batch; a hot key's shards; windows; a lost response; a reset
redelivered after later deltas; an earlier message handed back holding the reset back; and the property:
for any order of deltas, resets and corrections, any batching and any duplication, the stored value is
that of applying the distinct messages one by one in source order (``tests/support/reference.py``: ``expected_values``).
"""

from __future__ import annotations

import json
import random
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tally.commit.marker_reads import MarkerReadGate
from tally.core.decode import decode_message
from tally.core.ledger import Claim
from tally.core.model import Message, SourceRecord
from tally.core.sharding import parse_hot_keys
from tally.core.windows import HOUR_MS, parse_window_spec
from tally.reader import CounterReader
from tally.store.journal import DynamoDBJournal
from tally_local.kit.faults import DynamoDBFaults
from tests.support.events import SAMPLES_SENT_MS, expected_samples, processed_twice
from tests.support.pipeline import make_pipeline, make_store
from tests.support.properties import on_emulator
from tests.support.reference import expected_values

if TYPE_CHECKING:
    from tally.core.sharding import HotKeys
    from tally.pipeline import BatchPipeline
    from tests.support.pipeline import RecordingDeadLetterQueue
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

SENT_MS = SAMPLES_SENT_MS
NOW_MS = SENT_MS + 1_000
EXPECTED = expected_samples("-resets.json")


def counters_of(tables: DynamoDBTables, key: str, hot_keys: HotKeys | str = "") -> dict[str, str]:
    reader = CounterReader(tables.counters_table, client=tables.client, hot_keys=hot_keys)
    return {n: str(v) for n, v in reader.get(key).values.items()}


def operators_of(tables: DynamoDBTables, key: str) -> dict[str, dict[str, list[str]]]:
    stored = CounterReader(tables.counters_table, client=tables.client).get(key).operators
    return {
        kind: {name: [record.message_id, str(record.amount)] for name, record in records.items()}
        for kind, records in stored.items()
    }


def pipeline_on(
    tables: DynamoDBTables, *, hot_keys: HotKeys | None = None, **options: Any
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    store = make_store(tables.client, tables.counters_table, tables.markers_table)
    return make_pipeline(store, hot_keys=hot_keys, **options)


def records(bodies: list[dict[str, Any]], prefix: str = "r") -> list[SourceRecord]:
    return [SourceRecord(f"{prefix}{i}", json.dumps(body), SENT_MS) for i, body in enumerate(bodies)]


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_each_reset_sample_counts_as_documented(ddb_tables: DynamoDBTables, event_file: str) -> None:
    # GIVEN a sample with deltas, a reset, a duplicate of it, a correction and two refused operator messages
    spec = EXPECTED[event_file]
    pipeline, dlq = pipeline_on(ddb_tables)
    # WHEN it is processed twice (a redelivery of the whole batch)
    first, second = processed_twice(pipeline, event_file, spec, NOW_MS)
    # THEN the counters are as if applied one by one, the reset and correction recorded, the bad ones refused
    assert first.failed_record_ids == second.failed_record_ids == ()
    assert {key: counters_of(ddb_tables, key) for key in spec["counters"]} == spec["counters"]
    assert {key: operators_of(ddb_tables, key) for key in spec["operators"]} == spec["operators"]
    assert sorted(str(letter.rejection.code) for letter in dlq.letters) == sorted(spec["dead_letters"] * 2)


def delta(mid: str, key: str, amount: int, **extra: Any) -> dict[str, Any]:
    return {"id": mid, "key": key, "deltas": {"stock": amount}, **extra}


def reset(mid: str, key: str, value: int) -> dict[str, Any]:
    return {"id": mid, "key": key, "reset": {"stock": value}}


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (["d5", "R100"], "100"),  # reset last: the earlier delta is overwritten
        (["R100", "d5"], "105"),  # reset first: the later delta adds on top
        (["d1", "d2", "R10", "d3", "d4"], "17"),
        (["R10", "R20", "d1"], "21"),  # several resets: the last wins
        (["d1", "R10", "d2", "R0", "d3", "C-1"], "2"),  # a correction adds like a delta
        (["R7"], "7"),
        (["C5", "R1", "C5"], "6"),
    ],
)
def test_a_reset_overwrites_what_came_before_it_in_the_batch_and_nothing_after(
    ddb_tables: DynamoDBTables, shape: list[str], expected: str
) -> None:
    # GIVEN one batch on one key (which already holds 1000) with resets at the positions given
    key = f"stock:{uuid.uuid4().hex}"
    pipeline, dlq = pipeline_on(ddb_tables)
    assert pipeline.process(records([delta("seed-" + key, key, 1000)]), NOW_MS, lambda: 60_000).failed_record_ids == ()
    bodies = []
    for n, step in enumerate(shape):
        mid, amount = f"{key}-{n}", int(step[1:])
        if step[0] == "R":
            bodies.append(reset(mid, key, amount))
        else:
            bodies.append(delta(mid, key, amount, **({"correction": True} if step[0] == "C" else {})))
    # WHEN it is processed
    result = pipeline.process(records(bodies), NOW_MS, lambda: 60_000)
    # THEN the value is that of applying the messages one by one, in order
    assert result.failed_record_ids == ()
    assert not dlq.letters
    assert counters_of(ddb_tables, key) == {"stock": expected}


def test_a_reset_sets_every_shard_of_a_hot_key_and_leaves_its_windows(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a hot key (4 shards declared, reads sum all 16) counted in hourly windows over several batches
    hot = parse_hot_keys("stock:hot=4")
    windows = parse_window_spec("hour")
    key = "stock:hot"
    pipeline, _ = pipeline_on(ddb_tables, hot_keys=hot, windows=windows)
    ts = NOW_MS - 60_000
    for n in range(8):
        batch = records([delta(f"hot-{n}", key, 10, ts=ts)], prefix=f"b{n}-")
        assert pipeline.process(batch, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # WHEN a reset to 3 and then a correction of +2 arrive
    batch = records([reset("hot-reset", key, 3), delta("hot-fix", key, 2, correction=True, ts=ts)], prefix="x")
    assert pipeline.process(batch, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # THEN the key reads 5 however its shards held the 80; its hour window holds what happened in it (80 + 2)
    assert counters_of(ddb_tables, key, hot) == {"stock": "5"}
    reader = CounterReader(ddb_tables.counters_table, client=ddb_tables.client, hot_keys=hot, windows=windows)
    (window,) = reader.series(key, "hour", ts, ts).windows
    assert {n: str(v) for n, v in window.values.items()} == {"stock": "82"}
    assert operators_of(ddb_tables, key) == {
        "reset": {"stock": ["hot-reset", "3"]},
        "correction": {"stock": ["hot-fix", "2"]},
    }
    assert window.start_ms == ts - ts % HOUR_MS


def test_a_lost_response_to_the_reset_commits_it_once(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a key at 50 and a batch: a delta, a reset whose transaction's answer is lost, a delta
    key = f"stock:{uuid.uuid4().hex}"
    pipeline, _ = pipeline_on(ddb_tables, marker_read_gate=None)
    assert pipeline.process(records([delta(f"{key}-0", key, 50)]), NOW_MS, lambda: 60_000).failed_record_ids == ()
    faults = DynamoDBFaults(ddb_tables.client)
    batch = records([delta(f"{key}-1", key, 5), reset(f"{key}-2", key, 10), delta(f"{key}-3", key, 1)])
    faults.lose_responses(2)  # the first segment's transaction and the reset's: each retried, each meets its markers
    result = pipeline.process(batch, NOW_MS, lambda: 60_000)
    # THEN every message is settled and the value is 10 + 1
    assert result.failed_record_ids == ()
    assert faults.injected.count("lose_response") == 2
    assert counters_of(ddb_tables, key) == {"stock": "11"}


def test_a_reset_redelivered_after_later_deltas_does_not_wipe_them(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a reset to 100 applied, then deltas applied by later batches
    key = f"stock:{uuid.uuid4().hex}"
    pipeline, _ = pipeline_on(ddb_tables)
    the_reset = reset(f"{key}-reset", key, 100)
    assert pipeline.process(records([the_reset]), NOW_MS, lambda: 60_000).failed_record_ids == ()
    later = records([delta(f"{key}-1", key, -7), delta(f"{key}-2", key, 2, correction=True)], prefix="later")
    assert pipeline.process(later, NOW_MS, lambda: 60_000).failed_record_ids == ()
    # WHEN the reset is delivered again (an SQS redelivery, a producer re-send, a DLQ redrive), alone and in a batch
    again = pipeline.process(records([the_reset], prefix="again"), NOW_MS, lambda: 60_000)
    mixed = pipeline.process(records([delta(f"{key}-3", key, 1), the_reset], prefix="mixed"), NOW_MS, lambda: 60_000)
    # THEN it is a duplicate each time: the later deltas stand
    assert again.failed_record_ids == mixed.failed_record_ids == ()
    assert again.figures["DuplicatesAlreadyApplied"] == mixed.figures["DuplicatesAlreadyApplied"] == 1
    assert counters_of(ddb_tables, key) == {"stock": "96"}
    assert operators_of(ddb_tables, key)["reset"] == {"stock": [f"{key}-reset", "100"]}


def test_a_message_handed_back_before_a_reset_holds_the_reset_and_what_follows(ddb_tables: DynamoDBTables) -> None:
    # GIVEN a batch: a delta whose transaction DynamoDB keeps throttling, then a reset, then a delta
    key = f"stock:{uuid.uuid4().hex}"
    pipeline, _ = pipeline_on(ddb_tables)
    batch = records([delta(f"{key}-1", key, 5), reset(f"{key}-2", key, 10), delta(f"{key}-3", key, 1)])
    faults = DynamoDBFaults(ddb_tables.client)
    faults.cancel("ThrottlingError", count=8)  # every attempt of the first segment (FAST_RETRIES: 8)
    # WHEN it is processed, and then redelivered from the first failed record (as Kinesis does)
    first = pipeline.process(batch, NOW_MS, lambda: 60_000)
    # THEN nothing after the handed-back delta committed: the reset waits for it
    assert first.failed_record_ids == ("r0", "r1", "r2")
    assert counters_of(ddb_tables, key) == {}
    faults.clear()
    second = pipeline.process(batch, NOW_MS, lambda: 60_000)
    assert second.failed_record_ids == ()
    assert counters_of(ddb_tables, key) == {"stock": "11"}


@pytest.mark.parametrize("reads_markers", [True, False], ids=["marker-read", "no-marker-read"])
def test_a_message_held_by_another_batch_before_a_reset_holds_the_reset(
    ddb_tables: DynamoDBTables, reads_markers: bool
) -> None:
    # GIVEN a message claimed by another invocation's journal batch whose lease is live, then a batch: that
    # message, a reset, a delta (met through the marker read, or through the direct transaction's cancellation)
    key = f"stock:{uuid.uuid4().hex}"
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    journal.open("other-invocation", NOW_MS + 600_000, [Claim(f"{key}-1")], NOW_MS)
    gate = MarkerReadGate() if reads_markers else MarkerReadGate(quiet_batches=0)
    pipeline, _ = make_pipeline(store, marker_read_gate=gate)
    batch = records([delta(f"{key}-1", key, 5), reset(f"{key}-2", key, 10), delta(f"{key}-3", key, 1)])
    # WHEN it is processed
    result = pipeline.process(batch, NOW_MS, lambda: 60_000)
    # THEN the held message, the reset and the delta after it all go back to the source: nothing overtook it
    assert result.failed_record_ids == ("r0", "r1", "r2")
    assert counters_of(ddb_tables, key) == {}


class Killed(Exception):
    """The invocation dies here (a timeout, an out-of-memory kill): nothing after this call runs."""


def crash_batch(run: str) -> list[dict[str, Any]]:
    """A packed message over 120 keys (a journal unit of several chunks, with the reset's key in it), a
    reset, a direct delta, a correction, a delta: every kind of step a batch with resets makes."""
    key = f"stock:{run}"
    packed = {"id": f"{run}-0", "events": [{"key": f"{key}:{n}" if n else key, "delta": 7} for n in range(120)]}
    return [
        packed,
        reset(f"{run}-1", key, 10),
        delta(f"{run}-2", key, 1),
        delta(f"{run}-3", key, -2, correction=True),
        delta(f"{run}-4", key, 4),
    ]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_any_call_of_a_batch_with_resets_is_repaired_by_redelivery(
    ddb_tables: DynamoDBTables, when: str
) -> None:
    # GIVEN how many DynamoDB calls a clean run of the batch makes
    pipeline, dlq = pipeline_on(ddb_tables, max_actions=40)  # small transactions: a multi-chunk journal unit
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(model.name)

    ddb_tables.client.meta.events.register("before-call.dynamodb", count)
    assert pipeline.process(records(crash_batch(uuid.uuid4().hex)), NOW_MS, lambda: 60_000).failed_record_ids == ()
    ddb_tables.client.meta.events.unregister("before-call.dynamodb", count)
    clean_calls = len(calls)
    assert {"TransactWriteItems", "BatchWriteItem"} <= set(calls)  # the journal's pages too
    for n in range(1, clean_calls + 1):
        # WHEN the invocation dies before the n-th call is sent, or after it committed and before its answer
        run = uuid.uuid4().hex
        batch = records(crash_batch(run))
        seen = [0]

        def die(seen: list[int] = seen, n: int = n, **_: Any) -> None:
            seen[0] += 1
            if seen[0] == n:
                raise Killed

        ddb_tables.client.meta.events.register(f"{when}-call.dynamodb", die)
        try:
            with pytest.raises(Killed):
                pipeline.process(batch, NOW_MS, lambda: 60_000)
        finally:
            ddb_tables.client.meta.events.unregister(f"{when}-call.dynamodb", die)
        # THEN redelivering the whole batch (after any lease it left has ended) settles it exactly once
        later = NOW_MS
        for _ in range(3):
            later += 600_000
            if not pipeline.process(batch, later, lambda: 60_000).failed_record_ids:
                break
        else:
            pytest.fail(f"still failing after a crash {when} call {n}")
        key = f"stock:{run}"
        assert counters_of(ddb_tables, key) == {"count": "7", "stock": "13"}, (when, n)
        assert counters_of(ddb_tables, f"{key}:1") == {"count": "7"}
        assert operators_of(ddb_tables, key) == {
            "reset": {"stock": [f"{run}-1", "10"]},
            "correction": {"stock": [f"{run}-3", "-2"]},
        }
    assert not dlq.letters


# ----------------------------------------------------------------------------------------- the property
steps = st.lists(
    st.tuples(
        st.sampled_from(["delta", "reset", "correction"]),
        st.sampled_from(["p:a", "p:b"]),
        st.integers(-20, 20),
    ),
    min_size=1,
    max_size=12,
)


def step_bodies(spec: list[tuple[str, str, int]], run: str) -> list[str]:
    """The message bodies of drawn steps, their ids and keys made unique to the example's ``run``."""
    bodies = []
    for n, (kind, key, amount) in enumerate(spec):
        mid, k = f"m{n}-{run}", f"{key}:{run}"
        if kind == "reset":
            bodies.append(json.dumps(reset(mid, k, amount)))
        else:
            bodies.append(json.dumps(delta(mid, k, amount, **({"correction": True} if kind == "correction" else {}))))
    return bodies


@on_emulator()
@given(steps, st.integers(0, 2**32), st.integers(1, 4), st.booleans())
def test_stored_values_equal_the_distinct_messages_applied_one_by_one_in_order(
    ddb_tables: DynamoDBTables, spec: list[tuple[str, str, int]], seed: int, batches: int, hot: bool
) -> None:
    # GIVEN deltas, resets and corrections on two keys, each delivered 1 to 3 times (a copy lands anywhere
    # after its first delivery), cut into consecutive batches, on a hot key or not
    rng = random.Random(seed)
    run = uuid.uuid4().hex  # examples share the tables: each gets its own keys and ids (replays too)
    bodies = step_bodies(spec, run)
    deliveries = list(bodies)
    for body in bodies:
        for _ in range(rng.randint(0, 2)):
            deliveries.insert(rng.randint(deliveries.index(body) + 1, len(deliveries)), body)
    hot_keys = parse_hot_keys(f"p:a:{run}=4") if hot else None
    pipeline, dlq = pipeline_on(ddb_tables, hot_keys=hot_keys)
    # WHEN each batch is processed in turn
    size = -(-len(deliveries) // batches)
    for start in range(0, len(deliveries), size):
        batch = [
            SourceRecord(f"r{start + i}", body, SENT_MS) for i, body in enumerate(deliveries[start : start + size])
        ]
        assert pipeline.process(batch, NOW_MS, lambda: 60_000).failed_record_ids == ()
    assert not dlq.letters
    # THEN each key holds what applying the distinct messages one by one, in order of first delivery, gives
    distinct = [decode_message(body) for body in dict.fromkeys(deliveries)]
    want = expected_values(message for message in distinct if isinstance(message, Message))
    for key, counters in want.items():
        stored = counters_of(ddb_tables, key, hot_keys or "")
        assert set(stored) <= set(counters)
        # A counter only ever moved by zero deltas was never written: it reads as 0.
        assert {n: Decimal(stored.get(n, 0)) for n in counters} == {n: Decimal(v) for n, v in counters.items()}


@on_emulator()
@given(steps, st.integers(0, 2**32), st.integers(1, 4), st.sets(st.integers(0, 11), max_size=3))
# What it found at 150 examples with segments cut after the marker read (the defect fixed in 5067b2b): the
# held delta on p:b was in no segment, the reset committed first, and its redelivery added on top.
@example(spec=[("delta", "p:a", 0), ("delta", "p:b", 1), ("reset", "p:b", 0)], seed=0, batches=1, held={1})
def test_a_shard_checkpointing_at_held_messages_still_applies_them_one_by_one_in_order(
    ddb_tables: DynamoDBTables, spec: list[tuple[str, str, int]], seed: int, batches: int, held: set[int]
) -> None:
    # GIVEN a Kinesis-like shard of deltas, resets and corrections (with re-sends), in which some ordinary
    # messages are claimed by another invocation's journal batch whose lease is still live (held back)
    rng = random.Random(seed)
    run = uuid.uuid4().hex
    bodies = step_bodies(spec, run)
    stream = list(bodies)
    for body in bodies:
        if rng.random() < 0.3:
            stream.insert(rng.randint(stream.index(body) + 1, len(stream)), body)
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    journal = DynamoDBJournal(store.client, store.counters_table, store.markers_table, store.marker_ttl_seconds)
    claims = [Claim(f"m{n}-{run}") for n in sorted(held) if n < len(spec) and spec[n][0] == "delta"]
    if claims:
        journal.open(f"other-{run}", NOW_MS + 60_000, claims, NOW_MS)
    pipeline, dlq = make_pipeline(store)
    # WHEN the shard is read in batches, each retried from its first failed record (Kinesis' checkpoint at the
    # lowest failure), the clock moving past the other batch's lease after a failure
    size, position, now = -(-len(stream) // batches), 0, NOW_MS
    for _ in range(4 * len(stream) + 4):
        if position >= len(stream):
            break
        batch = [
            SourceRecord(f"r{position + i}", body, SENT_MS) for i, body in enumerate(stream[position : position + size])
        ]
        failed = pipeline.process(batch, now, lambda: 60_000).failed_record_ids
        position = min((int(record_id[1:]) for record_id in failed), default=position + len(batch))
        if failed:
            now += 150_000
    assert position >= len(stream)
    assert not dlq.letters
    # THEN each key holds what applying the distinct messages one by one, in stream order, gives
    distinct = [decode_message(body) for body in dict.fromkeys(stream)]
    want = expected_values(message for message in distinct if isinstance(message, Message))
    for key, counters in want.items():
        stored = counters_of(ddb_tables, key)
        assert {n: Decimal(stored.get(n, 0)) for n in counters} == {n: Decimal(v) for n, v in counters.items()}
