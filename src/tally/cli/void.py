"""``tally void MESSAGE_ID``: undo one counted message exactly once (``tally.audit.voids``), by corrections
published through the normal pipeline under ids derived from it: voiding twice voids once."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from tally.cli.archive import (
    archive_options,
    correction_json,
    publish_corrections,
    read_countings,
    resolve_archive,
    target_options,
)
from tally.cli.output import console, json_option, print_json, table
from tally.cli.resolve import Resolver


@click.command()
@click.argument("message_id")
@click.option(
    "--commit",
    help="Which counting to void, when the id was counted more than once (re-sent past the "
    "marker horizon): its commit, as tally events shows it.",
)
@click.option(
    "--additive-only",
    is_flag=True,
    help="Void the deltas only, leaving its gauge readings and distinct members (a correction cannot take those back).",
)
@click.option(
    "--since",
    help="Read only the archive written since this (epoch ms or ISO 8601 with offset): "
    "faster, when you know when it was counted.",
)
@click.option("--dry-run", is_flag=True, help="Print the corrections, publish nothing.")
@json_option('Print {"id", "commit", "corrections", "left_out", "sent", ...} as JSON.')
@archive_options
@target_options
def void(  # click passes every option by name
    *,
    message_id: str,
    commit: str | None,
    additive_only: bool,
    since: str | None,
    dry_run: bool,
    as_json: bool,
    archive_bucket: str | None,
    archive_prefix: str | None,
    stack_name: str | None,
    queue_url: str | None,
    stream_name: str | None,
    kind: str | None,
) -> None:
    """Undo the counted message MESSAGE_ID: a correction of its negated deltas in the windows of its time.

    The corrections' ids are derived from the message and its commit, so voiding again is a duplicate the
    consumer drops. Refused, with the reason: a message the archive does not hold, one already voided, a reset
    or a repair, one counted twice (name it with --commit), one a reset of its key came after, and one with
    gauge readings or distinct members unless --additive-only."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.audit.voids import VoidRefused, plan_void
    from tally.cli.aws import failure
    from tally.errors import InvalidReadError, TallyError
    from tally.reader import parse_time_ms

    resolver = Resolver(stack_name, os.environ)
    archive = resolve_archive(resolver, archive_bucket, archive_prefix)
    try:
        since_ms = parse_time_ms(since) if since else None
    except InvalidReadError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from exc
    try:
        found = read_countings(archive, since_ms)
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(f"read the archive s3://{archive.bucket}/{archive.prefix}", "s3", exc) from exc
    mine = [counting for counting in found if counting.record.id == message_id]
    keys = {event.key for counting in mine for event in counting.message.events}
    try:
        plan = plan_void(
            message_id,
            mine,
            commit=commit,
            additive_only=additive_only,
            archived_ids={counting.record.id for counting in found},
            key_countings=[c for c in found if any(event.key in keys for event in c.message.events)],
        )
    except VoidRefused as exc:
        if as_json:
            print_json({"id": message_id, "refused": str(exc)})
            sys.exit(1)
        raise click.ClickException(str(exc)) from exc
    document: dict[str, Any] = {
        "id": plan.message_id,
        "commit": plan.commit,
        "corrections": [correction_json(correction) for correction in plan.corrections],
        "left_out": list(plan.left_out),
        "sent_before": list(plan.resent),
        "dry_run": dry_run,
        "sent": False,
    }
    failures: list[str] = []
    if not dry_run:
        try:
            address, failures = publish_corrections(
                plan.corrections, resolver, queue_url=queue_url, stream_name=stream_name, kind=kind
            )
        except (TallyError, BotoCoreError, ClientError) as exc:
            raise failure(f"publish the void of {message_id!r}", "sqs", exc) from exc
        document |= {"sent": not failures, "target": address, "failures": failures}
    if as_json:
        print_json(document)
    else:
        title = f"void of {message_id!r} (commit {plan.commit})" + (": dry run, nothing published" if dry_run else "")
        rows = table(title, ["correction id", "key", "deltas", "ts"], right=["ts"])
        for correction in plan.corrections:
            deltas = ", ".join(f"{name} {delta:+}" for name, delta in correction.deltas.items())
            rows.add_row(correction.message_id, correction.key, deltas, str(correction.ts_ms))
        out = console()
        out.print(rows)
        if plan.left_out:
            out.print("left as they are: " + "; ".join(plan.left_out))
        if plan.resent:
            out.print(f"sent before and counted: {len(plan.resent)} of them (sent again: duplicates are dropped)")
    if failures:
        click.echo(f"not sent ({'; '.join(failures)}): run tally void {message_id} again", err=True)
        sys.exit(1)
