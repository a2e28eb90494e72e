"""The test tiers (tests/support/tiers.py): markers from fixtures, and the guard that keeps them true."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.tiers import (
    BUILD,
    DYNAMODB_LOCAL,
    MOTO,
    NEEDS_BY_FIXTURE,
    EmulatorOutsideItsTierError,
    group_modules_sharing_fixtures,
    mark_by_fixtures,
)


@dataclass
class FakeItem:
    fixturenames: list[str]
    markers: list[Any] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> Any:
        return next((marker for marker in self.markers if marker.name == name), None)

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker)


def test_a_test_is_marked_with_what_its_fixtures_need() -> None:
    # GIVEN tests whose fixtures (their closure, as pytest lists it) need DynamoDB Local, a moto server, a build
    items = [
        FakeItem(["ddb_tables", "dynamodb_local", "tmp_path"]),
        FakeItem(["serial_moto_endpoint", "dynamodb_local"]),
        FakeItem(["deployed_build", "python"]),
        FakeItem(["tmp_path", "mocked_aws"]),
    ]
    # WHEN they are marked
    mark_by_fixtures(items)  # type: ignore[arg-type]
    # THEN each carries exactly the markers of its needs (moto's in-process mock is no server: none)
    assert [sorted(marker.name for marker in item.markers) for item in items] == [
        [DYNAMODB_LOCAL],
        [DYNAMODB_LOCAL, MOTO],
        [BUILD],
        [],
    ]
    assert set(NEEDS_BY_FIXTURE.values()) == {DYNAMODB_LOCAL, MOTO, BUILD}


def test_an_unmarked_test_cannot_start_dynamodb_local() -> None:
    # the guard refuses before the process exists: nothing is started
    with pytest.raises(EmulatorOutsideItsTierError, match=r"test_tiers\.py::.* is not marked dynamodb_local"):
        subprocess.Popen(["java", "-jar", "/nowhere/DynamoDBLocal.jar", "-inMemory"])


def test_an_unmarked_test_cannot_start_a_moto_server() -> None:
    from werkzeug.serving import make_server  # noqa: PLC0415

    with pytest.raises(EmulatorOutsideItsTierError, match="is not marked moto"):
        make_server("127.0.0.1", 0, lambda environ, start_response: [])


def test_an_unmarked_test_cannot_run_sam_build_or_the_demo() -> None:
    with pytest.raises(EmulatorOutsideItsTierError, match="is not marked build"):
        subprocess.Popen(["/nowhere/bin/sam", "build", "--template-file", "template.yaml"])
    with pytest.raises(EmulatorOutsideItsTierError, match="is not marked dynamodb_local, moto"):
        subprocess.Popen([sys.executable, "-m", "tally_local.demo", "--events", "10"])


def test_other_subprocesses_are_left_alone() -> None:
    assert (
        subprocess.run([sys.executable, "-c", "print('ok')"], capture_output=True, text=True, check=True).stdout
        == "ok\n"
    )


@pytest.mark.dynamodb_local
def test_a_marked_test_may_start_what_its_marker_names() -> None:
    # a harmless command that merely names the jar: the guard lets it through for a test marked dynamodb_local
    command = [sys.executable, "-c", "import sys; print(sys.argv[1])", "DynamoDBLocal.jar"]
    assert subprocess.run(command, capture_output=True, text=True, check=True).stdout == "DynamoDBLocal.jar\n"


@dataclass
class FakeDefinition:
    scope: str


@dataclass
class FakeInfo:
    name2fixturedefs: dict[str, list[FakeDefinition]]


@dataclass
class FakeGroupedItem(FakeItem):
    nodeid: str = ""
    _fixtureinfo: FakeInfo = field(default_factory=lambda: FakeInfo({}))


def test_a_module_whose_tests_share_a_wider_fixture_stays_on_one_worker() -> None:
    # GIVEN tests that share a module-scoped fixture, and tests with only function and session fixtures
    shared = FakeInfo({"deployed_build": [FakeDefinition("module")], "tmp_path": [FakeDefinition("function")]})
    alone = FakeInfo({"dynamodb_local": [FakeDefinition("session")], "ddb_tables": [FakeDefinition("function")]})
    items = [
        FakeGroupedItem([], nodeid="tests/artifact/test_built_package.py::test_a", _fixtureinfo=shared),
        FakeGroupedItem([], nodeid="tests/artifact/test_built_package.py::test_b[x]", _fixtureinfo=shared),
        FakeGroupedItem([], nodeid="tests/integration/test_chaos.py::test_c", _fixtureinfo=alone),
    ]
    # WHEN they are grouped
    group_modules_sharing_fixtures(items)  # type: ignore[arg-type]
    # THEN the first two share their module's group and the third is handed out alone
    groups = [[marker.args for marker in item.markers if marker.name == "xdist_group"] for item in items]
    assert groups == [[("tests/artifact/test_built_package.py",)], [("tests/artifact/test_built_package.py",)], []]


@pytest.mark.slow
def test_under_loadgroup_the_tests_of_a_module_sharing_a_fixture_run_on_one_worker(tmp_path: Any) -> None:
    # GIVEN a module of eight tests sharing a module-scoped fixture (tests/support/xdist_group_probe.py)
    out = tmp_path / "workers.txt"
    probe = Path(__file__).resolve().parents[1] / "support" / "xdist_group_probe.py"
    # WHEN pytest runs it as make test does, on two workers handed tests one by one
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            str(probe),
        ],
        cwd=probe.parents[2],
        env=os.environ | {"TALLY_GROUP_PROBE_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # THEN all eight ran on one worker, and the fixture once (pytest 9 with xdist 3.8 ignored the groups: both
    # workers ran the module, and each its own fixture)
    rows = [line.split() for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 8
    assert len({worker for _, _, worker in rows}) == 1, rows
    assert len({fixture for _, fixture, _ in rows}) == 1, rows
