"""A chaos run: publish the seeded load, consume it under faults, redrive the DLQ twice, judge the result.

The pipeline of every consumer is wired like ``tally.runtime.build_pipeline`` (``DynamoDBCounterStore``,
``DynamoDBJournal``, ``Applier``, ``BatchPipeline``, the deployment's windows and hot keys, botocore's
client configuration), on its own client to DynamoDB Local with its own fault injector; the dead-letter
port is the run's in-memory queue. Only the retry delays are scaled down (``CHAOS_RETRIES``): the
emulated sources redeliver at once instead of after minutes, and the run must not sleep for real.

``pipeline_factory`` replaces that wiring: the test suite passes deliberately broken variants through
it and checks that the same harness catches them.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Protocol

from tally.commit.applier import Applier, RetryPolicy
from tally.commit.marker_reads import MarkerReadGate
from tally.core.declarations import parse_declarations
from tally.core.defaults import parse_counter_defaults
from tally.core.fence import fence_horizon_ms, plan_fenced_apply, prunable
from tally.core.items import ALL_TIME
from tally.core.limits import WIRE_LIMITS
from tally.core.model import SourceRecord
from tally.core.numbered_ids import parse_numbered
from tally.core.sharding import parse_hot_keys
from tally.core.views import parse_counter_views
from tally.core.windows import DAY_MS, parse_window_id, parse_window_spec
from tally.core.write_planner import plan_write
from tally.pipeline import BatchPipeline, DeadLetterQueue, PipelineSettings
from tally.post_commit import post_commit_steps
from tally.post_commit.archive import wall_clock_ms
from tally.reader import CounterReader
from tally.reader.store_view import read_counters
from tally.store.counted import DynamoDBCountedLookup
from tally.store.distinct import DynamoDBDistinctStore
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.expressions import counter_limit_for
from tally.store.gauges import DynamoDBGaugeStore
from tally.store.journal import DynamoDBJournal
from tally.store.windows import DynamoDBWindowMover
from tally_local.chaos.archive import BUCKET, ArchiveSite, ArchiveVerdict, CountedMessages, judge_archive
from tally_local.chaos.check import PatternReads, Verdict, judge
from tally_local.chaos.clock import LANDING_WAIT_S, VirtualClock
from tally_local.chaos.config import VISIBILITY_TIMEOUT_S
from tally_local.chaos.dlq import ConsumerPort, DeadLetterStore
from tally_local.chaos.expired_claims import run_expired_claims
from tally_local.chaos.explain import explain_wrong_counters
from tally_local.chaos.faults import ArchiveChaos, DynamoDBChaos, FaultLog
from tally_local.chaos.horizon import run_past_horizon
from tally_local.chaos.invoke import Consumer, KilledClaims
from tally_local.chaos.kinesis import ShardConsumer, Stream
from tally_local.chaos.ledger import JepsenMonitor, Ledger, MessageTrail, Violation
from tally_local.chaos.patterns import BOUND_CODES, refused_keys
from tally_local.chaos.sqs import Queue, consume
from tally_local.chaos.window_reads import SeriesReadMonitor, WindowReadViolation, window_contributions
from tally_local.chaos.wiring import PipelineFactory, Tables
from tally_local.chaos.workload import TRACER, Source, Workload, generate, wide_items
from tally_local.esm import RetryCadence
from tally_local.kit.conflicts import InFlightTransactions
from tally_local.kit.limits import RequestLimits
from tally_local.moto_server import SerialMotoServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.core.fence import FencedPlanner, PruneRule
    from tally.core.write_planner import WritePlanner
    from tally.post_commit import ArchiveWriter
    from tally_local.chaos.config import ChaosConfig

TTL_SECONDS = 35 * 86_400
CHAOS_RETRIES = RetryPolicy(base_delay_s=0.005, max_delay_s=0.1, max_attempts=8, reserve_ms=3_000)
FENCE_CLOCK_MARGIN_MS = 1_000
"""The clock margin of the run's prune horizon: its consumers share one clock, so a second covers a request still in
flight as its invocation's deadline passes."""


ONE_ADD_NAMES = 331
"""Counter names one ADD carries within DynamoDB's 4 KB expression limit (DynamoDB Local: 331 accepted,
4,085 bytes; 332 refused, 4,098): a constant here, so the harness does not lean on the code it checks."""
WIDE_MESSAGE_NAMES = 100


