"""What a clone of the repository holds, and what following the docs leaves in it.

A reader who runs the docs' commands in a checkout must find ``git status`` as clean as before (the files the
commands write are ignored), and a fresh clone must hold nothing that points outside itself.
"""

from __future__ import annotations

import itertools
import os
import shlex
import subprocess
from pathlib import Path
from typing import Final

import pytest

from tests.support.docs_pages import REPO_ROOT, page_commands

PAGES: Final = sorted(
    [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")], key=lambda path: str(path.relative_to(REPO_ROOT))
)
_WRITES_TO: Final = frozenset({">", ">>", "--expected-out", "--failed-out", "--json-out", "-o"})
"""Shell redirections and the options of this project's commands that name a file to write."""


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)


def _words(command: str) -> list[str]:
    """The command's words, operators apart (a here-document's body left out), as the shell reads them."""
    first = command.split("\n", 1)[0] if "<<" in command.split("\n", 1)[0] else command.replace("\\\n", " ")
    lexer = shlex.shlex(first, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def written_files() -> list[tuple[str, str]]:
    """(where, path) of every file a docs command writes into the working directory."""
    found = []
    for page in PAGES:
        name = str(page.relative_to(REPO_ROOT))
        for command in page_commands(name, page.read_text(encoding="utf-8")):
            words = _words(command.text)
            for word, following in itertools.pairwise(words):
                option, _, attached = word.partition("=")
                path = attached if attached and option in _WRITES_TO else following if word in _WRITES_TO else None
                if path is None or path.startswith(("/", "$", "~")):
                    continue  # nothing written, or written outside the checkout
                found.append((command.where(), path))
    return found


def test_the_docs_commands_that_write_files_are_found() -> None:
    paths = {path for _, path in WRITTEN}
    assert {"totals.json", "events.jsonl", "template.x86_64.yaml"} <= paths, paths


WRITTEN: Final = written_files()


@pytest.mark.parametrize(("where", "path"), WRITTEN, ids=[f"{where.split(': $')[0]}-{path}" for where, path in WRITTEN])
def test_every_file_a_docs_command_writes_is_ignored_by_git(where: str, path: str) -> None:
    ignored = _git("check-ignore", "--quiet", "--no-index", path)
    assert ignored.returncode == 0, f"{where} writes {path}, which git would show as untracked: add it to .gitignore"


def test_no_tracked_link_points_outside_the_checkout() -> None:
    listed = _git("ls-files", "-s", "-z")
    assert listed.returncode == 0, listed.stderr
    links = [entry.split("\t", 1)[1] for entry in listed.stdout.split("\0") if entry.startswith("120000 ")]
    outside = []
    for link in links:
        target = (REPO_ROOT / link).parent / os.readlink(REPO_ROOT / link)
        if not target.resolve().is_relative_to(REPO_ROOT.resolve()):
            outside.append(f"{link} -> {os.readlink(REPO_ROOT / link)}")
    assert outside == [], "tracked links that dangle in a clone (git rm --cached them)"


def test_repo_root_is_this_checkout() -> None:
    assert Path(_git("rev-parse", "--show-toplevel").stdout.strip()).resolve() == REPO_ROOT.resolve()
