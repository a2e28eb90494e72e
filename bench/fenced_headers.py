"""The requests a fenced batch sends for other epochs' headers when containers share keys, on DynamoDB Local.

Every container (a pipeline of the handlers' own wiring, ``tally.runtime.wire_pipeline``, fenced apply on) takes
packed batches (``--messages`` messages of 100 events over ``--keys`` keys) on the same keys at once, each on a
thread with its own client. A fenced write answers with the item's marks; the owner of the next batch reads the
headers of the other epochs' batches it saw there (may their marks be pruned?). This counts, per fenced batch, the
requests that read those headers and the other requests by operation (``before-parameter-build``: what the code
asks, before any retry), and checks every counter against the stream's sums.

Run: ``python -m bench fenced-headers [--containers 1 4 8] [--keys 50] [--batches 8]``.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.archive_cost import _NoLetters
from bench.deployment import default_settings
from bench.peers.tables import drop_tables, tally_tables
from bench.workloads import lambda_event, u_stream
from tally.reader.store_view import read_counters
from tally.runtime import CLIENT_CONFIG, wire_pipeline
from tally.sources.sqs import records_from_event
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.dynamodb_local import DynamoDBLocal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

    from bench.workloads import Totals


@dataclass(frozen=True)
class Figures:
    containers: int
    batches: int
    """Fenced journal batches committed."""
    header_requests: int
    """Requests that read other epochs' batch headers (``GetItem`` or ``BatchGetItem`` of header ids only)."""
    headers_asked: int
    """Header ids those requests asked for."""
    requests: dict[str, int]
    """Every request by operation."""

    @property
    def header_requests_per_batch(self) -> float:
        return self.header_requests / self.batches if self.batches else 0.0


class _Requests:
    """What the clients ask, by operation, and the header reads among them (``before-parameter-build``)."""

    def __init__(self, markers_table: str) -> None:
        self._markers = markers_table
        self._lock = threading.Lock()
        self.by_operation: Counter[str] = Counter()
        self.header_requests = 0
        self.headers_asked = 0

    def attach(self, client: DynamoDBClient) -> None:
        client.meta.events.register("before-parameter-build.dynamodb", self._keep)

    def _keep(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        ids = _ids_asked(model.name, params, self._markers)
        with self._lock:
            self.by_operation[model.name] += 1
            if ids and all(_is_header(ledger_id) for ledger_id in ids):
                self.header_requests += 1
                self.headers_asked += len(ids)


def _ids_asked(operation: str, params: dict[str, Any], table: str) -> list[str]:
    if operation == "GetItem" and params.get("TableName") == table:
        return [params["Key"]["id"]["S"]]
    if operation == "BatchGetItem" and table in params.get("RequestItems", {}):
        return [key["id"]["S"] for key in params["RequestItems"][table]["Keys"]]
    return []


def _is_header(ledger_id: str) -> bool:
    """A journal batch's header id (``b#<batch>``); its pages and markers carry a second ``#``."""
    return ledger_id.startswith("b#") and "#" not in ledger_id[2:]


def measure(ddb: DynamoDBLocal, containers: int, *, keys: int, batches: int, messages: int = 10) -> Figures:
    """``containers`` pipelines at once, ``batches`` batches each of ``messages`` packed messages on ``keys`` keys."""
    admin = ddb.client()
    tables = tally_tables(admin, "fh", f"{containers}x{time.time_ns() % 1_000_000}")
    stream = u_stream(containers * batches * messages * 100, packed=True, keys=keys)
    work = list(stream.batches(messages))
    requests = _Requests(tables[1])
    pipelines = []
    for _ in range(containers):
        client = ddb.client(CLIENT_CONFIG)
        requests.attach(client)
        pipelines.append(wire_pipeline(client, _NoLetters(), default_settings(tables[0], tables[1]), fenced=True))
    figures: Counter[str] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        try:
            for batch in work[index::containers]:
                now = time.time_ns() // 1_000_000
                result = pipelines[index].process(records_from_event(lambda_event(batch, now)), now, lambda: 900_000)
                if result.failed_record_ids:
                    raise RuntimeError(f"a benchmark batch failed records: {result.failed_record_ids[:3]}")
                with lock:
                    figures.update(result.figures)
        except BaseException as exc:  # raised below, on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(containers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        if errors:
            raise errors[0]
        _check(admin, tables, stream.expected())
    finally:
        drop_tables(admin, list(tables))
    return Figures(
        containers=containers,
        batches=figures["JournalBatches"],
        header_requests=requests.header_requests,
        headers_asked=requests.headers_asked,
        requests=dict(requests.by_operation),
    )


def _check(client: DynamoDBClient, tables: Sequence[str], expected: Totals) -> None:
    store = DynamoDBCounterStore(client, tables[0], tables[1], 86_400)
    for key, counters in expected.items():
        found = read_counters(store, key)
        if any(found.get(name, 0) != value for name, value in counters.items()):
            raise RuntimeError(f"{key}: stored {found}, the stream sums to {counters}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fenced-headers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--containers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--batches", type=int, default=8, help="batches per container")
    args = parser.parse_args()
    print(f"{args.keys} keys, {args.batches} batches per container of 10 packed messages (100 events each)")
    print("| containers | fenced batches | header requests | per batch | headers asked | every request |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    with DynamoDBLocal() as ddb:
        for containers in args.containers:
            f = measure(ddb, containers, keys=args.keys, batches=args.batches)
            every = ", ".join(f"{name} {count:,}" for name, count in sorted(f.requests.items()))
            print(
                f"| {f.containers} | {f.batches} | {f.header_requests} | {f.header_requests_per_batch:.2f} "
                f"| {f.headers_asked} | {every} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