def wire_pipeline(
    client: DynamoDBClient,
    tables: Tables,
    dead_letters: DeadLetterQueue,
    config: ChaosConfig,
    *,
    store: DynamoDBCounterStore | None = None,
    journal: DynamoDBJournal | None = None,
    marker_read_gate: MarkerReadGate | None = None,
    archive: ArchiveWriter | None = None,
    clock: Callable[[], int] | None = None,
    write_planner: WritePlanner = plan_write,
    fenced: bool = True,
    fenced_planner: FencedPlanner = plan_fenced_apply,
    prune_rule: PruneRule = prunable,
) -> BatchPipeline:
    """``tally.runtime.build_pipeline``'s wiring, on the given client, dead-letter port and archive writer (a broken
    variant passes its store, journal, ``write_planner``, ``fenced_planner`` or ``prune_rule``); ``fenced``: journal
    batches applied by fenced single-item writes (``tally.core.fence``), else by chunk transactions. The prune
    horizon is the function timeout's (``fence_horizon_ms``), not the default of Lambda's longest: marks then go
    within a run, whose clock jumps minutes at a time."""
    declared = parse_declarations(
        windows=config.windows,
        window_retention=config.window_retention,
        hot_keys=config.hot_keys,
        defaults=config.counter_defaults,
        bounds=config.counter_bounds,
        views=config.counter_views,
    )
    store = store or DynamoDBCounterStore(client, tables.counters, tables.markers, TTL_SECONDS)
    journal = journal or DynamoDBJournal(client, tables.counters, tables.markers, TTL_SECONDS, declared.defaults)
    settings = PipelineSettings(limits=WIRE_LIMITS, dedup_horizon_ms=TTL_SECONDS * 1000, declarations=declared)
    applier = Applier(
        store,
        journal,
        policy=CHAOS_RETRIES,
        marker_read_gate=marker_read_gate,
        counter_limit=counter_limit_for(declared.defaults),
        declarations=declared,
        write_planner=write_planner,
        write_concurrency=config.write_concurrency,
        fenced=fenced,
        fence_horizon=fence_horizon_ms(config.function_timeout_s, FENCE_CLOCK_MARGIN_MS),
        fenced_planner=fenced_planner,
        prune_rule=prune_rule,
    )
    # The gauge and member stores as production wires them: without them a message with gauges
    # or distinct members is dead-lettered.
    return BatchPipeline(
        applier,
        dead_letters,
        settings,
        steps=post_commit_steps(
            declared.windows,
            gauges=DynamoDBGaugeStore(client, tables.counters),
            distinct=DynamoDBDistinctStore(client, tables.counters, declared.hot_keys),
            mover=DynamoDBWindowMover(
                client,
                tables.counters,
                declared.windows,
                marks_due=applier.prunable_marks if applier.epochs is not None else None,
            ),
            archive=archive,
            clock=clock or wall_clock_ms,
        ),
    )


class SeriesReaderFactory(Protocol):
    """Builds the reader of the series reads made during the run (the library's: ``series_reader``)."""

    def __call__(self, client: DynamoDBClient, tables: Tables, config: ChaosConfig) -> CounterReader: ...


def series_reader(client: DynamoDBClient, tables: Tables, config: ChaosConfig) -> CounterReader:
    """``tally.reader.CounterReader`` as an application builds it for this deployment."""
    spec = parse_window_spec(config.windows, config.window_retention)
    return CounterReader(tables.counters, client=client, hot_keys=config.hot_keys, windows=spec)


