"""``tally audit`` on a million archived events, on the local stack, beside a naive recount measured in the same run.

``python -m bench audit`` starts a local stack (DynamoDB Local, moto's S3, ``Windows=hour,day``) and builds:

- **the archive**: ``--events`` single-event messages (two counters, ``count`` and ``bytes``) over ``--keys`` keys
  (skewed: a few keys get most events), their times spread over ``--hours`` hours ending an hour ago, written as
  the archive step writes them (``tally.core.archive``: real digests, one gzip JSON-lines object per invocation
  of ``--per-object`` records) to the stack's archive bucket, plus ``--copies`` of them archived again by a later
  delivery (a redelivery that met their markers: the recount drops them);
- **the counters table**, through the production pipeline (``tally.runtime.wire_pipeline``, archive off): one
  message per key and hour carrying the sums of that hour's events, so the table holds what the archive must
  recount to, every all-time value and window.

Then it measures, as a person runs it, ``tally audit --json`` in a process of its own (wall time from start to
exit, peak RSS, and the audit's own ``seconds``), and the naive recount in this process: every object read with
one ``GetObject`` at a time, ``gzip`` + ``json.loads`` per line, ``dict`` adds per event (no deduplication, no
windows, floats where the JSON has fractions). The target: the audit under 60 s for 1,000,000 events on the
project's 2-core machine. The load average before and after is printed: the machine is shared, figures vary
with it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import boto3

from bench.results import field, report
from tally.config import Settings
from tally.core.archive import archive_record, encode_records, object_key
from tally.core.digest import content_digest
from tally.core.ledger import Commit
from tally.core.model import CounterEvent, Message, SourceRecord
from tally.core.windows import HOUR_MS
from tally.dead_letter_sender import SqsDeadLetterQueue
from tally.runtime import wire_pipeline
from tally_local.stack import LocalStack

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from tally.core.archive import ArchiveRecord
    from tally_local.resources import LocalResources

ARN: Final = "arn:aws:sqs:us-east-1:123456789012:tally-local-EventsQueue"
PARAMETERS: Final = {"Source": "SQS", "Windows": "hour,day"}
FILL_BATCH: Final = 100


@dataclass(frozen=True, slots=True)
class Built:
    """What was written: the archive's size, and what every key must count all-time."""

    objects: int
    records: int
    events: int
    keys: int
    totals: Mapping[str, Mapping[str, int]]


def _key(rng: random.Random, keys: int) -> str:
    return f"bench:{int(keys * rng.random() ** 2):05d}"  # skewed: the low keys get most events


def archive_objects(
    events: int, keys: int, per_object: int, *, hours: int, copies: float, now_ms: int, seed: int
) -> Iterator[tuple[int, str, list[ArchiveRecord]]]:
    """(archived ms, delivery, records) of each archive object, as invocations over the span would write them."""
    rng = random.Random(seed)
    start = now_ms - (hours + 1) * HOUR_MS
    span = hours * HOUR_MS
    copied: list[ArchiveRecord] = []
    for first in range(0, events, per_object):
        committed = start + first * span // events
        delivery = uuid.UUID(int=rng.getrandbits(128)).hex
        records = []
        for seq, number in enumerate(range(first, min(first + per_object, events))):
            ts = start + number * span // events
            message = Message(
                f"b-{number}", (CounterEvent(_key(rng, keys), {"count": 1, "bytes": rng.randrange(1, 5_000)}, ts),)
            )
            source = SourceRecord(f"r-{number}", "", ts + 5, {"source": ARN})
            record = archive_record(
                message,
                Commit.of_marker(committed, None),
                source,
                digest=content_digest(message),
                archived_ms=committed + 40,
                delivery=delivery,
                seq=seq,
                counted_here=True,
            )
            records.append(record)
            if rng.random() < copies:
                copied.append(record)
        if copied and rng.random() < 0.5:  # a later invocation met their markers and archived them again
            again = uuid.UUID(int=rng.getrandbits(128)).hex
            records += [
                _copy(record, again, committed + 45, seq) for seq, record in enumerate(copied, start=len(records))
            ]
            copied = []
        yield committed + 40, delivery, records


def _copy(record: ArchiveRecord, delivery: str, archived_ms: int, seq: int) -> ArchiveRecord:
    fields = {name: getattr(record, name) for name in record.__struct_fields__}
    return type(record)(
        **{**fields, "delivery": delivery, "archived_ms": archived_ms, "seq": seq, "counted_here": False}
    )


def build(
    stack: LocalResources, *, events: int, keys: int, per_object: int, hours: int, copies: float, seed: int
) -> Built:
    """Write the archive to the stack's bucket and the sums it recounts to through the pipeline."""
    bucket = stack.archive_bucket
    if bucket is None:
        raise SystemExit("the local stack has no archive bucket (ArchiveEnabled=false?)")
    s3 = stack.client("s3")
    now_ms = time.time_ns() // 1_000_000
    sums: dict[tuple[str, int], dict[str, int]] = {}
    objects = records = 0
    counted: set[str] = set()
    written = archive_objects(events, keys, per_object, hours=hours, copies=copies, now_ms=now_ms, seed=seed)
    for archived_ms, delivery, batch in written:
        s3.put_object(Bucket=bucket, Key=object_key("events/", archived_ms, delivery), Body=encode_records(batch))
        objects += 1
        records += len(batch)
        for record in batch:
            if record.id in counted:
                continue
            counted.add(record.id)
            for event in record.events:
                hour = (event.ts or 0) - (event.ts or 0) % HOUR_MS
                into = sums.setdefault((event.key, hour), {})
                for name, delta in event.deltas.items():
                    into[name] = into.get(name, 0) + int(delta)
    _fill(stack, sums, now_ms)
    totals: dict[str, dict[str, int]] = {}
    for (key, _hour), deltas in sums.items():
        into = totals.setdefault(key, {})
        for name, value in deltas.items():
            into[name] = into.get(name, 0) + value
    return Built(objects, records, len(counted), len(totals), totals)


def _fill(stack: LocalResources, sums: Mapping[tuple[str, int], Mapping[str, int]], now_ms: int) -> None:
    """One message per key and hour through the production pipeline, the archive off (these are not archived)."""
    settings = Settings.from_env(stack.settings)
    pipeline = wire_pipeline(
        stack.client("dynamodb"), SqsDeadLetterQueue(stack.client("sqs"), stack.dead_letter_queue_url), settings
    )
    bodies = [
        json.dumps({"id": f"fill-{key}-{hour}", "key": key, "deltas": deltas, "ts": hour + 1})
        for (key, hour), deltas in sorted(sums.items())
    ]
    for first in range(0, len(bodies), FILL_BATCH):
        chunk = [SourceRecord(f"fill-{n}", body, now_ms) for n, body in enumerate(bodies[first : first + FILL_BATCH])]
        result = pipeline.process(chunk, now_ms, lambda: 60_000)
        if result.failed_record_ids:
            raise SystemExit(f"the table could not be filled: {len(result.failed_record_ids)} records failed")


@dataclass(frozen=True, slots=True)
class Timed:
    seconds: float
    """Wall time, from the process's start to its exit."""
    cpu_seconds: float
    """Its user and system CPU: what it would take on a machine no one else uses (one core at a time)."""
    peak_mb: float
    """The largest resident size of any process this one has waited for so far."""
    output: str


