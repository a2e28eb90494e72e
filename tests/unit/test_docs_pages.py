"""How commands are read from the docs pages, and how their shown output is compared (tests/support/docs_pages)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import docs_pages
from tests.support.docs_pages import output_matches, page_commands, stack_identity, unrun_shell_blocks

PAGE = """\
# A page

```console
$ tally publish page:/home 3 \\
    --stack "$TALLY_STACK"
$ tally get page:/home --json
{"count":3}
```

- In a list:

    ```console
    $ tally dlq list --json
    {"message_id":...,"error_code":"below_floor",...}
    ```

```python
print("not a command")
```
"""


def test_commands_come_in_order_with_their_shown_output() -> None:
    commands = page_commands("page.md", PAGE)
    assert [(command.line, command.text, command.shown) for command in commands] == [
        (4, 'tally publish page:/home 3 \\\n    --stack "$TALLY_STACK"', ""),
        (6, "tally get page:/home --json", '{"count":3}'),
        (13, "tally dlq list --json", '{"message_id":...,"error_code":"below_floor",...}'),
    ]


@pytest.mark.parametrize(
    "command", ["tally-local --param Source=SQS", ".venv/bin/tally-local", "python -m tally_local.stack --port 8600"]
)
def test_the_local_stack_command_is_recognised(command: str) -> None:
    text = f"```console\n$ {command}\nlocal stack ... is up\n```\n"
    (found,) = page_commands("page.md", text)
    assert found.starts_stack
    assert found.shown == "local stack ... is up"


def test_one_stack_whether_the_page_activated_the_venv_or_not() -> None:
    assert stack_identity(".venv/bin/tally-local --param Source=SQS") == stack_identity(
        "tally-local --param Source=SQS"
    )
    assert not page_commands("p.md", "```console\n$ tally-localish\n```\n")[0].starts_stack


def test_one_stack_whichever_way_the_page_spells_the_program() -> None:
    """``python -m tally_local.stack`` is the program ``tally-local`` runs: the same arguments, the same stack."""
    assert stack_identity("python -m tally_local.stack --param Source=SQS") == stack_identity(
        ".venv/bin/tally-local --param Source=SQS"
    )
    assert stack_identity("python -m tally_local.stack --param Source=SQS") != stack_identity(
        "tally-local --param Source=Kinesis"
    )


@pytest.mark.parametrize(
    ("shown", "printed", "matches"),
    [
        ('{"count":3}', '{"count":3}\n', True),
        ('{"count":3}', '{"count":2}', False),
        ('{"count":3}', "{}", False),
        (
            '{"message_id":...,"error_code":"below_floor",...}',
            '{"message_id":"x","error_code":"below_floor","b":1}',
            True,
        ),
        (
            '{"message_id":...,"error_code":"below_floor",...}',
            '{"message_id":"x","error_code":"id_conflict","b":1}',
            False,
        ),
        ("count   3", "count 3", True),
        ("", "anything at all", True),
    ],
)
def test_shown_output_is_compared_as_a_doctest(shown: str, printed: str, matches: bool) -> None:
    assert output_matches(shown, printed) is matches


def test_a_shell_block_the_test_would_not_run_is_reported() -> None:
    text = "```sh\ntally get k\n```\n\n```console\ntally get k\n```\n\n```console\n$ tally get k\n```\n"
    assert unrun_shell_blocks("how-to/x.md", text) == [
        "how-to/x.md:1: a ```sh block (write commands in ```console)",
        "how-to/x.md:5: a ```console block without a '$ ' command",
    ]


def test_a_console_block_must_open_with_a_command() -> None:
    with pytest.raises(ValueError, match="first line must be a \\$ command"):
        page_commands("page.md", "```console\noutput first\n$ tally get k\n```\n")


def test_a_here_document_belongs_to_its_command() -> None:
    text = '```console\n$ tally publish --file - <<\'END\'\n{"key": "k"}\nEND\n$ tally get k --json\n{"count":1}\n```\n'
    first, second = page_commands("page.md", text)
    assert first.text == 'tally publish --file - <<\'END\'\n{"key": "k"}\nEND'
    assert first.shown == ""
    assert (second.text, second.shown) == ("tally get k --json", '{"count":1}')


class QueueCounts:
    """A queue whose counts (visible, in flight) follow a script, one entry per look, the last one kept."""

    def __init__(self, script: list[tuple[int, int]]) -> None:
        self.script = script
        self.looks = 0

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        del QueueUrl, AttributeNames
        visible, in_flight = self.script[min(self.looks, len(self.script) - 1)]
        self.looks += 1
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(visible),
                "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            }
        }


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("script", "settled"),
    [
        ([(3, 1), (0, 2), (0, 0)], False),  # delivered: nothing left
        ([(2, 0), (0, 1)], True),  # one message in flight from then on, and nothing visible: waiting out its timeout
    ],
    ids=["delivered", "in flight for good"],
)
def test_emptying_waits_for_delivery_or_for_messages_no_invocation_holds(
    script: list[tuple[int, int]], settled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(docs_pages, "time", clock)
    queue = QueueCounts(script)
    assert docs_pages._wait_until_delivered(queue, "queue", 180.0, in_flight_settled_s=75.0) is settled
    assert clock.now < 80.0


@pytest.mark.parametrize(
    "script",
    [
        [(0, 1), (1, 0)] * 1000,  # a message turning visible again: a poller will take it
        [(0, n % 3 + 1) for n in range(2000)],  # the messages in flight change: invocations are still at work
    ],
    ids=["visible again", "in flight changing"],
)
def test_emptying_does_not_take_messages_still_moving_for_settled(
    script: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(docs_pages, "time", clock)
    with pytest.raises(TimeoutError):
        docs_pages._wait_until_delivered(QueueCounts(script), "queue", 180.0, in_flight_settled_s=75.0)