@dataclass(frozen=True, slots=True)
class ChaosResult:
    config: ChaosConfig
    events: int
    """Distinct valid events published (doomed ones included, setup messages not)."""
    messages: int
    publications: int
    counts: dict[str, int]
    """Faults, redeliveries and outcomes by name (``FaultLog``)."""
    verdict: Verdict
    jepsen_reads: int
    jepsen_violations: tuple[Violation, ...]
    unexpected_errors: tuple[str, ...]
    seconds: float
    virtual_seconds: float
    """How far the virtual clock jumped ahead of real time (visibility timeouts, backoffs)."""
    wide_items: int = 0
    """Keys whose item got more counter names than one ADD's 4 KB expression carries."""
    wide_messages: int = 0
    """Messages with 100 or more counters on one key."""
    series_reads: int = 0
    """Series reads of ``win:`` keys made while the consumers ran (``tally_local.chaos.window_reads``)."""
    series_read_violations: tuple[WindowReadViolation, ...] = ()
    past_horizon_problems: tuple[str, ...] = ()
    """What went wrong with the ids met past their horizon after a TTL sweep (``tally_local.chaos.horizon``)."""
    expired_claim_problems: tuple[str, ...] = ()
    """What went wrong with the claims of dead batches met while TTL swept between two requests
    (``tally_local.chaos.expired_claims``)."""
    archive: ArchiveVerdict | None = None
    """The archive recounted against the tables (``tally_local.chaos.archive``); None: the run archived nothing."""
    requests_over_limits: tuple[str, ...] = ()
    """Requests of the consumers that broke one of DynamoDB's published limits (``tally_local.kit.limits``)."""
    explanation: tuple[str, ...] = ()
    """When a counter is wrong: the messages behind the first wrong keys, their markers, batches and trails
    (``tally_local.chaos.explain``)."""

    @property
    def faults(self) -> dict[str, int]:
        """Every injected fault by kind (the figures that must add up to at least 1,000 in the full run)."""
        prefixes = ("ddb.", "delivery.", "producer.", "poison.")
        excluded = {"delivery.sqs_moved_to_dlq", "delivery.kinesis_given_up_records"}
        return {
            name: count
            for name, count in sorted(self.counts.items())
            if name.startswith(prefixes) and name not in excluded
        }

    @property
    def situations(self) -> dict[str, int]:
        """How often the run produced each situation at the journal's edges (gate closed, kill between claim and
        commit then redelivery after the lease, sums needing more than 38 digits in a later chunk)."""
        return {name: count for name, count in sorted(self.counts.items()) if name.startswith("situation.")}

    @property
    def redeliveries(self) -> dict[str, int]:
        return {name: count for name, count in sorted(self.counts.items()) if name.startswith("redelivery.")}

    @property
    def passed(self) -> bool:
        return (
            self.verdict.ok
            and not self.jepsen_violations
            and not self.unexpected_errors
            and self.jepsen_reads > 0
            and not self.series_read_violations
            and not self.past_horizon_problems
            and not self.expired_claim_problems
            and not self.requests_over_limits
            and (self.series_reads > 0 or not self.config.window_messages)
            and (self.archive is None or self.archive.ok)
            and (self.archive is not None or not self.config.archive)
        )