def _timed(command: list[str], stack: LocalResources) -> Timed:
    """``command`` run in a process of its own on the stack: its times, and what it printed."""
    environment = {**os.environ, **stack.cli_environment()}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    finished = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if finished.returncode not in {0, 1}:
        raise SystemExit(f"{command[0]} failed ({finished.returncode}): {finished.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Timed(seconds, cpu, after.ru_maxrss / 1024, finished.stdout)


def measure_audit(stack: LocalResources, built: Built, processes: int | None) -> dict[str, Any]:
    """``tally audit --json`` in a process of its own, as a person runs it (``--processes`` if given)."""
    tally = str(Path(sys.executable).with_name("tally"))
    options = ["--processes", str(processes)] if processes else []
    timed = _timed([tally, "audit", "--json", "--settle", "0", *options], stack)
    document = json.loads(timed.output)
    exact = (
        document["ok"]
        and document["keys"] == built.keys
        and document["archive"]["countings"] == built.events
        and document["verdicts"]["exact"] == document["values"]
    )
    return {
        "what": f"tally audit --processes {processes}" if processes else "tally audit",
        "seconds": timed.seconds,
        "cpu_seconds": timed.cpu_seconds,
        "events_per_s": built.events / timed.seconds,
        "inner_seconds": float(document["seconds"]),
        "values": document["values"],
        "peak_rss_mb": timed.peak_mb,
        "matches": exact,
        "exact": exact,
    }


def measure_naive(stack: LocalResources, built: Built) -> dict[str, Any]:
    """The naive recount (``naive_recount``) in a process of its own, after the audit (its peak RSS is then the
    larger of the two: it is printed only if it is the naive one's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    timed = _timed([sys.executable, "-m", "bench.audit", "--naive-recount"], stack)
    document = json.loads(timed.output)
    totals = {
        key: {name: int(value) for name, value in counters.items()} for key, counters in document["totals"].items()
    }
    return {
        "what": "naive recount (json.loads + dict adds, all-time only)",
        "seconds": timed.seconds,
        "cpu_seconds": timed.cpu_seconds,
        "events_per_s": built.events / timed.seconds,
        "inner_seconds": document["counting_s"],
        "values": sum(len(counters) for counters in totals.values()),
        **({"peak_rss_mb": timed.peak_mb} if timed.peak_mb > before else {}),
        "matches": totals == built.totals,
    }


def naive_recount() -> None:
    """List the archive, read each object in turn, ``json.loads`` each line, add each event's deltas to a
    ``dict``: what a script would do. Prints its totals and how long the adding took, as JSON."""
    s3 = boto3.client("s3")
    bucket = os.environ["TALLY_ARCHIVE_BUCKET"]
    keys = [
        entry["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="events/")
        for entry in page.get("Contents", [])
    ]
    bodies = [s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys]
    started = time.perf_counter()
    totals: dict[str, dict[str, Any]] = {}
    for body in bodies:
        for line in gzip.decompress(body).splitlines():
            for event in json.loads(line)["events"]:
                counters = totals.setdefault(event["key"], {})
                for name, delta in event["deltas"].items():
                    counters[name] = counters.get(name, 0) + delta
    print(json.dumps({"totals": totals, "counting_s": time.perf_counter() - started}))


def run(args: argparse.Namespace, stack: LocalResources) -> list[dict[str, Any]]:
    built = build(
        stack,
        events=args.events,
        keys=args.keys,
        per_object=args.per_object,
        hours=args.hours,
        copies=args.copies,
        seed=args.seed,
    )
    print(f"built: {built.objects:,} objects, {built.records:,} records, {built.events:,} events, {built.keys:,} keys")
    rows = []
    for processes in (1, None):  # one process, then the default (the machine's cores), in the same run
        print(f"load average: {os.getloadavg()[0]:.1f}")
        rows.append(measure_audit(stack, built, processes))
    print(f"load average: {os.getloadavg()[0]:.1f}")
    rows.append(measure_naive(stack, built))
    print(f"load average: {os.getloadavg()[0]:.1f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--per-object", type=int, default=1_000, help="records per archive object (one invocation)")
    parser.add_argument("--hours", type=int, default=6, help="hours the events' times span")
    parser.add_argument("--copies", type=float, default=0.01, help="share of records archived again by a redelivery")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--json-out", type=Path, help="also write the rows (and the run's size) as JSON here")
    parser.add_argument("--naive-recount", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.naive_recount:  # the naive recount's own process (measure_naive)
        naive_recount()
        return 0
    with LocalStack(PARAMETERS) as stack:
        rows = run(args, stack)
    columns = [
        field("what"),
        field("seconds", ".1f"),
        field("cpu_seconds", ".1f", "CPU (s)"),
        field("events_per_s", ",.0f", "events/s"),
        field("inner_seconds", ".1f", "inside (s)"),
        field("values", ","),
        field("peak_rss_mb", ",.0f", "peak RSS (MB)"),
        ("matches the table", lambda row: "yes" if row["matches"] else "NO"),
    ]
    title = f"{args.events:,} archived events over {args.keys:,} keys, {args.per_object:,} per object, local stack"
    notes = [
        "seconds: each in a process of its own, from its start to its exit, as a person runs it; CPU: its user and"
        " system time (on a machine others share, the wall time is longer by the time it waited for a core)."
        " inside: tally audit's own figure (from its first listing to its report: no interpreter start or imports);"
        " the naive recount's json.loads and adds alone (its GetObjects, one at a time, excluded).",
        "tally audit: the default splits the recount over the machine's cores (processes, a share of keys each),"
        " --processes 1 recounts in one.",
        "tally audit compares every all-time value and every hour and day window, copies dropped. The naive recount"
        " counts each copy again and keeps no window: it does not match the table when --copies > 0, which is what"
        " the audit's recount is for.",
    ]
    parameters = {key: value for key, value in vars(args).items() if key != "json_out"}
    return report("audit", title, columns, rows, parameters, json_out=args.json_out, notes=notes)


if __name__ == "__main__":
    raise SystemExit(main())
