"""The shell commands of the documentation, read from the pages themselves, and a shell that runs them.

The convention the pages follow (CONTRIBUTING.md, "Docs that run"):

- A command the reader types is written in a ```` ```console ```` block, on a line starting with ``$ ``; a
  line ending with a backslash continues on the next one. The lines after a command, up to the next
  ``$ `` line or the end of the block, are its output as the page shows it.
- Shown output is compared as a doctest compares it: ``...`` matches anything, runs of whitespace are equal.
  A command with no output shown only has to succeed (exit status 0).
- In the tutorial and the how-to guides every shell block is a ``console`` block, so no command can hide
  from the test in a ``sh`` or ``bash`` block. (The README's ``sh`` block holds ``make demo`` and
  ``make test``, which CI runs itself.)
- ``tally-local ...`` (``.venv/bin/tally-local``, ``python -m tally_local.stack``) runs until Ctrl-C in a terminal of its own; the page then tells the
  reader to paste the ``export`` lines it printed into the terminal of the commands that follow. The test
  does exactly that (``StackProcess``). Pages that start the same command may share one stack, emptied
  between them (``StackProcess.empty``): a stack takes seconds of CPU to start, emptying it a fraction of one.
"""

from __future__ import annotations

import collections
import doctest
import functools
import os
import queue
import re
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import boto3

from tests.support.tables import scan_all

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
VENV_BIN: Final = REPO_ROOT / ".venv" / "bin"
STACK_COMMAND: Final = re.compile(r"^(?:python -m tally_local\.stack|(?:\.venv/bin/)?tally-local)(?:\s|$)")
_STACK_PROGRAM: Final = re.compile(r"^(?:python -m tally_local\.stack|(?:\.venv/bin/)?tally-local)(?=\s|$)")


def stack_identity(command: str) -> str:
    """What makes two pages' stack commands the same stack: the arguments, however the program is spelled
    (``tally-local`` runs ``python -m tally_local.stack``: tally_local/command.py) and wherever it is found."""
    return _STACK_PROGRAM.sub("tally-local", command, count=1)


