"""Figures the docs give about the repository, checked against the repository: what `sam deploy --guided` asks
(the template's parameters, which others add to), and how many events `make sam-local` runs. A figure typed from
memory drifts the day the repository changes; these fail that day instead, naming the figure to write."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Final

import pytest

from tally_local.template import load_template
from tests.artifact.sam_local import GENERATED
from tests.support.docs_pages import REPO_ROOT

SAM: Final = Path(os.environ.get("TALLY_SAM_BIN", REPO_ROOT / ".venv-sam" / "bin" / "sam"))
DEPLOY: Final = REPO_ROOT / "docs" / "how-to" / "deploy.md"
SAM_LOCAL: Final = REPO_ROOT / "docs" / "how-to" / "sam-local-invoke.md"
_PROMPT: Final = re.compile(r"([A-Z][^\t\n:\[]*?) \[[^\]\n]*\]: ")


def _figures(page: Path, pattern: str) -> tuple[int, ...]:
    text = " ".join(page.read_text(encoding="utf-8").split())
    found = re.search(pattern, text)
    assert found is not None, f"{page.relative_to(REPO_ROOT)} no longer says /{pattern}/"
    return tuple(int(group) for group in found.groups())


@pytest.mark.slow  # the SAM CLI in a subprocess (make test-fast skips it)
def test_the_guided_deploy_asks_what_the_deploy_page_says(tmp_path: Path) -> None:
    # GIVEN a checkout's template and samconfig.toml, and no AWS: every answer is Enter (each default), and the
    # first call to AWS (SAM's deployment bucket) fails at an endpoint nothing listens on, after every prompt
    assert SAM.exists(), f"the SAM CLI is not installed at {SAM}: run `make sam`"
    for name in ("template.yaml", "samconfig.toml"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    ran = subprocess.run(
        [str(SAM), "deploy", "--guided"],
        cwd=tmp_path,
        input="\n" * 200,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "SAM_CLI_TELEMETRY": "0",
            "AWS_ACCESS_KEY_ID": "none",
            "AWS_SECRET_ACCESS_KEY": "none",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_MAX_ATTEMPTS": "1",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        },
        check=False,
    )
    prompts = _PROMPT.findall(ran.stdout)
    parameters = [prompt.removeprefix("Parameter ") for prompt in prompts if prompt.startswith("Parameter ")]
    assert "Looking for resources needed for deployment" in ran.stdout, ran.stdout + ran.stderr  # all asked
    # THEN it asked every template parameter, the ones worth deciding first, and as many prompts as the page says
    assert parameters == list(load_template(REPO_ROOT / "template.yaml")["Parameters"])
    assert parameters[:4] == ["Source", "AlarmEmail", "ReadEndpoint", "Windows"]
    said = _figures(DEPLOY, r"asks for every parameter \((\d+) of them; (\d+) prompts in all")
    assert said == (len(parameters), len(prompts)), (
        f"docs/how-to/deploy.md: write '({len(parameters)} of them; {len(prompts)} prompts in all'"
    )


def test_the_sam_local_page_counts_the_events_make_sam_local_runs() -> None:
    files = len(json.loads((REPO_ROOT / "events" / "expected.json").read_text(encoding="utf-8")))
    said = _figures(
        SAM_LOCAL,
        r"every file `events/expected.json` lists \((\d+) of them\) .*? plus the (\d+) events the recipe above "
        r"generates: (\d+) events",
    )
    assert said == (files, len(GENERATED), files + len(GENERATED)), (
        f"docs/how-to/sam-local-invoke.md: write '({files} of them)', 'plus the {len(GENERATED)} events' and "
        f"'{files + len(GENERATED)} events'"
    )