@dataclass
class _Run:
    """Everything one run shares between its threads."""

    config: ChaosConfig
    client_factory: Callable[[], DynamoDBClient]
    tables: Tables
    pipeline_factory: PipelineFactory
    clock: VirtualClock = field(default_factory=VirtualClock)
    log: FaultLog = field(default_factory=FaultLog)
    dead_letters: DeadLetterStore = field(default_factory=DeadLetterStore)
    ledger: Ledger = field(default_factory=Ledger)
    unexpected: list[BaseException] = field(default_factory=list)
    injectors: list[DynamoDBChaos] = field(default_factory=list)
    in_flight: InFlightTransactions = field(default_factory=InFlightTransactions)
    """DynamoDB's conflicts between transactions in flight on one item, across every consumer."""
    killed: KilledClaims = field(default_factory=KilledClaims)
    series_monitor: SeriesReadMonitor | None = None
    """Holds window moves until a series read of their key is between two requests."""
    sessions: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """The bounded sessions' messages (``Workload.sessions``), for the situations the consumers count."""
    archive: ArchiveSite | None = None
    """Where every consumer archives what it counts (``ChaosConfig.archive``)."""
    limits: list[RequestLimits] = field(default_factory=list)
    """Each consumer's watch of DynamoDB's request limits: a request one of them breaks fails the run."""
    trail: MessageTrail = field(default_factory=MessageTrail)
    """Each message body's deliveries, redrives and give-ups (named by the archive's verdict)."""

    def archive_writer(self) -> ArchiveWriter | None:
        """A writer without faults (the setup and the past-horizon step), or None when the run archives nothing."""
        return self.archive.writer() if self.archive is not None else None

    def consumer(self, name: str, index: int, of: int) -> Consumer:
        """Consumer ``index`` of its source's ``of``; the first ``closed_gate_consumers`` never read markers, the last
        ``chunked_consumers`` apply journal batches by chunk transactions (the others fenced)."""
        config = self.config
        client = self.client_factory()
        self.limits.append(RequestLimits(client, [self.tables.counters, self.tables.markers]))
        chaos = DynamoDBChaos(
            client, config.dynamodb, random.Random(f"{config.seed}:ddb:{name}"), self.log, self.in_flight
        )
        chaos.reserve_ms = CHAOS_RETRIES.reserve_ms
        chaos.refused_keys = refused_keys(config.seed, config.pattern_keys, config.refused_keys)
        self.injectors.append(chaos)
        if self.series_monitor is not None:  # after the injector's hooks: only moves it lets through are held
            self.series_monitor.attach(client)
        port = ConsumerPort(
            self.dead_letters, config.delivery.dlq_refusal, random.Random(f"{config.seed}:dlq:{name}"), self.log
        )
        # A gate that never reads is one that has closed (10 quiet batches) and met no marker since.
        gate = MarkerReadGate(quiet_batches=0) if index < config.closed_gate_consumers else MarkerReadGate()
        archive = None
        if self.archive is not None:
            s3 = self.archive.client()
            ArchiveChaos(s3, config.archive_faults, random.Random(f"{config.seed}:s3:{name}"), self.log, chaos)
            archive = self.archive.writer(s3)
        fenced = index < of - config.chunked_consumers
        self.log.add("situation.fenced_containers" if fenced else "situation.chunked_containers")
        chaos.fenced.container_fenced = fenced
        build = partial(
            self.pipeline_factory,
            client,
            self.tables,
            port,
            config,
            marker_read_gate=gate,
            archive=archive,
            clock=self.clock.now_ms,
            fenced=fenced,
        )
        pipeline = build()

        def restart(old: BatchPipeline) -> BatchPipeline:
            # The old environment's write threads end with it: those of a killed invocation send nothing more.
            pool = getattr(getattr(old, "_applier", None), "_pool", None)
            if pool is not None:
                pool.shutdown(wait=True)
            return build()

        return Consumer(
            name=name,
            pipeline=pipeline,
            chaos=chaos,
            clock=self.clock,
            log=self.log,
            rng=random.Random(f"{config.seed}:invoke:{name}"),
            timeout_ms=config.function_timeout_s * 1000,
            crash_after_commit=config.delivery.crash_after_commit,
            unexpected=self.unexpected,
            gate=gate,
            killed=self.killed,
            trail=self.trail,
            sessions=self.sessions,
            minute_windows=any(
                unit.name == "minute" for unit in parse_window_spec(config.windows, config.window_retention).units
            ),
            restart=restart,
            restart_after_kill=config.delivery.restart_after_kill,
        )


def _run_threads(
    targets: dict[str, Callable[[], None]], on_tick: Callable[[], None] | None, halt: Callable[[], None]
) -> None:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(target), name=name) for name, target in targets.items()]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.25)
                if on_tick is not None:
                    on_tick()
    except KeyboardInterrupt:
        halt()  # let every consumer finish its invocation, so that DynamoDB Local can be stopped cleanly
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]


def _redrive(run: _Run, queue: Queue, *, moved_only: bool = False) -> None:
    """The operator's redrive: every letter sent back to the source queue as a new message (a new MessageId).

    ``moved_only``: an extra redrive sends back only the letters the redrive policy moved (no reason code)
    and leaves those with a reason. Sending the few hundred letters with reasons again would give each of
    them another chance of failing ``maxReceiveCount`` receives in a row under the run's fault rates, so
    that every extra redrive moved some message again and the last one could leave a valid message moved.
    """
    sent = 0
    for letter in run.dead_letters.drain():
        if moved_only and letter.code is not None:
            run.dead_letters.add(letter, again=True)
        else:
            run.trail.note(letter.body, f"{run.clock.now_ms()} redriven from the DLQ (letter code {letter.code})")
            queue.send(letter.body)
            sent += 1
    run.log.add("producer.dlq_redriven", sent)


def _needs_another_redrive(
    run: _Run, workload: Workload, config: ChaosConfig, stream: Stream, *, redrives: int
) -> bool:
    """Whether something is still where only an operator's redrive brings it back, and an extra redrive is left
    (``ChaosConfig.extra_redrives``): messages the redrive policy moved to the DLQ (no reason code: valid ones,
    or poison whose batch kept failing before its letter could be sent), or Kinesis ranges given up to the
    on-failure destination (given up again in the last replay). Logged as ``producer.dlq_extra_redrives``. An
    operator redrives a letter without a reason again and replays a given-up range (``tally dlq redrive``); a
    poison message then earns its reason, a valid one counts."""
    if redrives >= config.redrives + config.extra_redrives:
        return False
    known = workload.by_body.keys() | workload.poison.keys()
    moved = any(letter.code is None and letter.body in known for letter in run.dead_letters.letters())
    given_up = any(shard.given_up for shard in stream.shards)
    if moved or given_up:
        run.log.add("producer.dlq_extra_redrives")
    return moved or given_up


