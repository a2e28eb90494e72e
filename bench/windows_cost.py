"""``python -m bench.windows_cost``: what hour and day windows add to the write cost.

Why: hour and day windows should cost at most 1.3x the all-time-only write units per event on
workload U, packed and single. Since the open windows ride on the key's item and ended ones are moved off
it later (``tally.store.windows``), what windows add is (a) a slightly larger key item in every batch's
write and (b) the moves: about one key-item update and one day-item write per key and day (more when a key
item grows past ``MOVE_AT_BYTES`` first), and one check read per key, container and hour. (b) is paid per
active key-day, not per event, so the ratio depends on how many batches write a key per hour: this bench
measures it over a simulated day at given batch rates.

How: workload U (``bench.workloads``: 1,000 Zipf keys, counters ``units`` and ``cost``, no re-sends) runs
through the real pipeline (``bench.peers.tally_pipeline``, the template's settings) on DynamoDB Local,
billed by ``tally_local.kit.meter``, once with windows off and once with the template's ``hour,day``, on the same
stream. The handler's clock is simulated: batch ``i`` is received and handled at ``START + i x 3600 s /
batches_per_hour`` (events carry no ``ts``: their windows come from that receive time), so a run spans
``hours`` hours and its ended windows are moved, and billed, as in production. After the last batch the
final close moves what is left, as the next day's first batch writing each key would (a ``BatchGetItem`` of
every key item, then the moves, at the next day's first instant), billed too: without it the last day's
moves would go unpaid. Then every window of every key is read back through
``tally.reader`` and compared with what the stream put in it (``exact``), and the all-time values as well.
"""

from __future__ import annotations

import math
import sys
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Final

import click

from bench.peers import lambda_context, metered
from bench.peers.tally_pipeline import TallyCounter
from bench.plan_check import u_records_per_batch
from bench.results import EXACT, console, field, json_options, pair, report
from bench.suite import LAMBDA_TIMEOUT_MS, compare
from bench.workloads import PACK, lambda_event, u_stream
from tally.core.windows import DAY_MS, HOUR_MS
from tally.reader.dynamodb import CounterReader
from tally.runtime import CLIENT_CONFIG
from tally.store.requests import batch_get
from tally.store.schema import item_key
from tally.store.windows import DynamoDBWindowMover
from tally_local.dynamodb_local import DynamoDBLocal

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from mypy_boto3_dynamodb import DynamoDBClient

    from bench.results import Column
    from bench.workloads import Delivery, Stream

START_MS: Final = 4_102_444_800_000
"""2100-01-01T00:00Z: the simulated day's first instant."""
KEYS: Final = 1000


@dataclass(frozen=True, slots=True)
class Config:
    packed: bool
    batch_records: int
    batches_per_hour: int
    hours: int = 24

    @property
    def name(self) -> str:
        return f"{'packed' if self.packed else 'single'}, {self.batch_records:,} records, {self.batches_per_hour}/h"


@dataclass(frozen=True, slots=True)
class Result:
    config: str
    events: int
    batches: int
    hours: int
    write_units_off: float
    """Write units per event, windows off."""
    write_units_on: float
    """Write units per event, hour and day windows on (the batches, their moves and the final close)."""
    close_write_units: float
    """Of ``write_units_on``: the final close's share, per event."""
    read_units_off: float
    read_units_on: float
    windows_moved: int
    window_move_transactions: int
    exact: bool
    """All-time values (both runs) and every hour and day window (windows on) read back exactly."""

    @property
    def ratio(self) -> float:
        return self.write_units_on / self.write_units_off


def default_configs() -> list[Config]:
    """Batch size 100 (the original table's) at one and at several batches an hour, and the template's
    batch size (cut to 6 MB) at one batch an hour: the fewest batches per key and hour, where moves weigh most."""
    return [
        Config(packed=False, batch_records=100, batches_per_hour=1),
        Config(packed=False, batch_records=100, batches_per_hour=12),
        Config(packed=False, batch_records=u_records_per_batch(1), batches_per_hour=1),
        Config(packed=True, batch_records=100, batches_per_hour=1),
        Config(packed=True, batch_records=100, batches_per_hour=6),
        Config(packed=True, batch_records=u_records_per_batch(PACK), batches_per_hour=1),
    ]


def run(ddb: DynamoDBLocal, config: Config, *, seed: int = 20_261_124, keys: int = KEYS) -> Result:
    """Both runs of one configuration, on tables of their own."""
    admin = ddb.client()
    client = ddb.client(CLIENT_CONFIG)
    pack = PACK if config.packed else 1
    batches = config.hours * config.batches_per_hour
    stream = u_stream(batches * config.batch_records * pack, packed=config.packed, keys=keys, seed=seed)
    off = _run_one(client, admin, stream, config, windows=False)
    on = _run_one(client, admin, stream, config, windows=True)
    events = stream.distinct_events
    return Result(
        config=config.name,
        events=events,
        batches=off.batches,
        hours=config.hours,
        write_units_off=off.write_units / events,
        write_units_on=on.write_units / events,
        close_write_units=on.close_write_units / events,
        read_units_off=off.read_units / events,
        read_units_on=on.read_units / events,
        windows_moved=on.windows_moved,
        window_move_transactions=on.move_transactions,
        exact=off.exact and on.exact,
    )


@dataclass(frozen=True, slots=True)
class _Run:
    batches: int
    write_units: float
    read_units: float
    close_write_units: float
    windows_moved: int
    move_transactions: int
    exact: bool


