"""``python -m bench.duration``: a batch's handler duration, split into what was measured and what is not.

Why split: a handler's duration on Lambda is its CPU plus its DynamoDB requests, one after another. Here
the CPU can be measured (the handler runs for real) but the requests cannot: DynamoDB Local serialises
transactions and takes longer than DynamoDB over a region's network, and there is no AWS account to
measure the latter. So this runs the real pipeline on DynamoDB Local (workload U, ``bench.workloads``),
times every DynamoDB call with botocore's ``before-call``/``after-call`` hooks, and reports per batch:

- the handler's wall time here, and the share of it inside DynamoDB calls (shown, not used: on a shared
  machine the wall time includes waiting for a core);
- the CPU the process used (**measured**, ``time.process_time``: decoding, aggregation, planning,
  botocore's request building and response parsing), and
- the requests per batch by operation (**measured**), priced at ``tally.cost.model.Latencies`` (**assumed**),

and from them the AWS-like duration per batch and Lambda GB-seconds per million events at a memory size
(CPU stretched by 1,769 MB / memory, Lambda's vCPU share), beside what ``tally plan``'s model predicts
for the same traffic (requests one after another: ``TALLY_WRITE_CONCURRENCY=1``, as the model prices them).

``--proxy`` runs the unmodified SQS handler instead, its DynamoDB endpoint on
``tally_local.latency_proxy`` (published AWS latencies in front of DynamoDB Local), at the template's settings,
``BatchSize`` cut at Lambda's 6 MB payload and 100 records, at each ``--write-concurrency``; per batch the
wall time, CPU, the requests as the proxy saw them, the time stalled on DynamoDB Local (which the proxy
cannot hide), the duration at the template's memory and GB-s per million events, beside the computed
figure above and ``tally plan``'s model.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import logging
import os
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

import click

from bench.deployment import TEMPLATE, template_environment
from bench.peers import lambda_context
from bench.peers.tables import drop_tables, tally_tables
from bench.peers.tally_pipeline import TallyCounter
from bench.plan_check import store_page_bytes, u_traffic
from bench.results import EXACT, console, field, json_options, per_operation, report
from bench.suite import compare
from bench.workloads import PACK, event_sums, lambda_event, u_stream
from tally.config import (
    COUNTERS_TABLE,
    DEFAULT_WRITE_CONCURRENCY,
    DLQ_URL,
    MARKERS_TABLE,
    MAX_WRITE_CONCURRENCY,
    WINDOWS,
    WRITE_CONCURRENCY,
)
from tally.core.limits import LAMBDA_PAYLOAD_MAX_BYTES
from tally.cost.model import LAMBDA_FULL_VCPU_MB, Latencies, RequestLatencies, price
from tally.reader.store_view import read_counters
from tally.runtime import CLIENT_CONFIG
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.dynamodb_local import DynamoDBLocal
from tally_local.esm import records_within_payload
from tally_local.latency_proxy import LatencyProxy, ProxiedRequest
from tally_local.resources import LOCAL_CREDENTIALS
from tally_local.template import load_template

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path

    from mypy_boto3_dynamodb import DynamoDBClient
    from rich.console import Console

    from bench.results import Column
    from bench.workloads import Delivery, Stream
    from tally.cost.model import Bill

_START: Final = "bench_duration_start"
ASSUMED: Final = Latencies()
"""``Latencies``' defaults: request latencies below the published ones `tally plan` prices with."""
LATENCY_OF: Final = {
    "TransactWriteItems": "transact_write_ms",
    "BatchGetItem": "batch_get_ms",
    "BatchWriteItem": "batch_write_ms",
}


