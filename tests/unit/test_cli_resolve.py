"""``tally.cli.resolve.Resolver``: the one precedence rule, on a fake ``DescribeStacks`` that counts its calls."""

from __future__ import annotations

import click
import pytest

from tally.cli.resolve import Resolver, StackDescription, Target

STACKS = {
    "A": StackDescription("A", {"CountersTableName": "table-A", "EventsQueueUrl": "queue-A"}, {"HotKeys": "a=2"}),
    "B": StackDescription(
        "B",
        {"CountersTableName": "table-B", "EventsQueueUrl": "queue-B", "EventStreamName": "stream-B"},
        {"HotKeys": ""},
    ),
}


class Describe:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, name: str) -> StackDescription:
        self.calls.append(name)
        if name not in STACKS:
            raise click.ClickException(f"stack {name!r} does not exist")
        return STACKS[name]


A_EXPORTS = {
    "TALLY_STACK": "A",
    "TALLY_COUNTERS_TABLE": "table-A",
    "TALLY_QUEUE_URL": "queue-A",
    "TALLY_HOT_KEYS": "a=2",
}


def resolver(stack: str | None, environ: dict[str, str]) -> tuple[Resolver, Describe]:
    describe = Describe()
    return Resolver(stack, environ, describe), describe


def test_an_option_beats_the_stack_and_the_environment() -> None:
    found, _ = resolver("B", A_EXPORTS)
    assert found.value("TALLY_COUNTERS_TABLE", "given") == "given"


def test_a_given_stack_beats_every_variable_settings_included() -> None:
    found, describe = resolver("B", A_EXPORTS)
    assert found.value("TALLY_COUNTERS_TABLE") == "table-B"
    assert found.value("TALLY_HOT_KEYS") == ""  # B's (none), not A's exported a=2
    assert found.value("TALLY_DLQ_URL") is None  # B has no such output: never A's
    assert describe.calls == ["B"]


def test_a_given_stack_is_read_even_when_options_give_everything() -> None:
    with pytest.raises(click.ClickException, match="'nope' does not exist"):
        resolver("nope", A_EXPORTS)


def test_the_environment_beats_tally_stack_which_is_read_only_when_needed() -> None:
    found, describe = resolver(None, {**A_EXPORTS, "TALLY_STACK": "B"})
    assert found.value("TALLY_COUNTERS_TABLE") == "table-A"
    assert describe.calls == []
    assert found.value("TALLY_STREAM_NAME") == "stream-B"  # missing from the environment: $TALLY_STACK's
    assert describe.calls == ["B"]


def test_an_empty_setting_counts_an_empty_resource_does_not() -> None:
    found, describe = resolver(None, {"TALLY_STACK": "A", "TALLY_HOT_KEYS": "", "TALLY_COUNTERS_TABLE": ""})
    assert found.value("TALLY_HOT_KEYS") == ""
    assert describe.calls == []
    assert found.value("TALLY_COUNTERS_TABLE") == "table-A"


def test_missing_everywhere_names_every_way_to_give_it() -> None:
    found, _ = resolver(None, {})
    with pytest.raises(click.UsageError, match=r"--table, --stack NAME, \$TALLY_COUNTERS_TABLE or \$TALLY_STACK"):
        found.required("TALLY_COUNTERS_TABLE", None, "the counters table", "--table")


@pytest.mark.parametrize(
    ("stack", "environ", "options", "expected"),
    [
        (None, A_EXPORTS, ("q", None, None), Target("sqs", "q")),
        (None, A_EXPORTS, (None, "s", None), Target("kinesis", "s")),
        ("B", A_EXPORTS, (None, None, "sqs"), Target("sqs", "queue-B")),
        ("B", A_EXPORTS, (None, None, "Kinesis"), Target("kinesis", "stream-B")),
        (None, A_EXPORTS, (None, None, None), Target("sqs", "queue-A")),
        (None, {"TALLY_STACK": "B"}, (None, None, "KINESIS"), Target("kinesis", "stream-B")),
        (None, {"TALLY_STACK": "B", "TALLY_QUEUE_URL": "q"}, (None, None, "kinesis"), Target("kinesis", "stream-B")),
    ],
)
def test_the_publish_target(
    stack: str | None, environ: dict[str, str], options: tuple[str | None, str | None, str | None], expected: Target
) -> None:
    found, _ = resolver(stack, environ)
    assert found.publish_target(*options) == expected


def test_a_stack_with_a_queue_and_a_stream_needs_to() -> None:
    found, _ = resolver("B", {})
    with pytest.raises(click.ClickException, match="choose one with --to"):
        found.publish_target(None, None, None)
