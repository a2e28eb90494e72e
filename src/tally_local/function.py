"""Run a Lambda function locally the way Lambda does: isolated execution environments, one invocation each.

Each execution environment is a process of its own, as each Lambda instance is a sandbox of its own:
it gets the function's environment variables before the handler is imported, imports the handler once
(the init phase; the handler's cached pipeline is then built on the first invocation, a cold start),
and serves one invocation at a time. The processes are forked from a ``forkserver`` that has already
imported the heavy dependencies (boto3, Powertools, msgspec: seconds of imports on a busy machine),
so an environment starts in a fraction of a second; the handler module itself, which reads its
settings from the environment when it is imported, is imported only in the environment.
``concurrency`` environments run side by side, so concurrent batches really run concurrently, with
module state (Powertools' metric set, the handler's clients) never shared between them, and on both
cores.

What a function prints (its structured logs, the EMF metrics Powertools flushes after each invocation,
tracebacks) goes to a log file per environment, as Lambda sends it to a CloudWatch log stream. After
each invocation the environment reads back the EMF lines it just wrote and returns their sums with the
response (``Invocation.metrics``), together with the DynamoDB writes the invocation made, counted by a
botocore hook (``tally_local.kit.writes``): the same figures CloudWatch would show, from the unmodified handler.

It owns the execution environments and nothing of event sources: what to invoke, when and with which
batch is the pollers' (``tally_local.poller``); it must not change what the handler does.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

from tally_local.context import LocalLambdaContext
from tally_local.kit.writes import DynamoDBWrites, WriteMeter
from tally_local.resources import LOCAL_ACCOUNT, LOCAL_REGION
from tally_local.service import BackgroundService

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from tally_local.template import FunctionDefinition

_HOST_PREFIXES_DROPPED: Final = ("AWS_", "TALLY_", "POWERTOOLS_")
_PRELOAD: Final = [
    "boto3",
    "botocore.session",
    "aws_lambda_powertools",
    "aws_xray_sdk.core",
    "msgspec",
    "tenacity",
    "tally.runtime",
]
"""Imported once by the forkserver; none of them reads function settings when imported. X-Ray's SDK (which
Powertools' ``Tracer`` imports) builds its recorder from ``AWS_XRAY_*`` and ``LAMBDA_TASK_ROOT``, set neither in
the forkserver nor in a local environment; ``tally.runtime`` brings the pipeline, the store and the commit (the
handler modules, which read the settings, are imported in the environment). Each environment's init fell from
about 0.22 s of CPU to 0.01 s."""


def function_arn(logical_id: str, region: str = LOCAL_REGION) -> str:
    return f"arn:aws:lambda:{region}:{LOCAL_ACCOUNT}:function:tally-local-{logical_id}"


@dataclass(frozen=True, slots=True)
class Invocation:
    """One invocation's result, as Lambda's event source mapping and CloudWatch would see it."""

    response: Any
    error: str | None
    """``"ErrorType: message"`` when the handler raised or its environment died (a function error)."""
    duration_ms: float
    writes: DynamoDBWrites = field(default_factory=DynamoDBWrites)
    metrics: dict[str, float] = field(default_factory=dict)
    """EMF metrics the invocation emitted (Powertools ``Metrics``), summed by name."""


class LocalFunction(BackgroundService):
    """Up to ``concurrency`` execution environments of one function; ``invoke`` blocks until one answers."""

    def __init__(
        self,
        definition: FunctionDefinition,
        environment: Mapping[str, str],
        *,
        concurrency: int,
        log_dir: Path,
    ) -> None:
        if concurrency < 1:
            raise ValueError("a function needs at least one execution environment")
        self.definition = definition
        self.arn = function_arn(definition.logical_id)
        self.concurrency = concurrency
        self.log_dir = log_dir
        # Like a Lambda sandbox, the environment holds the function's configuration and nothing of the
        # host's AWS, tally or Powertools settings (a stray AWS_ENDPOINT_URL_SQS would win over the stack's).
        host = {name: value for name, value in os.environ.items() if not name.startswith(_HOST_PREFIXES_DROPPED)}
        self._environment = {**host, **definition.environment, **environment}
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self._requests = itertools.count(1)

    def start(self) -> Self:
        """Start every execution environment and wait for their init phases (imports, environment)."""
        with self._lock:
            if self._executor is not None:
                return self
            self.log_dir.mkdir(parents=True, exist_ok=True)
            executor = self._executor = self._new_executor()
        # One task per environment: each submit finds no idle process and spawns one, so they all start
        # (and import) side by side now, in the thread that starts the stack. Started on demand instead (as
        # Lambda starts them), an environment is spawned from a poller's thread during an invocation, where a
        # spawn that raises stops the poller and the stack: in one clean-clone CI run of five with them started
        # on demand, a docs page's stack went away mid-page (its cause was not found), so they start here.
        for future in [executor.submit(_ready) for _ in range(self.concurrency)]:
            future.result()
        return self

    def stop(self) -> None:
        """Shut every environment down (waits for invocations in flight). Safe to call twice."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def invoke(self, event: Mapping[str, Any]) -> Invocation:
        """Invoke synchronously (as an event source mapping does) in a free environment."""
        request_id = f"{self.definition.logical_id}-{next(self._requests):08d}"
        with self._lock:
            executor = self._executor
        if executor is None:
            raise RuntimeError(f"{self.definition.logical_id} is not started")
        started = time.perf_counter()
        try:
            return executor.submit(_invoke, dict(event), request_id).result()
        except BrokenProcessPool as exc:
            # An environment died mid-invocation (as a Lambda sandbox can): the invocation failed, and
            # new environments replace the broken ones, as Lambda would start fresh instances.
            self._replace(executor)
            elapsed = (time.perf_counter() - started) * 1000
            return Invocation(response=None, error=f"Runtime.ExitError: {exc}", duration_ms=elapsed)

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = self._new_executor()
        broken.shutdown(wait=False, cancel_futures=True)

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.concurrency,
            mp_context=_context(),
            initializer=_init_environment,
            initargs=(
                _Init(
                    handler_path=self.definition.handler,
                    environment=dict(self._environment),
                    log_prefix=str(self.log_dir / self.definition.logical_id),
                    timeout_ms=self.definition.timeout_seconds * 1000,
                    logical_id=self.definition.logical_id,
                    arn=self.arn,
                ),
            ),
        )


