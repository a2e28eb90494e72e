"""The chaos run of threshold notifications: every crossing announced, none twice, none spurious, under faults.

A small run of its own (seconds, ``python -m tally_local.chaos.thresholds``;
``tests/integration/test_chaos_thresholds.py`` runs it and its broken variants), drawing only thresholded
counters on DynamoDB Local:

- ``t:up:<n>`` keys: rising levels 10, 20 on ``n`` (steps +1..+3): each level passed exactly once;
- ``t:down:<n>`` keys: falling levels 60, 40, 20 on ``n``, start 80 (steps -1..-3): each level once;
- ``t:mix:<n>`` keys: a rising level 10 and a falling level 9 on ``v``, start 8, steps -2..+2: the value
  crosses back and forth, so each key is announced many times, every crossing by another message;
- ``t:win:<n>`` keys: per-day levels 10 and 20 on ``w`` (``w@day``, steps +1..+3), each event in one of four
  days: three that have ended before the run's clock starts (every event for them is late) and the clock's
  own day. The run counts hour and day windows (``TALLY_WINDOWS``), and its clock moves an hour per
  invocation, so the pipelines' own post-commit steps keep moving ended windows off the key items while late
  events for them keep landing there: each day's value is split between the key's item and its day item, and each
  day's levels must be announced once, from the sum;
- ``t:wide:<n>`` keys (the levels of ``up``), moved together by packed messages of all of them: one such message
  crosses a level on each key at once, more crossings than fit its transaction beside its marker and its ADDs
  (40 keys: 80 items with their minute windows, and 40 or 80 crossings), so it records the rest in the pages of a
  journal batch its marker names (``tally.core.plan.Spill``);
- ``t:big:<n>`` keys (the levels of ``up``), stepped by a 36-digit amount at 10^39: the write's condition compares
  the value with a level minus that step, 39 significant digits unless rounded to a storable number;
- ``t:sp:<n>`` keys and keys literally named ``t:sp:<n>@m#<minute>``, a level 10 on each one's all-time value and
  on each of its minutes, moved together by packed messages whose events fall in that minute: the key's minute item
  and the other key's all-time item print the same label (``item_label``), in every transaction that holds them,
  and the value each condition met must be read for the item it belongs to.

Consumers (threads, each its own pipeline and client, as concurrent invocations) take random batches from a
standard-queue model (no order), and the chaos faults of ``tally_local.chaos.faults`` hit every DynamoDB request:
connection failures, lost responses, throttling, conflicts (also DynamoDB's own between transactions in
flight on one item). On top: an invocation killed right after the transaction that recorded a crossing
committed (before anything could announce it), whole batches redelivered after a lost response, producer
re-sends. The notifications pipe (``tally_local.pipe``, the model of ``NotificationsPipe``) runs beside them,
its puts failing or losing their answers, and is itself killed and restarted from the stream's trim horizon.

What is checked, from the run's own model (the workload's deltas), on what a consumer of the bus received,
deduplicated by ``notification_id`` as a consumer must:

- every valid message counted once (each key is its start plus its messages);
- on ``up``/``down`` keys exactly the levels between the start and the end announced, each once;
- on ``mix`` keys the announced rising crossings minus the falling ones equal the side change from start to
  end; every announcement is real (the message counted, and its own step, from ``step_value`` back by its
  delta, crosses the level the announced way) and no (message, level, direction) is announced twice;
- on ``win`` keys, per day window, exactly the levels its day's total reaches, each once, under that window;
- on ``wide`` and ``big`` keys, like ``up``; on ``sp`` keys, their level once on the all-time value and once on
  the minute's, each key and the key spelling its minute item's label alike;
- every announcement is a recorded crossing and every recorded crossing was announced;
- no message dead-lettered (every one is valid), no request over one of DynamoDB's limits.

Every request each consumer sends is watched against DynamoDB's published limits
(``tally_local.kit.limits.RequestLimits``): one that breaks a limit is a problem, whatever DynamoDB Local answered.

The broken variants announce before the commit, or without the deterministic id, or judge a day's level on the
key item's part alone (never reading what a move took off it), or trust the key item's pointer of moved parts
(``tally.core.moved``) for a day older than its own, or never spill a message's crossings, or send a condition's
exact ends, or tell items apart by their labels: the run fails. The run's faults count how the moved part of
each late write's day was known (``situation.moved_part_of_*``): the pointer's own day, a newer one (never
moved), an older one (its day item read).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import traceback
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import click

from tally.config import Settings
from tally.core.model import SourceRecord
from tally.core.moved import moved_part
from tally.core.thresholds import Direction, crossed
from tally.core.windows import DAY_MS, HOUR_MS
from tally.core.write import DirectWrite
from tally.core.write_planner import plan_write
from tally.reader import NotificationReader
from tally.runtime import CLIENT_CONFIG, wire_pipeline
from tally.store.notifications import NOTIFICATION_ID
from tally.store.schema import PAGE_CROSSINGS
from tally_local.chaos.clock import Invocation
from tally_local.chaos.config import DynamoDBFaultRates
from tally_local.chaos.faults import DynamoDBChaos, FaultLog, InvocationKilled
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.kit.clients import local_client
from tally_local.kit.conflicts import InFlightTransactions
from tally_local.kit.limits import RequestLimits
from tally_local.pipe import LocalNotificationsPipe
from tally_local.resources import LocalResources
from tally_local.template import load_template, table_definitions

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.core.declarations import Declarations
    from tally.core.moved import MovedPointer
    from tally.core.plan import Chunk
    from tally.core.thresholds import Crossing
    from tally.core.write import ReadFirst, Seen
    from tally.core.write_planner import PartOf, WritePlanner
    from tally.pipeline import BatchPipeline, DeadLetterQueue

ROOT: Final = Path(__file__).resolve().parents[3]
THRESHOLDS: Final = (
    "t:up:*#n>=10,20;t:wide:*#n>=10,20;t:big:*#n>=10,20;t:down:*#n<=60,40,20;t:mix:*#v>=10;t:mix:*#v<=9;"
    "t:win:*#w@day>=10,20;t:sp:*#n>=10;t:sp:*#n@minute>=10"
)
"""Ten levels, the most a deployment may declare (``MAX_THRESHOLD_LEVELS``): ``up``, ``wide`` and ``big`` share
theirs, ``sp`` reuses the all-time 10 and adds the only per-minute level."""
DEFAULTS: Final = "t:down:*#n=start:80;t:mix:*#v=start:8"
STARTS: Final = {"up": 0, "down": 80, "mix": 8, "win": 0, "wide": 0, "big": 0, "sp": 0}
COUNTER: Final = {"up": "n", "down": "n", "mix": "v", "win": "w", "wide": "n", "big": "n", "sp": "n"}
BIG_STEP: Final = 1_234_567_890_123_456_789_012_345_678_901_234_560_000
"""A ``big`` key's step: 36 significant digits at 10^39 (storable, and so is any sum of up to 99 of them); a level
minus it needs 39 digits."""
SPELLED_MINUTE_MS: Final = 4_102_704_000_000
"""The minute the ``sp`` events fall in (2100-01-04T00:00Z, the clock's start): ``t:sp:<n>``'s minute item there
prints as ``t:sp:<n>@m#2100-01-04T00:00Z``, the label of the key of that name."""
SPELLED_MINUTE: Final = "m#2100-01-04T00:00Z"
SPELLED_LEVEL: Final = 10
DAY_LEVELS: Final = (10, 20)
CLOCK_START_MS: Final = 4_102_704_000_000
"""2100-01-04, 00:00 UTC: the run's clock starts here (the days before it have ended: their events are late)."""
CLOCK_STEP_MS: Final = HOUR_MS
"""How far the run's clock moves per invocation: an hour, so every batch's key items are checked for ended
windows again (a container checks a key item once per hour) and ended days are moved off them between nearly
any two batches, whatever the machine's speed: a late event then almost always meets a day split in two."""
MAX_DELIVERIES: Final = 40
"""Deliveries of one message before the run sets it aside as failing on every delivery (a problem), as a queue's
redrive policy would move it: a message that can never be written must end the run, not hold it forever. A
valid message reaches it only by a defect (crashes and kills redeliver one at rates of 0.05 to 0.4 each)."""

WINDOW_DAYS: Final = 4
"""The days ``win`` events fall in: the three before the clock's start and its own."""
LEVELS: Final = {
    "up": {(10, "rising"), (20, "rising")},
    "wide": {(10, "rising"), (20, "rising")},
    "big": {(10, "rising"), (20, "rising")},
    "down": {(60, "falling"), (40, "falling"), (20, "falling")},
}


@dataclass(frozen=True, slots=True)
class ThresholdChaosConfig:
    keys_per_kind: int = 3
    messages_per_key: int = 40
    window_messages_per_key: int = 24
    """For ``win`` keys: about six per day, two a level (steps +1..+3, levels 10 and 20 per day)."""
    wide_messages: int = 4
    """Packed messages over every ``wide`` key at once (steps +4..+8 each: their sum crosses both levels)."""
    wide_keys: int = 40
    big_keys: int = 2
    big_messages_per_key: int = 4
    spelled_keys: int = 2
    """``sp`` keys, each beside the key that spells its minute item's label."""
    spelled_messages_per_key: int = 8
    consumers: int = 3
    batch_size: int = 8
    seed: int = 26
    dynamodb: DynamoDBFaultRates = field(
        default_factory=lambda: DynamoDBFaultRates(
            connect_failure=0.04,
            lost_response=0.06,
            throttle_request=0.03,
            throttle_cancel=0.03,
            conflict=0.06,
            slow=0.0,
        )
    )
    kill_after_crossing: float = 0.4
    """Per transaction that records a crossing: it commits, then the invocation is killed (nothing announced yet)."""
    crash_after_commit: float = 0.05
    """Per invocation: its answer is lost, the whole batch is delivered again."""
    resend: float = 0.05
    """Per message: the producer sends it again later (same id, same body)."""
    pipe_put_failure: float = 0.2
    pipe_lost_answer: float = 0.2
    pipe_restarts: int = 2
    """Times the pipe is killed and a new one starts from the stream's trim horizon (its checkpoint lost)."""


@dataclass(frozen=True, slots=True)
class Tables:
    counters: str
    markers: str
    notifications: str


@dataclass
class ThresholdChaosResult:
    ok: bool
    figures: dict[str, int]
    faults: dict[str, int]
    problems: list[str]
    first_failure: str | None = None
    """The first unexpected error of an invocation (the source redelivered its batch)."""


class _Bus:
    """The consumer's side of the bus: every event put, in order (a repeat included).

    Each put also asks the notifications table, on a fault-free client, whether the crossing it announces is
    recorded yet: an announcement may only follow its commit. (Whether an early announcement later shows as
    wrong depends on the commit failing and the value moving meanwhile, which a run draws by chance; the
    moment of the put shows it on the first crossing.)"""

    def __init__(self, client: Any, notifications_table: str) -> None:
        self.events: list[dict[str, Any]] = []
        self.before_recorded: list[dict[str, Any]] = []
        """Events put while their crossing was not recorded in the table."""
        self._client = client
        self._table = notifications_table
        self._lock = threading.Lock()
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bus-reads")

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        details = [json.loads(entry["Detail"]) for entry in Entries]
        early = [detail for detail in details if not self._recorded(detail["notification_id"])]
        with self._lock:
            self.events += details
            self.before_recorded += early
        return {"FailedEntryCount": 0, "Entries": [{"EventId": uuid.uuid4().hex} for _ in Entries]}

    def _recorded(self, notification_id: str) -> bool:
        # On a thread of the bus's own: the read is the consumer's, not the function's that called put (the IAM
        # contract's recorder charges a call to the tally code on its thread's stack).
        answer = self._reads.submit(
            self._client.get_item,
            TableName=self._table,
            Key={NOTIFICATION_ID: {"S": notification_id}},
            ConsistentRead=True,
        ).result()
        return "Item" in answer


class _NoDeadLetters:
    """No valid message of this run may be dead-lettered: the queue takes a letter (so a broken variant ends fast)
    and the run reports each (``_Run.letters``)."""

    def send(self, letters: Any) -> frozenset[str]:
        del letters
        return frozenset()


@dataclass(frozen=True, slots=True)
class Message:
    message_id: str
    kind: str
    key: str
    delta: int
    ts_ms: int | None = None
    """When its event happened (``win`` and ``sp`` messages: which window it counts in)."""
    others: tuple[str, ...] = ()
    """More keys the message moves by ``delta`` (packed: ``wide`` and ``sp`` messages)."""

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key, *self.others)

    def body(self) -> str:
        events: list[dict[str, Any]] = []
        for key in self.keys:
            event: dict[str, Any] = {"key": key, "deltas": {COUNTER[self.kind]: self.delta}}
            if self.ts_ms is not None:
                event["ts"] = self.ts_ms
            events.append(event)
        if len(events) == 1:
            return json.dumps({"id": self.message_id, **events[0]})
        return json.dumps({"id": self.message_id, "events": events})

    @property
    def day(self) -> str:
        """The day window id of its event (``win`` messages)."""
        start = (self.ts_ms or 0) - (self.ts_ms or 0) % DAY_MS
        return "d#" + datetime.fromtimestamp(start / 1000, tz=UTC).strftime("%Y-%m-%d")


