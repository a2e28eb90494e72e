"""``python -m bench.plan_check``: ``tally plan``'s predictions against measured runs.

Why: a planner that tells users their bill is only worth its agreement with what tally really writes.
For each configuration (single-event or packed messages, the template's windows on or off, batches of
10, 100 and 700 records) this runs workload U (``bench.workloads``: Zipf keys, two counters) through the
real pipeline on DynamoDB Local (``bench.peers.tally_pipeline``), billed by ``tally_local.kit.meter``, and asks
``tally.cost.model`` for the same traffic description. The model never sees the measured stream: it
draws its own batches with its own seed. A configuration PASSes when the predicted write units per event
are within 10% of the measured; read units are printed beside them, not judged (the measured run's
marker-read gate warms up for 10 batches per container, which the model amortises to nothing).

``--numbered`` runs single-event messages under the producer library's numbered ids
(``<session>.<seq>``: 16 consecutive messages share a marker item) beside the same stream under random ids,
at batches of 100 and at the template's default (``BatchSize`` 10,000, which Lambda's 6 MB payload cuts
to 5,504 single-event records), windows off and on, and the naive peer (one ``ADD`` per event, not exact)
on the same stream: the target is <= 1.3 write units per event with numbered ids.

Hour and day windows ride on the key's item; the runs last minutes, so no window ends and none
is moved: the model is asked for the batches alone (``simulate(moves=False)``). ``--windows`` runs a
simulated day instead (``bench.windows_cost``: the batches, the moves and the final close) and checks the
model with its moves at the same rate.

The streams carry no producer re-sends here (``Stream.without_resends``): a re-send costs reads, not
writes, and a re-send the gate lets through costs a cancelled transaction, which is the suite's subject.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import click

from bench.peers.naive import NaiveCounter
from bench.peers.tally_pipeline import TallyCounter
from bench.results import console, field, json_options, pair, report
from bench.suite import run_peer
from bench.workloads import PACK, u_stream
from tally.core.limits import LAMBDA_PAYLOAD_MAX_BYTES
from tally.cost.model import MAX_BATCH_RECORDS, Traffic, simulate
from tally.runtime import CLIENT_CONFIG
from tally.store.pages import encode_page
from tally_local.dynamodb_local import DynamoDBLocal

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from bench.results import Column, Row
    from tally.core.aggregate import Totals

TOLERANCE: Final = 0.10
KEY_BYTES: Final = len("usage:tenant-0000")
"""``bench.workloads`` names U's keys ``usage:tenant-NNNN``."""


def u_traffic(
    events_per_message: int = 1, *, windows: bool, keys: int = 1000, events_per_second: float = 1.0, **more: Any
) -> Traffic:
    """U as ``tally.cost.model`` describes traffic: two counters (``units``, ``cost``), U's key names, the
    template's windows (hour, day) or none. The units per event do not depend on the rate: one a second."""
    windowed = ("hour", "day") if windows else ()
    return Traffic(
        events_per_second,
        keys,
        events_per_message=events_per_message,
        counters=2,
        key_bytes=KEY_BYTES,
        windows=windowed,
        **more,
    )


