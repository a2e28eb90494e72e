"""When the local stack's event sources count as drained: never while a queue holds a message, whatever instant its
visibility ends at and whatever receive is in flight (``tally_local.mappings.EventSourceMappings.drained``,
``tally_local.poller``). Each hole let a test read a dead-letter queue before SQS had moved the message there, or
stop the pollers before it was delivered ``MaxReceiveCount`` times."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ClientError

from tally_local.esm import REPORT_BATCH_ITEM_FAILURES
from tally_local.function import Invocation
from tally_local.mappings import EventSourceMappings
from tally_local.poller import SourceStats, SqsPoller

if TYPE_CHECKING:
    from pathlib import Path

MOTOS_ORDER = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
)
"""The order moto computes a queue's counts in, each at its own instant (``Queue.BASE_ATTRIBUTES``)."""


class QueueWhoseMessageTurnsVisible:
    """One message in flight, whose visibility ends while the queue's counts are computed: each count is computed
    an instant after the one before, in moto's order."""

    def __init__(self) -> None:
        self.now = 0
        self.visible_at = 1

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        del QueueUrl
        counts: dict[str, str] = {}
        for name in MOTOS_ORDER:
            if name not in AttributeNames:
                continue
            visible = self.now >= self.visible_at
            holds = {"ApproximateNumberOfMessages": visible, "ApproximateNumberOfMessagesNotVisible": not visible}
            counts[name] = str(int(holds.get(name, False)))
            self.now += 1
        return {"Attributes": counts}


class Resources:
    def __init__(self, sqs: QueueWhoseMessageTurnsVisible) -> None:
        self._sqs = sqs

    def client(self, service: str) -> QueueWhoseMessageTurnsVisible:
        assert service == "sqs"
        return self._sqs


def test_a_message_turning_visible_while_the_counts_are_read_keeps_the_queue_undrained(tmp_path: Path) -> None:
    # GIVEN a queue whose one message becomes visible again between two of its counts (the visible one first)
    mappings = EventSourceMappings(Resources(QueueWhoseMessageTurnsVisible()), log_dir=tmp_path)  # type: ignore[arg-type]
    mappings._queues.append("queue")  # set when a mapping's pollers start
    # THEN the sources are not drained: the message is still there, on its way to the dead-letter queue
    assert not mappings.drained(since=0.0)


class QueueSeenDuringReceive:
    """Answers a receive with nothing, noting whether the poller already counted itself busy while it was sent."""

    def __init__(self) -> None:
        self.poller: SqsPoller | None = None
        self.busy_while_receiving: list[bool] = []

    def receive_message(self, **_: Any) -> dict[str, Any]:
        assert self.poller is not None
        self.busy_while_receiving.append(not self.poller.caught_up_since(0.0))
        return {}


def test_a_poller_counts_as_busy_from_the_moment_its_receive_is_sent(tmp_path: Path) -> None:
    # GIVEN a poller whose receive is in flight: the message it takes is out of sight, neither visible nor in hand
    queue = QueueSeenDuringReceive()
    poller = queue.poller = _poller(queue, function=None, stop=threading.Event())
    # WHEN it receives nothing
    assert poller._receive_batch() == []
    # THEN it was busy while the request was out, so no drain check could pass meanwhile; and is idle after
    assert queue.busy_while_receiving == [True]
    assert not poller._busy.is_set()


class QueueWithAMessageInFlight:
    """One message received and not deleted: its visibility lasts longer than any drain here waits."""

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        del QueueUrl
        return {"Attributes": {name: str(int(name.endswith("NotVisible"))) for name in AttributeNames}}


def test_a_drain_that_times_out_names_the_records_an_open_batchs_lease_held(tmp_path: Path) -> None:
    # GIVEN a queue that keeps a message in flight, a copy the handler reported failed because an open journal
    # batch's lease held its id
    mappings = EventSourceMappings(Resources(QueueWithAMessageInFlight()), log_dir=tmp_path)  # type: ignore[arg-type]
    mappings._queues.append("queue")
    mappings.stats["EventsQueueBatch"] = SourceStats(metrics={"RecordsHeldByLease": 2.0})
    # THEN the drain's timeout says so, and why they come back late
    with pytest.raises(TimeoutError, match=r"2 records were held by an open journal batch's lease"):
        mappings.wait_until_drained(0.2)
    # AND without such records it says nothing of leases
    mappings.stats["EventsQueueBatch"] = SourceStats()
    with pytest.raises(TimeoutError) as raised:
        mappings.wait_until_drained(0.2)
    assert "lease" not in str(raised.value)