def workload(config: ThresholdChaosConfig, rng: random.Random) -> list[Message]:
    messages: list[Message] = []
    for kind in ("up", "down", "mix", "win"):
        for n in range(config.keys_per_kind if kind != "win" or config.window_messages_per_key else 0):
            key = f"t:{kind}:{n}"
            value = STARTS[kind]
            count = config.window_messages_per_key if kind == "win" else config.messages_per_key
            for m in range(count):
                if kind == "win":
                    # one of the ended days (any hour), or the clock's own day's first hour (never ahead of it)
                    day = rng.randrange(WINDOW_DAYS) - (WINDOW_DAYS - 1)
                    hour = rng.randrange(24) if day < 0 else 0
                    ts_ms = CLOCK_START_MS + day * DAY_MS + hour * HOUR_MS + rng.randrange(HOUR_MS)
                    messages.append(Message(f"{key}-{m}", kind, key, rng.randint(1, 3), ts_ms))
                    continue
                if kind == "up":
                    delta = rng.randint(1, 3)
                elif kind == "down":
                    delta = -rng.randint(1, 3)
                else:  # a walk around the levels: back and forth
                    delta = rng.choice([-2, -1, 1, 2]) if 7 <= value <= 11 else (2 if value < 7 else -2)
                value += delta
                messages.append(Message(f"{key}-{m}", kind, key, delta))
    wide = tuple(f"t:wide:{n}" for n in range(config.wide_keys))
    messages += [
        Message(f"t:wide-{m}", "wide", wide[0], rng.randint(4, 8), None, wide[1:])
        for m in range(config.wide_messages if wide else 0)
    ]
    for n in range(config.big_keys):
        messages += [
            Message(f"t:big:{n}-{m}", "big", f"t:big:{n}", BIG_STEP) for m in range(config.big_messages_per_key)
        ]
    for n in range(config.spelled_keys):
        key = f"t:sp:{n}"
        spelled = f"{key}@{SPELLED_MINUTE}"
        messages += [
            Message(f"{key}-{m}", "sp", key, rng.randint(1, 3), SPELLED_MINUTE_MS + rng.randrange(60_000), (spelled,))
            for m in range(config.spelled_messages_per_key)
        ]
    return messages


