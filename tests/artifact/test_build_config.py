"""How ``sam build`` is told to make the package: template.yaml and src/Makefile must agree (offline).

SAM hands a Makefile build no architecture, so src/Makefile reads it from the template: a template set to
x86_64 must build x86_64 libraries, and an architecture said otherwise must stop the build, never package
another machine's libraries silently. ``make -n`` shows the commands a build would run without running them.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from typing import TYPE_CHECKING

import pytest

from tally_local.template import load_template
from tests.artifact.build import ARCHITECTURE_LINE, DEPLOYED_ARCHITECTURE, FUNCTIONS, REPO_ROOT, TEMPLATE

if TYPE_CHECKING:
    from pathlib import Path

MAKEFILE = REPO_ROOT / "src" / "Makefile"
WHEEL_MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}


def _dry_run(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """``make -n build-CounterFunction`` as SAM runs it (from a scratch directory, ``--makefile`` the original), with
    an empty dependency cache unless ``TALLY_CACHE_DIR`` is given."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("TALLY_")}
    environment["TALLY_CACHE_DIR"] = str(tmp_path / "cache")
    environment.update(variables)
    return subprocess.run(
        ["make", "-n", "--makefile", str(MAKEFILE), "build-CounterFunction", f"ARTIFACTS_DIR={tmp_path / 'out'}"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _template_for(tmp_path: Path, architecture: str) -> Path:
    text = TEMPLATE.read_text(encoding="utf-8")
    assert text.count(ARCHITECTURE_LINE) == 1
    copy = tmp_path / f"template-{architecture}.yaml"
    copy.write_text(text.replace(ARCHITECTURE_LINE, f"Architectures: [{architecture}]"), encoding="utf-8")
    return copy


def _wheel_machines(output: str) -> set[str]:
    return set(re.findall(r"--platform manylinux\S*?_(aarch64|x86_64)\b", output))


def test_the_deployed_architecture_is_the_templates_alone() -> None:
    template = load_template(TEMPLATE)
    assert template["Globals"]["Function"]["Architectures"] == [DEPLOYED_ARCHITECTURE]
    for function in FUNCTIONS:
        assert "Architectures" not in template["Resources"][function]["Properties"], function


def test_a_plain_build_packages_the_templates_architecture(tmp_path: Path) -> None:
    result = _dry_run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert _wheel_machines(result.stdout) == {WHEEL_MACHINES[DEPLOYED_ARCHITECTURE]}


@pytest.mark.parametrize("architecture", ["x86_64", "arm64"])
def test_a_template_set_to_another_architecture_builds_for_it(tmp_path: Path, architecture: str) -> None:
    # GIVEN the template with Architectures changed (as one does for sam local invoke on an x86 machine)
    template = _template_for(tmp_path, architecture)
    # WHEN it is built with no TALLY_LAMBDA_ARCH THEN the wheels are that architecture's
    result = _dry_run(tmp_path, TALLY_TEMPLATE=str(template))
    assert result.returncode == 0, result.stderr
    assert _wheel_machines(result.stdout) == {WHEEL_MACHINES[architecture]}


def test_an_architecture_that_contradicts_the_template_stops_the_build(tmp_path: Path) -> None:
    template = _template_for(tmp_path, "x86_64")
    result = _dry_run(tmp_path, TALLY_TEMPLATE=str(template), TALLY_LAMBDA_ARCH="arm64")
    assert result.returncode != 0
    assert "TALLY_LAMBDA_ARCH is arm64 but" in result.stderr
    assert "deploys x86_64" in result.stderr


def test_a_template_with_two_architectures_stops_the_build(tmp_path: Path) -> None:
    template = _template_for(tmp_path, "x86_64")
    text = template.read_text(encoding="utf-8")
    template.write_text(
        text.replace(
            "      Handler: tally.handlers.sqs.handler",
            "      Handler: tally.handlers.sqs.handler\n      Architectures: [arm64]",
            1,
        ),
        encoding="utf-8",
    )
    result = _dry_run(tmp_path, TALLY_TEMPLATE=str(template))
    assert result.returncode != 0
    assert "declares several architectures (arm64 x86_64)" in result.stderr


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_is_built_by_its_makefile_target(function: str) -> None:
    resource = load_template(TEMPLATE)["Resources"][function]
    assert resource["Metadata"]["BuildMethod"] == "makefile"
    makefile = (REPO_ROOT / resource["Properties"]["CodeUri"] / "Makefile").read_text(encoding="utf-8")
    targets = re.search(r"^(build-\S+(?: build-\S+)*):", makefile, re.MULTILINE)
    assert targets is not None
    assert f"build-{function}" in targets.group(1).split()


def test_the_dependencies_are_installed_once_per_lock_and_architecture_then_copied(tmp_path: Path) -> None:
    # GIVEN an empty dependency cache: the build installs the lock into a directory named by its digest and
    # architecture (beside it first, then renamed: never a half-installed one), and copies that into the package
    digest = hashlib.sha256((REPO_ROOT / "src" / "requirements.txt").read_bytes()).hexdigest()[:16]
    installed = tmp_path / "cache" / "lambda-dependencies" / f"cp313-{DEPLOYED_ARCHITECTURE}-{digest}"
    result = _dry_run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pip install" in result.stdout
    assert f'mv -T "{installed}.' in result.stdout
    assert f'cp -R "{installed}/." "{tmp_path / "out"}/"' in result.stdout
    # WHEN that directory exists (an earlier function's build, or an earlier build of the same lock)
    installed.mkdir(parents=True)
    # THEN the build copies it and runs no pip
    result = _dry_run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pip install" not in result.stdout
    assert f'cp -R "{installed}/." "{tmp_path / "out"}/"' in result.stdout
