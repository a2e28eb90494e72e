"""``python -m tally_local.latency_proxy``: an HTTP proxy that gives DynamoDB Local AWS-like request latencies.

Why: the handler's duration on Lambda is its CPU plus its DynamoDB requests, and DynamoDB Local answers
in its own time, not DynamoDB's: it serialises transactions, and on this machine a 100-action
``TransactWriteItems`` takes it 20-40 ms on a busy core. There is no AWS account here. So the unmodified
handler talks, through ``AWS_ENDPOINT_URL_DYNAMODB``, to this proxy, which forwards each request to
DynamoDB Local at once and answers at ``max(arrival + modeled latency, DynamoDB Local's reply)``. The
modeled latency is ``tally.cost.model.RequestLatencies`` (published p50 figures, per operation from the
``X-Amz-Target`` header and per item from the body). Requests are served on a thread each, so requests
the client sends concurrently overlap here as on AWS.

What it cannot hide: a request DynamoDB Local takes longer to answer than the model (its own time, or
its time queued behind other transactions it serialises) is answered late by that much. Each record
keeps that **excess**, so the bench can say how much of a duration is DynamoDB Local's and not AWS's.

It runs as its own process (``LatencyProxy`` starts it), so its CPU never counts as the handler's.
``GET /__proxy/requests`` returns the requests answered since the last ``POST /__proxy/reset`` (JSON).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, TYPE_CHECKING, Any, ClassVar, Final, Self
from urllib.parse import urlsplit

import click

from tally.cost.model import RequestLatencies

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import TracebackType

CONTROL_PREFIX: Final = "/__proxy/"
_TARGET_PREFIX: Final = "DynamoDB_20120810."
_HOP_BY_HOP: Final = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """One request as the proxy saw it; times in seconds on the proxy's monotonic clock."""

    operation: str
    items: int
    arrived_s: float
    upstream_s: float
    """How long DynamoDB Local took to answer (from the forward to its last byte)."""
    modeled_s: float
    answered_s: float
    status: int

    @property
    def excess_s(self) -> float:
        """How much later than the model the client was answered (DynamoDB Local's share, not AWS's)."""
        return max(0.0, self.answered_s - self.arrived_s - self.modeled_s)


def operation_of(target: str | None) -> str:
    """``DynamoDB_20120810.TransactWriteItems`` -> ``TransactWriteItems``."""
    if not target:
        return "unknown"
    return target.removeprefix(_TARGET_PREFIX)


def item_count(operation: str, body: bytes) -> int:
    """Items one request carries: actions of a transaction, keys or requests of a batch, else 1."""
    if operation not in {"TransactWriteItems", "TransactGetItems", "BatchGetItem", "BatchWriteItem"}:
        return 1
    try:
        document = json.loads(body)
    except ValueError:
        return 1
    if operation.startswith("Transact"):
        return len(document.get("TransactItems", ()))
    requests = document.get("RequestItems", {})
    if operation == "BatchGetItem":
        return sum(len(table.get("Keys", ())) for table in requests.values())
    return sum(len(table) for table in requests.values())


