"""The locks (``make lock``), offline: the Lambda package's (``src/requirements.txt``) and the development
environment's (``tests/requirements-dev.txt``).

Each must still be what pyproject.toml asks for (a dependency added, dropped or raised there and not
recompiled fails here) and pin every package exactly with hashes (``pip install --require-hashes`` in
src/Makefile and the Makefile's install then refuse anything unpinned); the package keeps boto3 and botocore
together, and the environment running these tests is the development lock's.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.artifact.lock import Pin, read_lock, read_pins

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK = REPO_ROOT / "src" / "requirements.txt"
RUNTIME_LOCK = Path(__file__).resolve().parent / "runtime-requirements.txt"
DEV_LOCK = REPO_ROOT / "tests" / "requirements-dev.txt"
PROJECT_VIA = "tally (pyproject.toml)"


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project


def _project_dependencies() -> dict[str, Requirement]:
    requirements = (Requirement(text) for text in _project()["dependencies"])
    return {canonicalize_name(requirement.name): requirement for requirement in requirements}


def _extra_requirements(extra: str) -> list[Requirement]:
    """What ``pip install '.[extra]'`` asks for: the project's dependencies and the extra's, with the extras it
    names of the project itself (``tally[cli]``) expanded."""
    project = _project()
    extras: dict[str, list[str]] = project["optional-dependencies"]
    own = canonicalize_name(str(project["name"]))
    wanted = list(_project_dependencies().values())
    pending, seen = [extra], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in map(Requirement, extras[name]):
            if canonicalize_name(requirement.name) == own:
                pending.extend(requirement.extras)
            else:
                wanted.append(requirement)
    return wanted


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


@pytest.mark.parametrize("lock", [LOCK, RUNTIME_LOCK, DEV_LOCK], ids=["package", "runtime-stand-in", "dev"])
def test_every_pin_is_exact_and_hashed(lock: Path) -> None:
    pinned = read_pins(lock)  # raises on anything but ==
    assert pinned
    assert [pin.name for pin in pinned if not pin.hashes] == []


def test_the_dev_lock_pins_what_the_dev_extra_asks_for() -> None:
    """Every requirement of ``.[dev]`` (the project's own extras expanded) is pinned, and every version pinned
    for it (one per marker, in a universal lock) satisfies it."""
    pins = read_pins(DEV_LOCK)
    versions: dict[str, list[Pin]] = {}
    for pin in pins:
        versions.setdefault(pin.name, []).append(pin)
    wanted = _extra_requirements("dev")
    missing = sorted({req.name for req in wanted if canonicalize_name(req.name) not in versions})
    assert not missing, f"in pyproject.toml's dev extra, not in {DEV_LOCK.name}: {missing} (run `make lock`)"
    outside = [
        f"{pin.name}=={pin.version} ({req})"
        for req in wanted
        for pin in versions[canonicalize_name(req.name)]
        if not req.specifier.contains(pin.version, prereleases=True)
    ]
    assert not outside, f"{DEV_LOCK.name}'s pins no longer satisfy pyproject.toml: {outside} (run `make lock`)"


def test_the_tests_run_the_versions_the_package_ships(pins: dict[str, Pin]) -> None:
    """The development lock is compiled under the package's (``make lock``): a package both hold is pinned alike,
    so the core is tested on the msgspec, boto3 and Powertools that Lambda runs."""
    apart = [
        f"{pin.name}: {pin.version} in the package, {dev.version} in the dev lock"
        for dev in read_pins(DEV_LOCK)
        if (pin := pins.get(dev.name)) is not None and pin.version != dev.version
    ]
    assert not apart, f"run `make lock`: {apart}"


def test_the_environment_running_the_tests_is_the_dev_locks() -> None:
    """The Makefile installs .venv from the lock: a package at another version than its pin here means the
    environment came from somewhere else (a hand install, a lock changed since), and CI would not run what this
    run ran. The lock's pins whose markers hold here, each at its version."""
    here = [pin for pin in read_pins(DEV_LOCK) if pin.marker is None or Marker(pin.marker).evaluate()]
    installed: dict[str, Version | None] = {}
    for pin in here:
        try:
            installed[pin.name] = Version(metadata.version(pin.name))
        except metadata.PackageNotFoundError:
            installed[pin.name] = None
    other = [
        f"{pin.name}: {installed[pin.name]}, pinned {pin.version}" for pin in here if installed[pin.name] != pin.version
    ]
    assert not other, f"not the dev lock's versions (run `make install`): {other}"


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
