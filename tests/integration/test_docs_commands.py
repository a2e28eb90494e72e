"""The docs cannot drift: every shell command of the README's tour, the tutorial and the how-to guides runs
here, read from the pages themselves, against the local stack the pages tell the reader to start.

Each page runs in a bash shell of its own (its terminal: exports and variables persist), in a scratch
directory holding the project's ``.venv``, with no AWS variable, config or credentials of the test's own.
The stack a page starts (``tally-local ...``) runs in the background as in a second terminal opened where
the page's is (its PATH: a venv the page activated), its ``export`` lines pasted into the page's shell, as
the page says. A page's shell starts with nothing of the test's own on PATH: what the page needs, the page
must do (the README's tour is one command from a fresh shell). Each page has a stack of its
own as far as the reader can tell: pages that start the same command run one after another on one stack,
emptied between them (``StackProcess.empty``: queues drained, tables emptied), since a start costs seconds of
CPU; a page with another command stops it and starts its own. The stack's name (``tally-local``) and its
state directory (``.tally-local/``) are fixed, so a reader runs one at a time, and a page never sees another
page's counts or dead letters. The convention: ``tests/support/docs_pages.py``.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Final

import pytest

from tests.support.docs_pages import (
    REPO_ROOT,
    Command,
    PageFailed,
    Shell,
    StackProcess,
    clean_environment,
    code_blocks,
    page_commands,
    run_page,
    stack_identity,
    unrun_shell_blocks,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.integration

NOT_RUN: Final = {
    "docs/how-to/sam-local-invoke.md": "needs Docker (make sam-local runs it)",
}
"""Pages whose commands need what the test does not have; everything else under the tutorial and how-to is run."""

RUN_UNTIL: Final = {
    "docs/how-to/deploy.md": ("sam deploy", "the first call that needs an AWS account"),
}
"""Pages run up to (not including) their first command that starts so: getting the SAM CLI and `sam build` run."""

CHECKOUT: Final = (
    "Makefile",
    "pyproject.toml",
    "src",
    "events",
    "tests",  # the development lock (tests/requirements-dev.txt) the Makefile installs .venv from
    ".venv",
    ".venv-sam",
)
"""What of the repository a page's commands use, linked into the scratch directory (the reader's checkout)."""

COPIED: Final = ("template.yaml", "samconfig.toml")
"""Copied, not linked: `sam build` follows a linked template to its real directory and then resolves `CodeUri` by a
relative path that misses the checkout when the repository and the scratch directory share a parent (a clone under
/tmp: "Makefile not found at /main-ci/src/Makefile"; elsewhere the extra `..` stop at / and hide it)."""

WITHOUT_COMMANDS: Final = frozenset({"docs/how-to/existing-account.md"})
"""Pages that hold no command at all (parameters to set, not commands to type)."""


def _pages() -> list[str]:
    found = ["README.md"]
    for folder in ("docs/tutorial", "docs/how-to"):
        found.extend(str(path.relative_to(REPO_ROOT)) for path in sorted((REPO_ROOT / folder).glob("*.md")))
    return [page for page in found if page not in NOT_RUN]


PAGES: Final = _pages()


def _text(page: str) -> str:
    return (REPO_ROOT / page).read_text(encoding="utf-8")


def _stack_command(page: str) -> str:
    return next((stack_identity(c.text) for c in page_commands(page, _text(page)) if c.starts_stack), "")


PAGES_BY_STACK: Final = sorted(PAGES, key=_stack_command)
"""The pages in the order they run: those starting the same stack one after another, so they share it."""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where a reader's terminal would be: a checkout (the files its commands use, linked), with the project's
    virtual environments. One for the module, as a reader has one checkout (a module-scoped fixture also keeps the pages on one xdist worker, in
    ``PAGES_BY_STACK`` order: tests/support/tiers.py)."""
    directory = tmp_path_factory.mktemp("docs-commands")
    if not (REPO_ROOT / ".venv-sam").exists():  # the deploy page's `make sam` through a link needs it to exist
        subprocess.run(["make", "--no-print-directory", "-C", str(REPO_ROOT), "sam"], check=True, timeout=600)
    for name in CHECKOUT:
        (directory / name).symlink_to(REPO_ROOT / name, target_is_directory=(REPO_ROOT / name).is_dir())
    for name in COPIED:
        shutil.copyfile(REPO_ROOT / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def running(scratch: Path) -> Iterator[dict[str, StackProcess]]:
    """The stack left running by the last page that started one (at most one), stopped when the module ends."""
    left: dict[str, StackProcess] = {}
    try:
        yield left
    finally:
        for stack in left.values():
            stack.stop()


@pytest.fixture
def start_stack(scratch: Path, running: dict[str, StackProcess]) -> Callable[[str, str], StackProcess]:
    """The page's stacks: one an earlier page started with the same command, emptied, else a new one (stopping
    the one left running) with the PATH of the page's shell; again the same within the page."""
    this_page: dict[str, StackProcess] = {}

    def start(command: str, path: str) -> StackProcess:
        identity = stack_identity(command)
        if identity in this_page:
            return this_page[identity]
        stack = running.get(identity)
        if stack is not None and stack.alive:
            stack.empty()  # should it fail, the stack stays in ``running``, to be stopped with the module
        else:
            for other in running.values():
                other.stop()
            running.clear()
            stack = running[identity] = StackProcess(command, scratch, clean_environment({"PATH": path}))
        this_page[identity] = stack
        return stack

    return start


@pytest.fixture
def shell(scratch: Path) -> Iterator[Shell]:
    terminal = Shell(scratch, clean_environment())
    try:
        yield terminal
    finally:
        terminal.close()


def test_the_pages_are_found() -> None:
    assert "README.md" in PAGES
    assert any(page.startswith("docs/tutorial/") for page in PAGES)
    assert sum(page.startswith("docs/how-to/") for page in PAGES) >= 4


@pytest.mark.parametrize("page", PAGES)
def test_no_shell_command_hides_from_the_test(page: str) -> None:
    """In the tutorial and the how-to guides, every shell block is a console block this test runs."""
    if page == "README.md":
        return  # its sh block is `make demo` and `make test`, which CI runs itself
    assert unrun_shell_blocks(page, _text(page)) == []


def test_the_readmes_deploy_lines_are_the_deploy_pages() -> None:
    """The README's `sh` blocks are not run (`make demo` and `make test` are CI's own); its deploy lines must be
    commands of docs/how-to/deploy.md, which is run up to its first call to AWS."""
    deploy = {command.text for command in page_commands("docs/how-to/deploy.md", _text("docs/how-to/deploy.md"))}
    readme = [
        line.split("  #", 1)[0].strip()
        for block in code_blocks(_text("README.md"))
        if block.language == "sh"
        for line in block.lines
        if line.strip()
    ]
    assert "sam build" in readme
    assert [line for line in readme if line not in deploy and line not in {"make demo", "make test"}] == []


@pytest.mark.dynamodb_local  # each page starts the local stack, in a subprocess
@pytest.mark.moto
@pytest.mark.parametrize("page", PAGES_BY_STACK)
def test_every_command_of_the_page_runs_as_shown(
    page: str, shell: Shell, start_stack: Callable[[str, str], StackProcess]
) -> None:
    commands = page_commands(page, _text(page))
    if page in WITHOUT_COMMANDS:
        assert commands == []
        return
    if page in RUN_UNTIL:
        stop, why = RUN_UNTIL[page]
        until = next((index for index, c in enumerate(commands) if c.text.startswith(stop)), None)
        assert until, f"{page} has no command before `{stop}` ({why}) to run: update RUN_UNTIL"
        commands = commands[:until]
    assert commands, f"{page} shows no command: list it in WITHOUT_COMMANDS, or write its commands in console blocks"
    assert run_page(commands, shell, start_stack) == len(commands)


def test_a_page_that_drifted_fails(shell: Shell, start_stack: Callable[[str, str], StackProcess]) -> None:
    """The check can fail: output that never matches what the page shows, and a command that no longer exists,
    each fail the page. Neither needs a stack (the count a stack never made fails the same way, through the same
    comparison; a stack took 9 s of CPU to show it)."""
    assert shell.run(". .venv/bin/activate").status == 0  # as every page does first
    drifted = Command("drifted.md", 1, "tally --version", "tally 0.0.0-drifted")
    with pytest.raises(PageFailed, match="never matched"):
        run_page([drifted], shell, start_stack, settle_s=1)

    renamed = Command("drifted.md", 2, "tally fetch docs:never-counted", "")
    with pytest.raises(PageFailed, match="exit status 2"):
        run_page([renamed], shell, start_stack)