def _settings(tables: Tables) -> Settings:
    return Settings.from_env(
        {
            "TALLY_COUNTERS_TABLE": tables.counters,
            "TALLY_MARKERS_TABLE": tables.markers,
            "TALLY_NOTIFICATIONS_TABLE": tables.notifications,
            "TALLY_COUNTER_THRESHOLDS": THRESHOLDS,
            "TALLY_COUNTER_DEFAULTS": DEFAULTS,
            "TALLY_WINDOWS": "minute,hour,day",
            "TALLY_WRITE_CONCURRENCY": "1",
        },
        require_dlq=False,
    )


PipelineFactory: TypeAlias = "Callable[[Any, Tables, _Bus, FaultLog], BatchPipeline]"
"""Builds a consumer's pipeline on its client, the run's tables and bus, counting what it sees in the run's log:
``production_pipeline``, or a broken variant."""


def production_pipeline(
    client: Any, tables: Tables, bus: _Bus, log: FaultLog, *, write_planner: WritePlanner | None = None
) -> BatchPipeline:
    """The handlers' wiring (``tally.runtime.wire_pipeline``), its writes planned by ``write_planner`` (the core's
    ``plan_write``, counting in ``log`` how each late write's moved part was known, unless a variant is given)."""
    del bus
    dead_letters: DeadLetterQueue = _NoDeadLetters()
    planner = write_planner or partial(plan_write, part_of=counted_parts(log))
    return wire_pipeline(client, dead_letters, _settings(tables), write_planner=planner)