def u_records_per_batch(events_per_message: int) -> int:
    """The most records of U one batch holds: the template's ``BatchSize`` (10,000) as Lambda's 6 MB payload cuts it
    (``Traffic.record_bytes``)."""
    return min(MAX_BATCH_RECORDS, LAMBDA_PAYLOAD_MAX_BYTES // u_traffic(events_per_message, windows=False).record_bytes)


@dataclass(frozen=True, slots=True)
class Config:
    packed: bool
    windows: bool
    batch_size: int
    pack: int = PACK
    """Events per packed message (ignored for single-event messages)."""
    numbered: bool = False
    """The producer library's numbered ids (block markers) instead of random ones."""

    @property
    def name(self) -> str:
        kind = "single" if not self.packed else "packed" if self.pack == PACK else f"packed {self.pack:,}"
        ids = ", numbered ids" if self.numbered else ""
        return f"{kind}{ids}, windows {'on' if self.windows else 'off'}, {self.batch_size}"

    @property
    def events_per_message(self) -> int:
        return self.pack if self.packed else 1


HIGH_VOLUME: Final = (
    Config(packed=True, windows=False, batch_size=78, pack=1000),
    Config(packed=True, windows=True, batch_size=78, pack=1000),
)
"""The high-volume settings: what ``tally plan`` recommends for 10,000 events/s of 1,000-event messages on
1,000 Zipf keys (the producer's ``max_keys_per_message`` raised): 78 records, the most Lambda's 6 MB
payload holds (``Traffic.record_bytes``); the target is <= 0.03 write units per event, windows off."""


NUMBERED: Final = tuple(
    Config(packed=False, windows=windows, batch_size=size, numbered=numbered)
    for windows in (False, True)
    for size in (100, u_records_per_batch(1))
    for numbered in (True, False)
)
"""Single-event messages, numbered ids beside random ids, at 100 records and at the defaults."""


@dataclass(frozen=True, slots=True)
class Check:
    """One configuration: what the model predicted and what the run measured."""

    config: str
    events: int
    batches: int
    predicted_write_units: float
    measured_write_units: float
    predicted_read_units: float
    measured_read_units: float
    exact: bool

    @property
    def ratio(self) -> float:
        return self.predicted_write_units / self.measured_write_units

    @property
    def passed(self) -> bool:
        return self.exact and abs(self.ratio - 1) <= TOLERANCE

    def row(self) -> Row:
        return {**asdict(self), "ratio": self.ratio, "passed": self.passed}


PREDICTED_MEASURED: Final[list[Column]] = [
    field("config", header="configuration"),
    field("events", ","),
    field("batches"),
    field("predicted_write_units", ".4f", "predicted WU/event"),
    field("measured_write_units", ".4f", "measured WU/event"),
    field("ratio", ".3f"),
]
"""The columns of a check, in this table and in ``bench.cost_chart``'s."""


def _verdict(row: Row) -> str:
    if "passed" not in row:
        return "-"  # the naive peer's row: nothing was predicted for it
    return "PASS" if row["passed"] else "FAIL" if row["exact"] else "FAIL (count not exact)"


COLUMNS: Final[list[Column]] = [
    *PREDICTED_MEASURED,
    pair("predicted_read_units", "measured_read_units", ".4f", "RU/event predicted / measured"),
    ("verdict", _verdict),
]


def configs(batch_sizes: Sequence[int] = (10, 100, 700), pack: int = PACK) -> list[Config]:
    return [
        Config(packed, windows, size, pack)
        for packed in (False, True)
        for windows in (False, True)
        for size in batch_sizes
    ]


def run_checks(
    ddb: DynamoDBLocal,
    *,
    keys: int = 1000,
    min_events: int = 20_000,
    min_batches: int = 2,
    batch_sizes: Sequence[int] = (10, 100, 700),
    seed: int = 20_261_124,
    pack: int = PACK,
    progress: Callable[[str], None] = lambda _: None,
    only: Sequence[Config] | None = None,
) -> list[Check]:
    """Every configuration (or ``only`` these), measured on ``ddb`` and predicted by the model."""
    admin = ddb.client()
    client = ddb.client(CLIENT_CONFIG)
    checks = []
    for config in configs(batch_sizes, pack) if only is None else only:
        progress(config.name)
        per_batch = config.batch_size * config.events_per_message
        batches = max(min_batches, math.ceil(min_events / per_batch))
        stream = u_stream(
            batches * per_batch, packed=config.packed, keys=keys, seed=seed, pack=config.pack, numbered=config.numbered
        )
        peer = partial(TallyCounter, packed=config.packed, windows=config.windows, fenced=True)
        run = run_peer(peer, stream, client=client, admin=admin, batch_size=config.batch_size)
        traffic = u_traffic(config.events_per_message, windows=config.windows, keys=keys, numbered_ids=config.numbered)
        # The run lasts minutes, within an hour: it moves no ended windows, so they are not priced here
        # (``--windows`` measures them over a simulated day).
        predicted = simulate(
            traffic, config.batch_size, batches=batches, seed=seed + 1, page_bytes=store_page_bytes, moves=False
        )
        checks.append(
            Check(
                config=config.name,
                events=run.events,
                batches=run.batches,
                predicted_write_units=predicted.write_units,
                measured_write_units=run.write_units_per_event,
                predicted_read_units=predicted.read_units,
                measured_read_units=run.read_units_per_event,
                exact=run.correctness.exact,
            )
        )
    return checks


def naive_write_units(
    ddb: DynamoDBLocal, *, keys: int = 1000, min_events: int = 20_000, batch_size: int = 100, seed: int = 20_261_124
) -> float:
    """Write units per event of the naive peer (one ``UpdateItem ADD`` per event: not exact under faults) on
    the same single-event stream, metered the same way: what the numbered-ids target is measured against."""
    stream = u_stream(max(min_events, 2 * batch_size), packed=False, keys=keys, seed=seed)
    run = run_peer(NaiveCounter, stream, client=ddb.client(CLIENT_CONFIG), admin=ddb.client(), batch_size=batch_size)
    return run.write_units_per_event


def store_page_bytes(increments: Totals) -> int:
    """A journal page as the store encodes it (the model bills pages at this size)."""
    return len(encode_page(increments))


WINDOWS_CONFIGS: Final = (
    (False, 100, 12),
    (False, 100, 1),
    (True, 100, 1),
)
"""``--windows``: (packed, records per batch, batches per hour) over a simulated day (``bench.windows_cost``)."""


def run_window_checks(ddb: DynamoDBLocal, progress: Callable[[str], None] = lambda _: None) -> list[Check]:
    """Windows on the key's item and their moves, measured over a simulated day
    (``bench.windows_cost``: the batches, the moves they make, and the final close) against the model at
    the same rate (events per second = records x events per message x batches per hour / 3,600)."""
    from bench.windows_cost import Config as WindowsConfig  # noqa: PLC0415 - only this mode needs it
    from bench.windows_cost import run as run_windows  # noqa: PLC0415

    checks = []
    for packed, records, rate in WINDOWS_CONFIGS:
        config = WindowsConfig(packed, records, rate)
        progress(config.name)
        measured = run_windows(ddb, config)
        events_per_message = PACK if packed else 1
        traffic = u_traffic(
            events_per_message, windows=True, events_per_second=records * events_per_message * rate / 3600
        )
        batches = config.hours * rate
        predicted = simulate(traffic, records, batches=min(batches, 24), page_bytes=store_page_bytes)
        checks.append(
            Check(
                config=f"{config.name} over {config.hours} h, windows on",
                events=measured.events,
                batches=measured.batches,
                predicted_write_units=predicted.write_units,
                measured_write_units=measured.write_units_on,
                predicted_read_units=predicted.read_units,
                measured_read_units=measured.read_units_on,
                exact=measured.exact,
            )
        )
    return checks


@click.command()
@click.option("--min-events", type=click.IntRange(min=1), default=20_000, show_default=True)
@click.option("--keys", type=click.IntRange(min=1), default=1000, show_default=True)
@json_options
@click.option(
    "--high-volume",
    is_flag=True,
    help="Only the recommended high-volume settings (1,000-event messages, 78 records).",
)
@click.option(
    "--numbered",
    is_flag=True,
    help="Only single-event messages, numbered ids beside random ids, at 100 records and the defaults, and the "
    "naive peer at 100.",
)
@click.option(
    "--windows",
    "windows_mode",
    is_flag=True,
    help="Only windows on the key's item and their moves, over a simulated day.",
)
def main(
    *,
    min_events: int,
    keys: int,
    json_out: Path | None,
    as_json: bool,
    high_volume: bool,
    numbered: bool,
    windows_mode: bool,
) -> None:
    """Run every configuration on a DynamoDB Local of its own; exit 1 if any prediction misses by over 10%."""
    out = console(stderr=as_json)

    def progress(name: str) -> None:
        out.print(f"running {name} ...")

    only = HIGH_VOLUME if high_volume else NUMBERED if numbered else None
    with DynamoDBLocal() as ddb:
        if windows_mode:
            checks = run_window_checks(ddb, progress)
        else:
            checks = run_checks(ddb, keys=keys, min_events=min_events, progress=progress, only=only)
        rows = [check.row() for check in checks]
        if numbered:
            # The naive peer is not exact under faults; here it is the write units the target is measured against.
            progress("naive ADD, single, windows off, 100")
            naive = naive_write_units(ddb, keys=keys, min_events=min_events)
            rows.append({"config": "naive ADD (not exact), single, windows off, 100", "measured_write_units": naive})
    title = "tally plan: predicted vs measured write units per event (workload U, no re-sends)"
    report("plan-check", title, COLUMNS, rows, {"checks": len(checks)}, json_out=json_out, as_json=as_json)
    sys.exit(0 if all(check.passed for check in checks) else 1)


if __name__ == "__main__":
    main()