class _Journal:
    """The requests answered since the last reset (shared by the server's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[ProxiedRequest] = []

    def add(self, request: ProxiedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def take(self, *, reset: bool) -> list[ProxiedRequest]:
        with self._lock:
            taken = list(self._requests)
            if reset:
                self._requests.clear()
            return taken


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects
    disable_nagle_algorithm = True
    """TCP_NODELAY: else the body, written after the headers, waits for the client's delayed ACK (40 ms)."""
    upstream: ClassVar[tuple[str, int]]
    latencies: ClassVar[RequestLatencies]
    journal: ClassVar[_Journal]
    _local: ClassVar[threading.local] = threading.local()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would cost the machine more than the requests."""

    def do_GET(self) -> None:
        if self.path.startswith(CONTROL_PREFIX + "requests"):
            records = [{**asdict(record), "excess_s": record.excess_s} for record in self.journal.take(reset=False)]
            self._reply(200, [("Content-Type", "application/json")], json.dumps(records).encode())
            return
        self._forward(b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith(CONTROL_PREFIX + "reset"):
            self.journal.take(reset=True)
            self._reply(204, [], b"")
            return
        self._forward(body)

    def _forward(self, body: bytes) -> None:
        arrived = time.monotonic()
        operation = operation_of(self.headers.get("X-Amz-Target"))
        modeled_s = self.latencies.of(operation, item_count(operation, body)) / 1000
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        status, reply_headers, reply = self._upstream_call(self.command, self.path, body, headers)
        upstream_s = time.monotonic() - arrived
        wait = arrived + modeled_s - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        answered = time.monotonic()
        self.journal.add(
            ProxiedRequest(operation, item_count(operation, body), arrived, upstream_s, modeled_s, answered, status)
        )
        self._reply(status, reply_headers, reply)

    def _upstream_call(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request to DynamoDB Local on this thread's kept-alive connection (reopened once if stale)."""
        for attempt in (1, 2):
            connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
            if connection is None:
                connection = http.client.HTTPConnection(*self.upstream, timeout=60)
                self._local.connection = connection
            try:
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
                continue
            kept = [(name, value) for name, value in response.getheaders() if name.lower() not in _HOP_BY_HOP]
            return response.status, kept, data
        raise AssertionError("unreachable")  # pragma: no cover

    def _reply(self, status: int, headers: Sequence[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(upstream_url: str, port: int, latencies: RequestLatencies, ready: IO[str]) -> None:
    """Serve until killed; writes ``http://127.0.0.1:<port>`` to ``ready`` once listening."""
    parts = urlsplit(upstream_url)
    handler = type(
        "ProxyHandler",
        (_ProxyHandler,),
        {"upstream": (parts.hostname or "127.0.0.1", parts.port or 80), "latencies": latencies, "journal": _Journal()},
    )
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    ready.write(f"http://127.0.0.1:{server.server_address[1]}\n")
    ready.flush()
    server.serve_forever()


class LatencyProxy:
    """The proxy in a child process of its own, in front of ``upstream_url``. A context manager."""

    def __init__(self, upstream_url: str, *, scale: float = 1.0) -> None:
        self._upstream = upstream_url
        self._scale = scale
        self._process: subprocess.Popen[str] | None = None
        self.endpoint_url = ""

    def __enter__(self) -> Self:
        command = [
            sys.executable,
            "-m",
            "tally_local.latency_proxy",
            "--upstream",
            self._upstream,
            "--scale",
            str(self._scale),
        ]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline().strip()
        if not line.startswith("http://"):
            self.__exit__(None, None, None)
            raise RuntimeError(f"the latency proxy did not start (it printed {line!r})")
        self.endpoint_url = line
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()

    def reset(self) -> None:
        """Forget the requests answered so far."""
        request = urllib.request.Request(self.endpoint_url + CONTROL_PREFIX + "reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def requests(self) -> list[ProxiedRequest]:
        """The requests answered since the last reset."""
        with urllib.request.urlopen(self.endpoint_url + CONTROL_PREFIX + "requests", timeout=10) as response:
            documents = json.loads(response.read())
        return [
            ProxiedRequest(**{key: value for key, value in document.items() if key != "excess_s"})
            for document in documents
        ]


@click.command()
@click.option("--upstream", required=True, help="DynamoDB Local's endpoint, e.g. http://127.0.0.1:8000.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="0: any free port.")
@click.option(
    "--scale",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Multiply every modeled latency (0: forward only, no added latency).",
)
def main(upstream: str, port: int, scale: float) -> None:
    """Proxy DynamoDB requests to UPSTREAM, answering each after its published AWS latency."""
    base = RequestLatencies()
    latencies = RequestLatencies(
        single_item_ms=base.single_item_ms * scale,
        transact_base_ms=base.transact_base_ms * scale,
        transact_per_action_ms=base.transact_per_action_ms * scale,
        batch_base_ms=base.batch_base_ms * scale,
        batch_per_item_ms=base.batch_per_item_ms * scale,
    )
    serve(upstream, port, latencies, sys.stdout)


if __name__ == "__main__":
    main()