def counted_parts(log: FaultLog, part_of: PartOf = moved_part) -> PartOf:
    """``part_of``, counting in ``log`` how each moved part a write needed was known
    (``situation.moved_part_of_*``): said by the pointer of its own window, by a pointer at an older window (a newer
    one was never moved), or not said (the window item is read)."""

    def counting(pointer: MovedPointer, moves: Decimal | None, window: str, counter: str) -> Decimal | None:
        part = part_of(pointer, moves, window, counter)
        source = "window_item" if part is None else "pointers_window" if pointer.window == window else "newer_window"
        log.add(f"situation.moved_part_of_{source}")
        return part

    return counting


def broken_announce_before_commit(client: Any, tables: Tables, bus: _Bus, log: FaultLog) -> BatchPipeline:
    """BROKEN: announces each crossing its write will record before the transaction commits (and records none)."""

    def announcing(chunk: Chunk, declared: Declarations, seen: Seen, *, now_ms: int) -> DirectWrite | ReadFirst:
        planned = plan_write(chunk, declared, seen, now_ms=now_ms)
        if not isinstance(planned, DirectWrite) or not planned.crossings:
            return planned
        bus.put_events(Entries=[{"Detail": json.dumps(_announcement(crossing))} for crossing in planned.crossings])
        return replace(planned, crossings=())

    return production_pipeline(client, tables, bus, log, write_planner=announcing)


def _announcement(crossing: Crossing) -> dict[str, str]:
    return {
        "notification_id": crossing.notification_id,
        "key": crossing.key,
        "counter": crossing.counter,
        "level": str(crossing.level),
        "direction": str(crossing.direction),
        "window": crossing.window,
        "value": str(crossing.value),
        "step_value": str(crossing.step_value),
        "message_id": crossing.message_id,
    }


def _never_moved(pointer: MovedPointer, moves: Decimal | None, window: str, counter: str) -> Decimal | None:
    del pointer, moves, window, counter
    return Decimal(0)


def broken_window_on_key_item_alone(client: Any, tables: Tables, bus: _Bus, log: FaultLog) -> BatchPipeline:
    """BROKEN: judges an ended day's levels on the key item's part alone, as if no move had taken any of it."""
    planner = partial(plan_write, part_of=counted_parts(log, _never_moved))
    return production_pipeline(client, tables, bus, log, write_planner=planner)


