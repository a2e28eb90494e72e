"""What the archive adds to the handler: time per batch with and without it, and what it writes.

``python -m bench archive-cost`` runs the handlers' own wiring (``tally.runtime.wire_pipeline``, the template's
default settings) on DynamoDB Local, twice side by side on separate tables: once with the archive off, once
writing it to moto's S3 (``tally_local.moto_server``). The same batches of workload U (1,000 Zipf keys, numbered
ids) go to both, alternately, so a busy machine slows both alike; per configuration it reports the median
handler wall time per batch with and without the archive, the process CPU per batch (``time.process_time``; moto
runs in a process of its own, DynamoDB Local in its JVM),
the archive step's own wall time and the bytes it wrote per object, and the overhead, both measured here and
with S3's latency from Lambda as published figures put it (``--put-ms``, default 100 ms: 60-133 ms measured from
Lambda to S3 in one region for a small object, kkc.github.io 2020; AWS's performance guide quotes 100-200 ms
for small objects' first byte) against the handler time this project measured through the latency proxy
(docs/explanation/costs.md, "Handler duration"). Every counter is read back and compared with the
stream's sums, and the archive's recount (``tally.audit.recount``) with the counters.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.deployment import default_settings
from bench.peers.tables import drop_tables, tally_tables
from bench.workloads import lambda_event, u_stream
from tally.archive_writer import S3ArchiveWriter
from tally.audit.objects import read_archive
from tally.audit.recount import recount
from tally.post_commit import ArchiveStep
from tally.reader.store_view import read_counters
from tally.runtime import CLIENT_CONFIG, wire_pipeline
from tally.sources.sqs import records_from_event
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.chaos.archive import ArchiveSite
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.moto_server import SerialMotoServer

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

    from bench.workloads import Totals
    from tally.pipeline import BatchPipeline
    from tally.post_commit.step import SettledBatch, StepResult

PROXY_HANDLER_MS = {"single": 306.0, "packed": 1256.0}
"""Handler ms per batch of 100 records measured through the latency proxy (published DynamoDB latencies; single
events with windows on; packed, 100 events a message, the 'AWS-like' figure) in docs/explanation/costs.md."""


@dataclass(frozen=True)
class Figures:
    config: str
    batches: int
    without_ms: float
    with_ms: float
    cpu_without_ms: float
    cpu_with_ms: float
    step_ms: float
    object_bytes: float

    @property
    def overhead(self) -> float:
        return self.with_ms / self.without_ms - 1


class TimedStep(ArchiveStep):
    """The production step, its ``settle`` timed."""

    seconds: list[float]

    def settle(self, batch: SettledBatch) -> StepResult:
        started = time.perf_counter()
        try:
            return super().settle(batch)
        finally:
            self.seconds.append(time.perf_counter() - started)


def _pipeline(client: DynamoDBClient, tables: Sequence[str], archive: S3ArchiveWriter | None) -> BatchPipeline:
    """The handlers' wiring at a default deployment's settings (windows on), the archive on or off."""
    pipeline = wire_pipeline(client, _NoLetters(), default_settings(tables[0], tables[1]), archive=archive)
    if archive is not None:
        step = TimedStep(archive)
        step.seconds = []
        pipeline._steps = tuple(step if isinstance(old, ArchiveStep) else old for old in pipeline._steps)
    return pipeline


class _NoLetters:
    def send(self, letters: Sequence[object]) -> frozenset[str]:
        if letters:
            raise RuntimeError(f"a benchmark batch dead-lettered {len(letters)} records")
        return frozenset()


def measure(ddb: DynamoDBLocal, s3: S3Client, bucket: str, *, packed: bool, batches: int) -> Figures:
    stream = u_stream(batches * 100 * (100 if packed else 1), packed=packed, numbered=True)
    admin, client = ddb.client(), ddb.client(CLIENT_CONFIG)
    tag = uuid.uuid4().hex[:8]
    plain_tables = tally_tables(admin, "arc", f"off{tag}")
    archived_tables = tally_tables(admin, "arc", f"on{tag}")
    prefix = f"events/{tag}/"  # under the prefix the function role may write (the IAM contract checks it)
    writer = S3ArchiveWriter(s3, bucket)
    plain = _pipeline(client, plain_tables, None)
    archived = _pipeline(client, archived_tables, writer)
    (step,) = [step for step in archived._steps if isinstance(step, TimedStep)]
    step._prefix = prefix
    walls: dict[bool, list[float]] = {False: [], True: []}
    cpus: dict[bool, list[float]] = {False: [], True: []}
    try:
        for number, batch in enumerate(stream.batches(100)):
            order = (False, True) if number % 2 == 0 else (True, False)
            for on in order:
                records = records_from_event(lambda_event(batch, time.time_ns() // 1_000_000))
                pipeline = archived if on else plain
                started, cpu = time.perf_counter(), time.process_time()
                result = pipeline.process(records, time.time_ns() // 1_000_000, lambda: 900_000)
                walls[on].append(time.perf_counter() - started)
                cpus[on].append(time.process_time() - cpu)
                if result.failed_record_ids:
                    raise RuntimeError(f"a benchmark batch failed records: {result.failed_record_ids[:3]}")
        _check(client, plain_tables, archived_tables, expected=stream.expected(), s3=s3, bucket=bucket, prefix=prefix)
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
        object_bytes = statistics.mean(entry["Size"] for entry in listed)
    finally:
        drop_tables(admin, [*plain_tables, *archived_tables])
    return Figures(
        config="packed (100 events)" if packed else "single events",
        batches=len(walls[True]),
        without_ms=statistics.median(walls[False]) * 1000,
        with_ms=statistics.median(walls[True]) * 1000,
        cpu_without_ms=statistics.median(cpus[False]) * 1000,
        cpu_with_ms=statistics.median(cpus[True]) * 1000,
        step_ms=statistics.median(step.seconds) * 1000,
        object_bytes=object_bytes,
    )


def _check(
    client: DynamoDBClient,
    plain: Sequence[str],
    archived: Sequence[str],
    *,
    expected: Totals,
    s3: S3Client,
    bucket: str,
    prefix: str,
) -> None:
    """Both tables hold the stream's sums, and the archive recounts them."""
    stores = [DynamoDBCounterStore(client, tables[0], tables[1], 86_400) for tables in (plain, archived)]
    recounted = recount(read_archive(s3, bucket, prefix))
    for key, counters in expected.items():
        for store in stores:
            found = read_counters(store, key)
            if any(found.get(name, 0) != value for name, value in counters.items()):
                raise RuntimeError(f"{key}: {dict(found)} != {counters}")
        if any(recounted.counters.get(key, {}).get(name, 0) != value for name, value in counters.items()):
            raise RuntimeError(f"{key}: the archive recounts {recounted.counters.get(key)}, not {counters}")