STACK_READY: Final = "press Ctrl-C to stop"
DRAIN_DEADLINE_S: Final = 180.0
"""How long a stack may take to deliver what an earlier page published before it is emptied for the next: a
deadline against a hang, not a speed test. A page may check one key of a load while the rest is still being
counted (docs/how-to/publish.md's 200 generated messages, then read.md's start): 60 s ran out once in a
clean-clone run on a machine running at half the reference's speed."""
IN_FLIGHT_SETTLED_S: Final = 75.0
"""How long messages may stay in flight with nothing visible before ``StackProcess.empty`` takes them for records a
batch reported failed, waiting out the queue's visibility timeout (420 s, from the template's 60-s function
timeout), and purges them: no invocation lasts past the function's 60 s, so none still holds them. Left there,
such a record would come again after the tables were emptied and count in a later page's. docs/how-to/publish.md's
200 messages (5% of ids re-sent) left one so under load: emptying the stack for read.md once waited out the whole
deadline on it."""
IN_FLIGHT_PAUSE_S: Final = 2.0
"""How long the same messages in flight, nothing visible, end a read's wait for delivery (``StackProcess.delivered``):
a batch's invocation takes about a second here; a handed-back record would hold each read of its page for the whole
``DELIVERY_WAIT_S``."""
DELIVERY_WAIT_S: Final = 10.0
"""How long a command whose output the page shows waits for the stack to deliver what was published before it is run
(``StackProcess.delivered``): a deadline; the retry until the output matches does the rest."""
SHELL_FENCES: Final = frozenset({"sh", "bash", "shell", "zsh", "console", "shell-session"})
_FENCE: Final = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^\s`{]*)")
_SENTINEL: Final = "__tally_docs_command_done__"
_HERE_DOCUMENT: Final = re.compile(r"<<-?\s*(?P<quote>['\"]?)(?P<word>\w+)(?P=quote)")


@dataclass(frozen=True)
class Command:
    """One command of a page, with the output the page shows for it (empty: none shown)."""

    page: str
    line: int
    text: str
    shown: str

    @property
    def starts_stack(self) -> bool:
        return STACK_COMMAND.match(self.text) is not None

    def where(self) -> str:
        return f"{self.page}:{self.line}: $ {self.text}"


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language (the fence's info string) and its lines."""

    language: str
    line: int
    lines: tuple[str, ...]


def code_blocks(text: str) -> list[Block]:
    """Every fenced block of a markdown text, indented ones (inside lists) included."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[str] = []
        start = index + 1
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][indent:] if lines[index][:indent].strip() == "" else lines[index])
            index += 1
        blocks.append(Block(opening["info"].lower(), start, tuple(body)))
        index += 1
    return blocks


def page_commands(page: str, text: str) -> list[Command]:
    """The commands of a page's ``console`` blocks, in order, each with the output it shows. A command goes
    on after a line ending with a backslash, and through the end of a here-document it opens."""
    commands: list[Command] = []
    for block in code_blocks(text):
        if block.language != "console":
            continue
        lines = list(block.lines)
        index = 0
        while index < len(lines):
            if not lines[index].startswith("$ "):
                if lines[index].strip():
                    raise ValueError(
                        f"{page}:{block.line + index + 1}: a console block's first line must be a $ command"
                    )
                index += 1
                continue
            number = block.line + index + 1
            command = [lines[index][2:]]
            index += 1
            while command[-1].endswith("\\") and index < len(lines):
                command.append(lines[index])
                index += 1
            opened = _HERE_DOCUMENT.search("\n".join(command))
            if opened is not None:
                while index < len(lines):
                    command.append(lines[index])
                    index += 1
                    if command[-1] == opened["word"]:
                        break
            shown = []
            while index < len(lines) and not lines[index].startswith("$ "):
                shown.append(lines[index])
                index += 1
            commands.append(Command(page, number, "\n".join(command), "\n".join(shown).strip("\n")))
    return commands


def unrun_shell_blocks(page: str, text: str) -> list[str]:
    """Shell blocks a page holds that the test would not run: any shell fence but ``console``, or a console
    block without a command."""
    problems = []
    for block in code_blocks(text):
        if block.language in SHELL_FENCES and block.language != "console":
            problems.append(f"{page}:{block.line}: a ```{block.language} block (write commands in ```console)")
        elif block.language == "console" and not any(line.startswith("$ ") for line in block.lines):
            problems.append(f"{page}:{block.line}: a ```console block without a '$ ' command")
    return problems


_CHECKER: Final = doctest.OutputChecker()
_FLAGS: Final = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def output_matches(shown: str, actual: str) -> bool:
    """Whether the output a page shows matches what the command printed (doctest's rules: ``...``, spaces)."""
    if not shown.strip():
        return True
    return _CHECKER.check_output(shown.strip() + "\n", actual.strip() + "\n", _FLAGS)


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a reader's fresh terminal has: no virtual environment on PATH (a page activates the
    project's, as its reader must), no AWS or tally variable of the test's own (nothing may reach an AWS
    account), no AWS config or credentials."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "TALLY_", "BOTO_")) and name not in {"VIRTUAL_ENV", "PYTHONPATH"}
    }
    environment["PATH"] = os.pathsep.join(
        entry
        for entry in environment.get("PATH", "").split(os.pathsep)
        if entry and not (Path(entry) / "activate").exists()  # any virtual environment's bin (the test's own)
    )
    environment["AWS_CONFIG_FILE"] = os.devnull
    environment["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    environment["COLUMNS"] = "200"
    environment.update(extra or {})
    return environment


@dataclass(frozen=True)
class Ran:
    status: int
    stdout: str
    stderr: str


class Shell:
    """One bash process: the terminal of a page, where exports, variables and ``cd`` persist between commands."""

    def __init__(self, cwd: Path, environment: Mapping[str, str]) -> None:
        self._stderr_path = cwd / ".docs-shell-stderr"
        self._stderr = self._stderr_path.open("w+", encoding="utf-8")
        self._process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=dict(environment),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(self, command: str, timeout_s: float = 180.0) -> Ran:
        assert self._process.stdin is not None
        error_start = self._stderr.seek(0, os.SEEK_END)
        self._process.stdin.write(f"{command}\nprintf '\\n{_SENTINEL} %s\\n' \"$?\"\n")
        self._process.stdin.flush()
        deadline = time.monotonic() + timeout_s
        out: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no end of {command!r} after {timeout_s:.0f} s; so far: {''.join(out)}") from None
            if line is None:
                raise RuntimeError(f"the shell ended during {command!r}: {''.join(out)}")
            if line.startswith(_SENTINEL):
                status = int(line.split()[1])
                break
            out.append(line)
        self._stderr.flush()
        self._stderr.seek(error_start)
        stderr = self._stderr.read()
        stdout = "".join(out)
        stdout = stdout.removesuffix("\n")  # the newline printf put before the sentinel
        return Ran(status, stdout, stderr)

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._stderr.close()


class StackProcess:
    """``tally-local ...`` as the reader runs it: in a terminal of its own, until Ctrl-C."""

    def __init__(self, command: str, cwd: Path, environment: Mapping[str, str], timeout_s: float = 180.0) -> None:
        self.command = command
        self._process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", f"exec {command}"],
            cwd=cwd,
            env=dict(environment),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        printed: list[str] = []
        deadline = time.monotonic() + timeout_s
        assert self._process.stdout is not None
        while time.monotonic() < deadline:
            line = self._process.stdout.readline()
            if not line:
                break
            printed.append(line.rstrip("\n"))
            if line.startswith(STACK_READY):
                break
        self.printed = "\n".join(printed)
        if not printed or not printed[-1].startswith(STACK_READY):
            self.stop()
            raise RuntimeError(f"{command!r} did not come up:\n{self.printed}")
        # Keep draining what it prints later, so its pipe never fills; its last lines say why it stopped.
        self._later: collections.deque[str] = collections.deque(maxlen=40)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._later.append(line.rstrip("\n"))

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def state(self) -> str:
        """Whether it still runs (or how it exited), and the last lines it printed after coming up."""
        status = self._process.poll()
        running = "still running" if status is None else f"exited with status {status}"
        return f"the stack ({self.command!r}) is {running}; its last lines:\n" + "\n".join(self._later)

    @property
    def exports(self) -> list[str]:
        """The ``export`` lines it printed, which the page tells the reader to paste."""
        return [line for line in self.printed.splitlines() if line.startswith("export ")]

    @functools.cached_property
    def _variables(self) -> dict[str, str]:
        """What its ``export`` lines set."""
        return dict(_exported(line) for line in self.exports)

    @functools.cached_property
    def _session(self) -> boto3.session.Session:
        """A session with the credentials and region it printed (the endpoints are per service)."""
        return boto3.session.Session(
            aws_access_key_id=self._variables["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self._variables["AWS_SECRET_ACCESS_KEY"],
            region_name=self._variables["AWS_REGION"],
        )

    @functools.cached_property
    def _sqs(self) -> Any:
        return self._session.client("sqs", endpoint_url=self._variables["AWS_ENDPOINT_URL"])

    def delivered(self, timeout_s: float) -> bool:
        """Wait until its source queue holds no message, visible or in flight, for up to ``timeout_s``: whether it
        came to that. A reader who just published looks a second or two later (the page says to run a read again
        if it printed nothing yet); the test looks once the stack has delivered what was published, instead of
        starting a ``tally`` process every half second until the count shows (half a CPU-second each). Messages
        in flight, unchanged for ``IN_FLIGHT_PAUSE_S`` with nothing visible, end the wait too: a record handed back
        stays in flight for the visibility timeout (``IN_FLIGHT_SETTLED_S``), and the read runs meanwhile."""
        try:
            _wait_until_delivered(
                self._sqs,
                self._variables["TALLY_QUEUE_URL"],
                timeout_s,
                in_flight_settled_s=IN_FLIGHT_PAUSE_S,
            )
        except TimeoutError:
            return False
        return True

    def empty(self, timeout_s: float = DRAIN_DEADLINE_S) -> None:
        """Bring the running stack back to what a fresh start holds, for the next page: once its source queue
        has nothing left to deliver, every queue drained, every table's items and every bucket's objects (the
        archive) deleted.
        What only a restart would renew (warm execution environments, the pollers' tallies) holds no count, so
        no page can see another's. A stack with a stream is refused: records cannot be taken back."""
        variables, session = self._variables, self._session
        moto = variables["AWS_ENDPOINT_URL"]
        if session.client("kinesis", endpoint_url=moto).list_streams()["StreamNames"]:
            raise ValueError(f"{self.command!r} has a stream: start it afresh instead")
        sqs = self._sqs
        try:
            waiting_out = _wait_until_delivered(
                sqs, variables["TALLY_QUEUE_URL"], timeout_s, in_flight_settled_s=IN_FLIGHT_SETTLED_S
            )
        except TimeoutError as stuck:  # what the stack printed says why (a failed invocation, a poller's error)
            raise TimeoutError(f"{stuck}\n{self.state()}") from stuck
        if waiting_out:  # receivable by no one for minutes: only a purge takes them
            sqs.purge_queue(QueueUrl=variables["TALLY_QUEUE_URL"])
        queues = sqs.list_queues().get("QueueUrls", [])
        for url in queues:
            _drain(sqs, url)
        tables = list(session.resource("dynamodb", endpoint_url=variables["AWS_ENDPOINT_URL_DYNAMODB"]).tables.all())
        for table in tables:
            _delete_every_item(table)
        s3 = session.client("s3", endpoint_url=moto)
        buckets = [bucket["Name"] for bucket in s3.list_buckets().get("Buckets", [])]
        for bucket in buckets:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for entry in page.get("Contents", []):
                    s3.delete_object(Bucket=bucket, Key=entry["Key"])
        left = [url for url in queues if _holds_messages(sqs, url)]
        left += [table.name for table in tables if scan_all(table.meta.client, table.name)]
        left += [bucket for bucket in buckets if s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0)]
        if left:
            raise RuntimeError(f"emptying {self.command!r} left something in {left}")

    def stop(self) -> None:
        """Ctrl-C's equivalent (it handles SIGTERM the same way): it stops everything it started."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()


def _exported(line: str) -> tuple[str, str]:
    name, _, value = line.removeprefix("export ").partition("=")
    words = shlex.split(value)
    return name, words[0] if words else ""


def _wait_until_delivered(
    sqs: Any, queue_url: str, timeout_s: float, *, in_flight_settled_s: float | None = None
) -> bool:
    """Wait until the queue holds no message, visible or in flight (a poller deletes one once its invocation
    ends), so nothing is written after the tables are emptied. With ``in_flight_settled_s``, also return once
    nothing was visible and the same number of messages was in flight for that long: records reported failed,
    waiting out the visibility timeout, which no invocation holds any more. Whether it returned for that."""
    deadline = time.monotonic() + timeout_s
    in_flight_since: tuple[dict[str, str], float] | None = None
    while held := _holds_messages(sqs, queue_url):
        now = time.monotonic()
        if in_flight_settled_s is not None and set(held) == {"ApproximateNumberOfMessagesNotVisible"}:
            if in_flight_since is None or in_flight_since[0] != held:
                in_flight_since = (held, now)
            elif now - in_flight_since[1] >= in_flight_settled_s:
                return True
        else:
            in_flight_since = None
        if now > deadline:
            raise TimeoutError(f"{queue_url} still holds messages after {timeout_s:.0f} s: {held}")
        time.sleep(0.2)
    return False


def _holds_messages(sqs: Any, queue_url: str) -> dict[str, str]:
    """The queue's counts of visible and in-flight messages that are not 0 (empty: it holds none)."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return {name: attributes[name] for name in names if attributes[name] != "0"}


def _drain(sqs: Any, queue_url: str) -> None:
    """Receive and delete until the queue is empty (``PurgeQueue`` may run once a minute per queue, as on AWS)."""
    while messages := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages"):
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(index), "ReceiptHandle": m["ReceiptHandle"]} for index, m in enumerate(messages)],
        )


