"""Test tiers: what a test needs (an emulator, a build) as a pytest marker, and a guard that keeps the markers true.

Why: ``make test-fast`` (``-m "not dynamodb_local and not moto and not build"``) is the developer's loop and
must start no JVM, no moto server and no ``sam build``. A marker set by hand goes stale the day a test starts
using a fixture it did not use before, so the markers are derived from the fixtures a test asks for
(``NEEDS_BY_FIXTURE``); the few tests that start an emulator another way (a subprocess running the demo or
the local stack) carry the marker explicitly. The guard then checks the markers against what actually
happens: a test that starts DynamoDB Local, a moto server or ``sam build`` without carrying the marker for it
fails with a message saying which marker it lacks, in every run (fast tier or whole suite).
"""

from __future__ import annotations

import socketserver
import subprocess
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pytest

DYNAMODB_LOCAL = "dynamodb_local"
MOTO = "moto"
BUILD = "build"
SLOW = "slow"

MARKERS = {
    DYNAMODB_LOCAL: "starts or uses DynamoDB Local (a JVM); set from the fixtures the test uses",
    MOTO: "starts or uses a moto server (SQS, Kinesis, CloudFormation over HTTP); set from the fixtures",
    BUILD: "runs `sam build` or the built package under the Runtime Interface Emulator (tests/artifact)",
    SLOW: "seconds of CPU without an emulator (the planner's searches, cfn-lint, the IAM drive): marked by hand",
}

NEEDS_BY_FIXTURE = {
    "dynamodb_local": DYNAMODB_LOCAL,
    "moto_endpoint": MOTO,
    "serial_moto_endpoint": MOTO,
    "deployed_build": BUILD,
    "host_build": BUILD,
}


SHARED_SCOPES = frozenset({"module", "class", "package"})


def group_modules_sharing_fixtures(items: Iterable[pytest.Item]) -> None:
    """Keep a module's tests on one xdist worker when they share a fixture wider than a test (``make test`` runs
    ``--dist loadgroup``): the two ``sam build`` s of tests/artifact, the bench suite's smoke run and the template
    transforms then run once, while every other test is handed out alone, so one long file no longer holds a
    worker while the other waits (a whole-file split left one worker with the chaos pattern tests at the end)."""
    import pytest  # noqa: PLC0415

    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("xdist_group") is not None:
            continue
        if any(
            definition.scope in SHARED_SCOPES
            for definitions in info.name2fixturedefs.values()
            for definition in definitions
        ):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def name_groups_in_node_ids(items: Iterable[pytest.Item]) -> None:
    """Append ``@<group>`` to the node id of every test with an ``xdist_group`` marker, which is how
    ``--dist loadgroup`` learns the groups: pytest-xdist (3.8) writes it to ``item._nodeid``, which pytest 9 no
    longer reads (a node id is ``item._id``), so without this every group was ignored and each module sharing a
    fixture ran that fixture on both workers (the bench suite's smoke run twice, 25 s each). A node id that
    already ends with its group (an xdist that sets it where pytest reads it) is left as it is."""
    for item in items:
        names = sorted(
            {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
        )
        if not names:
            continue
        suffix = "@" + "_".join(names)
        if not item.nodeid.endswith(suffix):
            item._id = item.nodeid + suffix  # type: ignore[attr-defined]  # pytest's own attribute for nodeid


class EmulatorOutsideItsTierError(AssertionError):
    """A test started an emulator or a build without carrying the marker that says it needs one."""


def mark_by_fixtures(items: Iterable[pytest.Item]) -> None:
    """Add the marker of every need a test's fixtures (their whole closure) imply."""
    import pytest  # noqa: PLC0415 - this module is imported by conftest only

    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            need = NEEDS_BY_FIXTURE.get(fixture)
            if need is not None and item.get_closest_marker(need) is None:
                item.add_marker(getattr(pytest.mark, need))


class Guard:
    """Fails the running test when it starts something its markers do not allow.

    Installed once per process (every xdist worker loads the conftest): it wraps ``subprocess.Popen`` (the
    DynamoDB Local JVM is started through it by mirakuru, ``sam build`` and the demo are subprocesses) and the
    bind of werkzeug's WSGI servers (both moto servers, ``ThreadedMotoServer`` and ``SerialMotoServer``, are
    werkzeug servers; nothing else in the tests is).
    """

    def __init__(self) -> None:
        self.item: pytest.Item | None = None

    def install(self) -> None:
        guard = self
        popen_init = subprocess.Popen.__init__
        server_bind = socketserver.TCPServer.server_bind

        def guarded_popen_init(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
            try:
                guard.check(_needs_of_command(args), f"runs {_command_text(args)[:160]!r}")
            except EmulatorOutsideItsTierError:
                popen._child_created = False  # type: ignore[attr-defined]  # what Popen.__del__ reads: no child
                raise
            popen_init(popen, args, *rest, **kwargs)

        def guarded_server_bind(server: socketserver.TCPServer) -> None:
            if type(server).__module__.startswith("werkzeug"):
                guard.check({MOTO}, "starts a moto server (a werkzeug WSGI server)")
            server_bind(server)

        subprocess.Popen.__init__ = guarded_popen_init  # type: ignore[assignment,method-assign]
        socketserver.TCPServer.server_bind = guarded_server_bind  # type: ignore[method-assign]

    def check(self, needs: set[str], what: str) -> None:
        item = self.item
        if item is None or not needs:
            return
        missing = sorted(need for need in needs if item.get_closest_marker(need) is None)
        if missing:
            raise EmulatorOutsideItsTierError(
                f"{item.nodeid} {what} but is not marked {', '.join(missing)}: use the fixture that provides it "
                f"(tests/conftest.py) or mark the test with pytest.mark.{missing[0]} (tests/support/tiers.py)"
            )


def _command_text(args: Any) -> str:
    if isinstance(args, (str, bytes)):
        return args if isinstance(args, str) else args.decode(errors="replace")
    return " ".join(str(arg) for arg in args)


def _needs_of_command(args: Any) -> set[str]:
    text = _command_text(args)
    words = text.split()
    needs: set[str] = set()
    if "DynamoDBLocal.jar" in text:
        needs.add(DYNAMODB_LOCAL)
    if any(module in words for module in ("tally_local.demo", "tally_local.stack")) or any(
        word.rsplit("/", 1)[-1] == "tally-local" for word in words
    ):
        needs |= {DYNAMODB_LOCAL, MOTO}
    if words and words[0].endswith("sam") and "build" in words[1:2]:
        needs.add(BUILD)
    if words and "aws-lambda-rie" in words[0]:  # the built package, run as Lambda runs it (tests/artifact)
        needs.add(BUILD)
    return needs


GUARD = Guard()