class CallTimer:
    """Times every DynamoDB call of one client (botocore's own retries inside it)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls: Counter[str] = Counter()

    def attach(self, client: DynamoDBClient) -> None:
        client.meta.events.register("before-call.dynamodb", self._before, unique_id=f"bench-duration-b-{id(self)}")
        client.meta.events.register("after-call.dynamodb", self._after, unique_id=f"bench-duration-a-{id(self)}")

    def detach(self, client: DynamoDBClient) -> None:
        client.meta.events.unregister("before-call.dynamodb", unique_id=f"bench-duration-b-{id(self)}")
        client.meta.events.unregister("after-call.dynamodb", unique_id=f"bench-duration-a-{id(self)}")

    def _before(self, context: dict[str, Any], **_: Any) -> None:
        context[_START] = time.perf_counter()

    def _after(self, context: Mapping[str, Any], model: Any, **_: Any) -> None:
        started = context.get(_START)
        if started is not None:
            self.seconds += time.perf_counter() - started
            self.calls[model.name] += 1


@dataclass(frozen=True, slots=True)
class Duration:
    """One configuration's batches, averaged."""

    config: str
    batches: int
    events_per_batch: float
    local_ms: float
    """Handler wall time per batch on DynamoDB Local."""
    local_io_ms: float
    """Of which inside DynamoDB calls."""
    process_cpu_ms: float
    """CPU this process used per batch (``time.process_time``): the handler's own work, botocore's included."""
    calls: Mapping[str, float]
    """Requests per batch, by operation."""
    aws_like_ms: float
    """Measured non-I/O time at the memory's vCPU share + measured requests at assumed latencies."""
    model_ms: float
    """What ``tally.cost.model`` predicts for the same traffic and batch size."""
    gb_s_per_million_events: float
    model_gb_s_per_million_events: float