class QueueWhoseMessageIsTakenWhileTheCountsAreRead:
    """One message whose visibility has just ended: the in-flight count finds it visible; before the visible count
    is read a poller receives it, the function reports it failed (or counts it, and the delete is refused) and the
    poller is idle again, so the visible count finds it in flight. Its visibility timeout would then bring it back:
    it is not drained."""

    def __init__(self, *, delete_refused: bool) -> None:
        self.visible = False
        self.poller: SqsPoller | None = None
        self.invoked = threading.Event()
        self.delete_refused = delete_refused
        self.deletes_refused = 0

    def delete_message_batch(self, **_: Any) -> dict[str, Any]:
        assert self.delete_refused
        self.deletes_refused += 1
        raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "try again"}}, "DeleteMessageBatch")

    def receive_message(self, **_: Any) -> dict[str, Any]:
        if not self.visible:
            return {}
        self.visible = False
        message = {"MessageId": "m-1", "ReceiptHandle": "r-1", "Body": "{}", "MD5OfBody": "0" * 32}
        return {"Messages": [message]}

    def invoke(self, event: dict[str, Any]) -> Invocation:
        (record,) = event["Records"]
        self.invoked.set()
        failures = [] if self.delete_refused else [{"itemIdentifier": record["messageId"]}]
        return Invocation(response={"batchItemFailures": failures}, error=None, duration_ms=1.0)

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        del QueueUrl
        if "ApproximateNumberOfMessagesNotVisible" in AttributeNames:
            self.visible = True
            return {"Attributes": {"ApproximateNumberOfMessagesNotVisible": "0"}}
        assert self.poller is not None
        # the poller takes it, and the function has answered, before this count is computed
        assert self.invoked.wait(10)
        _wait_until_idle(self.poller)
        return {"Attributes": dict.fromkeys(AttributeNames, "0")}


@pytest.mark.parametrize("delete_refused", [False, True], ids=["reported failed", "delete refused"])
def test_a_message_received_and_failed_while_the_counts_are_read_keeps_the_queue_undrained(
    tmp_path: Path, delete_refused: bool
) -> None:
    # GIVEN a poller that has found its queue empty, and a message becoming visible again as the drain reads the
    # counts, taken, left undeleted and out of sight by the time the visible count is computed
    queue = QueueWhoseMessageIsTakenWhileTheCountsAreRead(delete_refused=delete_refused)
    mappings = EventSourceMappings(Resources(queue), log_dir=tmp_path)  # type: ignore[arg-type]
    mappings._queues.append("queue")
    stop = threading.Event()
    poller = queue.poller = _poller(queue, function=queue, stop=stop)
    mappings.pollers.append(poller)
    poller.start()
    try:
        _wait_until_idle(poller)
        # THEN the sources are not drained: the message comes back after its visibility timeout
        assert not mappings.drained(since=0.0)
        # (what the poller did, counted before it was idle again)
        assert (poller.stats.records_reported_failed, queue.deletes_refused) == ((0, 1) if delete_refused else (1, 0))
    finally:
        stop.set()
        poller.join()


def _poller(sqs: object, *, function: object, stop: threading.Event) -> SqsPoller:
    """A poller of one queue (batches of 10, no batching window, partial batch responses) on fakes."""
    source = SimpleNamespace(
        batch_size=10, maximum_batching_window_seconds=0, function_response_types=[REPORT_BATCH_ITEM_FAILURES]
    )
    return SqsPoller(
        "poller",
        sqs=sqs,  # type: ignore[arg-type]
        queue_url="queue",
        queue_arn="arn",
        source=source,  # type: ignore[arg-type]
        function=function,  # type: ignore[arg-type]
        stats=SourceStats(),
        stop=stop,
        region="us-east-1",
    )


def _wait_until_idle(poller: SqsPoller) -> None:
    """Until the poller holds nothing after an empty poll (10 s at most: a thread that never gets there fails)."""
    deadline = time.monotonic() + 10
    while not poller.caught_up_since(0.0):
        assert time.monotonic() < deadline
        time.sleep(0.001)
