"""One benchmark run: every peer on every workload, on one DynamoDB Local, then CPU and memory.

For each workload (U, H) the same seeded stream goes to every peer, each over fresh tables: the naive
counter and Powertools on the first ``per_event_prefix`` events (they make requests per event), tally on
all of it, once as single-event messages and once packed. Batches are Lambda-style (``batch_size``
records); records a handler reports as failed are redelivered in a later batch, as SQS would.

Time is the handler's own (``time.perf_counter`` around each call) less the meter's bookkeeping, so
events per second are "through the handler against DynamoDB Local". Counts are read back after each run
and compared with the workload's reference sums.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from bench.peers import lambda_context, metered
from bench.peers.naive import NaiveCounter
from bench.peers.powertools_idempotency import PowertoolsIdempotentCounter
from bench.peers.tally_pipeline import TallyCounter
from bench.workloads import (
    WorkloadSpec,
    batch_footprints,
    deliver,
    hot_events,
    lambda_event,
    usage_events,
    write_floor,
)
from tally.config import FENCED_APPLY
from tally.runtime import CLIENT_CONFIG

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from bench.peers import Peer
    from bench.workloads import Delivery, Stream, Totals
    from tally_local.dynamodb_local import DynamoDBLocal
    from tally_local.kit.meter import Usage

LAMBDA_TIMEOUT_MS: Final = 900_000
MAX_DELIVERIES: Final = 5
"""A record failed this many times would go to the DLQ; the suite stops redelivering it (and says so)."""
COUNTERS: Final = ("units", "cost")


@dataclass(frozen=True, slots=True)
class SuiteConfig:
    """Sizes of one run. ``FULL`` is the published one, ``SMOKE`` keeps the code alive in CI."""

    spec: WorkloadSpec = field(default_factory=WorkloadSpec)
    batch_size: int = 100
    per_event_prefix: int = 20_000
    warmup_events: int = 600
    cpu_events: int = 10_000
    cpu_repeats: int = 15
    memory_records: int = 10_000
    powertools_body_id: bool = True
    """Also run Powertools on U keyed on the producer's id (it catches re-sends, at the same price)."""
    tally_windows: bool = True
    """Also run tally on U with the template's default time windows (the comparison runs without); the
    single-event variant on the per-event prefix, to keep the run short."""


FULL: Final = SuiteConfig()
SMOKE: Final = SuiteConfig(
    spec=WorkloadSpec(events=300, keys=20, resend_window=75),
    per_event_prefix=75,
    warmup_events=50,
    cpu_events=300,
    cpu_repeats=1,
    memory_records=100,
)


@dataclass(frozen=True, slots=True)
class Correctness:
    """Counted against expected, summed over every key of the run."""

    keys: int
    keys_wrong: int
    expected: Mapping[str, Decimal]
    counted: Mapping[str, Decimal]
    delivered: Mapping[str, Decimal]
    """What a counter that counts every delivery once would show (re-sends included)."""

    @property
    def exact(self) -> bool:
        return self.keys_wrong == 0

    @property
    def error_pct(self) -> float:
        """Over (+) or under (-) count of ``units`` in percent of the expected total."""
        expected = self.expected["units"]
        return float((self.counted["units"] - expected) / expected * 100) if expected else 0.0


@dataclass(frozen=True, slots=True)
class PeerRun:
    """One peer on one stream."""

    peer: str
    workload: str
    stream: str
    events: int
    records: int
    batches: int
    seconds: float
    usage: Usage
    correctness: Correctness
    floor_write_units: int
    redelivered: int
    dead_letters: int
    pipeline: Mapping[str, int] | None = None
    fenced: bool = False
    """tally with the fenced apply on (journal batches' items written plainly, not in transactions)."""
    footprints: Sequence[tuple[int, int, int]] = ()
    """tally: per batch as delivered, (new messages, distinct counter items they touch, re-sent messages applied in
    an earlier batch): what the write floor and the request ceilings are computed from."""

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def requests_per_event(self) -> float:
        return self.usage.requests / self.events

    @property
    def write_units_per_event(self) -> float:
        return self.usage.write_units / self.events

    @property
    def read_units_per_event(self) -> float:
        return self.usage.read_units / self.events

    @property
    def floor_per_event(self) -> float:
        return self.floor_write_units / self.events


