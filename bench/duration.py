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
for the same traffic. This is issue 16's part 5 without its latency proxy: the proxy would only sleep
assumed latencies, and their sum is what is computed here.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click
from rich.console import Console
from rich.table import Table

from bench.peers import lambda_context
from bench.peers.tally_pipeline import TallyCounter
from bench.plan_check import COUNTERS, KEY_BYTES, PACK, store_page_bytes
from bench.workloads import WorkloadSpec, deliver, lambda_event, usage_events
from tally.cost.model import LAMBDA_FULL_VCPU_MB, Latencies, Traffic, price
from tally.local.dynamodb_local import DynamoDBLocal
from tally.runtime import CLIENT_CONFIG

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

_START: Final = "bench_duration_start"
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
    latencies: Latencies | None = None,
    seed: int = 20_261_124,
) -> Duration:
    """Run ``batches`` batches of one configuration and time them."""
    latencies = latencies or Latencies()
    admin = ddb.client()
    client = ddb.client(CLIENT_CONFIG)
    pack = PACK if packed else 1
    spec = WorkloadSpec(events=batches * batch_size * pack, keys=keys, resend_rate=0.0, pack=PACK, seed=seed)
    stream = deliver("U", usage_events(spec), spec, packed=packed).without_resends()
    peer = TallyCounter(client, admin, uuid.uuid4().hex[:10], packed=packed, windows=windows)
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
    cpu_s = cpu_used_s / ran * max(1.0, LAMBDA_FULL_VCPU_MB / memory_mb)
    io_ms = sum(calls.get(name, 0.0) * getattr(latencies, field) for name, field in LATENCY_OF.items())
    aws_like_s = cpu_s + io_ms / 1000
    traffic = Traffic(
        events_per_second=1.0,
        keys=keys,
        events_per_message=pack,
        counters=COUNTERS,
        key_bytes=KEY_BYTES,
        windows=("hour", "day") if windows else (),
        memory_mb=memory_mb,
    )
    # The model at the same records per batch (a rate that fills the batch in a second).
    model = price(
        Traffic(**{**_fields(traffic), "events_per_second": float(batch_size * pack)}),
        batch_size,
        latencies=latencies,
        page_bytes=store_page_bytes,
        batches=max(2, batches),
    )
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


def _fields(traffic: Traffic) -> dict[str, Any]:
    return {name: getattr(traffic, name) for name in Traffic.__dataclass_fields__}


def table(rows: Sequence[Duration], memory_mb: int) -> Table:
    out = Table(title=f"handler duration per batch (workload U), Lambda at {memory_mb} MB")
    for name in (
        "configuration",
        "batches",
        "events/batch",
        "here ms (in DynamoDB Local)",
        "CPU ms",
        "requests/batch",
        "AWS-like ms",
        "model ms",
        "GB-s / million events",
        "model GB-s / M",
    ):
        out.add_column(name, justify="left" if name == "configuration" else "right")
    for row in rows:
        out.add_row(
            row.config,
            str(row.batches),
            f"{row.events_per_batch:,.0f}",
            f"{row.local_ms:,.1f} ({row.local_io_ms:,.1f})",
            f"{row.process_cpu_ms:,.1f}",
            ", ".join(f"{name} {count:.1f}" for name, count in sorted(row.calls.items())),
            f"{row.aws_like_ms:,.1f}",
            f"{row.model_ms:,.1f}",
            f"{row.gb_s_per_million_events:,.1f}",
            f"{row.model_gb_s_per_million_events:,.1f}",
        )
    return out


@click.command()
@click.option("--batches", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--memory", "memory_mb", type=click.IntRange(128, 10_240), default=512, show_default=True)
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the rows as JSON.")
def main(batches: int, memory_mb: int, json_out: Path | None) -> None:
    """Time batches of 100 and 700 records, single and packed, windows on and off."""
    console = Console(width=200)
    rows = []
    with DynamoDBLocal() as ddb:
        for packed in (False, True):
            for windows in (False, True):
                for size in (100, 700):
                    console.print(f"running {'packed' if packed else 'single'}, windows {windows}, {size} ...")
                    rows.append(
                        measure(
                            ddb, packed=packed, windows=windows, batch_size=size, batches=batches, memory_mb=memory_mb
                        )
                    )
    console.print(table(rows, memory_mb))
    if json_out is not None:
        documents = [asdict(row) for row in rows]
        json_out.write_text(json.dumps(documents, indent=2) + "\n")
    console.print(f"AWS-like = CPU x max(1, 1769 MB / memory) + requests x assumed latencies {Latencies()}")


if __name__ == "__main__":
    main()