def measure(
    ddb: DynamoDBLocal,
    *,
    packed: bool,
    windows: bool,
    batch_size: int,
    batches: int,
    keys: int = 1000,
    memory_mb: int = 512,
    latencies: Latencies = ASSUMED,
    seed: int = 20_261_124,
) -> Duration:
    """Run ``batches`` batches of one configuration and time them."""
    admin = ddb.client()
    client = ddb.client(CLIENT_CONFIG)
    stream = u_stream(batches * batch_size * (PACK if packed else 1), packed=packed, keys=keys, seed=seed)
    # One request at a time, so that the CPU measured is the requests' own (no pool); they are priced as the cost
    # model prices them (``_requests_s``). The template's path for journal batches (``fenced=None``: the fenced apply).
    peer = TallyCounter(
        client,
        admin,
        uuid.uuid4().hex[:10],
        packed=packed,
        windows=windows,
        fenced=None,
        overrides={WRITE_CONCURRENCY: "1"},
    )
    timer = CallTimer()
    context = lambda_context(900_000)
    handler_s = 0.0
    cpu_used_s = 0.0
    ran = 0
    try:
        timer.attach(client)
        for batch in stream.batches(batch_size):
            event = lambda_event(batch, time.time_ns() // 1_000_000)
            started, cpu_started = time.perf_counter(), time.process_time()
            response = peer.handle(event, context)
            handler_s += time.perf_counter() - started
            cpu_used_s += time.process_time() - cpu_started
            ran += 1
            if response.get("batchItemFailures"):
                raise RuntimeError(f"a benchmark batch failed records: {response}")
    finally:
        timer.detach(client)
        peer.drop()
    events = stream.distinct_events
    calls = {name: count / ran for name, count in timer.calls.items()}
    aws_like_s = cpu_used_s / ran * max(1.0, LAMBDA_FULL_VCPU_MB / memory_mb) + _requests_s(calls, latencies)
    model = _model(packed, windows, keys, memory_mb, batch_size, batches, latencies)
    gb = memory_mb / 1024
    return Duration(
        config=f"{'packed' if packed else 'single'}, windows {'on' if windows else 'off'}, {batch_size}",
        batches=ran,
        events_per_batch=events / ran,
        local_ms=handler_s / ran * 1000,
        local_io_ms=timer.seconds / ran * 1000,
        process_cpu_ms=cpu_used_s / ran * 1000,
        calls=calls,
        aws_like_ms=aws_like_s * 1000,
        model_ms=model.handler_s * 1000,
        gb_s_per_million_events=aws_like_s * gb / (events / ran) * 1e6,
        model_gb_s_per_million_events=model.handler_s * gb / model.units.events_per_batch * 1e6,
    )


def _requests_s(calls: Mapping[str, float], latencies: Latencies) -> float:
    """Requests per batch at the assumed latencies: one after another, but the single-item writes (a fenced
    batch's) ``Latencies.parallel_writes`` at a time, as the write pool sends them and the cost model prices them."""
    one_by_one = sum(calls.get(name, 0.0) * float(getattr(latencies, latency)) for name, latency in LATENCY_OF.items())
    single = calls.get("UpdateItem", 0.0) * latencies.single_write_ms / max(1, latencies.parallel_writes)
    return (one_by_one + single) / 1000


def _model(  # noqa: PLR0917 - the configuration, as ``measure`` and ``measure_through_proxy`` have it
    packed: bool, windows: bool, keys: int, memory_mb: int, records: float, batches: int, latencies: Latencies
) -> Bill:
    """``tally plan``'s model of the same traffic at ``records`` per batch (a rate that fills a batch in a second)."""
    pack = PACK if packed else 1
    traffic = u_traffic(pack, windows=windows, keys=keys, events_per_second=float(records * pack), memory_mb=memory_mb)
    return price(traffic, round(records), latencies=latencies, page_bytes=store_page_bytes, batches=max(2, batches))


COLUMNS: Final[list[Column]] = [
    field("config", header="configuration"),
    field("batches"),
    field("events_per_batch", ",.0f", "events/batch"),
    ("here ms (in DynamoDB Local)", lambda row: f"{row['local_ms']:,.1f} ({row['local_io_ms']:,.1f})"),
    field("process_cpu_ms", ",.1f", "CPU ms"),
    per_operation("calls", "requests/batch"),
    field("aws_like_ms", ",.1f", "AWS-like ms"),
    field("model_ms", ",.1f", "model ms"),
    field("gb_s_per_million_events", ",.1f", "GB-s / million events"),
    field("model_gb_s_per_million_events", ",.1f", "model GB-s / M"),
]


# ------------------------------------------------------------------------------------------------------
# Through the latency proxy: the real handler, AWS-like request latencies.

_HANDLER_MODULE: Final = "tally.handlers.sqs"


@dataclass(frozen=True, slots=True)
class ProxiedDuration:
    """One configuration's batches through ``tally_local.latency_proxy``, averaged per batch."""

    config: str
    batches: int
    records_per_batch: float
    events_per_batch: float
    wall_ms: float
    """The handler's wall time here (one full core, shared), requests answered at AWS-like latencies."""
    cpu_ms: float
    """CPU this process used (``time.process_time``; the proxy and DynamoDB Local run in other processes)."""
    requests: Mapping[str, float]
    """Requests per batch, by operation, as the proxy saw them."""
    request_ms: float
    """Sum over the batch's requests of the time each took to be answered (overlapping ones counted each)."""
    modeled_ms: float
    """Of which the published AWS latencies (``RequestLatencies``)."""
    stalled_ms: float
    """How long the handler waited only on DynamoDB Local (``stalled_s``): its share of the wall time, not AWS's."""
    lambda_ms: float
    """The duration on Lambda at ``memory_mb``: wall - stalled, plus the CPU stretched to the memory's vCPU
    share (``cpu x (1769 / memory - 1)``: exact when nothing overlaps the CPU, an upper bound when
    concurrent requests wait while the handler computes)."""
    computed_ms: float
    """Today's computed figure for the same batches: CPU x 1769/memory + requests x assumed ``Latencies``."""
    model_ms: float
    """``tally plan``'s model for the same traffic and records per batch."""
    gb_s_per_million_events: float
    computed_gb_s_per_million_events: float
    model_gb_s_per_million_events: float
    exact: bool
    """Every key's all-time counters equal the workload's sums afterwards."""


def payload_batches(deliveries: Sequence[Delivery], batch_size: int, sent_ms: int) -> list[list[Delivery]]:
    """Lambda's batches: at most ``batch_size`` records, cut where the event's JSON would pass 6 MB."""
    batches: list[list[Delivery]] = []
    start = 0
    while start < len(deliveries):
        candidates = deliveries[start : start + batch_size]
        sizes = [len(json.dumps(record)) for record in lambda_event(candidates, sent_ms)["Records"]]
        count = records_within_payload(sizes)
        batches.append(list(candidates[:count]))
        start += count
    return batches


@contextlib.contextmanager
def handler_environment(environment: Mapping[str, str]) -> Iterator[Any]:
    """``tally.handlers.sqs`` imported (or rebuilt) under ``environment``, its output kept off the terminal.

    The handler reads its settings at its first invocation (``pipeline``, cached): the cache is cleared on
    the way in and out, so each configuration builds its own pipeline, as a new deployment would.
    """
    with mock.patch.dict(os.environ, environment), open(os.devnull, "w") as devnull:
        module = importlib.import_module(_HANDLER_MODULE)
        module.pipeline.cache_clear()
        stream = module.logger.registered_handler
        previous = stream.setStream(devnull) if isinstance(stream, logging.StreamHandler) else None
        try:
            with contextlib.redirect_stdout(devnull):  # Powertools prints its EMF metrics
                yield module
        finally:
            if isinstance(stream, logging.StreamHandler) and previous is not None:
                stream.setStream(previous)
            module.pipeline.cache_clear()


def handler_settings(counters_table: str, markers_table: str, dynamodb_url: str) -> dict[str, str]:
    """The function's environment as a default deployment sets it, its DynamoDB endpoint ``dynamodb_url``."""
    return {
        **template_environment(load_template(TEMPLATE)),
        COUNTERS_TABLE: counters_table,
        MARKERS_TABLE: markers_table,
        DLQ_URL: "http://127.0.0.1:9/000000000000/bench-duration-dlq",  # a workload with no poison: never sent to
        "AWS_ENDPOINT_URL_DYNAMODB": dynamodb_url,
        "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:9",
        **LOCAL_CREDENTIALS,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
    }


def measure_through_proxy(
    ddb: DynamoDBLocal,
    proxy: LatencyProxy,
    *,
    packed: bool,
    batch_size: int,
    batches: int,
    windows: bool = True,
    keys: int = 1000,
    memory_mb: int = 512,
    latencies: Latencies = ASSUMED,
    seed: int = 20_261_124,
    extra_environment: Mapping[str, str] | None = None,
) -> ProxiedDuration:
    """Run ``batches`` Lambda batches through the unmodified SQS handler, its DynamoDB client on the proxy."""
    admin = ddb.client()
    counters_table, markers_table = tally_tables(admin, "dur", uuid.uuid4().hex[:10])
    environment = {
        **handler_settings(counters_table, markers_table, proxy.endpoint_url),
        **({} if windows else {WINDOWS: ""}),
        **(extra_environment or {}),
    }
    sent_ms = time.time_ns() // 1_000_000
    stream, warm_up, cut = _workload(packed=packed, batch_size=batch_size, batches=batches, keys=keys, seed=seed)
    context = lambda_context(900_000)
    wall_s = cpu_s = 0.0
    per_batch: list[list[ProxiedRequest]] = []
    try:
        with handler_environment(environment) as module:
            module.handler(lambda_event(warm_up, sent_ms), context)
            for batch in cut:
                event = lambda_event(batch, sent_ms)
                proxy.reset()
                started, cpu_started = time.perf_counter(), time.process_time()
                response = module.handler(event, context)
                wall_s += time.perf_counter() - started
                cpu_s += time.process_time() - cpu_started
                per_batch.append(proxy.requests())
                if response.get("batchItemFailures"):
                    raise RuntimeError(f"a benchmark batch failed records: {response}")
        counted = [delivery for batch in (warm_up, *cut) for delivery in batch]
        exact = _exact(admin, counters_table, markers_table, stream, counted)
    finally:
        drop_tables(admin, [counters_table, markers_table])
    ran = len(cut)
    records = sum(len(batch) for batch in cut)
    events = sum(delivery.event_count for batch in cut for delivery in batch)
    seen = [request for batch in per_batch for request in batch]
    calls = Counter(request.operation for request in seen)
    requests = {name: count / ran for name, count in calls.items()}
    request_s = sum(request.answered_s - request.arrived_s for request in seen) / ran
    modeled_s = sum(request.modeled_s for request in seen) / ran
    stalled = sum(stalled_s(batch) for batch in per_batch) / ran
    wall = wall_s / ran
    cpu = cpu_s / ran
    stretch = max(1.0, LAMBDA_FULL_VCPU_MB / memory_mb)
    lambda_s = max(cpu * stretch, wall - stalled + cpu * (stretch - 1))
    computed_s = cpu * stretch + _requests_s(requests, latencies)
    model = _model(packed, windows, keys, memory_mb, records / ran, ran, latencies)
    gb = memory_mb / 1024
    per_event = ran / events * 1e6
    return ProxiedDuration(
        config=(
            f"{'packed' if packed else 'single'}, windows {'on' if windows else 'off'}, BatchSize {batch_size:,}, "
            f"write concurrency {environment.get(WRITE_CONCURRENCY, DEFAULT_WRITE_CONCURRENCY)}"
        ),
        batches=ran,
        records_per_batch=records / ran,
        events_per_batch=events / ran,
        wall_ms=wall * 1000,
        cpu_ms=cpu * 1000,
        requests=requests,
        request_ms=request_s * 1000,
        modeled_ms=modeled_s * 1000,
        stalled_ms=stalled * 1000,
        lambda_ms=lambda_s * 1000,
        computed_ms=computed_s * 1000,
        model_ms=model.handler_s * 1000,
        gb_s_per_million_events=lambda_s * gb * per_event,
        computed_gb_s_per_million_events=computed_s * gb * per_event,
        model_gb_s_per_million_events=model.handler_s * gb / model.units.events_per_batch * 1e6,
        exact=exact,
    )


def _workload(
    *, packed: bool, batch_size: int, batches: int, keys: int, seed: int
) -> tuple[Stream, list[Delivery], list[list[Delivery]]]:
    """U delivered as Lambda would: a warm-up batch, then ``batches`` batches to time.

    One more batch than timed: the first warms the container (imports, the cached pipeline, the client's
    connections) and DynamoDB Local's JIT, as a warm Lambda container would be; it is counted, not timed.
    """
    pack = PACK if packed else 1
    # Enough events for ``batches`` full batches: a batch holds ``batch_size`` records, or fewer when the
    # 6 MB payload fills first (sized on a sample of the same stream; its smallest record, so never short).
    sample = lambda_event(u_stream(20 * pack, packed=packed, keys=keys, seed=seed).deliveries, 0)
    smallest = min(len(json.dumps(record)) for record in sample["Records"])
    records = min(batch_size, LAMBDA_PAYLOAD_MAX_BYTES // smallest + 1)
    stream = u_stream((batches + 1) * records * pack, packed=packed, keys=keys, seed=seed)
    warm_up, *cut = payload_batches(stream.deliveries, batch_size, time.time_ns() // 1_000_000)[: batches + 1]
    if not cut:
        raise ValueError(f"{batches} batch(es) of {batch_size} records need more events than the workload drew")
    return stream, warm_up, cut


def stalled_s(requests: Sequence[ProxiedRequest]) -> float:
    """How long the client waited only because DynamoDB Local answered later than the model.

    The time when some request is overdue (past ``arrival + modeled``, not yet answered) while no request
    is within its modeled latency: then, on AWS, everything in flight would have been answered and the
    client would have moved on. For requests one after another this is the sum of their excesses; for
    concurrent ones it is the part of DynamoDB Local's serialisation that held the whole client up (a
    request overdue while another is legitimately in flight costs nothing on AWS either).
    """
    edges: list[tuple[float, int, int]] = []  # (time, overdue change, in-model change)
    for request in requests:
        due = request.arrived_s + request.modeled_s
        edges += [(request.arrived_s, 0, 1), (min(due, request.answered_s), 0, -1)]
        if request.answered_s > due:
            edges += [(due, 1, 0), (request.answered_s, -1, 0)]
    edges.sort()
    stalled = 0.0
    overdue = in_model = 0
    previous = edges[0][0] if edges else 0.0
    for at, overdue_change, in_model_change in edges:
        if overdue > 0 and in_model == 0:
            stalled += at - previous
        overdue += overdue_change
        in_model += in_model_change
        previous = at
    return stalled


def _exact(
    admin: DynamoDBClient, counters_table: str, markers_table: str, stream: Stream, counted: Sequence[Delivery]
) -> bool:
    """Whether every key's all-time counters are the sums of the delivered messages' events."""
    expected = event_sums(stream.events, counted)
    store = DynamoDBCounterStore(admin, counters_table, markers_table, 86_400)
    return compare(expected, expected, {key: read_counters(store, key) for key in expected}).exact


PROXIED_COLUMNS: Final[list[Column]] = [
    field("config", header="configuration"),
    field("batches"),
    field("records_per_batch", ",.0f", "records/batch"),
    field("events_per_batch", ",.0f", "events/batch"),
    per_operation("requests", "requests/batch"),
    field("wall_ms", ",.0f", "wall ms here"),
    field("cpu_ms", ",.0f", "CPU ms"),
    ("in requests ms (modeled)", lambda row: f"{row['request_ms']:,.0f} ({row['modeled_ms']:,.0f})"),
    field("stalled_ms", ",.0f", "stalled on Local ms"),
    field("lambda_ms", ",.0f", "Lambda ms"),
    field("computed_ms", ",.0f", "computed ms"),
    field("model_ms", ",.0f", "model ms"),
    (
        "GB-s / M events: proxy / computed / model",
        lambda row: " / ".join(
            format(row[name], ",.1f")
            for name in ("gb_s_per_million_events", "computed_gb_s_per_million_events", "model_gb_s_per_million_events")
        ),
    ),
    EXACT,
]


def template_default(parameter: str) -> int:
    """A template parameter's default (``MemorySize``, ``BatchSize``): what a default deployment runs with."""
    return int(load_template(TEMPLATE)["Parameters"][parameter]["Default"])


def run_priced(batches: int, memory_mb: int, progress: Console) -> list[Duration]:
    """Single and packed U, windows off and on, at 100 and 700 records, requests priced at assumed latencies."""
    rows = []
    with DynamoDBLocal() as ddb:
        for packed, windows, size in itertools.product((False, True), (False, True), (100, 700)):
            progress.print(f"running {'packed' if packed else 'single'}, windows {windows}, {size} ...")
            rows.append(
                measure(ddb, packed=packed, windows=windows, batch_size=size, batches=batches, memory_mb=memory_mb)
            )
    return rows


def run_proxied(batches: int, memory_mb: int, concurrencies: Sequence[int], progress: Console) -> list[ProxiedDuration]:
    """Single and packed U, at the template's ``BatchSize`` (cut at 6 MB) and at 100 records, windows on,
    at each ``TALLY_WRITE_CONCURRENCY`` of ``concurrencies``."""
    rows = []
    sizes = (template_default("BatchSize"), 100)
    with DynamoDBLocal() as ddb, LatencyProxy(ddb.endpoint_url) as proxy:
        for packed, size, concurrency in itertools.product((False, True), sizes, concurrencies):
            kind = "packed" if packed else "single"
            progress.print(f"through the proxy: {kind}, BatchSize {size}, write concurrency {concurrency} ...")
            written = {WRITE_CONCURRENCY: str(concurrency)}
            rows.append(
                measure_through_proxy(
                    ddb,
                    proxy,
                    packed=packed,
                    batch_size=size,
                    batches=batches,
                    memory_mb=memory_mb,
                    extra_environment=written,
                )
            )
    return rows


@click.command()
@click.option("--batches", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--memory",
    "memory_mb",
    type=click.IntRange(128, 10_240),
    default=None,
    help="Default: 512, or with --proxy the template's MemorySize.",
)
@json_options
@click.option(
    "--write-concurrency",
    "concurrencies",
    type=click.IntRange(1, MAX_WRITE_CONCURRENCY),
    multiple=True,
    help=f"With --proxy: TALLY_WRITE_CONCURRENCY to run (repeat to compare; default {DEFAULT_WRITE_CONCURRENCY}).",
)
@click.option(
    "--proxy",
    is_flag=True,
    help="Run the real handler through tally_local.latency_proxy (published AWS latencies), not priced requests.",
)
def main(  # noqa: PLR0917 - click passes one argument per option
    batches: int,
    memory_mb: int | None,
    json_out: Path | None,
    as_json: bool,
    concurrencies: tuple[int, ...],
    proxy: bool,
) -> None:
    """Time batches: by default 100 and 700 records, single and packed, windows on and off, requests priced
    at assumed latencies; with ``--proxy``, the real handler through the latency proxy."""
    progress = console(stderr=as_json)
    if proxy:
        memory = memory_mb or template_default("MemorySize")
        proxied = run_proxied(batches, memory, concurrencies or (DEFAULT_WRITE_CONCURRENCY,), progress)
        rows, columns = [asdict(row) for row in proxied], PROXIED_COLUMNS
        title = f"handler duration per batch through the latency proxy (workload U), Lambda at {memory} MB"
        note = (
            "Lambda ms = wall - stalled on Local + CPU x (1769 MB / memory - 1); computed = CPU x 1769/memory + "
            f"requests x assumed {ASSUMED}; proxy latencies {RequestLatencies()}"
        )
    else:
        memory = memory_mb or 512
        rows, columns = [asdict(row) for row in run_priced(batches, memory, progress)], COLUMNS
        title = f"handler duration per batch (workload U), Lambda at {memory} MB"
        note = f"AWS-like = CPU x max(1, 1769 MB / memory) + requests x assumed latencies {ASSUMED}"
    parameters = {"memory_mb": memory}
    sys.exit(report("duration", title, columns, rows, parameters, json_out=json_out, as_json=as_json, notes=[note]))


if __name__ == "__main__":
    main()
