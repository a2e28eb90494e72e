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
from typing import TYPE_CHECKING, Final

from bench.deployment import default_settings
from bench.peers.tables import tally_tables
from bench.peers.tally_pipeline import RecordingDeadLetterQueue
from tally.core.model import SourceRecord
from tally.reader.dynamodb import CounterReader
from tally.runtime import wire_pipeline
from tally_local.kit.meter import DynamoDBMeter

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.core.model import DeadLetter
    from tally.pipeline import BatchResult
    from tally_local.kit.meter import Usage

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
) -> MeteredRun:
    """Process ``bodies`` in batches of ``BATCH`` under ``declared`` (``TALLY_*`` variables) on new tables."""
    counters, markers = tally_tables(admin, tag, fresh_id())
    dead_letters = RecordingDeadLetterQueue()
    pipeline = wire_pipeline(client, dead_letters, default_settings(counters, markers, dict(declared)))
    meter = DynamoDBMeter()
    meter.track(counters, ["pk", "sk"], "counters")
    meter.track(markers, ["id"], "markers")
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
