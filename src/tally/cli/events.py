"""``tally events KEY``: the archived messages that made a counter, newest first (one line per counting: a
message re-sent past the marker horizon and counted twice shows twice, copies from retries once)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from tally.cli.archive import archive_options, counting_kind, read_countings, resolve_archive
from tally.cli.output import console, json_bytes, json_option, table
from tally.cli.resolve import Resolver

if TYPE_CHECKING:
    from tally.audit.recount import Counting


@click.command()
@click.argument("key")
@click.option("--since", help="Counted at or after this (epoch ms or ISO 8601 with offset; default: all).")
@click.option("--until", help="Counted at or before this (epoch ms or ISO 8601 with offset; default: now).")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many, the newest.")
@json_option("Print one JSON object per counting (newest first).")
@archive_options
def events(
    *,
    key: str,
    since: str | None,
    until: str | None,
    limit: int | None,
    as_json: bool,
    archive_bucket: str | None,
    archive_prefix: str | None,
    stack_name: str | None,
) -> None:
    """Print the archived messages that counted into KEY, newest first: when, id, kind, time, what it added.

    Kinds: event, correction, reset, void (tally void's correction), repair (tally audit --fix's)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import failure
    from tally.errors import InvalidReadError, TallyError
    from tally.reader import check_key, parse_time_ms

    try:
        check_key(key)
        since_ms = parse_time_ms(since) if since else None
        until_ms = parse_time_ms(until) if until else None
    except InvalidReadError as exc:
        raise click.BadParameter(str(exc)) from exc
    archive = resolve_archive(Resolver(stack_name, os.environ), archive_bucket, archive_prefix)
    try:
        found = read_countings(archive, since_ms)
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"read the archive s3://{archive.bucket}/{archive.prefix}", "s3", exc) from exc
    mine = [
        counting
        for counting in found
        if any(event.key == key for event in counting.message.events)
        and (since_ms is None or counting.record.committed_ms >= since_ms)
        and (until_ms is None or counting.record.committed_ms <= until_ms)
    ]
    mine.sort(key=lambda counting: counting.order, reverse=True)
    if limit is not None:
        mine = mine[:limit]
    if as_json:
        for counting in mine:
            sys.stdout.buffer.write(json_bytes(event_json(counting, key)))
        return
    rows = table(
        f"archived messages of {key!r}, newest first",
        ["counted (UTC)", "id", "kind", "ts (UTC)", "added", "commit"],
    )
    for counting in mine:
        document = event_json(counting, key)
        added = ", ".join(f"{name} {value:+}" for name, value in document["deltas"].items())
        if document.get("reset"):
            added = ", ".join(f"{name} = {value}" for name, value in document["reset"].items())
        extras = [f"{kind} {name} {value}" for kind, name, value in document.get("gauges", [])]
        extras += [f"{name} {member}" for name, member in document.get("distinct", {}).items()]
        rows.add_row(
            document["counted"],
            document["id"],
            document["kind"],
            document["ts"] or "",
            "; ".join([added, *extras] if added else extras),
            document["commit"],
        )
    console().print(rows if mine else f"no archived message counted into {key!r}")


def event_json(counting: Counting, key: str) -> dict[str, Any]:
    """One counting as it touched ``key``: its deltas summed over the events of that key, its readings."""
    from tally.core.numbers import add
    from tally.reader import iso_utc

    record = counting.record
    deltas: dict[str, Any] = {}
    reset: dict[str, Any] = {}
    gauges: list[tuple[str, str, Any]] = []
    distinct: dict[str, str] = {}
    stamps: list[int | None] = []
    for event in counting.message.events:
        if event.key != key:
            continue
        stamps.append(event.ts_ms)
        for name, delta in event.deltas.items():
            deltas[name] = add(deltas.get(name, 0), delta)
        reset |= dict(event.reset or {})
        gauges += [(str(gauge.kind), name, gauge.value) for name, gauge in (event.gauges or {}).items()]
        distinct |= dict(event.distinct or {})
    ts = next((stamp for stamp in stamps if stamp is not None), None)
    document: dict[str, Any] = {
        "counted": iso_utc(record.committed_ms),
        "counted_ms": record.committed_ms,
        "id": record.id,
        "kind": counting_kind(counting),
        "ts": iso_utc(ts) if ts is not None else None,
        "ts_ms": ts,
        "received_ms": record.received_ms,
        "placed_ms": counting.placed_ms,
        "deltas": deltas,
        "commit": record.commit,
        "copies": counting.copies,
    }
    if reset:
        document["reset"] = reset
    if gauges:
        document["gauges"] = gauges
    if distinct:
        document["distinct"] = distinct
    if len(counting.message.events) > len(stamps):
        document["other_keys"] = len({event.key for event in counting.message.events} - {key})
    return document