def _pointer_trusted(pointer: MovedPointer, moves: Decimal | None, window: str, counter: str) -> Decimal | None:
    said = moved_part(pointer, moves, window, counter)
    return Decimal(0) if said is None else said


def broken_older_window_trusts_the_pointer(client: Any, tables: Tables, bus: _Bus, log: FaultLog) -> BatchPipeline:
    """BROKEN: trusts the key item's pointer for what it cannot say, taking a window older than the pointer's as
    never moved (its moved part 0) instead of reading its window item."""
    planner = partial(plan_write, part_of=counted_parts(log, _pointer_trusted))
    return production_pipeline(client, tables, bus, log, write_planner=planner)


def broken_crossings_never_spilled(client: Any, tables: Tables, bus: _Bus, log: FaultLog) -> BatchPipeline:
    """BROKEN: records every crossing of a message in its transaction, however many (no ``Spill``)."""

    def unspilled(chunk: Chunk, declared: Declarations, seen: Seen, *, now_ms: int) -> DirectWrite | ReadFirst:
        return plan_write(replace(chunk, spill=None), declared, seen, now_ms=now_ms)

    return production_pipeline(client, tables, bus, log, write_planner=unspilled)


@dataclass
class _Pipe:
    """The notifications pipe, killed and restarted (its checkpoint lost) ``restarts`` times."""

    resources: LocalResources
    bus: _Bus
    rng: random.Random
    config: ThresholdChaosConfig
    log: FaultLog
    random_ids: bool = False
    """BROKEN: each put carries a new id instead of the crossing's deterministic one."""

    def run(self, stop: threading.Event) -> None:
        restarts = self.config.pipe_restarts
        while True:
            pipe = self._pipe()
            deadline = time.monotonic() + (0.5 + self.rng.random() if restarts else 3600)
            while not stop.is_set() and time.monotonic() < deadline:
                self._draw(pipe)
                with contextlib.suppress(Exception):  # a failed poll is read again on the next
                    pipe.run_once()
                time.sleep(0.02)
            if stop.is_set():
                break
            restarts -= 1
            self.log.add("pipe.killed_and_restarted")
        # the final drain, faults off: what was recorded must reach the bus
        pipe = self._pipe()
        while pipe.run_once():
            pass

    def _pipe(self) -> LocalNotificationsPipe:
        bus: Any = _RandomIds(self.bus) if self.random_ids else self.bus
        return LocalNotificationsPipe(self.resources, events=bus)

    def _draw(self, pipe: LocalNotificationsPipe) -> None:
        if self.rng.random() < self.config.pipe_put_failure:
            pipe.put_failures = 1
            self.log.add("pipe.put_failure")
        elif self.rng.random() < self.config.pipe_lost_answer:
            pipe.lost_answers = 1
            self.log.add("pipe.lost_answer")


class _RandomIds:
    def __init__(self, bus: _Bus) -> None:
        self._bus = bus

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        changed = [
            {**entry, "Detail": json.dumps({**json.loads(entry["Detail"]), "notification_id": uuid.uuid4().hex})}
            for entry in Entries
        ]
        return self._bus.put_events(Entries=changed)