def _delete_every_item(table: Any) -> None:
    key_names = [part["AttributeName"] for part in table.key_schema]
    with table.batch_writer() as batch:  # batches of 25, unprocessed items sent again
        # the resource's client hands items back as Python values, as ``batch_writer`` takes them
        for item in scan_all(table.meta.client, table.name):
            batch.delete_item(Key={name: item[name] for name in key_names})


class PageFailed(AssertionError):
    """A command of a page failed, or its output never matched what the page shows."""


def run_page(
    commands: list[Command],
    shell: Shell,
    start_stack: Callable[[str, str], StackProcess],
    *,
    settle_s: float = 60.0,
) -> int:
    """Run a page's commands in order in its shell; the number run. A command that exits non-zero fails the
    page at once; one whose output does not match what the page shows is run again until it does, for up to
    ``settle_s`` (counting is asynchronous: a count appears once the stack's pollers have delivered it)."""
    stacks: list[StackProcess] = []
    try:
        _run_commands(commands, shell, start_stack, stacks, settle_s)
    except PageFailed as failed:
        raise PageFailed("\n\n".join([str(failed), *(stack.state() for stack in stacks)])) from None
    return len(commands)


def _run_commands(
    commands: list[Command],
    shell: Shell,
    start_stack: Callable[[str, str], StackProcess],
    stacks: list[StackProcess],
    settle_s: float,
) -> None:
    for command in commands:
        if command.starts_stack:
            # in a terminal of its own, opened where the page's is: the same PATH (a venv the page activated)
            path = shell.run('printf "%s" "$PATH"').stdout
            stack = start_stack(command.text, path)
            if stack not in stacks:
                stacks.append(stack)
            if not output_matches(command.shown, stack.printed):
                raise PageFailed(f"{command.where()}\nshown:\n{command.shown}\nprinted:\n{stack.printed}")
            for export in stack.exports:  # what the page tells the reader to paste into this terminal
                ran = shell.run(export)
                if ran.status != 0:
                    raise PageFailed(f"{command.where()}: pasting {export!r} failed: {ran.stderr}")
            continue
        deadline = time.monotonic() + settle_s
        while True:
            if command.shown.strip():  # a command whose output the page shows may read what an earlier one published
                for stack in stacks:
                    stack.delivered(min(DELIVERY_WAIT_S, max(0.0, deadline - time.monotonic())))
            ran = shell.run(command.text)
            if ran.status != 0:
                raise PageFailed(
                    f"{command.where()}\nexit status {ran.status}\nstdout:\n{ran.stdout}\nstderr:\n{ran.stderr}"
                )
            if output_matches(command.shown, ran.stdout):
                break
            if time.monotonic() > deadline:
                raise PageFailed(
                    f"{command.where()}\nits output never matched the page's within {settle_s:.0f} s\n"
                    f"shown:\n{command.shown}\nprinted:\n{ran.stdout}"
                )
            time.sleep(0.5)  # a count lands within a batching window (1 s locally): look twice a window
