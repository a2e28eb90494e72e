"""Peers 3 and 4, tally: the real batch pipeline, fed single-event or packed messages.

``handle`` is ``tally.handlers.sqs.handler`` without its Powertools logger, metrics and tracer
decorators (the other peers log nothing either): read the clock once, turn the event into records, run
``BatchPipeline.process``, answer with the records to redeliver. The pipeline is the handlers' own
wiring (``tally.runtime.wire_pipeline``), from the settings a default deployment of ``template.yaml``
runs with (``bench.deployment``), on the metered client and with a dead-letter port that keeps the
letters in memory.

By default the time windows are switched off (``TALLY_WINDOWS`` empty): the peers count all-time totals
only, and so does tally then. ``windows=True`` keeps the template's default windows (more counter items
per key, each written once per batch).

``fenced`` picks how journal batches are applied: None runs what the settings say, that is the template's
``FencedApply`` default unless ``overrides`` sets ``TALLY_FENCED_APPLY`` (what ``make bench`` compares); True or False
forces it (the experiments that set the two paths side by side).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any

from bench.deployment import default_settings
from bench.peers.tables import drop_tables, tally_tables, template_definitions
from tally.config import WINDOWS
from tally.reader.store_view import read_counters
from tally.runtime import wire_pipeline
from tally.sources.sqs import records_from_event
from tally.store.dynamodb import DynamoDBCounterStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from decimal import Decimal

    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient

    from tally.core.model import DeadLetter
    from tally.cost.capacity import Item
    from tally.pipeline import BatchResult
    from tally_local.kit.meter import DynamoDBMeter


@dataclass
class RecordingDeadLetterQueue:
    """The dead-letter port, in memory: a benchmark workload has no poison, so any letter is a finding."""

    letters: list[DeadLetter] = field(default_factory=list)

    def send(self, letters: Sequence[DeadLetter]) -> frozenset[str]:
        self.letters.extend(letters)
        return frozenset()


@dataclass
class PipelineTotals:
    """``BatchResult`` figures summed over the run (the pipeline's own account of what it did)."""

    batches: int = 0
    records: int = 0
    messages_applied: int = 0
    events_applied: int = 0
    duplicates_in_batch: int = 0
    already_applied: int = 0
    dead_letters: int = 0
    failed_records: int = 0
    transactions: int = 0
    retries: int = 0
    windows_moved: int = 0
    """Ended windows moved off key items after the batches."""

    def add(self, result: BatchResult) -> None:
        self.batches += 1
        self.records += result.figures["RecordsReceived"]
        self.messages_applied += result.figures["MessagesApplied"]
        self.events_applied += result.figures["EventsApplied"]
        self.duplicates_in_batch += result.figures["DuplicatesInBatch"]
        self.already_applied += result.figures["DuplicatesAlreadyApplied"]
        self.dead_letters += len(result.dead_letters)
        self.failed_records += len(result.failed_record_ids)
        self.transactions += result.figures["Transactions"]
        self.retries += result.figures["TransactionRetries"]
        self.windows_moved += result.figures["WindowsMoved"]

    def as_dict(self) -> dict[str, int]:
        return {item.name: getattr(self, item.name) for item in fields(self)}


class TallyCounter:
    """tally's SQS handler over fresh tables built from ``template.yaml``."""

    def __init__(
        self,
        client: DynamoDBClient,
        admin: DynamoDBClient,
        suffix: str,
        *,
        packed: bool,
        windows: bool = False,
        variant: str = "",
        overrides: Mapping[str, str] | None = None,
        clock: Callable[[], int] | None = None,
        fenced: bool | None = False,
        classify: Callable[[str, Item], str] | None = None,
    ) -> None:
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        """The handler's clock (epoch ms): ``bench.windows_cost`` runs a simulated day through it."""
        self._classify = classify
        """``counters`` or ``markers``, an item's primary key -> its class: the meter adds writes up per class."""
        self.name = f"tally-{'packed' if packed else 'single'}{'-windows' if windows else ''}{variant}"
        self._admin = admin
        definitions = template_definitions()
        self.counters_table, self.markers_table = tally_tables(admin, "tally", suffix)
        self.settings = default_settings(
            self.counters_table, self.markers_table, {**({} if windows else {WINDOWS: ""}), **(overrides or {})}
        )
        self._key_names = {
            table: [key.attribute_name for key in sorted(definitions[logical].key_schema, key=_hash_first)]
            for table, logical in ((self.counters_table, "CountersTable"), (self.markers_table, "MarkersTable"))
        }
        self._dead_letters = RecordingDeadLetterQueue()
        self.fenced = self.settings.fenced_apply if fenced is None else fenced
        """Whether journal batches are applied by fenced single-item writes (the write floor depends on it)."""
        self._pipeline = wire_pipeline(client, self._dead_letters, self.settings, fenced=self.fenced)
        self.totals = PipelineTotals()

    @property
    def items_per_key(self) -> int:
        """Counter items one key's events write per batch: its own item (which holds the open hour and day
        windows) and one per minute window."""
        return 1 + sum(1 for unit in self.settings.declarations.windows.units if not unit.on_key_item)

    def handle(self, event: Mapping[str, Any], context: LambdaContext) -> Mapping[str, Any]:
        now_ms = self._clock()
        result = self._pipeline.process(records_from_event(event), now_ms, context.get_remaining_time_in_millis)
        self.totals.add(result)
        return {"batchItemFailures": [{"itemIdentifier": record_id} for record_id in result.failed_record_ids]}

    @property
    def dead_letters(self) -> int:
        return len(self._dead_letters.letters)

    def read_counters(self, keys: Iterable[str]) -> dict[str, dict[str, Decimal]]:
        store = DynamoDBCounterStore(
            self._admin, self.counters_table, self.markers_table, self.settings.marker_ttl_seconds
        )
        return {key: read_counters(store, key, self.settings.declarations.hot_keys) for key in keys}

    def track(self, meter: DynamoDBMeter) -> None:
        aliases = {self.counters_table: "counters", self.markers_table: "markers"}
        for table, names in self._key_names.items():
            alias = aliases[table]
            classify = None if self._classify is None else partial(self._classify, alias)
            meter.track(table, names, alias, classify=classify)

    def drop(self) -> None:
        drop_tables(self._admin, [self.counters_table, self.markers_table])


def _hash_first(key: Any) -> int:
    return 0 if key.key_type == "HASH" else 1
