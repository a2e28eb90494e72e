"""Run by tests/unit/test_tiers.py under ``-n 2 --dist loadgroup`` (not collected otherwise): tests sharing a
module-scoped fixture, each writing the xdist worker that ran it to the file named by ``TALLY_GROUP_PROBE_OUT``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def shared() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "none")


@pytest.mark.parametrize("n", range(8))
def test_probe(shared: str, n: int) -> None:
    with Path(os.environ["TALLY_GROUP_PROBE_OUT"]).open("a", encoding="utf-8") as out:
        out.write(f"{n} {shared} {os.environ.get('PYTEST_XDIST_WORKER')}\n")