def run_chaos(
    config: ChaosConfig,
    client_factory: Callable[[], DynamoDBClient],
    tables: Tables,
    *,
    pipeline_factory: PipelineFactory = wire_pipeline,
    on_progress: Callable[[str, int, int], None] | None = None,
    reader_factory: SeriesReaderFactory = series_reader,
) -> ChaosResult:
    """Run ``config`` against the empty ``tables``; ``on_progress(phase, acknowledged, messages)``. With
    ``config.archive``, on a moto server of its own for the archive's bucket, stopped at the end.

    Raises ``ValueError`` when a table holds an item: the run judges every key it writes against its own workload
    alone, and keys of a section are named alike whatever the seed (``bs:0:0``), so another run's counts would be
    judged as this run's events counted twice."""
    require_empty(client_factory(), (tables.counters, tables.markers))
    options = {"pipeline_factory": pipeline_factory, "on_progress": on_progress, "reader_factory": reader_factory}
    if not config.archive:
        return _run_chaos(config, client_factory, tables, archive=None, **options)  # type: ignore[arg-type]
    with SerialMotoServer() as moto:
        # A bucket of its own: moto keeps its services' state per process, across servers.
        site = ArchiveSite(moto.endpoint_url, f"{BUCKET}-{uuid.uuid4().hex[:12]}").create()
        return _run_chaos(config, client_factory, tables, archive=site, **options)  # type: ignore[arg-type]


def require_empty(client: DynamoDBClient, tables: Iterable[str]) -> None:
    """Raise ``ValueError`` naming the first of ``tables`` that holds an item (one strongly consistent item read)."""
    for table in tables:
        if client.scan(TableName=table, Limit=1, ConsistentRead=True).get("Items"):
            raise ValueError(
                f"the chaos run needs empty tables, and {table} holds items (another run's?): give each run new tables"
            )


def _publish(workload: Workload, log: FaultLog, queue: Queue, stream: Stream, trail: MessageTrail) -> None:
    """Every publication of the workload, to its source, each situation it makes counted in ``log``."""
    reused = {message.body for message in workload.alternates.values()}
    precision_bodies = {message.body for message in workload.precision_doomed}
    digit_bodies = {message.body for message in workload.digit_steps}
    for publication in workload.publications:
        if publication.resend:
            log.add("producer.resend")
            if workload.by_body[publication.body].body != publication.body:
                log.add("producer.resend_respelled")
        if publication.body in reused:
            log.add("producer.id_reused")
        if publication.body in workload.poison:
            log.add("poison.published")
        if publication.body in precision_bodies:
            log.add("situation.sum_over_38_digits_published")
        if publication.body in digit_bodies:
            log.add("situation.bounded_36_digit_step_published")
        if (message := workload.by_body.get(publication.body)) is not None and parse_numbered(message.message_id):
            log.add("situation.numbered_id_published")  # its marker shares a block item
        if workload.sessions.get(publication.body, ("", False))[1] and not publication.resend:
            log.add("situation.session_big_published")  # then its bounded sales, one block
        trail.note(
            publication.body, f"published to {publication.source.name}" + (" (re-send)" if publication.resend else "")
        )
        if publication.source is Source.SQS:
            queue.send(publication.body)
        else:
            stream.put(publication.body.encode(), publication.partition_key)


