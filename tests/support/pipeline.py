"""Build the production pipeline around test tables, with a recording dead-letter queue."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tally.commit.applier import Applier, RetryPolicy
from tally.core.bounds import NO_BOUNDS, CounterBounds
from tally.core.declarations import NO_DECLARATIONS, Declarations
from tally.core.defaults import NO_DEFAULTS, CounterDefaults
from tally.core.limits import TRANSACT_MAX_ACTIONS, WIRE_LIMITS
from tally.core.sharding import HotKeys
from tally.core.thresholds import NO_THRESHOLDS, CounterThresholds
from tally.core.views import NO_VIEWS, CounterViews
from tally.core.windows import WindowSpec
from tally.core.write import DirectWrite, Seen
from tally.core.write_planner import plan_write
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.post_commit import post_commit_steps
from tally.post_commit.archive import wall_clock_ms
from tally.store.distinct import DynamoDBDistinctStore
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.expressions import counter_limit_for
from tally.store.gauges import DynamoDBGaugeStore
from tally.store.journal import DynamoDBJournal
from tally.store.windows import DynamoDBWindowMover

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.commit.fates import ApplyOutcome
    from tally.commit.marker_reads import MarkerReadGate
    from tally.core.model import DeadLetter
    from tally.core.plan import Chunk
    from tally.core.write_planner import WritePlanner
    from tally.post_commit import ArchiveWriter, WindowMover

TTL_DAYS = 35
FAST_RETRIES = RetryPolicy(base_delay_s=0.001, max_delay_s=0.01, max_attempts=8, reserve_ms=1_000)


@dataclass
class RecordingDeadLetterQueue:
    """An in-memory dead-letter port; ``refuse`` names record ids it will not accept."""

    letters: list[DeadLetter] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, letters: Sequence[DeadLetter]) -> frozenset[str]:
        refused = frozenset(letter.record.record_id for letter in letters if letter.record.record_id in self.refuse)
        with self._lock:
            self.letters.extend(letter for letter in letters if letter.record.record_id not in refused)
        return refused

    def codes(self) -> dict[str, str]:
        """Source record id -> error code of every accepted letter."""
        return {letter.record.record_id: str(letter.rejection.code) for letter in self.letters}


def plenty() -> int:
    """An invocation's remaining time when it never runs short: a minute."""
    return 60_000


def make_store(
    client: DynamoDBClient, counters_table: str, markers_table: str, *, notifications_table: str | None = None
) -> DynamoDBCounterStore:
    """The counter store on the test's tables. It carries no declarations: the pipeline's planner decides each write
    from those ``make_pipeline`` is given."""
    return DynamoDBCounterStore(
        client, counters_table, markers_table, TTL_DAYS * 86_400, notifications_table=notifications_table
    )


def make_pipeline(
    store: DynamoDBCounterStore,
    dead_letters: RecordingDeadLetterQueue | None = None,
    policy: RetryPolicy = FAST_RETRIES,
    *,
    use_journal: bool = True,
    windows: WindowSpec | None = None,
    hot_keys: HotKeys | None = None,
    max_actions: int = TRANSACT_MAX_ACTIONS,
    marker_read_gate: MarkerReadGate | None = None,
    counter_defaults: CounterDefaults = NO_DEFAULTS,
    counter_bounds: CounterBounds = NO_BOUNDS,
    counter_thresholds: CounterThresholds = NO_THRESHOLDS,
    write_planner: WritePlanner = plan_write,
    with_distinct: bool = True,
    write_concurrency: int = 1,
    window_mover: WindowMover | None = None,
    move_windows: bool = True,
    rng: random.Random | None = None,
    archive: ArchiveWriter | None = None,
    clock: Callable[[], int] | None = None,
    views: CounterViews = NO_VIEWS,
) -> tuple[BatchPipeline, RecordingDeadLetterQueue]:
    """The production wiring; ``max_actions`` and ``marker_read_gate`` (a warm container's) are for tests.

    The deployment's declarations (``windows``, ``hot_keys``, ``counter_defaults``, ``counter_bounds``,
    ``counter_thresholds``) go to the decoder, the aggregate and the write planner as ``tally.runtime`` hands them;
    ``write_planner`` may be a broken variant.

    ``write_concurrency`` is 1 here (a round's direct transactions one at a time, so tests that count or
    order requests stay deterministic); the handlers' wiring takes ``TALLY_WRITE_CONCURRENCY`` (default 4).
    With hour or day windows, ended windows are moved off key items after each batch as in production
    (``tally.store.windows``), by ``window_mover`` if given; ``move_windows=False`` leaves them there. ``rng``
    draws each batch's hot-key shard (production's: a random one). ``archive`` writes the archive (None: off),
    its records' ``archived_ms`` read from ``clock`` (the wall clock by default).
    """
    dlq = dead_letters if dead_letters is not None else RecordingDeadLetterQueue()
    declared = Declarations(
        windows=windows or WindowSpec(),
        hot_keys=hot_keys or HotKeys(),
        defaults=counter_defaults,
        bounds=counter_bounds,
        thresholds=counter_thresholds,
        views=views,
    )
    settings = PipelineSettings(limits=WIRE_LIMITS, dedup_horizon_ms=TTL_DAYS * 86_400_000, declarations=declared)
    journal = DynamoDBJournal(
        store.client,
        store.counters_table,
        store.markers_table,
        store.marker_ttl_seconds,
        declared.defaults,
        notifications_table=store.notifications_table or None,
    )
    applier = Applier(
        store,
        journal,
        policy=policy,
        sleep=lambda _: None,
        use_journal=use_journal,
        max_actions=max_actions,
        marker_read_gate=marker_read_gate,
        counter_limit=counter_limit_for(declared.defaults),
        declarations=declared,
        write_planner=write_planner,
        write_concurrency=write_concurrency,
    )
    gauges = DynamoDBGaugeStore(store.client, store.counters_table)
    distinct = DynamoDBDistinctStore(store.client, store.counters_table, declared.hot_keys) if with_distinct else None
    mover = window_mover
    if mover is None and move_windows and any(unit.on_key_item for unit in declared.windows.units):
        mover = DynamoDBWindowMover(
            store.client, store.counters_table, declared.windows, thresholds=declared.thresholds
        )
    steps = post_commit_steps(
        declared.windows,
        gauges=gauges,
        distinct=distinct,
        mover=mover,
        archive=archive,
        clock=clock or wall_clock_ms,
    )
    return BatchPipeline(applier, dlq, settings, steps=steps, rng=rng), dlq


def write_chunk(
    store: DynamoDBCounterStore, chunk: Chunk, now_ms: int, declarations: Declarations = NO_DECLARATIONS
) -> None:
    """One chunk's direct transaction as the protocol sends it (planned by the core, then encoded by the store),
    for tests that write without a pipeline: a chunk whose write must read first cannot be written so."""
    write = plan_write(chunk, declarations, Seen(), now_ms=now_ms)
    assert isinstance(write, DirectWrite), write
    store.write(write)


@dataclass(frozen=True)
class Landed:
    """A fake applier's commit with nothing left to land (``tally.pipeline.CommitPort``): ``outcome`` is final."""

    outcome: ApplyOutcome
    landing: frozenset[str] = frozenset()

    @property
    def counted(self) -> ApplyOutcome:
        return self.outcome

    def land(self) -> ApplyOutcome:
        return self.outcome