@dataclass(frozen=True)
class Workloads:
    """The four streams of one run, built once."""

    streams: Mapping[str, Stream]

    @classmethod
    def build(cls, spec: WorkloadSpec) -> Workloads:
        streams: dict[str, Stream] = {}
        for workload, events in (("U", usage_events(spec)), ("H", hot_events(spec))):
            for packed in (False, True):
                stream = deliver(workload, events, spec, packed=packed)
                streams[stream.name] = stream
        return cls(streams)


PeerFactory = Callable[["DynamoDBClient", "DynamoDBClient", str], "Peer"]
"""Builds a peer on (metered client, admin client, table-name suffix)."""


@dataclass(frozen=True, slots=True)
class PeerPlan:
    """One peer of the run: how to build it, which stream it takes, on which workloads."""

    build: PeerFactory
    packed: bool = False
    per_event: bool = False
    """Runs on the per-event prefix of the stream (it makes requests per event)."""
    workloads: tuple[str, ...] = ("U", "H")
    resends: bool = True
    """False: the stream's messages each delivered once (``Stream.without_resends``)."""


def peer_plans(config: SuiteConfig) -> list[PeerPlan]:
    """The peers, in run order."""
    plans = [PeerPlan(NaiveCounter, per_event=True), PeerPlan(PowertoolsIdempotentCounter, per_event=True)]
    if config.powertools_body_id:
        plans.append(PeerPlan(partial(PowertoolsIdempotentCounter, key="body-id"), per_event=True, workloads=("U",)))
    # tally as the template deploys it (fenced=None: the settings' FencedApply, on by default), and once packed
    # with FencedApply=false, the chunked transactions it can be rolled back to, so both paths are in one run.
    tally = partial(TallyCounter, fenced=None)
    plans += [
        PeerPlan(partial(tally, packed=False)),
        PeerPlan(partial(tally, packed=True), packed=True),
        PeerPlan(
            partial(tally, packed=True, variant="-chunked", overrides={FENCED_APPLY: "false"}),
            packed=True,
            workloads=("U",),
        ),
        # The same stream without its re-sends: what the marker read gate saves when nothing is duplicated.
        PeerPlan(partial(tally, packed=False, variant="-no-resends"), workloads=("U",), resends=False),
    ]
    if config.tally_windows:
        plans += [
            PeerPlan(partial(tally, packed=False, windows=True), per_event=True, workloads=("U",)),
            PeerPlan(partial(tally, packed=True, windows=True), packed=True, workloads=("U",)),
        ]
    return plans


def run_workloads(
    ddb: DynamoDBLocal,
    config: SuiteConfig,
    workloads: Workloads,
    progress: Callable[[str, int, int], None] = lambda _label, _done, _total: None,
) -> list[PeerRun]:
    """Warm every peer up, then run each on U and H; ``progress(label, done, total)`` after each batch."""
    admin = ddb.client()
    client = ddb.client(CLIENT_CONFIG)
    warmup_spec = WorkloadSpec(
        events=config.warmup_events, keys=min(config.spec.keys, 100), seed=config.spec.seed + 1, resend_window=100
    )
    warmup = Workloads.build(warmup_spec)

    def run(plan: PeerPlan, stream: Stream, label: str) -> PeerRun:
        def labelled(peer: str, done: int, total: int) -> None:
            progress(f"{label} {peer}", done, total)

        return run_peer(plan.build, stream, client=client, admin=admin, batch_size=config.batch_size, progress=labelled)

    for plan in peer_plans(config):
        run(plan, warmup.streams[f"U/{'packed' if plan.packed else 'single'}"], "warm-up")
    runs: list[PeerRun] = []
    for workload in ("U", "H"):
        for plan in peer_plans(config):
            if workload not in plan.workloads:
                continue
            stream = workloads.streams[f"{workload}/{'packed' if plan.packed else 'single'}"]
            if not plan.resends:
                stream = stream.without_resends()
            if plan.per_event:
                stream = stream.prefix(config.per_event_prefix)
            runs.append(run(plan, stream, workload))
    return runs


