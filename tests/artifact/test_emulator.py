"""The emulator harness itself: a function that runs out of time is reported as a timeout, with the limit; a port
taken by another process before the emulator binds it is not taken for the emulator.

Under the Runtime Interface Emulator a timed-out invocation answers HTTP 200 with the text ``Task timed out
after N.00 seconds``, not JSON: read as JSON, it surfaced as a ``JSONDecodeError`` that did not say what
happened (a cold start on a loaded machine had run past the function's own 10 s).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

from tests.artifact import emulator
from tests.artifact.build import (
    ToolMissing,
    host_architecture,
    lambda_runtime_dir,
    python313,
    runtime_interface_emulator,
)
from tests.artifact.emulator import EmulatedFunction, FunctionConfig, FunctionRuntime, FunctionTimeout
from tests.support.ports import ports_starting_with

if TYPE_CHECKING:
    from pathlib import Path

SLOW_HANDLER = """\
import time


def handler(event, context):
    time.sleep(event["sleep_s"])
    return {"slept_s": event["sleep_s"]}
"""


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
    # GIVEN a function that sleeps as long as it is told, with a 1 s timeout on purpose
    config = _slow_function(tmp_path, timeout_s=1)
    with EmulatedFunction(config, runtime, tmp_path / "slow.log") as function:
        assert function.invoke({"sleep_s": 0}) == {"slept_s": 0}
        # WHEN an invocation outlasts the timeout THEN the error says it was a timeout, and which one
        with pytest.raises(FunctionTimeout, match=r"timed out after 1\.00 seconds .*timeout_s=1"):
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
