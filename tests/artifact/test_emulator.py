"""The emulator harness itself: a function that runs out of time is reported as a timeout, with the limit; a port
taken by another process before the emulator binds it is not taken for the emulator; an invocation the RIE cancels
while it resets the environment of a timed-out one is sent again, and no other failure is.

Under the Runtime Interface Emulator a timed-out invocation answers HTTP 200 with the text ``Task timed out
after N.00 seconds``, not JSON: read as JSON, it surfaced as a ``JSONDecodeError`` that did not say what
happened (a cold start on a loaded machine had run past the function's own 10 s).
"""

from __future__ import annotations

import socket
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.artifact import emulator
from tests.artifact.build import (
    ToolMissing,
    host_architecture,
    lambda_runtime_dir,
    python313,
    runtime_interface_emulator,
)
from tests.artifact.emulator import EmulatedFunction, FunctionConfig, FunctionError, FunctionRuntime, FunctionTimeout
from tests.support.ports import ports_starting_with

SLOW_HANDLER = """\
import time


def handler(event, context):
    time.sleep(event["sleep_s"])
    return {"slept_s": event["sleep_s"]}
"""


STAND_IN_RIE = """\
import http.server
import os
import socket
import sys

# The RIE's arguments: its own address and the runtime API's (the bootstrap's command follows).
arguments = sys.argv[1:]
own_host, own_port = arguments[arguments.index("--runtime-interface-emulator-address") + 1].split(":")
api_host, api_port = arguments[arguments.index("--runtime-api-address") + 1].split(":")
answers = os.environ["STAND_IN_ANSWERS"].split(",")
LOGS = {
    # What the RIE printed, and answered, when an invocation came while it reset a timed-out environment.
    "gate-canceled": (502, [
        "START RequestId: 2dc5075a-4559-4ca6-b849-3922f8953832 Version: $LATEST",
        "05 Dec 2026 09:36:56,925 [INFO] (rapid) INIT START(type: on-demand, phase: invoke)",
        "05 Dec 2026 09:36:56,925 [INFO] (rapid) INIT REPORT(durationMs: 0.036000)",
        "05 Dec 2026 09:36:56,925 [INFO] (rapid) INVOKE START(requestId: 2dc5075a-4559-4ca6-b849-3922f8953832)",
        "05 Dec 2026 09:36:56,925 [ERROR] (rapid) Invoke failed InvokeID=2dc5075a-4559-4ca6-b849-3922f8953832 "
        "error=ErrGateCanceled",
        "05 Dec 2026 09:36:56,925 [ERROR] (rapid) Invoke DONE failed: Sandbox.Failure",
        "05 Dec 2026 09:36:56,925 [WARNING] (rapid) Reset initiated: ReleaseFail",
    ]),
    # A runtime that started and then failed: the event may have reached the handler.
    "runtime-failed": (502, [
        "START RequestId: 7b0f3c1e-0d7a-4c55-9a53-3f1f0f7d2a11 Version: $LATEST",
        "05 Dec 2026 09:36:57,001 [INFO] (rapid) INIT START(type: on-demand, phase: invoke)",
        "05 Dec 2026 09:36:57,040 [INFO] (rapid) INIT RTDONE(status: success)",
        "05 Dec 2026 09:36:57,041 [INFO] (rapid) INVOKE START(requestId: 7b0f3c1e-0d7a-4c55-9a53-3f1f0f7d2a11)",
        "05 Dec 2026 09:36:57,050 [WARNING] (rapid) First fatal error stored in appctx: Runtime.ExitError",
        "05 Dec 2026 09:36:57,050 [ERROR] (rapid) Invoke DONE failed: Sandbox.Failure",
    ]),
    "ok": (200, ["START RequestId: 0e6f0c35-2b1d-4c1e-8d0e-5b7f0b9c9d21 Version: $LATEST"]),
}


class Invocations(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        status, lines = LOGS[answers.pop(0) if len(answers) > 1 else answers[0]]
        print("\\n".join(lines), flush=True)
        body = b'{"slept_s": 0}' if status == 200 else b'{"errorType": "Sandbox.Failure"}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


runtime_api = socket.create_server((api_host, int(api_port)))
http.server.HTTPServer((own_host, int(own_port)), Invocations).serve_forever()
"""
"""A stand-in for the RIE: it answers each invocation as ``STAND_IN_ANSWERS`` (comma-separated, the last one
repeated) says, logging what the RIE logged for that answer."""


# It runs a function under the Runtime Interface Emulator, with awslambdaric on python3.13.
pytestmark = pytest.mark.build


@pytest.fixture(scope="module")
def runtime() -> FunctionRuntime:
    try:
        python = python313()
        rie = runtime_interface_emulator(host_architecture())
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    lang_python, runtime_dir = lambda_runtime_dir(python)
    return FunctionRuntime(rie=rie, python=lang_python, runtime_dir=runtime_dir)


