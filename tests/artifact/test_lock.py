"""The lock the Lambda package is installed from (``src/requirements.txt``, ``make lock``), offline.

It must still be what pyproject.toml asks for (a dependency added, dropped or raised there and not
recompiled fails here), pin every package exactly with hashes (``pip install --require-hashes`` in
src/Makefile then refuses anything unpinned), and keep boto3 and botocore together.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.artifact.lock import Pin, read_lock

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK = REPO_ROOT / "src" / "requirements.txt"
RUNTIME_LOCK = Path(__file__).resolve().parent / "runtime-requirements.txt"
PROJECT_VIA = "tally (pyproject.toml)"


def _project_dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = (Requirement(text) for text in project["dependencies"])
    return {canonicalize_name(requirement.name): requirement for requirement in requirements}


@pytest.fixture(scope="module")
def pins() -> dict[str, Pin]:
    return read_lock(LOCK)


def test_lock_pins_what_pyproject_asks_for(pins: dict[str, Pin]) -> None:
    wanted = _project_dependencies()
    missing = sorted(set(wanted) - set(pins))
    assert not missing, f"in pyproject.toml, not in the lock: {missing} (run `make lock`)"
    outside = [
        f"{name}=={pins[name].version} ({req})"
        for name, req in wanted.items()
        if not req.specifier.contains(pins[name].version)
    ]
    assert not outside, f"the lock's pin no longer satisfies pyproject.toml: {outside} (run `make lock`)"


def test_lock_holds_nothing_pyproject_no_longer_needs(pins: dict[str, Pin]) -> None:
    """uv records why each pin is there: the direct ones must be exactly pyproject.toml's dependencies, and
    every other must be needed by a pin that is itself in the lock."""
    direct = {name for name, pin in pins.items() if PROJECT_VIA in pin.via}
    assert direct == set(_project_dependencies()), "run `make lock`"
    orphans = {name: pin.via for name, pin in pins.items() if not pin.via or not set(pin.via) <= {*pins, PROJECT_VIA}}
    assert not orphans, f"pinned for packages the lock no longer holds: {orphans} (run `make lock`)"


@pytest.mark.parametrize("lock", [LOCK, RUNTIME_LOCK], ids=["package", "runtime-stand-in"])
def test_every_pin_is_exact_and_hashed(lock: Path) -> None:
    pinned = read_lock(lock)  # raises on anything but ==
    assert pinned
    assert [name for name, pin in pinned.items() if not pin.hashes] == []


def test_boto3_and_botocore_are_pinned_together(pins: dict[str, Pin]) -> None:
    """aws-xray-sdk (Powertools' tracer) needs botocore; without boto3 beside it, Lambda's runtime boto3
    would run on a botocore it never chose. Both or neither, and boto3 is what we ship."""
    assert {"boto3", "botocore"} <= set(pins)
    assert (pins["boto3"].version.major, pins["boto3"].version.minor) == (
        pins["botocore"].version.major,
        pins["botocore"].version.minor,
    ), "boto3 x.y needs botocore x.y"


def test_the_stand_in_runtime_boto3_differs_from_the_packages() -> None:
    """tests/artifact proves the package's boto3 is the one that runs: only meaningful if they differ."""
    runtime = read_lock(RUNTIME_LOCK)
    assert runtime["boto3"].version != read_lock(LOCK)["boto3"].version
    assert runtime["botocore"].version != read_lock(LOCK)["botocore"].version