def _run_one(client: DynamoDBClient, admin: DynamoDBClient, stream: Stream, config: Config, *, windows: bool) -> _Run:
    clock = {"now": START_MS}
    peer = TallyCounter(
        client, admin, uuid.uuid4().hex[:10], packed=config.packed, windows=windows, clock=lambda: clock["now"]
    )
    context = lambda_context(LAMBDA_TIMEOUT_MS)
    step_ms = HOUR_MS // config.batches_per_hour
    expected: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    batches = stream.batches(config.batch_records)
    moved = transactions = 0
    with metered(peer, client) as meter:
        for index, batch in enumerate(batches):
            clock["now"] = START_MS + index * step_ms + 1
            response = peer.handle(lambda_event(batch, clock["now"]), context)
            if response["batchItemFailures"]:
                raise RuntimeError(f"{peer.name}: batch {index} reported failures (a bench finding)")
            _expect(expected, stream, batch, clock["now"], peer)
        before_close = meter.usage().write_units
        if windows:
            # The next day's first batches would each read and move their keys' ended windows: do it for
            # every key at once (a BatchGetItem per 100 keys, as the checks read them; not a Scan).
            mover = DynamoDBWindowMover(client, peer.counters_table, peer.settings.declarations.windows)
            next_day = START_MS + math.ceil(len(batches) * step_ms / DAY_MS) * DAY_MS
            raws = batch_get(client, peer.counters_table, [item_key(key) for key in stream.keys])
            closed = mover.move(raws, next_day)
            moved, transactions = closed.windows, closed.transactions
        usage = meter.usage()
        # Read back on the unmetered client, before the tables go.
        exact = compare(stream.expected(), stream.expected(), peer.read_counters(stream.keys)).exact
        if windows:
            exact = exact and _windows_exact(admin, peer, expected, len(batches) * step_ms)
    return _Run(
        batches=len(batches),
        write_units=usage.write_units,
        read_units=usage.read_units,
        close_write_units=usage.write_units - before_close,
        windows_moved=moved + peer.totals.as_dict().get("windows_moved", 0),
        move_transactions=transactions,
        exact=exact,
    )


def _expect(
    expected: dict[tuple[str, str], dict[str, Decimal]],
    stream: Stream,
    batch: Sequence[Delivery],
    received_ms: int,
    peer: TallyCounter,
) -> None:
    """Add a batch's events to the windows of its receive time (the events carry no ``ts``)."""
    for unit in peer.settings.declarations.windows.units:
        window = unit.window_id(unit.start_ms(received_ms))
        for delivery in batch:
            for index in range(delivery.first_event, delivery.first_event + delivery.event_count):
                event = stream.events[index]
                counters = expected[event.key, window]
                counters["units"] += event.units
                counters["cost"] += event.cost


def _windows_exact(
    admin: DynamoDBClient, peer: TallyCounter, expected: dict[tuple[str, str], dict[str, Decimal]], span_ms: int
) -> bool:
    reader = CounterReader(peer.counters_table, client=admin, windows=peer.settings.declarations.windows)
    now = START_MS + span_ms + DAY_MS
    keys = sorted({key for key, _ in expected})
    for key in keys:
        for unit in peer.settings.declarations.windows.units:
            series = reader.series(key, unit.name, START_MS, START_MS + span_ms - 1, now_ms=now)
            for window in series.windows:
                wanted = {n: v for n, v in expected.get((key, unit.window_id(window.start_ms)), {}).items() if v}
                if {n: v for n, v in window.values.items() if v} != wanted:
                    return False
    return True


COLUMNS: Final[list[Column]] = [
    field("config", header="configuration"),
    field("events", ","),
    field("batches"),
    field("write_units_off", ".4f", "WU/event off"),
    field("write_units_on", ".4f", "WU/event on"),
    field("close_write_units", ".4f", "of it: final close"),
    field("ratio", ".3f"),
    pair("read_units_off", "read_units_on", ".4f", "RU/event off / on"),
    EXACT,
]


@click.command()
@json_options
@click.option("--hours", type=click.IntRange(min=2), default=24, show_default=True, help="Simulated hours of traffic.")
@click.option(
    "--only",
    type=click.Choice(["single", "packed"]),
    help="Only single-event or only packed messages.",
)
@click.option("--rate", "rates", type=click.IntRange(min=1), multiple=True, help="Batches per hour (repeatable).")
@click.option("--batch-records", "sizes", type=click.IntRange(min=1), multiple=True, help="Records per batch.")
def main(  # noqa: PLR0917 - click passes each option positionally
    as_json: bool, json_out: Path | None, hours: int, only: str | None, rates: tuple[int, ...], sizes: tuple[int, ...]
) -> None:
    """Measure windows off vs hour+day over a simulated day; exit 1 if any count is not exact."""
    configs = [
        Config(c.packed, c.batch_records, c.batches_per_hour, hours)
        for c in default_configs()
        if (only is None or c.packed == (only == "packed"))
        and (not rates or c.batches_per_hour in rates)
        and (not sizes or c.batch_records in sizes)
    ]
    if rates and not configs:
        configs = [
            Config(packed, size, rate, hours)
            for packed in ((only == "packed",) if only else (False, True))
            for size in sizes or (100,)
            for rate in rates
        ]
    progress = console(stderr=as_json)
    results = []
    with DynamoDBLocal() as ddb:
        for config in configs:
            progress.print(f"running {config.name} over {config.hours} h ...")
            results.append(run(ddb, config))
    rows = [{**asdict(result), "ratio": result.ratio} for result in results]
    title = "hour and day windows: write units per event, windows on vs off (workload U, simulated day)"
    parameters = {"configurations": len(configs)}
    sys.exit(report("windows-cost", title, COLUMNS, rows, parameters, json_out=json_out, as_json=as_json))


if __name__ == "__main__":
    main()
