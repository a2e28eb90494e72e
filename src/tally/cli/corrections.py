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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from tally.cli.arguments import NumbersAsArguments
from tally.cli.output import json_option, print_json
from tally.cli.publish import _publisher, check_one_target
from tally.cli.publish_input import InputError, number, plain_name
from tally.cli.resolve import Resolver, counter_reader, kind_option, stack_option
from tally.producer import Event
from tally.producer.packing import new_message_id

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from tally.core.bounds import Bound
    from tally.core.numbers import Number


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
            click.option(
                "--force",
                is_flag=True,
                help="Send it even when it takes a bounded counter (CounterBounds) across its floor or ceiling:"
                " an operator's message is applied as given.",
            ),
        )
    ):
        command = option(command)
    return command


@dataclass(frozen=True, slots=True)
class Operation:
    """What an operator sends: a reset of COUNTER of KEY to ``amount``, or a correction by ``amount``."""

    key: str
    counter: str
    amount: Number
    reset: bool

    def event(self, message_id: str, ts: int | None) -> Event:
        values = {self.counter: self.amount}
        if self.reset:
            return Event.reset_to(self.key, values, id=message_id, ts=ts)
        return Event.correct(self.key, values, id=message_id, ts=ts)


@click.command(cls=NumbersAsArguments)
@click.argument("key")
@click.argument("counter")
@click.argument("value")
@_target_options
def reset(*, key: str, counter: str, value: str, **target: Any) -> None:
    """Reset COUNTER of KEY to VALUE (its all-time value; windows keep what happened in them)."""
    _send(_operation(key, counter, value, "VALUE", reset=True), **target)


@click.command(cls=NumbersAsArguments)
@click.argument("key")
@click.argument("counter")
@click.argument("delta")
@_target_options
def correct(*, key: str, counter: str, delta: str, **target: Any) -> None:
    """Correct COUNTER of KEY by DELTA (negative to take away), recorded as a correction."""
    _send(_operation(key, counter, delta, "DELTA", reset=False), **target)


def _operation(key: str, counter: str, amount: str, what: str, *, reset: bool) -> Operation:
    try:
        plain_name(key, "key")
        plain_name(counter, "counter")
        return Operation(key, counter, number(amount, what), reset)
    except (InputError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc


def _send(
    operation: Operation,
    *,
    message_id: str | None,
    ts: int | None,
    queue_url: str | None,
    stream_name: str | None,
    stack_name: str | None,
    kind: str | None,
    as_json: bool,
    force: bool,
) -> None:
    check_one_target(queue_url, stream_name, stack_name)
    chosen_id = message_id or new_message_id()
    try:
        event = operation.event(chosen_id, ts)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    resolver = Resolver(stack_name, os.environ)
    target = resolver.publish_target(queue_url, stream_name, kind)
    if not force:
        _hold_within_bounds(resolver, operation)
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


def _hold_within_bounds(resolver: Resolver, operation: Operation) -> None:
    """Stop (or, at a terminal, ask) before sending a message that takes a bounded counter across its bound.

    The consumer applies an operator's message as given, bounds aside (a correction is how an operator fixes a
    count, whatever it is): so the operator is told here, before the message is sent, never after."""
    crossing = bound_crossing(resolver, operation)
    if crossing is None:
        return
    if sys.stdin.isatty() and click.confirm(f"{crossing}. Send it anyway?", default=False, err=True):
        return
    raise click.ClickException(f"{crossing}; nothing sent. An operator's message is applied as given: --force sends it")


def bound_crossing(resolver: Resolver, operation: Operation) -> str | None:
    """In words, how ``operation`` would take its counter across a bound the stack declares (CounterBounds),
    or None: no bound, or it stays within."""
    from tally.core.bounds import parse_counter_bounds
    from tally.core.defaults import parse_counter_defaults
    from tally.core.numbers import add

    declared = resolver.value("TALLY_COUNTER_BOUNDS")
    if not declared:
        return None
    try:
        defaults = parse_counter_defaults(resolver.value("TALLY_COUNTER_DEFAULTS") or "")
        bound = parse_counter_bounds(declared, defaults=defaults).bounds(operation.key).get(operation.counter)
    except ValueError as exc:
        raise click.ClickException(f"the stack's CounterBounds cannot be read: {exc}") from exc
    if bound is None:
        return None
    what = f"{operation.key!r}/{operation.counter!r}"
    if operation.reset:
        after: Number = operation.amount
        change = f"a reset sets {what} to {after}"
    else:
        delta = operation.amount
        if not ((delta < 0 and bound.floor is not None) or (delta > 0 and bound.ceiling is not None)):
            return None  # a step away from the bound never crosses it
        current = _current_value(resolver, operation, defaults.starts(operation.key).get(operation.counter, 0), bound)
        after = add(current, delta)
        change = f"{what} is {current}: a correction of {delta} takes it to {after}"
    if bound.floor is not None and after < bound.floor:
        return f"{change}, below its floor {bound.floor} (CounterBounds)"
    if bound.ceiling is not None and after > bound.ceiling:
        return f"{change}, above its ceiling {bound.ceiling} (CounterBounds)"
    return None


def _current_value(resolver: Resolver, operation: Operation, start: Number, bound: Bound) -> Number:
    """The counter's all-time value (its start value, or 0, before its first count)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.errors import TallyError

    try:
        counters = counter_reader(resolver, None).get(operation.key)
    except (click.ClickException, TallyError, BotoCoreError, ClientError) as exc:
        named = (("floor", bound.floor), ("ceiling", bound.ceiling))
        limits = " and ".join(f"{name} {value}" for name, value in named if value is not None)
        raise click.ClickException(
            f"cannot read {operation.key!r}/{operation.counter!r} to check it against its {limits} (CounterBounds):"
            f" {exc}; --force sends it without the check"
        ) from exc
    return counters.values.get(operation.counter, start)