def _run_chaos(
    config: ChaosConfig,
    client_factory: Callable[[], DynamoDBClient],
    tables: Tables,
    *,
    pipeline_factory: PipelineFactory,
    on_progress: Callable[[str, int, int], None] | None,
    reader_factory: SeriesReaderFactory,
    archive: ArchiveSite | None,
) -> ChaosResult:
    started = time.perf_counter()
    run = _Run(config, client_factory, tables, pipeline_factory, archive=archive)
    generated_ms = run.clock.now_ms()
    workload = generate(config, generated_ms)
    run.sessions = workload.sessions
    queue = Queue(
        run.clock,
        run.dead_letters,
        run.log,
        visibility_ms=VISIBILITY_TIMEOUT_S[config.function_timeout_s] * 1000,
        max_receive_count=config.max_receive_count,
        expiry_rate=config.delivery.visibility_expiry,
        seed=config.seed,
    )
    stream = Stream(config.kinesis_shards, run.clock)
    _apply_setup(workload, run)
    # Before the load, on clients of their own: ids met past their horizon, then dead batches' claims met while
    # TTL sweeps between two requests (each returns what went wrong); both archive what they count.
    past_horizon, expired_claims = (
        section(
            config,
            client_factory,
            tables,
            pipeline_factory,
            dead_letters=ConsumerPort(DeadLetterStore(), 0.0, random.Random(), run.log),
            log=run.log,
            now_ms=run.clock.now_ms(),
            ttl_seconds=TTL_SECONDS,
            archive=run.archive_writer(),
            clock=run.clock.now_ms,
        )
        for section in (run_past_horizon, run_expired_claims)
    )
    precision_bodies = {message.body for message in workload.precision_doomed}
    digit_bodies = {message.body for message in workload.digit_steps}
    _publish(workload, run.log, queue, stream, run.trail)

    series_client = client_factory()
    series_monitor = SeriesReadMonitor(
        run.ledger,
        run.log,
        window_contributions(workload, parse_window_spec(config.windows, config.window_retention)),
        reader_factory(series_client, tables, config),
        series_client,
        day_ms=generated_ms - generated_ms % DAY_MS - DAY_MS,  # the window messages' day (``workload``)
        now_ms=run.clock.now_ms,
        seed=config.seed,
        interval_s=config.series_read_interval_s,
    )
    run.series_monitor = series_monitor
    sqs_consumers = [run.consumer(f"sqs-{index}", index, config.sqs_consumers) for index in range(config.sqs_consumers)]
    shard_consumers = [
        ShardConsumer(
            shard,
            run.consumer(f"kinesis-{index}", index, config.kinesis_shards),
            workload,
            run.ledger,
            run.clock,
            config.kinesis_batch_size,
            config.kinesis_max_retries,
            config.delivery.kinesis_rewind,
            random.Random(f"{config.seed}:rewind:{index}"),
            max_record_age_s=config.kinesis_max_record_age_s,
            cadence=RetryCadence(config.kinesis_retry_cadence),
        )
        for index, shard in enumerate(stream.shards)
    ]
    reader = DynamoDBCounterStore(client_factory(), tables.counters, tables.markers, TTL_SECONDS)
    hot_keys = parse_hot_keys(config.hot_keys)

    def read_count(key: str) -> Decimal:
        return read_counters(reader, key, hot_keys).get(TRACER, Decimal(0))

    def phase_targets(replay: bool) -> dict[str, Callable[[], None]]:
        targets: dict[str, Callable[[], None]] = {
            c.name: partial(consume, queue, c, workload, run.ledger, config.sqs_batch_size) for c in sqs_consumers
        }
        for shard_consumer in shard_consumers:
            targets[shard_consumer.consumer.name] = shard_consumer.replay_given_up if replay else shard_consumer.run
        return targets

    def halt() -> None:
        queue.halted.set()
        for shard_consumer in shard_consumers:
            shard_consumer.halted.set()

    distinct = len(workload.valid)
    with (
        JepsenMonitor(run.ledger, sorted(workload.expected), read_count, config.jepsen_interval_s, config.seed) as jm,
        series_monitor,
    ):
        phases = ["main"] + [f"redrive {n + 1}" for n in range(config.redrives)]
        for number, phase in enumerate(phases):  # an extra redrive appends a phase (see below)
            if number > 0:
                _redrive(run, queue, moved_only=number > config.redrives)

            def tick(phase: str = phase) -> None:
                if on_progress is not None:
                    on_progress(phase, len(run.ledger.acknowledged_messages), distinct)

            _run_threads(phase_targets(replay=number > 0), tick, halt)
            if number == len(phases) - 1 and _needs_another_redrive(run, workload, config, stream, redrives=number):
                phases.append(f"redrive {number + 1}")
    for injector in run.injectors:
        injector.enabled = False
    if jm.error is not None:
        raise jm.error
    if series_monitor.error is not None:
        raise series_monitor.error

    run.log.add(
        "situation.bounded_36_digit_step_refused_by_its_bound",
        sum(1 for letter in run.dead_letters.letters() if letter.body in digit_bodies and letter.code in BOUND_CODES),
    )
    run.log.add(
        "situation.sum_over_38_digits_dead_lettered",
        sum(1 for letter in run.dead_letters.letters() if letter.body in precision_bodies and letter.code),
    )
    patterns = _pattern_reads(config, tables, client_factory)
    verdict = judge(
        workload,
        _counters_read_at_once(
            CounterReader(tables.counters, client=client_factory(), hot_keys=config.hot_keys),
            (key for message in workload.valid.values() for key in message.sums),
        ),
        run.dead_letters.letters(),
        given_up_left=sum(len(records) for shard in stream.shards for records in shard.given_up),
        patterns=patterns,
        replayed=frozenset(body for shard in stream.shards for body in shard.ever_given_up),
        read_window=_final_close(config, tables, client_factory, run.clock.now_ms(), run.log),
        read_view=_view_reads(config, tables, client_factory),
        ever_letters=run.dead_letters.ever(),
    )
    archived = None
    if archive is not None:
        archived = judge_archive(
            archive,
            windows=parse_window_spec(config.windows, config.window_retention),
            defaults=parse_counter_defaults(config.counter_defaults, hot_keys),
            views=parse_counter_views(config.counter_views),
            client=client_factory(),
            counters_table=tables.counters,
            patterns=patterns,
            refused_keys=refused_keys(config.seed, config.pattern_keys, config.refused_keys),
            now_ms=run.clock.now_ms(),
            counted=_counted_messages(workload, run.trail, client_factory, tables),
        )
    published = [message for message in workload.valid.values() if message not in workload.setup]
    return ChaosResult(
        config=config,
        events=sum(message.events for message in published),
        messages=len(published),
        publications=len(workload.publications),
        counts=run.log.snapshot(),
        verdict=verdict,
        jepsen_reads=jm.reads,
        jepsen_violations=tuple(jm.violations),
        unexpected_errors=(
            tuple(repr(exc) for exc in run.unexpected)
            + tuple(run.in_flight.self_overlaps)
            + tuple(
                f"the clock jumped over a fenced request in flight ({LANDING_WAIT_S} s)"
                for _ in range(run.clock.late_landings)
            )
        ),
        seconds=time.perf_counter() - started,
        virtual_seconds=run.clock.jumped_ms / 1000,
        wide_items=wide_items(workload, ONE_ADD_NAMES),
        wide_messages=sum(1 for m in published if any(len(c) >= WIDE_MESSAGE_NAMES for c in m.sums.values())),
        series_reads=series_monitor.reads,
        series_read_violations=tuple(series_monitor.violations),
        past_horizon_problems=tuple(past_horizon),
        expired_claim_problems=tuple(expired_claims),
        archive=archived,
        requests_over_limits=tuple(violation for limits in run.limits for violation in limits.violations),
        explanation=explain_wrong_counters(
            workload,
            verdict.wrong_keys,
            run.trail,
            client=client_factory,
            tables=tables,
            marker_ttl_seconds=TTL_SECONDS,
        ),
    )


