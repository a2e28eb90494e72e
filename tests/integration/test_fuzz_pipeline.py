"""Fuzzing the whole pipeline: hostile bodies mixed with good ones, on DynamoDB Local.

Each example is a batch of generated records: hostile bodies (malformed JSON, wrong types, 39+ digit and
out-of-range numbers, NaN/Infinity, lone surrogates and other unicode edge cases, oversized keys, deep
nesting, huge packed messages) interleaved with good single and packed messages. Over all examples at
least 10,000 bodies go through. The batch never raises; every record is either counted (exactly once) or
in the dead-letter queue with a specific reason code; the good records' counters are exact.
"""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tally.core.decode import decode_message
from tally.core.model import Message, RejectCode, SourceRecord
from tally.reader.store_view import read_counters
from tests.support.pipeline import make_pipeline, make_store
from tests.support.workload import SENT_MS

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal
    from tests.support.tables import DynamoDBTables

pytestmark = pytest.mark.integration

NOW_MS = SENT_MS + 1_000
BATCH = 100
EXAMPLES = 105  # 105 batches x 100 records = 10,500 bodies

numbers = st.one_of(
    st.integers(-(10**40), 10**40).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=None).map(str),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "1e-400", "-0", "0E-999999999", "1" * 39, "9.99E+125"]),
    st.sampled_from(["true", "null", '"1"', "[]", "{}", '"NaN"']),
)
keys = st.one_of(
    st.text(min_size=0, max_size=20),
    st.sampled_from(["\\ud800", "\\udfff", "a\\ud83d", "\\u0000", "\\u001f", "é" * 1100, "x" * 2100, ""]),
)


BAD_TS = ["1.5", "-1", "true", '"yesterday"', '"2026-01-01"']


@st.composite
def hostile_body(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 7))
    message_id = draw(st.one_of(st.just(f"h-{draw(st.uuids())}"), st.sampled_from(['""', "1", "null"])))
    mid = json.dumps(message_id) if message_id.startswith("h-") else message_id
    key = "h:" + draw(keys)  # hostile keys never touch the good records' keys
    key_json = json.dumps(key) if "\\u" not in key else f'"{key}"'
    if kind == 0:
        return draw(st.text(max_size=60))
    if kind == 1:
        return f'{{"id":{mid},"key":{key_json},"delta":{draw(numbers)}}}'
    if kind == 2:
        return f'{{"id":{mid},"key":{key_json},"deltas":{{{json.dumps(draw(st.text(max_size=5)))}:{draw(numbers)}}}}}'
    if kind == 3:
        depth = draw(st.integers(10, 5000))
        return f'{{"id":{mid},"key":"k","delta":' + "[" * depth + "]" * depth + "}"
    if kind == 4:
        return f'{{"id":{mid},"key":"k","delta":1,{json.dumps(draw(st.text(min_size=1, max_size=8)))}:1}}'
    if kind == 5:
        ts = draw(st.sampled_from(BAD_TS))
        return f'{{"id":{mid},"key":"k","delta":1,"ts":{ts}}}'
    if kind == 6:
        return f'{{"id":{mid},"events":[]}}'
    return f'{{"id":{mid},"events":[' + ",".join(['{"key":"k","delta":1}'] * 10_001) + "]}"


@st.composite
def good_body(draw: st.DrawFn) -> tuple[str, dict[str, Decimal]]:
    message_id = f"g-{uuid.uuid4()}"
    events = draw(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-50, 50)), min_size=1, max_size=5))
    expected: dict[str, Decimal] = {}
    for key, delta in events:
        expected[key] = expected.get(key, Decimal(0)) + delta
    if len(events) == 1:
        return f'{{"id":"{message_id}","key":"{events[0][0]}","delta":{events[0][1]}}}', expected
    packed = ",".join(f'{{"key":"{key}","delta":{delta}}}' for key, delta in events)
    return f'{{"id":"{message_id}","events":[{packed}]}}', expected


def test_hostile_batches_never_crash_and_good_records_count(
    dynamodb_local: DynamoDBLocal, ddb_tables: DynamoDBTables
) -> None:
    store = make_store(ddb_tables.client, ddb_tables.counters_table, ddb_tables.markers_table)
    pipeline, dlq = make_pipeline(store)
    total: dict[str, Decimal] = {}
    bodies_seen = [0]
    specific = set(RejectCode)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(
        batch=st.lists(st.one_of(hostile_body().map(lambda b: (b, None)), good_body()), min_size=BATCH, max_size=BATCH)
    )
    def run(batch: list[tuple[str, dict[str, Decimal] | None]]) -> None:
        records = [SourceRecord(f"r-{uuid.uuid4()}", body, SENT_MS) for body, _ in batch]
        dlq.letters.clear()
        result = pipeline.process(records, NOW_MS, lambda: 60_000)
        bodies_seen[0] += len(records)
        assert result.failed_record_ids == ()
        dead = {letter.record.record_id: letter.rejection for letter in dlq.letters}
        for record, (_, expected) in zip(records, batch, strict=True):
            if expected is None:
                # A generated body is sometimes valid after all (say, key "h:0" and delta 0): then it
                # counts; otherwise it must be dead-lettered with a specific reason.
                if not isinstance(decode_message(record.body), Message):
                    assert record.record_id in dead, record.body[:200]
                    assert dead[record.record_id].code in specific
                    assert dead[record.record_id].detail
            else:
                assert record.record_id not in dead, dead.get(record.record_id)
                for key, delta in expected.items():
                    total[key] = total.get(key, Decimal(0)) + delta

    run()
    assert bodies_seen[0] >= 10_000
    counted = {key: read_counters(store, key).get("count", Decimal(0)) for key in ("a", "b", "c")}
    assert counted == {key: total.get(key, Decimal(0)) for key in ("a", "b", "c")}
