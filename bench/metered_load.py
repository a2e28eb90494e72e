"""One metered run of single-event messages through the handlers' wiring, for the pattern benchmarks.

``bench.patterns``, ``bench.bounded``, ``bench.distinct`` and ``bench.resets`` each measure a load shape
beside plain sums; what they share is here: fresh tables from the template, the handlers' own wiring
(``tally.runtime.wire_pipeline``) with the deployment's declarations, batches of ``BATCH`` records, and
``tally_local.kit.meter`` billing every call from item sizes. Each benchmark builds its bodies and judges the counts.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final

from bench.deployment import default_settings
from bench.peers.tables import tally_tables
from bench.peers.tally_pipeline import RecordingDeadLetterQueue
from bench.results import EXACT, beside, field, report
from tally.core.model import SourceRecord
from tally.reader.dynamodb import CounterReader
from tally.runtime import CLIENT_CONFIG, wire_pipeline
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.kit.meter import DynamoDBMeter

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any

    from mypy_boto3_dynamodb import DynamoDBClient

    from bench.results import Column, Row
    from tally.core.model import DeadLetter
    from tally.cost.capacity import Item
    from tally.pipeline import BatchResult
    from tally_local.kit.meter import Usage

    Measure = Callable[[str, int, int, DynamoDBClient, DynamoDBClient], Row]
    """One load measured: (its name, events, keys, the metered client, the admin client) -> its row."""

BATCH: Final = 100
NOW_MS: Final = time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class MeteredRun:
    """What one load cost and left behind."""

    usage: Usage
    seconds: float
    results: tuple[BatchResult, ...]
    dead_letters: tuple[DeadLetter, ...]
    reader: CounterReader
    """Reads the run's counters table (on the uninstrumented client)."""

    @property
    def failed(self) -> int:
        return sum(len(result.failed_record_ids) for result in self.results)

    @property
    def clean(self) -> bool:
        """Every record applied and none dead-lettered: the first condition of an exact count."""
        return not self.failed and not self.dead_letters

    def per_event(self, events: int) -> dict[str, float]:
        """What every load shape reports: write units and requests per event, and events per second."""
        return {
            "write_units_per_event": self.usage.write_units / events,
            "requests_per_event": self.usage.requests / events,
            "events_per_s": events / self.seconds,
        }


def fresh_id() -> str:
    """A prefix for one run's message ids and table names."""
    return uuid.uuid4().hex[:8]


def run_metered(
    bodies: Sequence[str],
    declared: Mapping[str, str],
    client: DynamoDBClient,
    admin: DynamoDBClient,
    *,
    tag: str,
    remaining_ms: Callable[[], int] = lambda: 60_000,
    classify: Callable[[str, Item], str] | None = None,
) -> MeteredRun:
    """Process ``bodies`` in batches of ``BATCH`` under ``declared`` (``TALLY_*`` variables) on new tables;
    ``classify`` (``"counters"`` or ``"markers"``, an item's primary key -> its class) adds the writes up per class of
    item (``Usage.by_class``)."""
    counters, markers = tally_tables(admin, tag, fresh_id())
    dead_letters = RecordingDeadLetterQueue()
    pipeline = wire_pipeline(client, dead_letters, default_settings(counters, markers, dict(declared)))
    meter = DynamoDBMeter()
    for table, key_names, alias in ((counters, ["pk", "sk"], "counters"), (markers, ["id"], "markers")):
        meter.track(table, key_names, alias, classify=None if classify is None else partial(classify, alias))
    results = []
    with meter.attached(client):
        started = time.perf_counter()
        for first in range(0, len(bodies), BATCH):
            batch = bodies[first : first + BATCH]
            records = [SourceRecord(f"r{first + i}", body, NOW_MS) for i, body in enumerate(batch)]
            results.append(pipeline.process(records, NOW_MS, remaining_ms))
        seconds = time.perf_counter() - started
    return MeteredRun(
        meter.usage(), seconds, tuple(results), tuple(dead_letters.letters), CounterReader(counters, client=admin)
    )


def measure_each(ddb: DynamoDBLocal, loads: Iterable[str], measure: Measure, events: int, keys: int) -> dict[str, Row]:
    """Each of ``loads`` measured on ``ddb`` (through the metered client; tables made with the admin one)."""
    admin, client = ddb.client(), ddb.client(CLIENT_CONFIG)
    return {load: measure(load, events, keys, client, admin) for load in loads}


def measure_each_fresh(loads: Iterable[str], measure: Measure, args: argparse.Namespace) -> list[Row]:
    """Each of ``loads`` measured at the size the options give, on a DynamoDB Local of its own."""
    with DynamoDBLocal() as ddb:
        return list(measure_each(ddb, loads, measure, args.events, args.keys).values())


def report_beside_sums(
    experiment: str,
    args: argparse.Namespace,
    rows: Sequence[Row],
    columns: Sequence[Column],
    *,
    label: str = "pattern",
    baseline: Callable[[Row], int] = lambda _: 0,
    subject: str = "single-event messages",
    parameters: Mapping[str, Any] | None = None,
) -> int:
    """The table of a pattern benchmark: each row's ``label``, its write units per event beside those of its
    ``baseline`` row (by default the first: plain sums), ``columns``, and whether it counted exactly."""

    def base(row: Row) -> float:
        return float(rows[baseline(row)]["write_units_per_event"])

    table = [field(label), beside("write_units_per_event", base, "write units/event"), *columns, EXACT]
    title = f"{args.events:,} {subject} over {args.keys} keys, batches of {BATCH}"
    size = parameters if parameters is not None else {"events": args.events, "keys": args.keys}
    return report(experiment, title, table, rows, size, json_out=args.json_out)
