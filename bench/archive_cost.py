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

import boto3

from bench.deployment import default_settings
from bench.peers.tables import drop_tables, tally_tables
from bench.workloads import lambda_event, u_stream
from tally.archive_writer import S3ArchiveWriter
from tally.audit.objects import read_archive
from tally.audit.recount import recount
from tally.post_commit import ArchiveStep, ArchiveWriter
from tally.reader.store_view import read_counters
from tally.runtime import CLIENT_CONFIG, wire_pipeline
from tally.sources.sqs import records_from_event
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.chaos.archive import ArchiveSite
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.latency_proxy import LatencyProxy
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
    """The archive written beside the last fenced batch's landing (the pipeline as it runs)."""
    cpu_without_ms: float
    cpu_with_ms: float
    step_ms: float
    object_bytes: float
    after_ms: float = 0.0
    """The archive written after the landing, as before the overlap (``AfterTheLanding``); 0: not run."""

    @property
    def overhead(self) -> float:
        return self.with_ms / self.without_ms - 1

    @property
    def overhead_after(self) -> float:
        return self.after_ms / self.without_ms - 1


class SlowWriter:
    """The production writer, each ``PutObject`` answered ``delay_s`` late: S3's latency from Lambda, which moto's
    server on this machine does not have."""

    def __init__(self, writer: S3ArchiveWriter, delay_s: float) -> None:
        self._writer, self._delay_s = writer, delay_s

    def put(self, key: str, body: bytes) -> None:
        self._writer.put(key, body)
        time.sleep(self._delay_s)


class TimedStep(ArchiveStep):
    """The production step, its ``settle`` timed."""

    seconds: list[float]

    def settle(self, batch: SettledBatch) -> StepResult:
        started = time.perf_counter()
        try:
            return super().settle(batch)
        finally:
            self.seconds.append(time.perf_counter() - started)


class AfterTheLanding(TimedStep):
    """The same step run after the landing, as the pipeline ran it before the overlap: the figure it saves."""

    beside_landing = False


def _pipeline(
    client: DynamoDBClient,
    tables: Sequence[str],
    archive: ArchiveWriter | None,
    step_class: type[TimedStep] = TimedStep,
) -> BatchPipeline:
    """The handlers' wiring at a default deployment's settings (windows on), the archive on or off."""
    pipeline = wire_pipeline(client, _NoLetters(), default_settings(tables[0], tables[1]), archive=archive)
    if archive is not None:
        step = step_class(archive)
        step.seconds = []
        pipeline._steps = tuple(step if isinstance(old, ArchiveStep) else old for old in pipeline._steps)
    return pipeline


class _NoLetters:
    def send(self, letters: Sequence[object]) -> frozenset[str]:
        if letters:
            raise RuntimeError(f"a benchmark batch dead-lettered {len(letters)} records")
        return frozenset()