def _serve_moto(endpoints: multiprocessing.Queue[str], stop: Any) -> None:
    """moto's server in a process of its own, so that its CPU is not counted as the handler's."""
    with SerialMotoServer() as moto:
        endpoints.put(moto.endpoint_url)
        stop.wait()


@contextlib.contextmanager
def moto_process() -> Iterator[str]:
    """The endpoint of a moto server running in a child process, stopped at the end."""
    endpoints: multiprocessing.Queue[str] = multiprocessing.Queue()
    stop = multiprocessing.Event()
    process = multiprocessing.Process(target=_serve_moto, args=(endpoints, stop), daemon=True)
    process.start()
    try:
        yield endpoints.get(timeout=60)
    finally:
        stop.set()
        process.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench archive-cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="batches of 100 records per configuration")
    parser.add_argument("--put-ms", type=float, default=100.0, help="S3 PutObject latency from Lambda, assumed")
    args = parser.parse_args(argv)
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; {args.batches} batches of 100 records each")
    with DynamoDBLocal() as ddb, moto_process() as endpoint:
        site = ArchiveSite(endpoint, "tally-bench-archive").create()
        s3, bucket = site.client(), site.bucket
        print(
            "| messages | handler ms / batch, archive off | on | overhead here | CPU ms off / on | archive step ms "
            "| object bytes | handler ms through the proxy | + PUT at --put-ms |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for packed in (False, True):
            f = measure(ddb, s3, bucket, packed=packed, batches=args.batches)
            proxy = PROXY_HANDLER_MS["packed" if packed else "single"]
            print(
                f"| {f.config} | {f.without_ms:.1f} | {f.with_ms:.1f} | {f.overhead:+.1%} "
                f"| {f.cpu_without_ms:.1f} / {f.cpu_with_ms:.1f} | {f.step_ms:.1f} | {f.object_bytes:,.0f} "
                f"| {proxy:,.0f} | {args.put_ms / proxy:+.1%} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
