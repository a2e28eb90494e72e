"""``make demo`` at a small size, as a user runs it: its own local stack, every check, exit status 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# The demo starts its own DynamoDB Local and moto server in a subprocess: marked by hand (tests/support/tiers.py).
pytestmark = [pytest.mark.integration, pytest.mark.dynamodb_local, pytest.mark.moto]


def test_the_demo_runs_end_to_end_and_every_check_passes() -> None:
    # GIVEN no AWS settings from the caller's environment (the demo sets up its own)
    environment = {name: value for name, value in os.environ.items() if not name.startswith(("AWS_", "TALLY_"))}
    # WHEN the demo runs at a small size
    result = subprocess.run(
        [sys.executable, "-m", "tally_local.demo", "--events", "2000", "--keys", "40", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**environment, "COLUMNS": "120"},
        check=False,
    )
    # THEN it exits 0, with every check passed, and says so
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    output = result.stdout
    assert "EXACT" in output
    assert "WRONG" not in output
    for check in (
        "sample events",
        "every counter exact",
        "events counted = events published",
        "redrive changed no counter",
        "audit: 0 drift (tally audit)",
    ):
        assert check in output
