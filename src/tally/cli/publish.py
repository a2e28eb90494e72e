"""``tally publish``: send counter events to an SQS queue or a Kinesis stream, with the producer library.

Events come from the arguments (``tally publish KEY [DELTA]``, ``--event SPEC``), from JSON lines
(``--file PATH``, ``-`` for stdin) or from a synthetic load (``--generate N``); they go to ``--queue-url``,
``--stream-name`` or the queue or stream of a deployed stack (``--stack NAME``, read from its Outputs),
else to ``$TALLY_QUEUE_URL`` / ``$TALLY_STREAM_NAME``, else to ``$TALLY_STACK``'s (``tally.cli.resolve``).
A progress bar shows the sending and a table sums it up; the exit status is 1 if anything failed, and
``--failed-out`` keeps the failed messages, ids and all, to be sent again with ``--file``.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

from tally.cli.arguments import NumbersAsArguments
from tally.cli.aws import nothing_answered
from tally.cli.output import console, json_option, print_json
from tally.cli.publish_input import InputError, Parsed, event_from_spec, number, parse_lines, plain_name
from tally.cli.resolve import Resolver, Target, kind_option, stack_option
from tally.cli.synthetic import generate
from tally.producer import Event, KinesisPublisher, PublishResult, SqsPublisher
from tally.producer.kinesis import DEFAULT_MAX_MESSAGE_BYTES as KINESIS_MAX_MESSAGE_BYTES
from tally.producer.sqs import DEFAULT_MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from rich.console import Console
    from rich.table import Table

    from tally.producer.wire import OutgoingMessage

Publisher = SqsPublisher | KinesisPublisher

_CHUNK_MESSAGES = 500
"""Messages handed to the publisher at a time: the progress bar moves once per chunk."""
_JSON = msgspec.json.Encoder(decimal_format="number")


@click.command(cls=NumbersAsArguments)
@click.argument("key", required=False)
@click.argument("delta", required=False)
@click.option("--counter", default="count", show_default=True, help="The counter KEY DELTA adds to.")
@click.option(
    "--event",
    "event_specs",
    multiple=True,
    metavar="SPEC",
    help="One event, repeatable: key=shop:42,orders=1,revenue=49.99[,ts=EPOCH_MS|ISO][,id=ID] or a JSON object.",
)
@click.option(
    "--dim",
    "dims",
    multiple=True,
    metavar="NAME=VALUE",
    help="A dimension of KEY's and each --event's events, repeatable (--dim customer=acme): the stack's views "
    "(CounterViews) count them under it.",
)
@click.option(
    "--file",
    "input_file",
    type=click.File("r", encoding="utf-8"),
    help="JSON lines of events ({key, delta|deltas, ts?, id?}) or whole messages ({id, events}); - is stdin.",
)
@click.option(
    "--generate", "generate_count", type=click.IntRange(min=1), metavar="N", help="Publish N synthetic events."
)
@click.option("--keys", type=click.IntRange(min=1), default=100, show_default=True, help="Distinct keys of --generate.")
@click.option(
    "--skew",
    type=click.FloatRange(min=0),
    default=1.1,
    show_default=True,
    help="Zipf exponent of --generate (0: uniform).",
)
@click.option(
    "--duplicate-rate",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="With --generate: send this fraction of the messages a second time, as producer re-sends (same ids).",
)
@click.option("--seed", type=int, default=None, help="Seed of --generate (random if not given).")
@click.option("--queue-url", help="Publish to this SQS queue (standard or .fifo; default: $TALLY_QUEUE_URL).")
@click.option("--stream-name", help="Publish to this Kinesis stream (a name or an ARN; default: $TALLY_STREAM_NAME).")
@stack_option
@kind_option
@click.option("--pack/--no-pack", default=True, show_default=True, help="Many events per message (cheap exactly-once).")
@click.option(
    "--max-message-bytes",
    type=click.IntRange(min=1024),
    default=None,
    help=f"Largest message to build: SQS default {DEFAULT_MAX_MESSAGE_BYTES} (set the queue's MaximumMessageSize "
    "if lower), Kinesis default just under 1 MiB.",
)
@click.option(
    "--failed-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write messages that could not be sent (exact bodies, ids kept) as JSON lines, for --file later.",
)
@click.option(
    "--expected-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --generate: write the exact totals per key as JSON, to compare with `tally get`.",
)
@json_option("Print the summary as JSON (the progress bar still goes to stderr).")
def publish(  # click passes every option by name
    *,
    key: str | None,
    delta: str | None,
    counter: str,
    event_specs: tuple[str, ...],
    dims: tuple[str, ...],
    input_file: TextIO | None,
    generate_count: int | None,
    keys: int,
    skew: float,
    duplicate_rate: float,
    seed: int | None,
    queue_url: str | None,
    stream_name: str | None,
    stack_name: str | None,
    kind: str | None,
    pack: bool,
    max_message_bytes: int | None,
    failed_out: Path | None,
    expected_out: Path | None,
    as_json: bool,
) -> None:
    """Publish counter events (KEY [DELTA] adds DELTA, default 1, to KEY's --counter)."""
    modes = [bool(key or event_specs), input_file is not None, generate_count is not None]
    if sum(modes) != 1:
        raise click.UsageError("give events one way: KEY [DELTA] / --event, --file, or --generate")
    check_one_target(queue_url, stream_name, stack_name)
    if (duplicate_rate or expected_out) and generate_count is None:
        raise click.UsageError("--duplicate-rate and --expected-out go with --generate")
    if dims and not (key or event_specs):
        raise click.UsageError("--dim goes with KEY [DELTA] and --event (a --file's events carry their own dims)")
    rng = random.Random(seed)
    try:
        parsed = _read_events(key, delta, counter, event_specs, input_file, dims=_dims(dims))
        if generate_count is not None:
            load = generate(
                generate_count, keys, seed=rng.randrange(2**32), now_ms=time.time_ns() // 1_000_000, skew=skew
            )
            parsed = Parsed(events=load.events)
            if expected_out is not None:
                expected_out.write_bytes(_JSON.encode(dict(sorted(load.totals.items()))) + b"\n")
    except (InputError, OSError) as exc:
        raise click.UsageError(str(exc)) from exc
    resolver = Resolver(stack_name, os.environ)
    target = resolver.publish_target(queue_url, stream_name, kind)
    try:
        publisher = _publisher(target, pack, max_message_bytes, resolver.value("TALLY_COUNTER_VIEWS") or "")
        messages = publisher.prepare(parsed.events) + list(parsed.messages)
    except ValueError as exc:  # the stack's CounterViews refuse an event's dims, or cannot be read
        raise click.UsageError(str(exc)) from exc
    resends = rng.sample(messages, round(duplicate_rate * len(messages))) if duplicate_rate else []

    progress_console = console(stderr=True)
    started = time.perf_counter()
    result = _send(publisher, messages, progress_console, "publishing")
    resent = _send(publisher, resends, progress_console, "re-sending duplicates") if resends else PublishResult()
    elapsed = time.perf_counter() - started

    total = result + resent
    if total.failed and failed_out is not None:
        failed_out.write_bytes(b"".join(message.body + b"\n" for message in total.failed_messages))
    summary = _summary(
        target=target,
        messages=messages,
        result=result,
        resent=resent,
        events=parsed.event_count,
        elapsed=elapsed,
        failed_out=failed_out,
    )
    if as_json:
        print_json(
            summary_document(
                target=target,
                result=result,
                resent=resent,
                events=parsed.event_count,
                elapsed=elapsed,
                failed_out=failed_out,
            )
        )
    else:
        out = console()
        out.print(f"published to {target.kind}: {target.address}", soft_wrap=True)  # a URL to copy: never folded
        out.print(summary)
        if duplicate_rate and not resends:
            out.print(
                f"--duplicate-rate {duplicate_rate:g} of {_count(len(messages), 'message')} re-sends none:"
                " --no-pack sends one message per event (or publish more events)"
            )
        if any(failure.code in _UNREACHABLE for failure in total.failed):
            out.print(nothing_answered(target.kind))
    if total.failed:
        sys.exit(1)


def _read_events(
    key: str | None,
    delta: str | None,
    counter: str,
    specs: tuple[str, ...],
    input_file: TextIO | None,
    *,
    dims: dict[str, str] | None = None,
) -> Parsed:
    if input_file is not None:
        return parse_lines(input_file, input_file.name)
    events: list[Event] = []
    if key is not None:
        try:
            plain_name(key, "key")
            plain_name(counter, "counter")
            events.append(Event(key, {counter: number(delta, "DELTA") if delta is not None else 1}, dims=dims))
        except (TypeError, ValueError) as exc:
            raise InputError(f"{key!r}: {exc}") from None
    events.extend(event_from_spec(spec, dims) for spec in specs)
    return Parsed(events=tuple(events))


def _dims(given: tuple[str, ...]) -> dict[str, str] | None:
    """``("customer=acme", "route=/v1/users")`` -> ``{"customer": "acme", "route": "/v1/users"}`` (None: none)."""
    dims: dict[str, str] = {}
    for text in given:
        name, separator, value = text.partition("=")
        if not separator or not name or not value:
            raise click.UsageError(f"--dim {text!r}: expected NAME=VALUE (e.g. --dim customer=acme)")
        if name in dims:
            raise click.UsageError(f"--dim {name!r} given twice")
        dims[name] = value
    return dims or None


def check_one_target(queue_url: str | None, stream_name: str | None, stack_name: str | None) -> None:
    """At most one target on the command line (the environment's is used only when none is given)."""
    if sum(x is not None for x in (queue_url, stream_name, stack_name)) > 1:
        raise click.UsageError("give one target: --queue-url, --stream-name or --stack")


def _publisher(target: Target, pack: bool, max_message_bytes: int | None, views: str = "") -> Publisher:
    """The target's publisher, told the stack's views (``CounterViews``, when known): an event whose dims they refuse
    is refused before sending, and packing counts each event's view items."""
    from tally.cli.aws import client

    if target.kind == "sqs":
        return SqsPublisher(
            client("sqs"),
            target.address,
            pack=pack,
            max_message_bytes=max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES,
            views=views,
        )
    kinesis = client("kinesis")
    size = max_message_bytes or KINESIS_MAX_MESSAGE_BYTES
    if target.address.startswith("arn:"):
        return KinesisPublisher(kinesis, stream_arn=target.address, pack=pack, max_message_bytes=size, views=views)
    return KinesisPublisher(kinesis, stream_name=target.address, pack=pack, max_message_bytes=size, views=views)


def _send(publisher: Publisher, messages: Sequence[OutgoingMessage], out: Console, what: str) -> PublishResult:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    result = PublishResult()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("events"))
    with Progress(*columns, TimeElapsedColumn(), console=out, transient=False) as progress:
        task = progress.add_task(what, total=sum(len(m.events) for m in messages))
        for start in range(0, len(messages), _CHUNK_MESSAGES):
            chunk = messages[start : start + _CHUNK_MESSAGES]
            result += publisher.send(chunk)
            progress.advance(task, sum(len(m.events) for m in chunk))
    return result


