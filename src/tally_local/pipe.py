"""The notifications pipe on the local stack: DynamoDB Local's stream of the notifications table -> moto's
EventBridge, as ``NotificationsPipe`` in template.yaml does on AWS (no emulator here runs EventBridge Pipes).

What it models, and only that: the pipe reads the table's stream from the trim horizon, keeps ``INSERT``
records (the template's filter), renders each record's new image through the template's own
``InputTemplate`` (read from template.yaml, so local never drifts from the deployment) and puts the events to
the bus the template names (``NotificationBusName``, the default bus) with its ``Source`` and ``DetailType``.
Delivery is at least once, as on AWS: a shard's position moves on only after ``PutEvents`` accepted every entry
of a batch, so a failed or interrupted put is repeated, entries that had been accepted included; consumers drop
a repeat by ``notification_id``. ``put_failures`` injects failed puts (the chaos run and the tests).

So the demo can show an event, ``inbox`` creates what a consumer would (it is not in the template): an
EventBridge rule matching ``source: tally`` on the bus and an SQS queue as its target.

Each put's lag, from the commit's time on the item (``at``) to the put, is kept in ``lags_ms``: the figure
``python -m bench notifications`` reports (commit -> PutEvents).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Final, Self

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import TracebackType

    from tally_local.resources import LocalResources

logger = logging.getLogger(__name__)

PIPE: Final = "NotificationsPipe"
TABLE: Final = "NotificationsTable"
INBOX_RULE: Final = "tally-local-notifications"
_PLACEHOLDER: Final = re.compile(r"<\$\.dynamodb\.NewImage\.([A-Za-z0-9_]+)\.([SN])>")
_PUT_EVENTS_MAX: Final = 10
_SHARDS_EVERY_S: Final = 5.0
"""How often a pipe with open shards lists the stream's shards again."""


def render(input_template: str, image: Mapping[str, Mapping[str, str]]) -> str:
    """The template filled in from one new image: each placeholder's value JSON-escaped, as EventBridge does
    ("to ensure valid JSON output"); a missing attribute renders empty."""
    return _PLACEHOLDER.sub(lambda m: json.dumps(image.get(m[1], {}).get(m[2], ""))[1:-1], input_template)