def run_peer(
    factory: PeerFactory,
    stream: Stream,
    *,
    client: DynamoDBClient,
    admin: DynamoDBClient,
    batch_size: int,
    progress: Callable[[str, int, int], None] = lambda _label, _done, _total: None,
) -> PeerRun:
    """One peer over ``stream`` on fresh tables, metered; the tables are dropped afterwards.

    ``progress(peer name, batches done, batches in all)`` is called after each batch.
    """
    peer = factory(client, admin, uuid.uuid4().hex[:10])
    context = lambda_context(LAMBDA_TIMEOUT_MS)
    pending: deque[tuple[Delivery, ...]] = deque(stream.batches(batch_size))
    handled: list[tuple[Delivery, ...]] = []
    attempts: dict[str, int] = {}
    redelivered = 0
    total = len(pending)
    handler_s = 0.0
    with metered(peer, client) as meter:
        while pending:
            batch = pending.popleft()
            event = lambda_event(batch, time.time_ns() // 1_000_000)
            started = time.perf_counter()
            response = peer.handle(event, context)
            handler_s += time.perf_counter() - started
            handled.append(batch)
            retry = _failed(batch, response, attempts)
            if retry:
                redelivered += len(retry)
                pending.append(retry)
                total += 1
            progress(peer.name, len(handled), total)
        usage = meter.usage()
        counted = peer.read_counters(stream.keys)
    fenced = isinstance(peer, TallyCounter) and peer.fenced
    footprints = (
        [
            (messages, peer.items_per_key * keys, resent)
            for messages, keys, resent in batch_footprints(handled, stream.events)
        ]
        if isinstance(peer, TallyCounter)
        else []
    )
    return PeerRun(
        peer=peer.name,
        workload=stream.workload,
        stream="packed" if stream.packed else "single",
        events=stream.distinct_events,
        records=len(stream.deliveries),
        batches=len(handled),
        seconds=handler_s - meter.overhead_s,
        usage=usage,
        correctness=compare(stream.expected(), stream.delivered(), counted),
        floor_write_units=write_floor(handled, stream.events, peer.items_per_key, item_units=1 if fenced else 2),
        redelivered=redelivered,
        dead_letters=getattr(peer, "dead_letters", 0),
        pipeline=peer.totals.as_dict() if isinstance(peer, TallyCounter) else None,
        fenced=fenced,
        footprints=footprints,
    )


def _failed(batch: Sequence[Delivery], response: Mapping[str, Any], attempts: dict[str, int]) -> tuple[Delivery, ...]:
    """The deliveries to redeliver: those the handler reported, until they have failed ``MAX_DELIVERIES``."""
    failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
    retry = []
    for delivery in batch:
        if delivery.record_id in failed:
            attempts[delivery.record_id] = attempts.get(delivery.record_id, 1) + 1
            if attempts[delivery.record_id] <= MAX_DELIVERIES:
                retry.append(delivery)
    return tuple(retry)


def compare(expected: Totals, delivered: Totals, counted: Mapping[str, Mapping[str, Decimal]]) -> Correctness:
    """Counted against expected per key and counter (absent and zero read the same)."""
    keys = set(expected) | {key for key, counters in counted.items() if any(counters.values())}
    wrong = sum(
        1
        for key in keys
        if any(
            expected.get(key, {}).get(name, Decimal(0)) != counted.get(key, {}).get(name, Decimal(0))
            for name in COUNTERS
        )
    )
    return Correctness(
        keys=len(keys),
        keys_wrong=wrong,
        expected=_column_sums(expected),
        counted=_column_sums(counted),
        delivered=_column_sums(delivered),
    )


def _column_sums(totals: Mapping[str, Mapping[str, Decimal]]) -> dict[str, Decimal]:
    return {
        name: sum((counters.get(name, Decimal(0)) for counters in totals.values()), Decimal(0)) for name in COUNTERS
    }
