"""One hot key under concurrent consumers, with and without write sharding, on DynamoDB Local.

DynamoDB Local serialises transactions and never reports ``TransactionConflict``; DynamoDB does, when
two transactions touch the same item at once. The kit's ``ConflictEmulator`` (``tally_local.kit.conflicts``)
restores that rule at the botocore layer: a ``TransactWriteItems`` whose items overlap a transaction still in
flight (on any consumer) is cancelled with ``TransactionConflict``, shaped as the service reports it, and
tally's applier retries it with backoff like any conflict. Everything else is the production code.

Run: ``python -m bench hot-key [--events 20000] [--consumers 4] [--shards 8] [--json-out FILE]`` (``make
bench-hot-key``). Prints conflicts per batch and events per second for both runs and their ratio; checks exact counts.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import asdict, dataclass
from decimal import Decimal
from queue import Empty, Queue
from typing import TYPE_CHECKING, Final

from bench.peers.tables import drop_tables, tally_tables
from bench.results import field, load_options, report
from tally.commit.applier import Applier, RetryPolicy
from tally.core.declarations import Declarations
from tally.core.limits import WIRE_LIMITS
from tally.core.model import SourceRecord
from tally.core.sharding import HotKeys, parse_hot_keys
from tally.pipeline import BatchPipeline, PipelineSettings
from tally.reader.store_view import read_counters
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import DynamoDBJournal
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.kit.conflicts import ConflictEmulator

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bench.results import Column
    from tally.core.model import DeadLetter

TTL_S = 35 * 86_400
SENT_MS = 4_102_444_800_000
HOT_KEY = "page:/home"


class _DropDeadLetters:
    def send(self, letters: Sequence[DeadLetter]) -> frozenset[str]:
        raise AssertionError(f"unexpected dead letters: {[letter.rejection for letter in letters]}")


@dataclass(frozen=True)
class RunFigures:
    label: str
    events: int
    batches: int
    conflicts: int
    transactions: int
    seconds: float
    counted: Decimal

    @property
    def conflicts_per_batch(self) -> float:
        return self.conflicts / self.batches

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds


def run_case(
    ddb: DynamoDBLocal, label: str, hot: HotKeys, *, events: int, consumers: int, batch_size: int = 100
) -> RunFigures:
    """Feed ``events`` single-event messages on one key to ``consumers`` concurrent pipelines."""
    client = ddb.client()
    counters, markers = tally_tables(client, "hot", uuid.uuid4().hex[:8])
    emulator = ConflictEmulator()
    batches: Queue[list[SourceRecord]] = Queue()
    for start in range(0, events, batch_size):
        batches.put(
            [
                SourceRecord(f"r{i}", f'{{"id":"{label}-{i}","key":"{HOT_KEY}","delta":1}}', SENT_MS)
                for i in range(start, min(events, start + batch_size))
            ]
        )
    batch_count = batches.qsize()
    errors: list[BaseException] = []

    def consume() -> None:
        consumer_client = ddb.client()
        emulator.attach(consumer_client)
        store = DynamoDBCounterStore(consumer_client, counters, markers, TTL_S)
        journal = DynamoDBJournal(consumer_client, counters, markers, TTL_S)
        policy = RetryPolicy(base_delay_s=0.01, max_delay_s=0.2, max_attempts=50, reserve_ms=0)
        pipeline = BatchPipeline(
            Applier(store, journal, policy=policy, declarations=Declarations(hot_keys=hot)),
            _DropDeadLetters(),
            PipelineSettings(WIRE_LIMITS, TTL_S * 1000, declarations=Declarations(hot_keys=hot)),
        )
        while True:
            try:
                batch = batches.get_nowait()
            except Empty:
                return
            try:
                pending = batch
                while pending:  # what a consumer could not apply comes back, as SQS would redeliver it
                    failed = set(pipeline.process(pending, SENT_MS + 1000, lambda: 60_000).failed_record_ids)
                    pending = [record for record in pending if record.record_id in failed]
            except BaseException as exc:
                errors.append(exc)
                return

    started = time.perf_counter()
    threads = [threading.Thread(target=consume) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    counted = read_counters(DynamoDBCounterStore(client, counters, markers, TTL_S), HOT_KEY, hot).get(
        "count", Decimal(0)
    )
    drop_tables(client, [counters, markers])
    return RunFigures(label, events, batch_count, emulator.conflicts, emulator.transactions, seconds, counted)


def compare(ddb: DynamoDBLocal, events: int, consumers: int, shards: int) -> tuple[RunFigures, RunFigures]:
    plain = run_case(ddb, "unsharded", HotKeys(), events=events, consumers=consumers)
    sharded = run_case(
        ddb, f"{shards}-shards", parse_hot_keys(f"{HOT_KEY}={shards}"), events=events, consumers=consumers
    )
    return plain, sharded


COLUMNS: Final[list[Column]] = [
    field("label", header="case"),
    field("events", ","),
    field("batches", ","),
    field("conflicts_per_batch", ".2f", "conflicts/batch"),
    field("transactions", ","),
    field("events_per_second", ",.0f", "events/s"),
    ("exact", lambda row: "yes" if row["exact"] else f"NO ({row['counted']})"),
]


def main() -> int:
    parser = load_options(
        "one hot key under concurrent consumers, with and without write sharding", events=20_000, keys=None
    )
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    with DynamoDBLocal() as ddb:
        plain, sharded = compare(ddb, args.events, args.consumers, args.shards)
    rows = [
        {
            **asdict(run),
            "counted": int(run.counted),
            "conflicts_per_batch": run.conflicts_per_batch,
            "events_per_second": run.events_per_second,
            "exact": run.counted == run.events,
        }
        for run in (plain, sharded)
    ]
    note = (
        f"sharded vs unsharded: {sharded.events_per_second / plain.events_per_second:.2f}x events/s, "
        f"conflicts per batch {plain.conflicts_per_batch:.2f} -> {sharded.conflicts_per_batch:.2f}"
    )
    title = "one hot key, concurrent consumers (DynamoDB Local + conflict emulation)"
    parameters = {"events": args.events, "consumers": args.consumers, "shards": args.shards}
    return report("hot-key", title, COLUMNS, rows, parameters, json_out=args.json_out, notes=[note])


if __name__ == "__main__":
    raise SystemExit(main())