def measure(
    ddb: DynamoDBLocal,
    s3: S3Client,
    bucket: str,
    *,
    packed: bool,
    batches: int,
    endpoint_url: str | None = None,
    put_delay_s: float = 0.0,
    after: bool = False,
) -> Figures:
    """Median handler ms per batch with the archive off, on (beside the landing) and, with ``after``, on after the
    landing, the same batches to each in turn; requests to ``endpoint_url`` (the latency proxy) when given."""
    stream = u_stream(batches * 100 * (100 if packed else 1), packed=packed, numbered=True)
    admin = ddb.client()
    client = ddb.client(CLIENT_CONFIG) if endpoint_url is None else _client_to(endpoint_url)
    tag = uuid.uuid4().hex[:8]
    configs = ("off", "on", "after") if after else ("off", "on")
    tables = {name: tally_tables(admin, "arc", f"{name}{tag}") for name in configs}
    prefix = f"events/{tag}/"  # under the prefix the function role may write (the IAM contract checks it)
    writer: ArchiveWriter = S3ArchiveWriter(s3, bucket)
    if put_delay_s > 0:
        writer = SlowWriter(S3ArchiveWriter(s3, bucket), put_delay_s)
    pipelines = {
        "off": _pipeline(client, tables["off"], None),
        "on": _pipeline(client, tables["on"], writer),
        **({"after": _pipeline(client, tables["after"], writer, AfterTheLanding)} if after else {}),
    }
    steps = {
        name: step
        for name in ("on", "after")
        if name in pipelines
        for step in pipelines[name]._steps
        if isinstance(step, TimedStep)
    }
    for archived, step in steps.items():
        step._prefix = f"{prefix}{archived}/"
    walls: dict[str, list[float]] = {name: [] for name in configs}
    cpus: dict[str, list[float]] = {name: [] for name in configs}
    try:
        for number, batch in enumerate(stream.batches(100)):
            shift = number % len(configs)
            for config in configs[shift:] + configs[:shift]:  # each configuration first in turn
                records = records_from_event(lambda_event(batch, time.time_ns() // 1_000_000))
                started, cpu = time.perf_counter(), time.process_time()
                result = pipelines[config].process(records, time.time_ns() // 1_000_000, lambda: 900_000)
                walls[config].append(time.perf_counter() - started)
                cpus[config].append(time.process_time() - cpu)
                if result.failed_record_ids:
                    raise RuntimeError(f"a benchmark batch failed records: {result.failed_record_ids[:3]}")
        for config in configs[1:]:
            _check(
                ddb.client(CLIENT_CONFIG),
                tables["off"],
                tables[config],
                expected=stream.expected(),
                s3=s3,
                bucket=bucket,
                prefix=f"{prefix}{config}/",
            )
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}on/").get("Contents", [])
        object_bytes = statistics.mean(entry["Size"] for entry in listed)
    finally:
        drop_tables(admin, [name for pair in tables.values() for name in pair])
    return Figures(
        config="packed (100 events)" if packed else "single events",
        batches=len(walls["on"]),
        without_ms=statistics.median(walls["off"]) * 1000,
        with_ms=statistics.median(walls["on"]) * 1000,
        cpu_without_ms=statistics.median(cpus["off"]) * 1000,
        cpu_with_ms=statistics.median(cpus["on"]) * 1000,
        step_ms=statistics.median(steps["on"].seconds) * 1000,
        object_bytes=object_bytes,
        after_ms=statistics.median(walls["after"]) * 1000 if after else 0.0,
    )


def _client_to(endpoint_url: str) -> DynamoDBClient:
    """A client of the handlers' configuration to ``endpoint_url`` (the latency proxy), DynamoDB Local's credentials."""
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=CLIENT_CONFIG,
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
    parser.add_argument(
        "--proxy",
        action="store_true",
        help="DynamoDB's requests through the latency proxy, each PutObject answered --put-ms late, and the archive"
        " also written after the landing (as before the overlap): single events, the handler's time measured",
    )
    args = parser.parse_args(argv)
    if args.proxy:
        return _through_the_proxy(args.batches, args.put_ms / 1000)
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


def _through_the_proxy(batches: int, put_delay_s: float) -> int:
    """The archive's cost in handler time where it is paid: DynamoDB at AWS-like latencies, S3 at ``put_delay_s``."""
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; {batches} batches of 100 single-event records each")
    with DynamoDBLocal() as ddb, LatencyProxy(ddb.endpoint_url) as proxy, moto_process() as endpoint:
        site = ArchiveSite(endpoint, "tally-bench-archive").create()
        f = measure(
            ddb,
            site.client(),
            site.bucket,
            packed=False,
            batches=batches,
            endpoint_url=proxy.endpoint_url,
            put_delay_s=put_delay_s,
            after=True,
        )
    print(
        f"| messages | handler ms, archive off | on, beside the landing | on, after the landing "
        f"(PutObject +{put_delay_s * 1000:.0f} ms) |"
    )
    print("| --- | ---: | ---: | ---: |")
    print(
        f"| {f.config} | {f.without_ms:,.1f} | {f.with_ms:,.1f} ({f.overhead:+.1%}) "
        f"| {f.after_ms:,.1f} ({f.overhead_after:+.1%}) |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
