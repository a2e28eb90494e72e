"""A built function run the way Lambda runs it, without Docker: AWS's Runtime Interface Emulator (RIE) as a
process, exec'ing AWS's runtime interface client (``awslambdaric``) on python3.13 as the bootstrap.

What stands where on Lambda, and here:

- ``/var/task`` (the package, first on the path) is the ``sam build`` output directory;
- ``/var/runtime`` (the runtime's own ``awslambdaric`` and boto3, after the package) is a directory
  installed from ``runtime-requirements.txt``, with a boto3 deliberately older than the package's;
- ``/var/lang`` is a bare python3.13 virtual environment (no site-packages of its own: Lambda's holds none
  of the function's dependencies);
- the environment holds only what Lambda sets and what the template gives the function, plus
  ``AWS_ENDPOINT_URL_*`` for the local endpoints (DynamoDB Local, moto's SQS) and dummy credentials.

The RIE serves ``POST /2015-03-31/functions/function/invocations`` and answers with what the handler
returned (or Lambda's ``errorType``/``errorMessage`` document when it raised); the function is initialised
on the first invocation, in one execution environment that stays warm, as on Lambda. When the function
runs past its timeout (``AWS_LAMBDA_FUNCTION_TIMEOUT``, which the RIE enforces on the cold start and the
invocation together) the RIE answers, still with HTTP 200, the text ``Task timed out after N.00 seconds``
and resets the environment: ``invoke`` raises ``FunctionTimeout`` for it.

The reset runs after that answer. An invocation that comes while it still runs can have its gate canceled before
the new runtime starts (``error=ErrGateCanceled``, HTTP 502; seen once in CI, 100 ms after a timeout on a busy
machine): the event reached no handler, and Lambda would have run it on a fresh environment, so ``invoke`` sends
it again, up to ``INVOKE_ATTEMPTS`` times. Any other failure is the function's, and is never sent again: the
handler may have run.

Time limits: these tests check answers, counts and dead letters, never speed, so an emulated function gets
``EMULATED_TIMEOUT_S`` however short the template's timeout is: a cold start (imports, first clients) on a
loaded 2-core machine ran past the read function's own 10 s once. Speed has its own tests (tests/bench).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import psutil

from tally_local.service import BackgroundService

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

INVOKE_PATH = "/2015-03-31/functions/function/invocations"
REGION = "us-east-1"
START_TIMEOUT_S = 120.0
"""How long the RIE may take to listen: generous, a loaded machine is not what these tests test."""
START_ATTEMPTS = 5
"""Starts on new ports after the RIE exited on a port another process took first."""
EMULATED_TIMEOUT_S = 300
"""The timeout an emulated function of the template gets (Lambda allows up to 900 s)."""
INVOKE_MARGIN_S = 60.0
"""How much longer than the function's timeout the client waits for the RIE's answer (its timeout answer
included)."""
INVOKE_ATTEMPTS = 3
"""How many times ``invoke`` sends an event the RIE canceled before any runtime took it."""
LOG_WAIT_S = 5.0
"""How long ``invoke`` reads the log, after a 502, for the lines that say why (the RIE writes them as it answers)."""
_TIMED_OUT = re.compile(rb"Task timed out after [0-9.]+ seconds")
_GATE_CANCELED = "error=ErrGateCanceled"
_RUNTIME_STARTED = re.compile(r"INIT RTDONE|INVOKE RTDONE")
_INVOCATION_DONE = re.compile(r"Invoke DONE|INVOKE RTDONE")


@dataclass(frozen=True)
class FunctionRuntime:
    """Where the pieces of a Lambda execution environment live on this machine."""

    rie: Path
    """``aws-lambda-rie-<arch>`` from the aws-sam-cli wheel."""
    python: Path
    """python3.13 of a bare virtual environment (Lambda's ``/var/lang``)."""
    runtime_dir: Path
    """awslambdaric and the stand-in boto3 (Lambda's ``/var/runtime``)."""


@dataclass(frozen=True)
class FunctionConfig:
    """One function as the template configures it, with the local endpoints it must reach."""

    name: str
    handler: str
    package_dir: Path
    """The ``sam build`` output of the function (Lambda's ``/var/task``)."""
    memory_mb: int
    timeout_s: int
    template_environment: Mapping[str, str]
    endpoints: Mapping[str, str] = field(default_factory=dict)
    """``AWS_ENDPOINT_URL_<SERVICE>`` values (``{"DYNAMODB": "http://127.0.0.1:..."}``)."""


def lambda_environment(config: FunctionConfig, runtime: FunctionRuntime) -> dict[str, str]:
    """The process environment of the bootstrap: Lambda's reserved variables, the template's, endpoints.

    Nothing of the test process leaks in (no ``PYTHONPATH`` of the repo's ``src``, no ``HOME``, no proxy):
    what the function imports comes from the package or the stand-in runtime only.
    """
    environment = {
        "PATH": f"{runtime.python.parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "LAMBDA_TASK_ROOT": str(config.package_dir),
        "LAMBDA_RUNTIME_DIR": str(runtime.runtime_dir),
        # Lambda's python runtime: the package first, then the runtime's own libraries.
        "PYTHONPATH": f"{config.package_dir}:{runtime.runtime_dir}",
        "_HANDLER": config.handler,
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_LAMBDA_FUNCTION_NAME": config.name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(config.memory_mb),
        "AWS_LAMBDA_FUNCTION_TIMEOUT": str(config.timeout_s),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{config.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "local/rie",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        **config.template_environment,
    }
    for service, url in config.endpoints.items():
        environment[f"AWS_ENDPOINT_URL_{service.upper()}"] = url
    return environment


class FunctionError(AssertionError):
    """The function raised (the RIE answered with Lambda's error document) or never answered."""


class FunctionTimeout(FunctionError):
    """The function ran past its timeout (the RIE's ``Task timed out after ...`` answer)."""


class EmulatedFunction(BackgroundService):
    """One function under the RIE; ``invoke`` posts an event and returns the handler's JSON answer."""

    def __init__(self, config: FunctionConfig, runtime: FunctionRuntime, log_path: Path) -> None:
        self._config = config
        self._runtime = runtime
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._url = ""

    def start(self) -> Self:
        """The RIE on two ports picked free. Another process (a server of a test beside this one) may take a port
        between the pick and the RIE's bind: the RIE then exits (status 2), and is started again on new ports. It
        is ready once it listens on both itself; a port that merely accepts may be that other server's."""
        for _ in range(START_ATTEMPTS):
            emulator_port, runtime_api_port = _free_port(), _free_port()
            self._spawn(emulator_port, runtime_api_port)
            if self._wait_listening(emulator_port, runtime_api_port):
                self._url = f"http://127.0.0.1:{emulator_port}{INVOKE_PATH}"
                return self
        raise FunctionError(
            f"the RIE exited on each of {START_ATTEMPTS} starts, on ports picked free:\n{self.log_tail()}"
        )

    def _spawn(self, emulator_port: int, runtime_api_port: int) -> None:
        command = [
            str(self._runtime.rie),
            "--runtime-interface-emulator-address",
            f"127.0.0.1:{emulator_port}",
            "--runtime-api-address",
            f"127.0.0.1:{runtime_api_port}",
            str(self._runtime.python),
            "-m",
            "awslambdaric",
            self._config.handler,
        ]
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                env=lambda_environment(self._config, self._runtime),
                cwd=self._config.package_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _wait_listening(self, *ports: int) -> bool:
        """True once the RIE's own process listens on every one of ``ports``; False if it exited first."""
        process = self._process
        assert process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                listening = {
                    connection.laddr.port
                    for connection in psutil.Process(process.pid).net_connections(kind="tcp")
                    if connection.status == psutil.CONN_LISTEN
                }
            except psutil.NoSuchProcess:
                listening = set()
            if listening.issuperset(ports):
                return True
            if process.poll() is not None:
                return False
            time.sleep(0.05)
        raise FunctionError(f"the RIE did not listen on ports {ports} within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    @property
    def invoke_url(self) -> str:
        """Where ``invoke`` posts (set by ``start``)."""
        return self._url

    def invoke(self, event: Mapping[str, Any]) -> Any:
        """The handler's answer to ``event``; a function error raises ``FunctionError`` with the logs."""
        for attempt in range(1, INVOKE_ATTEMPTS + 1):
            logged_before = self._log_size()
            try:
                body = self._post(event)
                break
            except urllib.error.HTTPError as exc:
                if attempt < INVOKE_ATTEMPTS and self._canceled_before_any_runtime(logged_before):
                    continue
                raise FunctionError(f"invocation failed (attempt {attempt}): {exc}\n{self.log_tail()}") from exc
            except OSError as exc:
                raise FunctionError(f"invocation failed: {exc}\n{self.log_tail()}") from exc
        if _TIMED_OUT.fullmatch(body.strip()):
            raise FunctionTimeout(
                f"{self._config.name} {body.strip().decode()} (its timeout_s={self._config.timeout_s}, cold start "
                f"included)\n{self.log_tail()}"
            )
        try:
            answer = json.loads(body or b"null")
        except ValueError as exc:
            raise FunctionError(
                f"the RIE answered something other than JSON: {body[:500]!r}\n{self.log_tail()}"
            ) from exc
        if isinstance(answer, dict) and "errorType" in answer:
            raise FunctionError(f"the function raised {answer}\n{self.log_tail()}")
        return answer

    def _post(self, event: Mapping[str, Any]) -> bytes:
        request = urllib.request.Request(
            self._url, data=json.dumps(event).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=self._config.timeout_s + INVOKE_MARGIN_S) as response:
            body: bytes = response.read()
            return body

    def _log_size(self) -> int:
        return self._log_path.stat().st_size if self._log_path.exists() else 0

    def _canceled_before_any_runtime(self, logged_before: int) -> bool:
        """Whether the RIE's log since ``logged_before`` shows the invocation canceled before a runtime took it."""
        deadline = time.monotonic() + LOG_WAIT_S
        while True:
            with self._log_path.open("rb") as log:
                log.seek(logged_before)
                logged = log.read().decode(errors="replace")
            if _INVOCATION_DONE.search(logged) or time.monotonic() >= deadline:
                return _GATE_CANCELED in logged and not _RUNTIME_STARTED.search(logged)
            time.sleep(0.05)

    def log_tail(self, lines: int = 60) -> str:
        if not self._log_path.exists():
            return "(no log)"
        return "\n".join(self._log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def host_environment_without_python() -> dict[str, str]:
    """The test process's environment minus what would point a child Python at the repository's code."""
    return {name: value for name, value in os.environ.items() if name not in {"PYTHONPATH", "PYTHONHOME"}}
