"""``SqsPublisher`` against moto's SQS server, with partial failures injected at the botocore layer."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from typing import TYPE_CHECKING, Any

import pytest

from tally.core.numbered_ids import parse_numbered
from tally.errors import TallyError
from tally.producer import Event, PublishError, RetryPolicy, SqsPublisher, new_message_id
from tally_local.kit.faults import BatchFaults
from tests.support.moto_server import client, drain_queue, unique

if TYPE_CHECKING:
    from collections.abc import Callable

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.04)


def counting_ids(prefix: str = "m") -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter)}"


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sqs(moto_endpoint: str) -> Any:
    return client("sqs", moto_endpoint)


def publisher(sqs: Any, url: str, sleeps: Sleeps | None = None, **options: Any) -> SqsPublisher:
    return SqsPublisher(
        sqs,
        url,
        policy=FAST,
        new_id=counting_ids(),
        sleep=sleeps if sleeps is not None else Sleeps(),
        rng=random.Random(7),
        **options,
    )


def bodies_by_id(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for message in messages:
        found.setdefault(json.loads(message["Body"])["id"], []).append(message["Body"])
    return found


def test_events_are_packed_and_sent_in_batches_of_ten(sqs: Any) -> None:
    # GIVEN a queue and 25 events that must not be packed
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    faults = BatchFaults(sqs)
    # WHEN they are published one per message
    result = publisher(sqs, url, pack=False).publish([Event.count(f"k{i}") for i in range(25)])
    # THEN three calls of 10, 10 and 5 entries carried them, and every message arrived once
    assert [len(call) for call in faults.sent] == [10, 10, 5]
    assert (result.ok, result.sent_messages, result.sent_events, result.calls, result.retried) == (True, 25, 25, 3, 0)
    assert sorted(bodies_by_id(drain_queue(sqs, url))) == sorted(f"m-{i}" for i in range(1, 26))


def test_packing_puts_many_events_in_one_message(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    result = publisher(sqs, url).publish([Event.count(f"k{i % 40}", i) for i in range(5_000)])
    received = drain_queue(sqs, url)
    assert result.ok
    assert result.sent_events == 5_000
    assert result.sent_messages == len(received) < 5_000 / 50  # packs of hundreds, not single events
    assert all(len(m["Body"].encode()) <= 256 * 1024 for m in received)
    assert sum(len(json.loads(m["Body"])["events"]) for m in received) == 5_000


def test_a_batch_never_exceeds_the_payload_limit(sqs: Any) -> None:
    # GIVEN events of ~76 KB each (100 counters named in non-ASCII, escaped to 6 bytes a character)
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    faults = BatchFaults(sqs)
    events = [Event(f"k{i}", {f"{c:03d}" + "\u00e9" * 126: 1 for c in range(100)}) for i in range(12)]
    # WHEN they are published one per message
    result = publisher(sqs, url, pack=False).publish(events)
    # THEN every call stayed within 256 KiB: 3 entries a call, where the 10-entry limit alone allows 10
    assert result.ok
    sizes = [sum(len(entry["MessageBody"].encode()) for entry in call) for call in faults.sent]
    assert [len(call) for call in faults.sent] == [3, 3, 3, 3]
    assert max(sizes) <= 256 * 1024


def test_only_the_failed_entries_are_retried_and_they_keep_their_ids(sqs: Any) -> None:
    # GIVEN a first call whose entries 2 and 7 are reported failed (SQS stored them nevertheless)
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    faults = BatchFaults(sqs)
    faults.fail_entries(2, 7)
    sleeps = Sleeps()
    # WHEN ten messages are published
    result = publisher(sqs, url, sleeps, pack=False).publish([Event.count(f"k{i}") for i in range(10)])
    # THEN the second call carried exactly those two, with the same bodies, after one backoff
    first, second = faults.sent
    assert [entry["MessageBody"] for entry in second] == [first[2]["MessageBody"], first[7]["MessageBody"]]
    assert (result.ok, result.sent_messages, result.retried, result.calls) == (True, 10, 2, 2)
    assert len(sleeps) == 1
    assert 0 <= sleeps[0] <= FAST.base_delay_s
    # ... and the queue holds the two as duplicates with identical ids: the consumer counts them once
    received = bodies_by_id(drain_queue(sqs, url))
    assert {mid: len(bodies) for mid, bodies in received.items() if len(bodies) > 1} == {"m-3": 2, "m-8": 2}
    assert all(len(set(bodies)) == 1 for bodies in received.values())


def test_a_sender_fault_is_reported_not_retried(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    faults = BatchFaults(sqs)
    faults.fail_entries(1, code="InvalidMessageContents", sender_fault=True)
    result = publisher(sqs, url, pack=False).publish([Event.count("a"), Event.count("b"), Event.count("c")])
    assert len(faults.sent) == 1
    assert [(f.message.message_id, f.code, f.attempts) for f in result.failed] == [("m-2", "InvalidMessageContents", 1)]
    assert (result.sent_messages, result.failed_events) == (2, 1)


def test_a_throttled_call_is_retried_whole_with_growing_backoff(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    faults = BatchFaults(sqs)
    faults.refuse_calls("RequestThrottled", count=2)
    sleeps = Sleeps()
    result = publisher(sqs, url, sleeps).publish([Event.count("a"), Event.count("b")])
    assert (result.ok, result.calls, result.retried) == (True, 3, 2)
    assert [entry["MessageBody"] for entry in faults.sent[0]] == [entry["MessageBody"] for entry in faults.sent[2]]
    assert len(sleeps) == 2
    assert sleeps[0] <= FAST.base_delay_s
    assert sleeps[1] <= 2 * FAST.base_delay_s


def test_a_lost_response_is_retried_and_the_duplicate_keeps_the_id(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    faults = BatchFaults(sqs)
    faults.lose_responses(1)
    result = publisher(sqs, url).publish([Event.count("a"), Event.count("b")])
    assert result.ok
    assert result.retried == 1  # the two events were packed into one message, sent twice
    assert bodies_by_id(drain_queue(sqs, url)) == {"m-1": [faults.sent[0][0]["MessageBody"]] * 2}


def test_when_attempts_run_out_the_failures_are_returned_and_can_be_sent_again_unchanged(sqs: Any) -> None:
    # GIVEN a queue that throttles every call for longer than the retry policy waits
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    faults = BatchFaults(sqs)
    faults.refuse_calls("RequestThrottled", count=FAST.max_attempts)
    pub = publisher(sqs, url, pack=False)
    result = pub.publish([Event.count("a"), Event.count("b", id="order-9")])
    # THEN nothing is lost: both are in the result, with the reason, after every attempt
    assert not result.ok
    assert [(f.message.message_id, f.code, f.attempts) for f in result.failed] == [
        ("m-1", "RequestThrottled", FAST.max_attempts),
        ("order-9", "RequestThrottled", FAST.max_attempts),
    ]
    # WHEN they are sent again later THEN they go out with the very same ids and bodies
    again = pub.send(result.failed_messages)
    assert again.ok
    assert bodies_by_id(drain_queue(sqs, url)) == {
        "m-1": [result.failed[0].message.body.decode()],
        "order-9": [result.failed[1].message.body.decode()],
    }


def test_a_missing_queue_fails_every_message_without_retrying(sqs: Any, moto_endpoint: str) -> None:
    url = f"{moto_endpoint}/123456789012/{unique('missing')}"
    sleeps = Sleeps()
    result = publisher(sqs, url, sleeps).publish([Event.count("a")])
    assert len(result.failed) == 1
    assert "NonExistentQueue" in result.failed[0].code or "QueueDoesNotExist" in result.failed[0].code
    assert sleeps == []
    with pytest.raises(PublishError, match="not accepted") as raised:
        result.raise_for_failures()
    assert raised.value.result is result
    assert isinstance(raised.value, TallyError)  # the CLI's one `except TallyError` still catches it


def test_fifo_messages_carry_group_and_deduplication_ids(sqs: Any) -> None:
    # GIVEN a FIFO queue
    url = sqs.create_queue(QueueName=unique("q") + ".fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    long_key = "k" * 300
    events = [Event.count("page:/home", id="single-1"), Event.count(long_key, id="single-2")]
    # WHEN single-event messages and one packed message are published
    pub = publisher(sqs, url)
    result = pub.publish(events) + pub.publish([Event.count("a"), Event.count("b")])
    assert result.ok
    received = drain_queue(sqs, url, ["MessageGroupId", "MessageDeduplicationId"])
    seen = {
        json.loads(m["Body"])["id"]: (m["Attributes"]["MessageGroupId"], m["Attributes"]["MessageDeduplicationId"])
        for m in received
    }
    # THEN a single event's group is its key (hashed when over 128 characters), a pack's is its id,
    # and the deduplication id is always the message id
    assert seen == {
        "single-1": ("page:/home", "single-1"),
        "single-2": (hashlib.sha256(long_key.encode()).hexdigest(), "single-2"),
        "m-1": ("m-1", "m-1"),
    }


def test_fifo_deduplicates_a_retried_entry_within_its_window(sqs: Any) -> None:
    url = sqs.create_queue(
        QueueName=unique("q") + ".fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    )["QueueUrl"]
    faults = BatchFaults(sqs)
    faults.fail_entries(0)
    assert publisher(sqs, url, pack=False).publish([Event.count("a"), Event.count("b")]).retried == 1
    assert sorted(bodies_by_id(drain_queue(sqs, url))) == ["m-1", "m-2"]  # SQS dropped the re-send itself


def test_by_default_messages_are_numbered_in_one_session_and_keep_their_ids_on_retry(sqs: Any) -> None:
    # GIVEN a publisher with the default ids, on a FIFO queue, whose first call loses two entries
    url = sqs.create_queue(
        QueueName=unique("q") + ".fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    )["QueueUrl"]
    faults = BatchFaults(sqs)
    faults.fail_entries(0, 3, code="InternalError")
    pub = SqsPublisher(sqs, url, policy=FAST, pack=False, sleep=Sleeps(), rng=random.Random(7))

    # WHEN 12 single events are published
    result = pub.publish([Event.count(f"k{i}") for i in range(12)])

    # THEN their ids are <session>.0 .. <session>.11 (numbered, one session, each a valid deduplication id),
    # the retried entries kept theirs, and a second publisher starts another session
    assert (result.ok, result.retried) == (True, 2)
    ids = sorted(bodies_by_id(drain_queue(sqs, url)), key=lambda mid: int(mid.split(".")[1]))
    parsed = [parse_numbered(mid) for mid in ids]
    assert [p.seq for p in parsed if p is not None] == list(range(12))
    assert {p.session for p in parsed if p is not None} == {ids[0].split(".")[0]}
    other = SqsPublisher(sqs, url, pack=False).prepare([Event.count("k")])[0].message_id
    assert parse_numbered(other) is not None
    assert other.split(".")[0] != ids[0].split(".")[0]


def test_random_uuid_ids_remain_available(sqs: Any) -> None:
    url = sqs.create_queue(QueueName=unique("q"))["QueueUrl"]
    (message,) = SqsPublisher(sqs, url, new_id=new_message_id).prepare([Event.count("k")])
    assert parse_numbered(message.message_id) is None
    assert len(message.message_id) == 32
