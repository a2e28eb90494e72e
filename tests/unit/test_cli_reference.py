"""The CLI reference (docs/reference/cli.md): every command and option ``--help`` lists, readable on GitHub as
written and on the built site, and never out of date.

The page is written by ``make cli-reference`` (``tally_local.cli_reference``). What it must hold is read here
from ``--help`` itself, the way a user finds the commands, not from the generator.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Final

import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally_local.cli_reference import PATH, render
from tests.support.docs_pages import REPO_ROOT

if TYPE_CHECKING:
    from pathlib import Path

PAGE: Final = REPO_ROOT / PATH
_OPTION: Final = re.compile(r"^  (-[^ ].*?)(?:  |$)")
_COMMAND: Final = re.compile(r"^  ([a-z][\w-]*)(?:  |$)")


def _help(*path: str) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "300"}, terminal_width=300)
    assert result.exit_code == 0, result.output
    return str(result.output)


def _sections(text: str) -> dict[str, list[str]]:
    """``Options:`` and ``Commands:`` of a ``--help`` text: their lines."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = sections.setdefault(line[:-1], [])
        elif current is not None and line.startswith("  "):
            current.append(line)
    return sections


def listed() -> dict[str, list[str]]:
    """Every command ``tally --help`` lists, down every group (``tally dlq redrive``), -> the option flags its own
    ``--help`` lists (``--pack`` and ``--no-pack`` apart)."""
    found: dict[str, list[str]] = {}
    pending: list[tuple[str, ...]] = [()]
    while pending:
        path = pending.pop(0)
        sections = _sections(_help(*path))
        flags = []
        for line in sections.get("Options", []):
            match = _OPTION.match(line)
            if match:
                flags += [word.rstrip(",") for word in match[1].split() if word.startswith("-")]
        found[" ".join(("tally", *path))] = flags
        for line in sections.get("Commands", []):
            match = _COMMAND.match(line)
            if match:
                pending.append((*path, match[1]))
    return found


LISTED: Final = listed()


def test_help_lists_the_lazily_imported_commands_too() -> None:
    assert {"tally get", "tally publish", "tally dlq", "tally dlq redrive", "tally windows close"} <= set(LISTED)
    assert "--dry-run" in LISTED["tally dlq redrive"]


def test_the_page_is_what_the_commands_say() -> None:
    written = PAGE.read_text(encoding="utf-8")
    assert written == render(), f"{PATH} is out of date: run `make cli-reference` and commit it"


def test_the_page_as_written_names_every_command_and_option() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for command, flags in LISTED.items():
        assert f"## `{command}`" in text, command
        section = text.split(f"## `{command}`", 1)[1].split("\n## ", 1)[0]
        for flag in flags:
            assert re.search(rf"^- `[^`]*(?<![\w-]){re.escape(flag)}(?![\w-])[^`]*`:", section, re.MULTILINE), (
                command,
                flag,
            )
    assert "Sentinel" not in text


@pytest.mark.slow  # a strict build of the whole site: seconds of CPU
def test_the_built_page_names_every_command_and_option_and_no_sentinel(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={"PATH": str(REPO_ROOT / ".venv" / "bin"), "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
        check=False,
    )
    assert built.returncode == 0, built.stderr
    page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    headings = {
        html.unescape(re.sub(r"<[^>]+>", "", match[1])).strip("¶ ").strip()
        for match in re.finditer(r"<h2[^>]*>(.*?)</h2>", page, re.DOTALL)
    }
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    missing = []
    for command, flags in LISTED.items():
        if command not in headings:
            missing.append(command)
            continue
        section = text.split(command, 1)[1]
        missing += [f"{command} {flag}" for flag in flags if flag not in section]
    assert missing == []
    assert "Sentinel" not in text