@dataclass
class _Run:
    """What the consumers of one run share: the queue model, the faults' log, the bus."""

    endpoint: str
    config: ThresholdChaosConfig
    tables: Tables
    pipeline_factory: PipelineFactory
    pending: list[Message]
    bus: _Bus
    log: FaultLog = field(default_factory=FaultLog)
    in_flight: InFlightTransactions = field(default_factory=InFlightTransactions)
    lock: threading.Lock = field(default_factory=threading.Lock)
    failures: list[str] = field(default_factory=list)
    invocations: int = 0
    deliveries: Counter[str] = field(default_factory=Counter)
    """Message id -> its deliveries that came back failed; at ``MAX_DELIVERIES`` it is set aside."""
    limits: list[RequestLimits] = field(default_factory=list)
    """Each consumer's watch of DynamoDB's request limits."""
    letters: list[str] = field(default_factory=list)
    """Dead letters (every message of the run is valid: each is a problem)."""

    @property
    def given_up(self) -> set[str]:
        """Messages set aside after ``MAX_DELIVERIES`` deliveries."""
        return {message_id for message_id, count in self.deliveries.items() if count >= MAX_DELIVERIES}

    def now_ms(self) -> int:
        """The run's clock, for one more invocation: ``CLOCK_STEP_MS`` later than the one before."""
        with self.lock:
            self.invocations += 1
            return CLOCK_START_MS + self.invocations * CLOCK_STEP_MS

    def _take(self, rng: random.Random) -> list[Message]:
        """A batch from the standard-queue model: any messages, in any order."""
        with self.lock:
            rng.shuffle(self.pending)
            batch, self.pending[:] = self.pending[: self.config.batch_size], self.pending[self.config.batch_size :]
            return batch

    def consume(self, index: int) -> None:
        """One consumer: its own client, faults and pipeline, one invocation per batch until the queue stays empty."""
        config = self.config
        rng = random.Random(config.seed * 100 + index)
        client = local_client("dynamodb", self.endpoint, region="us-east-1", config=CLIENT_CONFIG)
        limits = RequestLimits(client, [self.tables.counters, self.tables.markers, self.tables.notifications])
        with self.lock:
            self.limits.append(limits)
        client.meta.events.register("provide-client-params.dynamodb.BatchWriteItem", self._count_crossing_pages)
        chaos = DynamoDBChaos(client, config.dynamodb, rng, self.log, self.in_flight)
        _kill_after_crossing(client, self.tables.notifications, rng, config.kill_after_crossing, self.log)
        pipeline = self.pipeline_factory(client, self.tables, self.bus, self.log)
        idle = 0
        while idle <= 50:
            batch = self._take(rng)
            if not batch:
                idle += 1
                time.sleep(0.01)
                continue
            idle = 0
            invocation = Invocation(60_000)
            chaos.invocation = invocation
            chaos.begin_invocation()
            back = self._invoke(pipeline, batch, invocation, rng)
            with self.lock:
                for message in back:
                    self.deliveries[message.message_id] += 1
                    if self.deliveries[message.message_id] < MAX_DELIVERIES:
                        self.pending.append(message)

    def _count_crossing_pages(self, params: dict[str, Any], **_: Any) -> None:
        """Journal pages of crossings written: a message's crossings that did not fit its transaction (a spill)."""
        pages = [
            request
            for requests in params.get("RequestItems", {}).values()
            for request in requests
            if PAGE_CROSSINGS in request.get("PutRequest", {}).get("Item", {})
        ]
        if pages:
            self.log.add("situation.crossing_pages_written", len(pages))

    def _invoke(
        self, pipeline: BatchPipeline, batch: list[Message], invocation: Invocation, rng: random.Random
    ) -> list[Message]:
        """One invocation; returns the messages the source delivers again."""
        now_ms = self.now_ms()
        for message in batch:  # the edges a batch carries: spilled crossings, 36-digit steps, spelled labels
            if message.kind in {"wide", "big", "sp"}:
                self.log.add(f"situation.{message.kind}_message_delivered")
        records = [SourceRecord(f"{m.message_id}#{rng.random()}", m.body(), now_ms) for m in batch]
        by_record = {r.record_id: m for r, m in zip(records, batch, strict=True)}
        try:
            result = pipeline.process(records, now_ms, invocation.remaining_ms)
        except InvocationKilled:
            self.log.add("invocation.killed")
            return batch
        except Exception:
            self.log.add("invocation.failed")
            if not self.failures:
                self.failures.append(traceback.format_exc())
            return batch
        with self.lock:
            self.letters += [
                f"{letter.record.record_id.partition('#')[0]} dead-lettered as {letter.rejection.code}: "
                f"{letter.rejection.detail[:160]}"
                for letter in result.dead_letters
            ]
        if rng.random() < self.config.crash_after_commit:
            self.log.add("delivery.crash_after_commit")
            return batch
        return [by_record[record_id] for record_id in result.failed_record_ids]


def run_threshold_chaos(
    endpoint: str,
    config: ThresholdChaosConfig = ThresholdChaosConfig(),
    *,
    pipeline_factory: PipelineFactory = production_pipeline,
    random_ids: bool = False,
) -> ThresholdChaosResult:
    """One run on the DynamoDB Local at ``endpoint`` (tables of its own); ``pipeline_factory`` and
    ``random_ids`` select the broken variants."""
    rng = random.Random(config.seed)
    admin = local_client("dynamodb", endpoint, region="us-east-1")
    template = load_template(ROOT / "template.yaml")
    tables = _create_tables(admin, template)
    messages = workload(config, rng)
    resent = [m for m in messages if rng.random() < config.resend]
    run = _Run(endpoint, config, tables, pipeline_factory, [*messages, *resent], _Bus(admin, tables.notifications))
    resources = LocalResources(
        "chaos", template, endpoint, endpoint, {"NotificationsTable": tables.notifications}, {}, {}
    )
    pipe = _Pipe(resources, run.bus, random.Random(config.seed + 1), config, run.log, random_ids=random_ids)
    stop = threading.Event()
    pipe_thread = threading.Thread(target=pipe.run, args=(stop,), daemon=True)
    pipe_thread.start()
    consumers = [threading.Thread(target=run.consume, args=(index,)) for index in range(config.consumers)]
    for thread in consumers:
        thread.start()
    for thread in consumers:
        thread.join()
    stop.set()
    pipe_thread.join()
    result = _check(messages, admin, tables, run.bus, run.log, given_up=run.given_up)
    result.problems += [f"a request DynamoDB refuses as sent: {v}" for limits in run.limits for v in limits.violations]
    result.problems += run.letters
    result.ok = not result.problems
    result.first_failure = run.failures[0] if run.failures else None
    return result


def _kill_after_crossing(client: Any, table: str, rng: random.Random, rate: float, log: FaultLog) -> None:
    """An invocation killed right after a transaction that recorded a crossing committed."""

    def after(params: dict[str, Any], parsed: dict[str, Any] | None = None, **_: Any) -> None:
        if parsed is None or "Error" in parsed or table not in repr(params.get("TransactItems", [])):
            return
        if rng.random() < rate:
            log.add("kill.after_crossing_committed")
            raise InvocationKilled("killed between the commit of a crossing and its announcement")

    def remember(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["tally_params"] = params

    client.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", remember)
    client.meta.events.register(
        "after-call.dynamodb.TransactWriteItems",
        lambda context, parsed=None, **kw: after(context.get("tally_params", {}), parsed),
    )


def _create_tables(client: Any, template: dict[str, Any]) -> Tables:
    definitions = table_definitions(template)
    suffix = uuid.uuid4().hex[:8]
    tables = Tables(f"tchaos-counters-{suffix}", f"tchaos-markers-{suffix}", f"tchaos-notifications-{suffix}")
    for logical_id, name in (
        ("CountersTable", tables.counters),
        ("MarkersTable", tables.markers),
        ("NotificationsTable", tables.notifications),
    ):
        client.create_table(**definitions[logical_id].create_table_kwargs(name))
    return tables


def _check(
    messages: list[Message], client: Any, tables: Tables, bus: _Bus, log: FaultLog, *, given_up: set[str]
) -> ThresholdChaosResult:
    problems = [f"{message}: failed on each of its {MAX_DELIVERIES} deliveries" for message in sorted(given_up)]
    by_id = {m.message_id: m for m in messages}
    ends: dict[str, int] = {}
    for m in messages:
        for key in m.keys:
            ends[key] = ends.get(key, STARTS[m.kind]) + m.delta
    reader_values = _values(client, tables.counters, sorted(ends))
    for key, end in ends.items():
        if reader_values.get(key) != end:
            problems.append(f"{key}: counted {reader_values.get(key)}, the model says {end}")
    announced: dict[str, dict[str, Any]] = {}
    for event in bus.events:
        announced.setdefault(event["notification_id"], event)
    recorded = {c.notification_id: c for c in NotificationReader(tables.notifications, client=client).list()}
    figures = {
        "messages": len(messages),
        "events_put": len(bus.events),
        "announced": len(announced),
        "recorded": len(recorded),
    }
    problems += _check_announced(announced, recorded, by_id, bus.before_recorded)
    problems += _check_days(messages, announced, figures)
    problems += _check_spelled(ends, announced, figures)
    problems += _check_keys(ends, announced, figures)
    faults = log.snapshot()
    return ThresholdChaosResult(not problems, figures, faults, problems)


def _check_announced(
    announced: dict[str, dict[str, Any]],
    recorded: dict[str, Any],
    by_id: dict[str, Message],
    before_recorded: list[dict[str, Any]],
) -> list[str]:
    """Each crossing announced once, by its message, for a step that crosses its level, after its commit; every
    recorded crossing announced."""
    problems: list[str] = []
    names = Counter(
        (e["message_id"], e["key"], e.get("window", "all"), e["level"], e["direction"]) for e in announced.values()
    )
    for name, times in names.items():
        if times > 1:
            problems.append(f"announced {times} times under different ids: {name}")
    for nid, event in announced.items():
        message = by_id.get(event["message_id"])
        if message is None or event["key"] not in message.keys:
            problems.append(f"announced for an unknown message: {event}")
            continue
        after = Decimal(event["step_value"])
        if not crossed(Decimal(event["level"]), Direction(event["direction"]), after - message.delta, after):
            crossing_name = f"{event['level']} {event['direction']}"
            problems.append(f"spurious: {event['message_id']}'s step to {after} does not cross {crossing_name}")
        if nid not in recorded:
            problems.append(f"announced but never recorded (no commit): {event}")
    problems.extend(f"announced before its crossing was recorded: {event}" for event in before_recorded)
    problems.extend(
        f"recorded but never announced: {crossing}" for nid, crossing in recorded.items() if nid not in announced
    )
    return problems


def _check_keys(ends: dict[str, int], announced: dict[str, dict[str, Any]], figures: dict[str, int]) -> list[str]:
    """Per all-time key: the levels between its start and its end announced once each (``up``, ``down``), or, for
    a ``mix`` key walking back and forth, as many rising as falling crossings as the side it ended on says."""
    problems: list[str] = []
    for key, end in ends.items():
        kind = key.split(":")[1]
        mine = [e for e in announced.values() if e["key"] == key]
        if kind in {"win", "sp"}:
            continue  # per window: _check_days, _check_spelled
        if kind in LEVELS:
            start = STARTS[kind]
            expected = {
                (level, direction)
                for level, direction in LEVELS[kind]
                if crossed(level, Direction(direction), start, end)
            }
            got = Counter((int(Decimal(e["level"])), e["direction"]) for e in mine)
            if set(got) != expected or any(times != 1 for times in got.values()):
                problems.append(f"{key}: announced {dict(got)}, expected each of {sorted(expected)} once")
        else:
            ups = sum(1 for e in mine if e["direction"] == "rising")
            downs = sum(1 for e in mine if e["direction"] == "falling")
            side = int(end >= 10) - int(STARTS["mix"] >= 10)
            figures["mix_crossings"] = figures.get("mix_crossings", 0) + len(mine)
            if ups - downs != side:
                problems.append(
                    f"{key}: {ups} rising and {downs} falling crossings announced, but the side changed by {side}"
                )
    return problems


def _check_days(messages: list[Message], announced: dict[str, dict[str, Any]], figures: dict[str, int]) -> list[str]:
    """Per ``win`` key and day window, exactly the levels its day's total reaches announced, each once, under that
    window (deltas are positive, so the levels between 0 and the total, whatever the order); none elsewhere."""
    problems: list[str] = []
    days: dict[tuple[str, str], int] = {}
    for m in messages:
        if m.kind == "win":
            days[(m.key, m.day)] = days.get((m.key, m.day), 0) + m.delta
    for (key, day), total in sorted(days.items()):
        expected = {level for level in DAY_LEVELS if total >= level}
        got = Counter(
            int(Decimal(e["level"])) for e in announced.values() if e["key"] == key and e.get("window") == day
        )
        figures["window_crossings"] = figures.get("window_crossings", 0) + sum(got.values())
        if set(got) != expected or any(times != 1 for times in got.values()):
            problems.append(f"{key}@{day}: announced {dict(got)}, its total {total} reaches {sorted(expected)}")
    strays = [
        e for e in announced.values() if e["key"].startswith("t:win:") and (e["key"], e.get("window")) not in days
    ]
    problems += [f"announced outside the windows its key's events fall in: {e}" for e in strays[:3]]
    return problems


def _check_spelled(ends: dict[str, int], announced: dict[str, dict[str, Any]], figures: dict[str, int]) -> list[str]:
    """Per ``sp`` key (those spelling another's minute item too), its level announced once on its all-time value and
    once on its minute's (every event falls in that one minute) when the total reaches it, and nowhere else."""
    problems: list[str] = []
    for key, total in sorted(ends.items()):
        if not key.startswith("t:sp:"):
            continue
        windows = {"all": total, f"{SPELLED_MINUTE}": total}
        for window, value in windows.items():
            got = [e for e in announced.values() if e["key"] == key and e.get("window", "all") == window]
            figures["spelled_crossings"] = figures.get("spelled_crossings", 0) + len(got)
            expected = 1 if value >= SPELLED_LEVEL else 0
            if len(got) != expected or any(int(Decimal(e["level"])) != SPELLED_LEVEL for e in got):
                problems.append(
                    f"{key}@{window}: announced {[(e['level'], e['message_id']) for e in got]}, its total {value}"
                )
        strays = [e for e in announced.values() if e["key"] == key and e.get("window", "all") not in windows]
        problems += [f"{key}: announced outside its windows: {e}" for e in strays]
    return problems


def _values(client: Any, table: str, keys: list[str]) -> dict[str, int]:
    from tally.reader import CounterReader  # noqa: PLC0415

    reader = CounterReader(table, client=client)
    found = reader.get_many(keys)
    starts = {"t:down": 80, "t:mix": 8}
    values: dict[str, int] = {}
    for key, counters in found.items():
        prefix = key.rsplit(":", 1)[0]
        name = {"t:mix": "v", "t:win": "w"}.get(prefix, "n")
        value = counters.values.get(name)
        values[key] = int(value) if value is not None else starts.get(prefix, 0)
    return values


@click.command()
@click.option("--seed", type=int, default=26, show_default=True)
def main(seed: int) -> None:
    """Run the threshold chaos on a DynamoDB Local of its own; exit 1 if any crossing is lost, doubled or spurious."""
    with DynamoDBLocal() as ddb:
        started = time.monotonic()
        result = run_threshold_chaos(ddb.endpoint_url, ThresholdChaosConfig(seed=seed))
    click.echo(json.dumps({"ok": result.ok, "figures": result.figures, "faults": result.faults}, indent=2))
    if result.first_failure:
        click.echo(f"first failed invocation:\n{result.first_failure}")
    for problem in result.problems:
        click.echo(f"PROBLEM {problem}")
    click.echo(f"{'PASS' if result.ok else 'FAIL'} in {time.monotonic() - started:.1f} s")
    raise SystemExit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
