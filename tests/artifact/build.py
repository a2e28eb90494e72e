"""Build the Lambda package with ``sam build`` and set up what stands in for Lambda's runtime.

Everything here shells out to the same tools a developer runs: the SAM CLI of ``.venv-sam`` (its own
venv: it pins its own boto3), python3.13 (the runtime's Python, which ``sam build`` needs on PATH), and
pip, installing from pinned, hash-checked requirement files only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = REPO_ROOT / "template.yaml"
LOCK = REPO_ROOT / "src" / "requirements.txt"
RUNTIME_REQUIREMENTS = Path(__file__).resolve().parent / "runtime-requirements.txt"
CACHE_DIR = Path(os.environ.get("TALLY_CACHE_DIR", Path.home() / ".cache" / "tally"))
DEPLOYED_ARCHITECTURE = "arm64"
ARCHITECTURE_LINE = "Architectures: [arm64]"
"""How template.yaml says it (Globals.Function); an x86_64 copy replaces exactly this line."""
FUNCTIONS = ("CounterFunction", "StreamCounterFunction", "ReadFunction")
BUILD_TIMEOUT_S = 600


class ToolMissing(RuntimeError):
    """A tool the artifact tests need is not installed: they fail with this message, they never skip."""


def host_architecture() -> str:
    """Lambda's name for this machine's architecture: the RIE and python3.13 run natively only."""
    machine = platform.machine()
    architectures = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
    if machine.lower() not in architectures:
        raise ToolMissing(f"no Lambda architecture runs natively on {machine}")
    return architectures[machine.lower()]


def python313() -> Path:
    """python3.13: ``$TALLY_PYTHON313`` (the Makefile sets it), else the first on PATH, else pyenv's."""
    candidates: list[str] = []
    if configured := os.environ.get("TALLY_PYTHON313"):
        candidates.append(configured)
    candidates.append("python3.13")
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates.extend(str(path) for path in sorted(pyenv_root.glob("versions/3.13*/bin/python3.13"), reverse=True))
    for candidate in candidates:
        try:
            found = subprocess.run(
                [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 13); print(sys.executable)"],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        return Path(found)
    raise ToolMissing(
        "tests/artifact needs python3.13 (Lambda's runtime): put it on PATH, `pyenv install 3.13`, "
        "or set TALLY_PYTHON313 (make test finds pyenv's)"
    )


def sam_cli() -> Path:
    """The SAM CLI of ``.venv-sam`` (``$TALLY_SAM_BIN``, set by the Makefile)."""
    sam = Path(os.environ.get("TALLY_SAM_BIN", REPO_ROOT / ".venv-sam" / "bin" / "sam"))
    if not sam.exists():
        raise ToolMissing(f"the SAM CLI is not installed at {sam}: run `make sam`")
    return sam


def runtime_interface_emulator(architecture: str) -> Path:
    """``aws-lambda-rie-<arch>``, shipped inside the aws-sam-cli wheel (``samcli/local/rapid/``)."""
    sam = sam_cli()
    found = subprocess.run(
        [str(sam.parent / "python"), "-c", "import samcli, pathlib; print(pathlib.Path(samcli.__file__).parent)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    rie = Path(found) / "local" / "rapid" / f"aws-lambda-rie-{architecture}"
    if not rie.exists():
        raise ToolMissing(f"the Runtime Interface Emulator is not in the aws-sam-cli wheel: {rie}")
    return rie


def sam_process_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` for a ``sam`` process: without ``PYTHONDONTWRITEBYTECODE`` (set on CI machines), and no
    telemetry. The SAM CLI's venv is installed without bytecode (uv's default: compiling all of it costs more CPU than
    the suite's sam processes spend), so with the variable set every ``sam`` compiled its imports again, about half of
    a ``sam validate --lint`` (8.3 s of CPU, 3.8 s with bytecode); the first now writes it into ``.venv-sam``."""
    found = {name: value for name, value in environment.items() if name != "PYTHONDONTWRITEBYTECODE"}
    found["SAM_CLI_TELEMETRY"] = "0"
    return found


def sam_environment(python: Path, architecture: str, template: Path = TEMPLATE) -> dict[str, str]:
    """``sam build``'s environment: python3.13 first on PATH, the template built (src/Makefile reads its
    architecture there) and the architecture expected of it, no telemetry."""
    environment = sam_process_environment(
        {name: value for name, value in os.environ.items() if name not in {"PYTHONPATH", "PYTHONHOME"}}
    )
    environment["PATH"] = f"{python.parent}{os.pathsep}{environment.get('PATH', '')}"
    environment["TALLY_LAMBDA_ARCH"] = architecture
    environment["TALLY_TEMPLATE"] = str(template)
    environment["PYTHON"] = str(python)
    return environment


@dataclass(frozen=True)
class Build:
    """A ``sam build`` output: one package directory per function."""

    architecture: str
    build_dir: Path
    log: str

    def package(self, function: str) -> Path:
        return self.build_dir / function


def sam_build(work_dir: Path, architecture: str, python: Path) -> Build:
    """``sam build`` of template.yaml for ``architecture`` into ``work_dir/build``.

    The deployed architecture builds the template itself; another builds a copy in ``work_dir`` whose only
    change is the ``Architectures`` line (``--base-dir`` keeps ``CodeUri: src/`` pointing at this repository).
    """
    template = TEMPLATE
    if architecture != DEPLOYED_ARCHITECTURE:
        text = TEMPLATE.read_text(encoding="utf-8")
        if text.count(ARCHITECTURE_LINE) != 1:
            raise AssertionError(f"template.yaml must say {ARCHITECTURE_LINE!r} exactly once")
        template = work_dir / "template.yaml"
        template.write_text(text.replace(ARCHITECTURE_LINE, f"Architectures: [{architecture}]"), encoding="utf-8")
    build_dir = work_dir / "build"
    command = [
        str(sam_cli()),
        "build",
        "--template-file",
        str(template),
        "--base-dir",
        str(REPO_ROOT),
        "--build-dir",
        str(build_dir),
        "--no-cached",  # samconfig.toml caches builds: a test must build what is on disk now
    ]
    result = subprocess.run(
        command,
        cwd=work_dir,
        env=sam_environment(python, architecture, template),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    log = f"$ {' '.join(command)}\n{result.stdout}\n{result.stderr}"
    if result.returncode != 0:
        raise AssertionError(f"sam build ({architecture}) failed:\n{log}")
    return Build(architecture=architecture, build_dir=build_dir, log=log)


def lambda_runtime_dir(python: Path) -> tuple[Path, Path]:
    """(bare python3.13, runtime dir): Lambda's ``/var/lang`` and ``/var/runtime`` stand-ins, cached by the
    hash of ``runtime-requirements.txt`` (installed once per machine, re-installed when the file changes)."""
    digest = hashlib.sha256(RUNTIME_REQUIREMENTS.read_bytes()).hexdigest()[:16]
    root = CACHE_DIR / f"lambda-python3.13-{host_architecture()}-{digest}"
    done = root / ".installed"
    lang, runtime = root / "lang", root / "runtime"
    if not done.exists():
        # Installed beside, then renamed into place: two test runs at once never see a half-installed runtime.
        staging = root.with_name(f"{root.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        _install_runtime(python, staging)
        with contextlib.suppress(OSError):  # another run put its copy in place first: use that one
            staging.rename(root)
        shutil.rmtree(staging, ignore_errors=True)
    return lang / "bin" / "python3.13", runtime


def _install_runtime(python: Path, root: Path) -> None:
    lang, runtime = root / "lang", root / "runtime"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(lang)], check=True, timeout=120)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--require-hashes",
            "--only-binary=:all:",
            "--target",
            str(runtime),
            "-r",
            str(RUNTIME_REQUIREMENTS),
        ],
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    (root / ".installed").touch()


def generate_event(service: str, event_type: str, *options: str) -> str:
    """``sam local generate-event <service> <type> <options>``: the JSON the SAM CLI prints."""
    result = subprocess.run(
        [str(sam_cli()), "local", "generate-event", service, event_type, *options],
        env=sam_process_environment(os.environ),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout
