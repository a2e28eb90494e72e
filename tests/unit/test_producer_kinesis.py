"""``KinesisPublisher`` against moto's Kinesis server, with partial failures injected at the botocore layer."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.limits import KINESIS_PUT_MAX_BYTES, KINESIS_RECORD_MAX_BYTES
from tally.producer import Event, KinesisPublisher, OutgoingMessage, RetryPolicy
from tally_local.kit.faults import BatchFaults
from tests.support.moto_server import client, create_stream, read_stream

if TYPE_CHECKING:
    from collections.abc import Callable

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.04)


def counting_ids(prefix: str = "m") -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


@pytest.fixture
def kinesis(moto_endpoint: str) -> Any:
    return client("kinesis", moto_endpoint)


def publisher(kinesis: Any, stream: str, **options: Any) -> KinesisPublisher:
    return KinesisPublisher(
        kinesis,
        stream_name=stream,
        policy=FAST,
        new_id=counting_ids(),
        sleep=lambda _: None,
        rng=random.Random(7),
        **options,
    )


def all_records(kinesis: Any, stream: str) -> list[dict[str, Any]]:
    return [record for records in read_stream(kinesis, stream).values() for record in records]


def test_single_events_are_keyed_by_counter_key_packs_by_message_id(kinesis: Any) -> None:
    # GIVEN a stream of four shards
    stream, _ = create_stream(kinesis, shards=4)
    # WHEN single-event messages and packed messages are published
    singles = publisher(kinesis, stream, pack=False).publish([Event.count("page:/home"), Event.count("page:/docs")])
    packs = KinesisPublisher(kinesis, stream_name=stream, new_id=counting_ids("p")).publish(
        [Event.count(f"k{i}") for i in range(10)]
    )
    assert singles.ok
    assert packs.ok
    # THEN the partition key of a single event is its counter key, of a pack its message id
    keys = {json.loads(r["Data"])["id"]: r["PartitionKey"] for r in all_records(kinesis, stream)}
    assert keys == {"m-1": "page:/home", "m-2": "page:/docs", "p-1": "p-1"}


def test_a_counter_key_longer_than_a_partition_key_is_hashed_consistently(kinesis: Any) -> None:
    stream, _ = create_stream(kinesis)
    key = "tenant:" + "x" * 400
    assert publisher(kinesis, stream, pack=False).publish([Event.count(key), Event.count(key)]).ok
    assert {r["PartitionKey"] for r in all_records(kinesis, stream)} == {hashlib.sha256(key.encode()).hexdigest()}


def test_put_records_calls_hold_at_most_500_records(kinesis: Any) -> None:
    stream, _ = create_stream(kinesis)
    faults = BatchFaults(kinesis)
    result = publisher(kinesis, stream, pack=False).publish([Event.count(f"k{i % 9}") for i in range(1_200)])
    assert [len(call) for call in faults.sent] == [500, 500, 200]
    assert (result.ok, result.sent_messages, result.calls) == (True, 1_200, 3)
    assert len(all_records(kinesis, stream)) == 1_200


def test_calls_stay_under_five_mib_and_records_under_one() -> None:
    # GIVEN (no network) messages of 0.9 MiB each
    pub = KinesisPublisher(client("kinesis", "http://127.0.0.1:9"), stream_name="s")
    big = [OutgoingMessage(f"id-{i}", (Event.count("k"),), b"x" * (900 * 1024), packed=False) for i in range(12)]
    # WHEN they are grouped into PutRecords calls THEN each call carries at most 5 MiB
    batches = [list(batch) for batch in pub.batches(big)]
    assert [len(batch) for batch in batches] == [5, 5, 2]
    assert all(sum(m.size + 1 for m in batch) <= KINESIS_PUT_MAX_BYTES for batch in batches)
    # ... and packing never builds a record that would not fit with its partition key
    assert pub.limits is not None
    assert pub.limits.max_bytes + 4 * 256 <= KINESIS_RECORD_MAX_BYTES


def test_packing_fills_records_far_beyond_sqs_size(kinesis: Any) -> None:
    stream, _ = create_stream(kinesis)
    result = publisher(kinesis, stream).publish([Event.count(f"k{i % 50}", i) for i in range(20_000)])
    records = all_records(kinesis, stream)
    assert result.ok
    assert [len(json.loads(r["Data"])["events"]) for r in records] == [10_000, 10_000]  # the event limit binds


def test_only_failed_records_are_retried_and_the_retries_keep_their_ids(kinesis: Any) -> None:
    # GIVEN a first call in which records 1 and 3 read as throttled (the stream stored them anyway)
    stream, _ = create_stream(kinesis)
    faults = BatchFaults(kinesis)
    faults.fail_entries(1, 3)
    # WHEN five messages are published
    result = publisher(kinesis, stream, pack=False).publish([Event.count(f"k{i}") for i in range(5)])
    # THEN only those two were sent again, byte for byte
    first, second = faults.sent
    assert [r["Data"] for r in second] == [first[1]["Data"], first[3]["Data"]]
    assert (result.ok, result.sent_messages, result.retried, result.calls) == (True, 5, 2, 2)
    # ... so the stream holds them twice, under new sequence numbers and the same ids
    records = all_records(kinesis, stream)
    ids = [json.loads(r["Data"])["id"] for r in records]
    assert sorted(ids) == ["m-1", "m-2", "m-2", "m-3", "m-4", "m-4", "m-5"]
    assert len({r["SequenceNumber"] for r in records}) == len(records)


def test_a_lost_response_resends_the_whole_call(kinesis: Any) -> None:
    stream, _ = create_stream(kinesis)
    faults = BatchFaults(kinesis)
    faults.lose_responses(1)
    result = publisher(kinesis, stream, pack=False).publish([Event.count("a"), Event.count("b")])
    assert (result.ok, result.retried, result.calls) == (True, 2, 2)
    assert sorted(json.loads(r["Data"])["id"] for r in all_records(kinesis, stream)) == ["m-1", "m-1", "m-2", "m-2"]


def test_records_still_failing_after_every_attempt_are_returned_for_a_later_resend(kinesis: Any) -> None:
    stream, _ = create_stream(kinesis)
    faults = BatchFaults(kinesis)
    faults.refuse_calls("ProvisionedThroughputExceededException", count=FAST.max_attempts)
    pub = publisher(kinesis, stream)
    result = pub.publish([Event.count("a"), Event.count("b")])
    assert [(f.message.message_id, f.code, f.attempts) for f in result.failed] == [
        ("m-1", "ProvisionedThroughputExceededException", FAST.max_attempts)
    ]
    assert all_records(kinesis, stream) == []
    assert pub.send(result.failed_messages).ok
    (record,) = all_records(kinesis, stream)
    assert record["Data"] == result.failed[0].message.body


def test_a_missing_stream_is_a_failure_not_an_exception(kinesis: Any) -> None:
    result = publisher(kinesis, "no-such-stream").publish([Event.count("a")])
    assert [f.code for f in result.failed] == ["ResourceNotFoundException"]
    assert result.calls == 1


def test_the_stream_can_be_named_by_arn(kinesis: Any) -> None:
    stream, arn = create_stream(kinesis)
    pub = KinesisPublisher(kinesis, stream_arn=arn, new_id=counting_ids())
    assert pub.publish([Event.count("a")]).ok
    assert [json.loads(r["Data"])["id"] for r in all_records(kinesis, stream)] == ["m-1"]


def test_exactly_one_of_name_and_arn() -> None:
    kinesis = client("kinesis", "http://127.0.0.1:9")
    with pytest.raises(ValueError, match="exactly one"):
        KinesisPublisher(kinesis)
    with pytest.raises(ValueError, match="exactly one"):
        KinesisPublisher(kinesis, stream_name="a", stream_arn="arn:aws:kinesis:us-east-1:1:stream/a")
