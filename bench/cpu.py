"""Handler CPU with no I/O, on one core: tally's decode + validate + aggregate against Powertools' loop.

Run as ``python -m bench.cpu`` (the suite runs it in a subprocess pinned to one core, so the figures do
not depend on what else the process did). Every path processes the same batch of ``--events`` U events:
as single-event records (one event per record) and as packed records (``pack`` events per record).
Each path runs ``--repeats`` times; the best time is kept (the least disturbed by a shared machine).

Paths:

- ``tally core``: every body through ``decode_message`` (msgspec parse, strict validation, exact
  decimals), ``deduplicate``, ``message_totals`` and ``merge_totals``: the batch's net deltas per key.
- ``tally handler``: the same, starting from the Lambda event (``records_from_event``, which builds
  Powertools' SQS data classes), as the handler does.
- ``powertools loop + json_body sum``: Powertools' ``BatchProcessor`` over the same event with the
  smallest useful record handler (``record.json_body``, deltas summed per key): the record loop the
  targets compare with. ``powertools loop, empty handler`` (it only reads the body) is the loop alone.
- references: stdlib ``json.loads`` into a dict sum; msgspec decoding into a typed ``Struct``.

``--profile single|packed`` prints a pyinstrument profile of the ``tally core`` path instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import msgspec
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from bench.peers import lambda_context
from bench.workloads import WorkloadSpec, lambda_event, u_stream
from tally.core.aggregate import deduplicate, merge_totals, message_totals
from tally.core.decode import decode_message
from tally.core.limits import WIRE_LIMITS
from tally.core.model import Message
from tally.sources.sqs import records_from_event

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

LIMITS = WIRE_LIMITS


@dataclass(frozen=True, slots=True)
class CpuFigure:
    """One path on one batch: its best time and what that means per event."""

    path: str
    records: int
    events: int
    best_s: float
    repeats: int


def tally_core(bodies: Sequence[str]) -> Mapping[Any, Mapping[str, Any]]:
    """Decode, validate and aggregate a batch of bodies into net deltas per key (what the handler does)."""
    messages: list[Message] = []
    for body in bodies:
        decoded = decode_message(body, LIMITS)
        if isinstance(decoded, Message):
            messages.append(decoded)
    distinct = deduplicate(messages)
    return merge_totals(message_totals(messages[position]).totals for position in distinct.unique)


def tally_handler(event: dict[str, Any]) -> Mapping[Any, Mapping[str, Any]]:
    """The same from the Lambda event, through ``records_from_event``."""
    return tally_core([str(record.body) for record in records_from_event(event)])


def powertools_loop(event: dict[str, Any]) -> object:
    """Powertools' BatchProcessor record loop with an empty record handler (it only reads the body)."""

    def record_handler(record: SQSRecord) -> None:
        record.body  # noqa: B018 - the empty handler reads the body and does nothing with it

    return _process(event, record_handler)


def powertools_decode_sum(event: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Powertools' loop with the smallest useful handler: ``record.json_body``, summed per key."""
    totals: dict[str, dict[str, Any]] = defaultdict(dict)

    def record_handler(record: SQSRecord) -> None:
        body = record.json_body
        counters = totals[body["key"]]
        for name, delta in body["deltas"].items():
            counters[name] = counters.get(name, 0) + delta

    _process(event, record_handler)
    return totals


def _process(event: dict[str, Any], record_handler: Callable[[SQSRecord], None]) -> object:
    processor = BatchProcessor(event_type=EventType.SQS)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=lambda_context()
    )


def stdlib_json(bodies: Sequence[str]) -> dict[str, dict[str, Decimal]]:
    """Reference: ``json.loads`` each body (decimals exact) and sum the deltas per key."""
    totals: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for body in bodies:
        message = json.loads(body, parse_float=Decimal)
        counters = totals[message["key"]]
        for name, delta in message["deltas"].items():
            counters[name] += delta
    return totals


class _Typed(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    id: str
    key: str
    deltas: dict[str, int | Decimal]


_TYPED = msgspec.json.Decoder(_Typed, float_hook=Decimal)


def msgspec_typed(bodies: Sequence[str]) -> list[_Typed]:
    """Reference: msgspec decoding each body into a typed Struct (types checked, no other validation)."""
    return [_TYPED.decode(body) for body in bodies]


def best_of(run: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of ``repeats`` runs, in seconds of ``clock`` (wall time unless told otherwise)."""
    best = float("inf")
    for _ in range(repeats):
        started = clock()
        run()
        best = min(best, clock() - started)
    return best


def measure(
    events: int, repeats: int, seed: int = WorkloadSpec().seed, clock: Callable[[], float] = time.perf_counter
) -> list[CpuFigure]:
    """Every path on a batch of ``events`` U events, single-event and packed."""
    single = u_stream(events, packed=False, seed=seed).deliveries
    packed = u_stream(events, packed=True, seed=seed).deliveries
    sent_ms = time.time_ns() // 1_000_000
    single_bodies = [delivery.body for delivery in single]
    packed_bodies = [delivery.body for delivery in packed]
    single_event = lambda_event(single, sent_ms)
    packed_event = lambda_event(packed, sent_ms)
    paths: list[tuple[str, int, Callable[[], object]]] = [
        ("tally core, single-event records", len(single), lambda: tally_core(single_bodies)),
        ("tally core, packed records", len(packed), lambda: tally_core(packed_bodies)),
        ("tally handler, single-event records", len(single), lambda: tally_handler(single_event)),
        ("tally handler, packed records", len(packed), lambda: tally_handler(packed_event)),
        (
            "powertools loop + json_body sum, single-event records",
            len(single),
            lambda: powertools_decode_sum(single_event),
        ),
        ("powertools loop, empty handler, single-event records", len(single), lambda: powertools_loop(single_event)),
        ("stdlib json, single-event records", len(single), lambda: stdlib_json(single_bodies)),
        ("msgspec typed decode, single-event records", len(single), lambda: msgspec_typed(single_bodies)),
    ]
    return [CpuFigure(name, records, events, best_of(run, repeats, clock), repeats) for name, records, run in paths]


def profile(kind: str, events: int) -> str:
    """A pyinstrument profile (text) of the ``tally core`` path on one kind of records."""
    from pyinstrument import Profiler  # noqa: PLC0415 - a bench-only tool, imported when asked for

    stream = u_stream(events, packed=kind == "packed", seed=WorkloadSpec().seed)
    bodies = [delivery.body for delivery in stream.deliveries]
    profiler = Profiler(interval=0.0002)
    with profiler:
        for _ in range(20):
            tally_core(bodies)
    return str(profiler.output_text(unicode=True, color=False, show_all=False))


def pin_to_one_core() -> int:
    """Run on one core only (the lowest this process may use); returns its number."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--profile", choices=("single", "packed"))
    parser.add_argument(
        "--process-time",
        action="store_true",
        help="Time in CPU time of this process, not wall time: comparable on a machine other jobs share.",
    )
    args = parser.parse_args(argv)
    core = pin_to_one_core()
    if args.profile:
        sys.stdout.write(profile(args.profile, args.events))
        return 0
    figures = measure(args.events, args.repeats, clock=time.process_time if args.process_time else time.perf_counter)
    json.dump({"core": core, "figures": [asdict(figure) for figure in figures]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
