"""``tally reset`` and ``tally correct``: an operator's reset or correction, published like any event.

Each is one message with its own id (docs/explanation/counter-patterns.md, "Corrections and resets"), so it counts
exactly once however often it is sent: the id is generated when none is given and **printed**, and re-sending with
``--id`` that id (after a timeout, an unclear answer, a crash of the shell) is a duplicate at the consumer, never a
second reset or correction. It goes through the producer library, to the same targets as ``tally publish``,
found the same way (``--queue-url``, ``--stream-name``, ``--stack``, then ``$TALLY_QUEUE_URL``,
``$TALLY_STREAM_NAME``, ``$TALLY_STACK``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from tally.cli.arguments import NumbersAsArguments
from tally.cli.output import json_option, print_json
from tally.cli.publish import _publisher, check_one_target
from tally.cli.publish_input import InputError, number, plain_name
from tally.cli.resolve import Resolver, kind_option, stack_option
from tally.producer import Event
from tally.producer.packing import new_message_id

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def _target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        (
            click.option("--id", "message_id", help="The message id (generated and printed if not given)."),
            click.option("--ts", type=int, help="Event time, epoch milliseconds (recorded as when it happened)."),
            click.option("--queue-url", help="Publish to this SQS queue (default: $TALLY_QUEUE_URL)."),
            click.option("--stream-name", help="Publish to this Kinesis stream (default: $TALLY_STREAM_NAME)."),
            stack_option,
            kind_option,
            json_option('Print {"id": ..., "sent": true|false} instead of the bare id.'),
        )
    ):
        command = option(command)
    return command


@click.command(cls=NumbersAsArguments)
@click.argument("key")
@click.argument("counter")
@click.argument("value")
@_target_options
def reset(*, key: str, counter: str, value: str, **target: Any) -> None:
    """Reset COUNTER of KEY to VALUE (its all-time value; windows keep what happened in them)."""
    _check_names(key, counter)
    _send(lambda mid, ts: Event.reset_to(key, {counter: number(value, "VALUE")}, id=mid, ts=ts), **target)


@click.command(cls=NumbersAsArguments)
@click.argument("key")
@click.argument("counter")
@click.argument("delta")
@_target_options
def correct(*, key: str, counter: str, delta: str, **target: Any) -> None:
    """Correct COUNTER of KEY by DELTA (negative to take away), recorded as a correction."""
    _check_names(key, counter)
    _send(lambda mid, ts: Event.correct(key, {counter: number(delta, "DELTA")}, id=mid, ts=ts), **target)


def _check_names(key: str, counter: str) -> None:
    try:
        plain_name(key, "key")
        plain_name(counter, "counter")
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def _send(
    make: Callable[[str, int | None], Event],
    *,
    message_id: str | None,
    ts: int | None,
    queue_url: str | None,
    stream_name: str | None,
    stack_name: str | None,
    kind: str | None,
    as_json: bool,
) -> None:
    check_one_target(queue_url, stream_name, stack_name)
    chosen_id = message_id or new_message_id()
    try:
        event = make(chosen_id, ts)
    except (InputError, TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    target = Resolver(stack_name, os.environ).publish_target(queue_url, stream_name, kind)
    publisher = _publisher(target, pack=False, max_message_bytes=None)
    result = publisher.send(publisher.prepare([event]))
    reasons = [f"{failure.code}: {failure.reason}" for failure in result.failed]
    if reasons:
        click.echo(f"not sent ({'; '.join(reasons)}); send it again with --id {chosen_id}", err=True)
    if as_json:
        print_json({"id": chosen_id, "sent": not reasons, "target": target.address, "failures": reasons})
    else:
        click.echo(chosen_id)
    if reasons:
        sys.exit(1)