class LocalNotificationsPipe:
    """Start with ``with``: a thread polls the stream every ``poll_s`` until the block ends."""

    def __init__(
        self,
        resources: LocalResources,
        *,
        poll_s: float = 0.25,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        events: Any | None = None,
    ) -> None:
        """``events``: the EventBridge client to put to (default: moto's, on the stack's endpoint). ``poll_s``:
        four reads of each shard a second, as AWS's stream pollers read a DynamoDB stream's shard."""
        pipe = resources.template["Resources"][PIPE]["Properties"]
        parameters = pipe["TargetParameters"]
        self.input_template: str = parameters["InputTemplate"]
        self.source: str = parameters["EventBridgeEventBusParameters"]["Source"]
        self.detail_type: str = parameters["EventBridgeEventBusParameters"]["DetailType"]
        self.bus_name: str = str(resources.template["Parameters"]["NotificationBusName"].get("Default", "default"))
        self.table = resources.physical_ids[TABLE]
        self._resources = resources
        self._poll_s = poll_s
        self._clock_ms = clock_ms
        self._dynamodb = resources.client("dynamodb")
        self._streams = resources.client("dynamodbstreams")
        self._events = events if events is not None else resources.client("events")
        self._stream_arn: str | None = None
        self._shards: list[str] = []
        self._shards_listed_at = float("-inf")
        self._positions: dict[str, str | None] = {}
        """Shard id -> the iterator to read next (None: the shard is closed and read to its end)."""
        self._read_to: dict[str, str] = {}
        """Shard id -> the sequence number of the last record put (the pipe's checkpoint)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.put_failures = 0
        """Puts still to fail (injected): each fails its whole batch, which is put again on the next poll."""
        self.lost_answers = 0
        """Puts still to lose the answer of (injected): the events are on the bus, the batch is put again."""
        self.puts = 0
        self.events_put = 0
        self.lags_ms: list[int] = []

    # ------------------------------------------------------------------------------------ the consumer's side
    def inbox(self, name: str = "notifications-inbox") -> str:
        """An SQS queue receiving every event the pipe puts (through a rule on the bus); returns its URL."""
        sqs = self._resources.client("sqs")
        url: str = sqs.create_queue(QueueName=f"{self._resources.stack_name}-{name}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        pattern = {"source": [self.source], "detail-type": [self.detail_type]}
        self._events.put_rule(Name=INBOX_RULE, EventBusName=self.bus_name, EventPattern=json.dumps(pattern))
        self._events.put_targets(Rule=INBOX_RULE, EventBusName=self.bus_name, Targets=[{"Id": "inbox", "Arn": arn}])
        return url

    # ------------------------------------------------------------------------------------------ the pipe
    def run_once(self) -> int:
        """Read every shard once and put what is new; returns the events put (repeats included)."""
        arn, shards = self._shard_ids()
        put = 0
        for shard_id in shards:
            if shard_id not in self._positions:
                self._positions[shard_id] = self._iterator(arn, shard_id)
            position = self._positions[shard_id]
            while position is not None:
                try:
                    page = self._streams.get_records(ShardIterator=position, Limit=_PUT_EVENTS_MAX)
                except (
                    self._streams.exceptions.TrimmedDataAccessException,
                    self._streams.exceptions.ExpiredIteratorException,
                ):
                    # DynamoDB Local answers so for an iterator taken on a shard still empty: take a new one
                    # after what was read (as Pipes does from its checkpoint).
                    del self._positions[shard_id]
                    break
                records = page["Records"]
                images = [r["dynamodb"]["NewImage"] for r in records if r["eventName"] == "INSERT"]
                if images and not self._put(images):
                    break  # the same records are read again next time: at least once
                put += len(images)
                if records:
                    self._read_to[shard_id] = records[-1]["dynamodb"]["SequenceNumber"]
                self._positions[shard_id] = position = page.get("NextShardIterator")
                if not records:
                    break
        return put

    def _shard_ids(self) -> tuple[str, list[str]]:
        """The stream's ARN (the table's, read once) and its shards, listed again only when none is open (none yet,
        or all read to their end) or ``_SHARDS_EVERY_S`` passed: a stream gets a new shard when one closes. An
        idle pipe then sends one request a poll, where describing the table and the stream at every poll took
        three (7% of a core between DynamoDB Local and this process, for as long as a stack ran)."""
        if self._stream_arn is None:
            self._stream_arn = self._dynamodb.describe_table(TableName=self.table)["Table"]["LatestStreamArn"]
        open_shards = [shard for shard in self._shards if self._positions.get(shard, "") is not None]
        if not open_shards or time.monotonic() - self._shards_listed_at >= _SHARDS_EVERY_S:
            described = self._streams.describe_stream(StreamArn=self._stream_arn)["StreamDescription"]["Shards"]
            self._shards = [shard["ShardId"] for shard in described]
            self._shards_listed_at = time.monotonic()
        return self._stream_arn, self._shards

    def _iterator(self, arn: str, shard_id: str) -> str | None:
        after = self._read_to.get(shard_id)
        if after is None:
            kind: dict[str, str] = {"ShardIteratorType": "TRIM_HORIZON"}
        else:
            kind = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after}
        iterator: str | None = self._streams.get_shard_iterator(StreamArn=arn, ShardId=shard_id, **kind).get(
            "ShardIterator"
        )
        return iterator

    def _put(self, images: list[Mapping[str, Mapping[str, str]]]) -> bool:
        entries = [
            {
                "Source": self.source,
                "DetailType": self.detail_type,
                "Detail": render(self.input_template, image),
                "EventBusName": self.bus_name,
            }
            for image in images
        ]
        self.puts += 1
        if self.put_failures > 0:
            self.put_failures -= 1
            logger.info("notifications pipe: injected put failure (%d entries)", len(entries))
            return False
        answer = self._events.put_events(Entries=entries)
        if self.lost_answers > 0:
            self.lost_answers -= 1
            logger.info("notifications pipe: injected lost answer (%d entries put)", len(entries))
            return False
        if answer.get("FailedEntryCount"):
            return False
        now_ms = self._clock_ms()
        self.events_put += len(entries)
        self.lags_ms += [now_ms - int(image["at"]["N"]) for image in images]
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a pipe retries whatever failed: the next poll reads again
                logger.exception("notifications pipe: poll failed, retrying")
            self._stop.wait(self._poll_s)

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._loop, name="notifications-pipe", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def received(sqs: Any, inbox_url: str, *, wait_s: float = 5.0) -> list[dict[str, Any]]:
    """The events the inbox holds (deleted as read), waiting up to ``wait_s`` for a first one."""
    deadline = time.monotonic() + wait_s
    found: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(QueueUrl=inbox_url, MaxNumberOfMessages=10).get("Messages", [])
        for message in messages:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=inbox_url, ReceiptHandle=message["ReceiptHandle"])
        if messages:
            continue
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)