_UNREACHABLE = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError"})
"""What the producer reports for a call nothing answered (botocore's exception names)."""


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


def _shapes(messages: Sequence[OutgoingMessage]) -> str:
    """How the messages were built: packed (``{"id", "events"}``), single (an event with its own id, or
    ``--no-pack``), or some of each."""
    packed = sum(1 for message in messages if message.packed)
    single = len(messages) - packed
    if packed and single:
        return f"{packed:,} packed, {single:,} single"
    return "packed" if packed else "single"


def _summary(
    *,
    target: Target,
    messages: Sequence[OutgoingMessage],
    result: PublishResult,
    resent: PublishResult,
    events: int,
    elapsed: float,
    failed_out: Path | None,
) -> Table:
    from rich.table import Table

    table = Table(show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right", overflow="fold")
    rows: list[tuple[str, Any]] = [
        ("events", f"{events:,}"),
        ("messages sent", f"{result.sent_messages:,} ({_shapes(messages)})" if messages else "0"),
        ("events per message", f"{result.sent_events / result.sent_messages:,.1f}" if result.sent_messages else "-"),
        ("bytes sent", f"{result.sent_bytes:,}"),
        ("API calls", f"{result.calls + resent.calls:,}"),
        ("entries retried", f"{result.retried + resent.retried:,}"),
    ]
    if resent.calls:
        rows.append(
            ("duplicates re-sent (same ids)", f"{resent.sent_messages:,} messages, {resent.sent_events:,} events")
        )
    failed = result + resent
    rows.append(("failed", f"{len(failed.failed):,} messages, {failed.failed_events:,} events"))
    if failed.failed:
        codes = sorted({f"{f.code}: {f.reason}" for f in failed.failed})
        rows.append(("failure reasons", "; ".join(codes[:3])))
        rows.append(("failed messages written to", str(failed_out) if failed_out else "(not kept: use --failed-out)"))
    rows.append(("elapsed", f"{elapsed:.2f} s"))
    rows.append(("events/s", f"{result.sent_events / elapsed:,.0f}" if elapsed > 0 else "-"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def summary_document(
    *,
    target: Target,
    result: PublishResult,
    resent: PublishResult,
    events: int,
    elapsed: float,
    failed_out: Path | None,
) -> dict[str, Any]:
    """What ``--json`` prints: the same figures as the table, exact counts, seconds rounded."""
    failed = result + resent
    return {
        "target": {"kind": target.kind, "address": target.address},
        "events": events,
        "messages_sent": result.sent_messages,
        "events_sent": result.sent_events,
        "bytes_sent": result.sent_bytes,
        "api_calls": result.calls + resent.calls,
        "entries_retried": result.retried + resent.retried,
        "duplicates_resent": {"messages": resent.sent_messages, "events": resent.sent_events},
        "failed": {
            "messages": len(failed.failed),
            "events": failed.failed_events,
            "reasons": sorted({f"{f.code}: {f.reason}" for f in failed.failed}),
            "written_to": str(failed_out) if failed.failed and failed_out else None,
        },
        "elapsed_seconds": round(elapsed, 3),
    }