def _slow_function(tmp_path: Path, timeout_s: int) -> FunctionConfig:
    """A function that sleeps as long as its event says, with ``timeout_s``."""
    package = tmp_path / "package"
    package.mkdir()
    (package / "slow.py").write_text(SLOW_HANDLER, encoding="utf-8")
    return FunctionConfig(
        name="Slow",
        handler="slow.handler",
        package_dir=package,
        memory_mb=128,
        timeout_s=timeout_s,
        template_environment={},
    )


def test_a_function_that_runs_out_of_time_is_reported_as_a_timeout(runtime: FunctionRuntime, tmp_path: Path) -> None:
    # GIVEN a function that sleeps as long as it is told, with a 5 s timeout: the RIE counts a cold start (two here,
    # about 50 ms each) in the timeout, and a process starved of CPU beside six busy loops ran past 1 s in 6 of 80
    # runs
    config = _slow_function(tmp_path, timeout_s=5)
    with EmulatedFunction(config, runtime, tmp_path / "slow.log") as function:
        assert function.invoke({"sleep_s": 0}) == {"slept_s": 0}
        # WHEN an invocation outlasts the timeout THEN the error says it was a timeout, and which one
        with pytest.raises(FunctionTimeout, match=r"timed out after 5\.00 seconds .*timeout_s=5"):
            function.invoke({"sleep_s": 30})
        # AND the emulator starts a fresh execution environment for the next invocation, as Lambda does
        assert function.invoke({"sleep_s": 0}) == {"slept_s": 0}


def test_a_port_another_process_takes_first_is_not_taken_for_the_emulator(
    runtime: FunctionRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a server of another test listening on the port the emulator picks first (it took the port between the
    # pick and the RIE's bind: the RIE exits on it)
    config = _slow_function(tmp_path, timeout_s=5)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        monkeypatch.setattr(emulator, "_free_port", ports_starting_with(taken, emulator._free_port))
        # WHEN the emulator starts
        with EmulatedFunction(config, runtime, tmp_path / "rie.log") as function:
            # THEN it runs on ports of its own, and the handler answers
            assert f":{taken}/" not in function.invoke_url
            assert function.invoke({"sleep_s": 0}) == {"slept_s": 0}
        assert "address already in use" in (tmp_path / "rie.log").read_text(encoding="utf-8")


def _stand_in(tmp_path: Path, answers: str) -> tuple[FunctionConfig, FunctionRuntime]:
    rie = tmp_path / "stand-in-rie"
    rie.write_text(f"#!{sys.executable}\n{STAND_IN_RIE}", encoding="utf-8")
    rie.chmod(0o755)
    config = replace(_slow_function(tmp_path, timeout_s=5), template_environment={"STAND_IN_ANSWERS": answers})
    return config, FunctionRuntime(rie=rie, python=Path(sys.executable), runtime_dir=config.package_dir)


def test_an_invocation_canceled_while_the_rie_resets_is_sent_again(tmp_path: Path) -> None:
    # GIVEN an RIE that cancels the next invocation twice, as the real one did when it came while the environment
    # of a timed-out invocation was still being reset (the runtime never started: the event reached no handler)
    config, runtime = _stand_in(tmp_path, "gate-canceled,gate-canceled,ok")
    with EmulatedFunction(config, runtime, tmp_path / "rie.log") as function:
        # WHEN the function is invoked THEN it answers, as Lambda would on a fresh environment
        assert function.invoke({"sleep_s": 0}) == {"slept_s": 0}
    # AND the RIE was asked three times
    assert (tmp_path / "rie.log").read_text(encoding="utf-8").count("START RequestId:") == 3


def test_an_invocation_canceled_on_every_attempt_is_an_error(tmp_path: Path) -> None:
    # GIVEN an RIE that cancels every invocation
    config, runtime = _stand_in(tmp_path, "gate-canceled")
    # WHEN the function is invoked THEN the error says so, after a bounded number of attempts
    with (
        EmulatedFunction(config, runtime, tmp_path / "rie.log") as function,
        pytest.raises(FunctionError, match=r"attempt 3\)(.|\n)*ErrGateCanceled"),
    ):
        function.invoke({"sleep_s": 0})
    assert (tmp_path / "rie.log").read_text(encoding="utf-8").count("START RequestId:") == emulator.INVOKE_ATTEMPTS


def test_a_failure_after_the_runtime_started_is_not_sent_again(tmp_path: Path) -> None:
    # GIVEN an RIE whose runtime started and then failed (the handler may have run: sending it again could count
    # twice what Lambda would count once)
    config, runtime = _stand_in(tmp_path, "runtime-failed,ok")
    # WHEN the function is invoked THEN it is a function error, and the RIE was asked once
    with (
        EmulatedFunction(config, runtime, tmp_path / "rie.log") as function,
        pytest.raises(FunctionError, match="HTTP Error 502"),
    ):
        function.invoke({"sleep_s": 0})
    assert (tmp_path / "rie.log").read_text(encoding="utf-8").count("START RequestId:") == 1
