"""Run the demo's producers: each in a thread of its own, with the producer library, against the local stack.

A producer sends its planned messages in chunks (``SqsPublisher`` / ``KinesisPublisher``: batching,
retries of what failed, ids kept), then its re-sends (same messages, same ids), with its poison bodies
slipped in between chunks as raw sends, as a buggy client would send them.

moto's SQS does work proportional to the number of messages in the queue on every call, so an SQS
producer waits while the queue holds more than ``max_depth`` messages: the queue stays short and
moto fast. (A real queue does not care; the pacing only keeps the local stand-in quick.)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from tally.producer import KinesisPublisher, PublishResult, SqsPublisher

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tally.producer.wire import OutgoingMessage
    from tally_local.load import Poison, ProducerPlan
    from tally_local.resources import LocalResources

SQS_CHUNK: Final = 20
KINESIS_CHUNK: Final = 200
DEFAULT_MAX_DEPTH: Final = 150


@dataclass
class ProducerProgress:
    """What a producer has put on its source so far (read by the progress display)."""

    records: int = 0
    result: PublishResult = field(default_factory=PublishResult)
    poison_sent: int = 0
    done: bool = False
    error: BaseException | None = None


class Producer(threading.Thread):
    """Sends one producer's plan; ``progress`` says how far it got, ``error`` what stopped it."""

    def __init__(
        self, plan: ProducerPlan, resources: LocalResources, stop: threading.Event, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> None:
        super().__init__(name=plan.name, daemon=True)
        self.plan = plan
        self.progress = ProducerProgress()
        self._resources = resources
        self._stop_event = stop
        self._max_depth = max_depth
        self._sqs: Any = None
        self._kinesis: Any = None

    def run(self) -> None:
        try:
            self._send_all()
        except BaseException as exc:
            self.progress.error = exc
        finally:
            self.progress.done = True

    def _send_all(self) -> None:
        resources = self._resources
        self._sqs = resources.client("sqs")
        self._kinesis = resources.client("kinesis")
        if self.plan.source == "sqs":
            queue_url = resources.queue_url
            if queue_url is None:
                raise RuntimeError("the stack has no queue (Source parameter)")
            publisher: SqsPublisher | KinesisPublisher = SqsPublisher(self._sqs, queue_url)
            chunk_size = SQS_CHUNK
        else:
            stream = resources.stream_name
            if stream is None:
                raise RuntimeError("the stack has no stream (Source parameter)")
            publisher = KinesisPublisher(self._kinesis, stream_name=stream)
            chunk_size = KINESIS_CHUNK
        messages: Sequence[OutgoingMessage] = (*self.plan.messages, *self.plan.resends)
        chunks = [messages[start : start + chunk_size] for start in range(0, len(messages), chunk_size)]
        poison = list(self.plan.poison)
        every = max(1, len(chunks) // (len(poison) + 1))
        for index, chunk in enumerate(chunks):
            if self._stop_event.is_set():
                return
            self._pace()
            self.progress.result += publisher.send(chunk)
            self.progress.records += len(chunk)
            if poison and index % every == every - 1:
                self._send_poison(poison.pop())
        for rest in poison:
            self._send_poison(rest)

    def _send_poison(self, poison: Poison) -> None:
        resources = self._resources
        if self.plan.source == "sqs" and resources.queue_url is not None:
            self._sqs.send_message(QueueUrl=resources.queue_url, MessageBody=poison.body)
        elif resources.stream_name is not None:
            self._kinesis.put_record(
                StreamName=resources.stream_name,
                Data=poison.body.encode("utf-8"),
                PartitionKey=f"{self.plan.name}-poison-{self.progress.poison_sent}",
            )
        self.progress.poison_sent += 1
        self.progress.records += 1

    def _pace(self) -> None:
        if self.plan.source != "sqs" or self._resources.queue_url is None:
            return
        while not self._stop_event.is_set():
            attributes = self._sqs.get_queue_attributes(
                QueueUrl=self._resources.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
            if int(attributes.get("ApproximateNumberOfMessages", "0")) <= self._max_depth:
                return
            time.sleep(0.2)