@functools.cache
def _context() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)  # only effective before the forkserver first starts
    return context


# --------------------------------------------------------------------------------------------------
# Inside an execution environment (a forked process)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Init:
    """What a new execution environment needs (sent to the spawned process)."""

    handler_path: str
    environment: dict[str, str]
    log_prefix: str
    timeout_ms: int
    logical_id: str
    arn: str


@dataclass
class _Environment:
    handler: Callable[[dict[str, Any], Any], Any]
    timeout_ms: int
    function_name: str
    function_arn: str
    meter: WriteMeter
    log_path: Path
    log_offset: int = 0


_ENVIRONMENT: _Environment | None = None


def _init_environment(init: _Init) -> None:
    """The init phase: environment, log stream, meter, then the handler module's import."""
    global _ENVIRONMENT  # noqa: PLW0603 - one environment per process, set once, like Lambda's init phase
    # Ctrl-C reaches the whole foreground process group: the runtime (the parent) stops the environments
    # in order, as Lambda manages its sandboxes, rather than each dying mid-invocation.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.clear()  # the forkserver's environment is the parent's when it started: not this function's
    os.environ.update(init.environment)
    log_path = Path(f"{init.log_prefix}-{os.getpid()}.log")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)  # everything the function prints, C extensions included, goes to its log stream
    os.dup2(log_fd, 2)
    os.close(log_fd)
    meter = WriteMeter()
    meter.install()  # before the handler creates any client
    module_name, _, attribute = init.handler_path.rpartition(".")
    handler = getattr(importlib.import_module(module_name), attribute)
    sys.stdout.flush()
    _ENVIRONMENT = _Environment(
        handler=handler,
        timeout_ms=init.timeout_ms,
        function_name=f"tally-local-{init.logical_id}",
        function_arn=init.arn,
        meter=meter,
        log_path=log_path,
        log_offset=log_path.stat().st_size,
    )


def _ready() -> int:
    """A no-op task: returns once the environment's init phase is over."""
    return os.getpid()


def _invoke(event: dict[str, Any], request_id: str) -> Invocation:
    environment = _ENVIRONMENT
    if environment is None:  # pragma: no cover - the executor always runs the initializer first
        raise RuntimeError("execution environment not initialised")
    context = LocalLambdaContext.with_timeout(
        environment.timeout_ms,
        function_name=environment.function_name,
        function_arn=environment.function_arn,
        request_id=request_id,
    )
    before = environment.meter.total()
    started = time.perf_counter()
    response: Any = None
    error: str | None = None
    try:
        response = environment.handler(event, context)
    except Exception as exc:  # a function error: reported to the event source, as Lambda does
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()  # into the function's log stream, as the Lambda runtime logs it
    duration_ms = (time.perf_counter() - started) * 1000
    sys.stdout.flush()
    sys.stderr.flush()
    return Invocation(
        response=response,
        error=error,
        duration_ms=duration_ms,
        writes=environment.meter.total() - before,
        metrics=_new_metrics(environment),
    )


def _new_metrics(environment: _Environment) -> dict[str, float]:
    with environment.log_path.open("rb") as log:
        log.seek(environment.log_offset)
        written = log.read()
    environment.log_offset += len(written)
    return emf_metrics(written.decode("utf-8", "replace").splitlines())


def emf_metrics(lines: list[str]) -> dict[str, float]:
    """Sum the metrics of every CloudWatch Embedded Metric Format line among ``lines``, by name."""
    totals: dict[str, float] = {}
    for line in lines:
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        try:
            document = json.loads(line)
        except ValueError:
            continue
        for directive in document.get("_aws", {}).get("CloudWatchMetrics", []):
            for metric in directive.get("Metrics", []):
                name = metric.get("Name")
                value = document.get(name)
                values = value if isinstance(value, list) else [value]
                totals[name] = totals.get(name, 0.0) + sum(v for v in values if isinstance(v, int | float))
    return totals