def _counted_messages(
    workload: Workload, trail: MessageTrail, client_factory: Callable[[], DynamoDBClient], tables: Tables
) -> CountedMessages:
    """Every valid message's id, its marker after the run if it counts (direct, or its journal batch committed),
    and the trail of each of its bodies (a reused id's other content and a re-send's other spelling included).

    The markers are read at once, in ``BatchGetItem`` s of 100 (then the headers their journal batches name): one
    ``GetItem`` per message, one after the other, took most of the full run's time once the run was over. The load
    has ended, so nothing writes a marker while they are read (and DynamoDB Local answers every read consistently).
    """
    client = client_factory()
    markers = DynamoDBCounterStore(client, tables.counters, tables.markers, TTL_SECONDS)
    lookup = DynamoDBCountedLookup(client, tables.counters, tables.markers)
    bodies: dict[str, list[str]] = {}
    for body, message in workload.by_body.items():
        bodies.setdefault(message.message_id, []).append(body)
    found = markers.read_markers(sorted(bodies))
    committed = lookup.counted(
        {message_id: marker.digest or b"" for message_id, marker in found.items() if marker.batch_id is not None}
    )
    counting = {
        message_id: marker for message_id, marker in found.items() if marker.batch_id is None or message_id in committed
    }

    def history(message_id: str) -> list[str]:
        lines: list[str] = []
        for number, body in enumerate(bodies.get(message_id, ())):
            content = workload.by_body[body]
            label = f"body {number}{' (other content)' if content.reused else ''}"
            lines.extend(f"{label}: {line}" for line in trail.of(body))
        return lines

    return CountedMessages(sorted(bodies), counting.get, history)


def _counters_read_at_once(reader: CounterReader, keys: Iterable[str]) -> Callable[[str], dict[str, Decimal]]:
    """(key) -> its all-time counters as ``tally get`` reads them. At the first call, the valid messages' ``keys`` are
    read by the reader's ``get_many`` (``BatchGetItem`` s of 100); any other key (a poison message's) when asked. One
    read per key, one after the other, was a third of the smoke run's time once the load was over."""
    read: dict[str, dict[str, Decimal]] | None = None

    def counters_of(key: str) -> dict[str, Decimal]:
        nonlocal read
        if read is None:
            read = {name: dict(counters.values) for name, counters in reader.get_many(keys).items()}
        return read[key] if key in read else dict(reader.get(key).values)

    return counters_of


def _pattern_reads(config: ChaosConfig, tables: Tables, client_factory: Callable[[], DynamoDBClient]) -> PatternReads:
    """Gauges and distinct counts as ``tally.reader`` returns them to applications, and the markers."""
    reader = CounterReader(tables.counters, client=client_factory(), hot_keys=config.hot_keys)
    markers = DynamoDBCounterStore(client_factory(), tables.counters, tables.markers, TTL_SECONDS)
    return PatternReads(
        gauges=lambda key: reader.get(key).gauges,
        distinct=lambda key: reader.get(key).distinct,
        counted=lambda message_id: markers.read_marker(message_id) is not None,
        journaled=lambda message_id: getattr(markers.read_marker(message_id), "batch_id", None) is not None,
    )


def _final_close(
    config: ChaosConfig, tables: Tables, client_factory: Callable[[], DynamoDBClient], now_ms: int, log: FaultLog
) -> Callable[[str, str], dict[str, Decimal]]:
    """Move what the run left on key items (``tally windows close``, without faults), then read windows as
    ``tally.reader`` does: (key, window id) -> counters."""
    spec = parse_window_spec(config.windows, config.window_retention)
    client = client_factory()
    closed = DynamoDBWindowMover(client, tables.counters, spec).close_all(now_ms)
    log.add("situation.windows_moved_by_final_close", closed.windows)
    reader = CounterReader(tables.counters, client=client, hot_keys=config.hot_keys, windows=spec)

    def read_window(key: str, window: str) -> dict[str, Decimal]:
        name, start = parse_window_id(window)
        return dict(reader.series(key, name, start, start, now_ms=now_ms).windows[0].values)

    return read_window


def _view_reads(
    config: ChaosConfig, tables: Tables, client_factory: Callable[[], DynamoDBClient]
) -> Callable[[str, str, str], dict[tuple[str, ...], dict[str, Decimal]]]:
    """(key, view, window id or ``all``) -> each value's counters, read as ``tally.reader``'s group-by reads them
    (after the final close: wherever an ended window sits)."""
    spec = parse_window_spec(config.windows, config.window_retention)
    reader = CounterReader(
        tables.counters, client=client_factory(), hot_keys=config.hot_keys, windows=spec, views=config.counter_views
    )

    def read_view(key: str, view: str, window: str) -> dict[tuple[str, ...], dict[str, Decimal]]:
        if window == ALL_TIME:
            group = reader.group(key, view)
        else:
            unit, start = parse_window_id(window)
            group = reader.group(key, view, unit, start)
        return {tuple(row.dims.values()): dict(row.counters) for row in group.rows}

    return read_view


def _apply_setup(workload: Workload, run: _Run) -> None:
    """Apply the setup messages (the counters the doomed messages overflow), without faults."""
    if not workload.setup:
        return
    client = run.client_factory()
    pipeline = wire_pipeline(
        client,
        run.tables,
        ConsumerPort(run.dead_letters, 0.0, random.Random(), run.log),
        run.config,
        archive=run.archive_writer(),
        clock=run.clock.now_ms,
    )
    now_ms = run.clock.now_ms()
    records = [SourceRecord(f"setup-{m.message_id}", m.body, now_ms) for m in workload.setup]
    result = pipeline.process(records, now_ms, lambda: run.config.function_timeout_s * 1000)
    if result.failed_record_ids or result.dead_letters or result.figures["MessagesApplied"] != len(records):
        raise RuntimeError(f"the setup messages were not applied: {result}")
    run.ledger.attempt(workload.setup)
    run.ledger.acknowledge(workload.setup)


__all__ = [
    "CHAOS_RETRIES",
    "ChaosResult",
    "PipelineFactory",
    "SeriesReaderFactory",
    "Tables",
    "Workload",
    "run_chaos",
    "series_reader",
    "wire_pipeline",
]
