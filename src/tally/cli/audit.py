"""``tally audit``: recount the archive and compare it with the counters table, value by value; ``--fix`` repairs.

The work is ``tally.audit.auditor``'s (what it reads, in which order, and why the result holds while traffic
commits: ``tally.audit.cut``); the judgement ``tally.audit.compare``'s; the repairs ``tally.audit.repairs``'s.
Here: the options, the table for people, the JSON for scripts, the exit status (1 when a value drifted).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tally.cli.archive import archive_options, progress_bar, resolve_archive, target_options
from tally.cli.output import console, json_option, print_json, table
from tally.cli.resolve import Resolver
from tally.core.items import item_label, owner_key

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from rich.console import Console

    from tally.audit.auditor import Auditor, AuditReport
    from tally.audit.compare import Finding, Scope
    from tally.audit.repairs import RepairPlan

T = TypeVar("T")
UNITS = ("minute", "hour", "day", "month")
_SHOWN = 50


@click.command()
@click.option("--prefix", default="", help="Only keys that begin with this (default: every key).")
@click.option(
    "--since",
    help="Only windows that start at or after this (epoch ms or ISO 8601 with offset); all-time values are then"
    " not compared. The archive is read from an hour before it on.",
)
@click.option("--until", help="Only windows that start at or before this (epoch ms or ISO 8601 with offset).")
@click.option(
    "--window",
    "windows",
    multiple=True,
    type=click.Choice(UNITS),
    help="Only windows of this unit (repeat for several); all-time values are then not compared.",
)
@click.option("--fix", is_flag=True, help="Repair each drifted counter by a correction, then audit it again.")
@click.option("--dry-run", is_flag=True, help="With --fix: print the repairs, publish nothing.")
@click.option(
    "--settle",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="When a drifted or unsettled key is read again, seconds to wait before listing the archive again (what"
    " committed before the read is archived by then). The read itself waits until 2 s (the clocks' tolerance)"
    " have passed since the archive writes that raced the previous read.",
)
@click.option(
    "--attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Reads of a key at most, while live traffic races the read or drift may be an archive write in flight.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    help="Recount in this many processes, each a share of the keys (default: the machine's cores, at most 4, for"
    " an archive of 8 MB or more).",
)
@click.option(
    "--quiet",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="With --fix: reset a counter whose all-time value alone drifted only if its key has counted nothing for"
    " this many seconds (a reset overwrites what commits meanwhile).",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="With --fix: seconds to wait for the repairs to be counted before auditing again.",
)
@json_option("Print the audit as one JSON object (every value not exact, the counts, the repairs).")
@archive_options
@click.option("--table", "table_name", help="The counters table (default: the stack's, or $TALLY_COUNTERS_TABLE).")
@click.option(
    "--markers-table",
    help="The markers table, whose journal headers say when a batch archived before its deltas landed has landed"
    " (default: the stack's, or $TALLY_MARKERS_TABLE; without it such countings are never placed: unsettled).",
)
@click.option(
    "--dlq-url", help="The dead-letter queue, whose messages make drift pending (default: the stack's, $TALLY_DLQ_URL)."
)
@target_options
def audit(  # click passes every option by name
    *,
    prefix: str,
    since: str | None,
    until: str | None,
    windows: tuple[str, ...],
    fix: bool,
    dry_run: bool,
    settle: float,
    attempts: int,
    processes: int | None,
    quiet: float,
    wait: float,
    as_json: bool,
    archive_bucket: str | None,
    archive_prefix: str | None,
    stack_name: str | None,
    table_name: str | None,
    markers_table: str | None,
    dlq_url: str | None,
    queue_url: str | None,
    stream_name: str | None,
    kind: str | None,
) -> None:
    """Recount the archive and compare every counter, window, gauge and distinct count with the table.

    Each value is exact, drifted (stored and recounted differ), inexact (the archive cannot order a reset against
    another counting: never drift), pending (drift on a key the dead-letter queue holds messages of: redrive
    them first) or unsettled (live traffic kept committing while it was read). A drifted or unsettled key is
    read again after --settle seconds, --attempts reads in all. Exit status 1 when a value drifted.

    --fix publishes, through the normal pipeline, one correction per drifted counter and time under an id
    derived from the drift (running it twice repairs once), waits until they are counted, and audits those
    keys again; it needs the full audit (no --since, --until or --window). Where only the all-time value
    drifted and a window unit is kept forever, no correction can move it alone: a key quiet for --quiet
    seconds is reset to its recounted value instead. Gauges and distinct counts are reported, not repaired."""
    from tally.audit.auditor import Auditor, AuditSettings
    from tally.audit.compare import Verdict
    from tally.cli.aws import client
    from tally.reader import CounterReader

    scope = _scope(since, until, windows)
    if dry_run and not fix:
        raise click.UsageError("--dry-run goes with --fix")
    if fix and not scope.full:
        raise click.UsageError("--fix needs the full audit: a repair moves the all-time value and every window")
    resolver = Resolver(stack_name, os.environ)
    archive = resolve_archive(resolver, archive_bucket, archive_prefix)
    counters = resolver.required("TALLY_COUNTERS_TABLE", table_name, "the counters table", "--table")
    reader = CounterReader(
        counters, client=client("dynamodb"), hot_keys=archive.hot_keys, windows=archive.windows, views=archive.views
    )
    settings = AuditSettings(
        archive.windows,
        archive.defaults,
        scope,
        prefix=prefix,
        settle_s=settle,
        attempts=attempts,
        processes=processes,
        views=archive.views,
    )
    letters_url = resolver.value("TALLY_DLQ_URL", dlq_url)
    markers = resolver.value("TALLY_MARKERS_TABLE", markers_table)
    auditor = Auditor(
        archive.client(),
        archive.bucket,
        archive.prefix,
        reader,
        settings,
        waiting=_waiting(letters_url, archive) if letters_url else None,
        landings=_landings(markers) if markers else None,
    )
    report = _guarded(auditor.run, f"audit s3://{archive.bucket}/{archive.prefix} against {counters!r}", auditor)
    warning = unplaced_warning(report, markers_known=bool(markers))
    if warning:
        click.echo(warning, err=True)
    document = audit_document(report, scope, prefix)
    drifted = bool(report.with_verdict(Verdict.DRIFT))
    if not fix:
        _print(report, document, as_json=as_json)
        sys.exit(1 if drifted else 0)
    plan = _plan(report, archive.windows, archive.defaults, quiet_ms=int(quiet * 1000))
    document["fix"] = fix_document(plan, dry_run=dry_run)
    if dry_run or not plan.corrections:
        _print(report, document, as_json=as_json, plan=plan)
        sys.exit(1 if drifted else 0)
    address, failures = _publish(plan, resolver, queue_url, stream_name, kind)
    document["fix"] |= {"target": address, "failures": failures}
    if failures:
        _print(report, document, as_json=as_json, plan=plan)
        raise click.ClickException(f"repairs not sent ({'; '.join(failures)}): run tally audit --fix again")
    ids = [correction.message_id for correction in plan.corrections]
    keys = {correction.key for correction in plan.corrections}
    again, missing = _guarded(lambda: auditor.recheck(keys, ids, wait_s=wait), "audit the repaired keys again", auditor)
    document["fix"] |= {"not_counted_yet": sorted(missing), "after": audit_document(again, scope, prefix)}
    _print(report, document, as_json=as_json, plan=plan, again=again, missing=missing)
    sys.exit(1 if again.with_verdict(Verdict.DRIFT) else 0)


def _guarded(work: Callable[[], T], what: str, auditor: Auditor) -> T:
    """``work`` under a progress bar, AWS's errors said as the other commands say them."""
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.aws import failure
    from tally.errors import InvalidReadError, TallyError

    try:
        with progress_bar() as bar:
            auditor.progress = bar
            return work()
    except InvalidReadError as exc:
        raise click.ClickException(str(exc)) from exc
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure(what, "s3", exc) from exc


def _scope(since: str | None, until: str | None, windows: Sequence[str]) -> Scope:
    from tally.audit.compare import Scope
    from tally.errors import InvalidReadError
    from tally.reader import parse_time_ms

    try:
        since_ms = parse_time_ms(since) if since else None
        until_ms = parse_time_ms(until) if until else None
    except InvalidReadError as exc:
        raise click.BadParameter(str(exc)) from exc
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise click.BadParameter("--since is after --until")
    ranged = since_ms is not None or until_ms is not None or bool(windows)
    return Scope(all_time=not ranged, units=frozenset(windows) or None, since_ms=since_ms, until_ms=until_ms)


def _landings(markers_table: str) -> Callable[[Collection[str]], set[str]]:
    """Which fenced batches have landed, from their journal headers (read when the archive holds records written
    before their landing)."""

    def landings(batch_ids: Collection[str]) -> set[str]:
        from tally.cli.aws import client
        from tally.store.journal import landed_batches

        return landed_batches(client("dynamodb"), markers_table, batch_ids)

    return landings


def _waiting(dlq_url: str, archive: Any) -> Callable[[set[str]], Mapping[str, int]]:
    """Key -> dead letters whose message names it, for the drifted keys (read when drift was found)."""

    def waiting(keys: set[str]) -> Mapping[str, int]:
        from tally.cli.aws import client
        from tally.core.decode import decode_message
        from tally.core.model import Message
        from tally.ops.dead_letters import list_letters

        found: dict[str, int] = {}
        for letter in list_letters(client("sqs"), dlq_url):
            message = decode_message(letter.payload, defaults=archive.defaults)
            if isinstance(message, Message):
                published = {event.key for event in message.events}
                for key in keys:
                    if owner_key(key) in published:  # a view item's drift waits on its key's letters
                        found[key] = found.get(key, 0) + 1
        return found

    return waiting


def _plan(report: AuditReport, spec: Any, defaults: Any, *, quiet_ms: int) -> RepairPlan:
    from tally.audit.compare import Verdict
    from tally.audit.repairs import plan_repairs

    drifted = {finding.slot.key for finding in report.with_verdict(Verdict.DRIFT)}
    return plan_repairs(
        [finding for finding in report.findings if finding.slot.key in drifted],
        spec=spec,
        now_ms=report.finished_ms,
        starts=defaults.starts,
        generations=report.repair_generations(),
        last_counted=report.last_counted.get,
        quiet_ms=quiet_ms,
    )


def _publish(
    plan: RepairPlan, resolver: Resolver, queue_url: str | None, stream_name: str | None, kind: str | None
) -> tuple[str, list[str]]:
    from botocore.exceptions import BotoCoreError, ClientError

    from tally.cli.archive import publish_corrections
    from tally.cli.aws import failure
    from tally.errors import TallyError

    try:
        return publish_corrections(plan.corrections, resolver, queue_url=queue_url, stream_name=stream_name, kind=kind)
    except (TallyError, BotoCoreError, ClientError) as exc:
        raise failure("publish the repairs", "sqs", exc) from exc


# ----------------------------------------------------------------------------------------------- output
def finding_json(finding: Finding) -> dict[str, Any]:
    slot = finding.slot
    document: dict[str, Any] = {
        "key": item_label(slot.key),
        "window": slot.window,
        "kind": str(slot.kind),
        "name": slot.name,
        "stored": finding.stored,
        "recounted": finding.recounted,
        "verdict": str(finding.verdict),
    }
    if finding.difference is not None:
        document["difference"] = finding.difference
    if finding.reason:
        document["reason"] = finding.reason
    return document


def unplaced_warning(report: AuditReport, *, markers_known: bool) -> str | None:
    """What to say on stderr when records written before their batch landed could not be placed by the batches'
    headers for want of a markers table to read them from (only a later copy places such a counting)."""
    if markers_known or not report.not_landed:
        return None
    return (
        f"warning: {len(report.not_landed)} batch(es) archived before their deltas landed, and no markers table to"
        " learn whether they have: values their countings touch may stay unsettled (pass --markers-table, or --stack)"
    )


def audit_document(report: AuditReport, scope: Scope, prefix: str) -> dict[str, Any]:
    """The audit for scripts: counts of values and keys by verdict, every value not exact, what the archive held."""
    from tally.audit.compare import Verdict, summarise

    counts = summarise(report.findings)
    return {
        "ok": not report.with_verdict(Verdict.DRIFT),
        "keys": report.keys,
        "values": len(report.findings),
        "verdicts": {str(verdict): counts.values.get(verdict, 0) for verdict in Verdict},
        "keys_by_verdict": {str(verdict): counts.keys.get(verdict, 0) for verdict in Verdict},
        "findings": [finding_json(f) for f in report.findings if f.verdict is not Verdict.EXACT],
        "archive": {
            "objects": report.objects,
            "records": report.records,
            "countings": report.countings,
            "repairs": len({record.id for record in report.repairs}),
        },
        "recounted_twice": list(report.recounted_twice),
        "reused_ids": list(report.reused_ids),
        "digest_mismatches": list(report.digest_mismatches),
        "not_landed": list(report.not_landed),
        "reads": report.reads,
        "seconds": round((report.finished_ms - report.started_ms) / 1000, 3),
        "scope": {
            "prefix": prefix,
            "all_time": scope.all_time,
            "windows": sorted(scope.units) if scope.units is not None else "all",
            "since_ms": scope.since_ms,
            "until_ms": scope.until_ms,
        },
    }


def fix_document(plan: RepairPlan, *, dry_run: bool) -> dict[str, Any]:
    from tally.cli.archive import correction_json

    return {
        "dry_run": dry_run,
        "repairs": [correction_json(correction) for correction in plan.corrections],
        "unrepairable": [
            {"key": item_label(u.key), "window": u.window, "name": u.name, "reason": u.reason}
            for u in plan.unrepairable
        ],
    }


def _print(
    report: AuditReport,
    document: dict[str, Any],
    *,
    as_json: bool,
    plan: RepairPlan | None = None,
    again: AuditReport | None = None,
    missing: set[str] | None = None,
) -> None:
    if as_json:
        print_json(document)
        return
    out = console()
    _print_report(out, report, document, "audit")
    if plan is not None:
        _print_plan(out, plan, dry_run=document["fix"]["dry_run"])
    if again is not None:
        if missing:
            out.print(f"{len(missing)} repair(s) not counted yet: run tally audit again in a while")
        _print_report(out, again, document["fix"]["after"], "after the repairs")


def _print_report(out: Console, report: AuditReport, document: dict[str, Any], title: str) -> None:
    from tally.audit.compare import Verdict

    summary = table(f"{title}: {document['seconds']} s", ["", "keys", "values"], right=["keys", "values"])
    summary.add_row("checked", f"{document['keys']:,}", f"{document['values']:,}")
    for verdict in Verdict:
        summary.add_row(
            str(verdict),
            f"{document['keys_by_verdict'][str(verdict)]:,}",
            f"{document['verdicts'][str(verdict)]:,}",
        )
    archive = document["archive"]
    summary.caption = (
        f"archive: {archive['objects']:,} objects, {archive['records']:,} records, {archive['countings']:,} countings"
        f" ({archive['repairs']} repairs, not recounted); keys read {document['reads']} time(s) at most"
    )
    out.print(summary)
    shown = [f for f in report.findings if f.verdict is not Verdict.EXACT]
    if shown:
        columns = ["key", "window", "value", "stored", "recounted", "difference", "verdict", "why"]
        rows = table("values not exact", columns, right=["stored", "recounted", "difference"])
        for finding in shown[:_SHOWN]:
            slot = finding.slot
            name = slot.name if slot.kind.value == "counter" else f"{slot.kind} {slot.name}"
            rows.add_row(
                item_label(slot.key),
                slot.window,
                name,
                _text(finding.stored),
                _text(finding.recounted),
                _text(finding.difference),
                str(finding.verdict),
                finding.reason,
            )
        if len(shown) > _SHOWN:
            rows.caption = f"... and {len(shown) - _SHOWN:,} more (--json lists them all)"
        out.print(rows)
    for label, ids in (
        ("counted twice by design (re-sent past the marker horizon, same content)", report.recounted_twice),
        ("ids counted again with other content (reused past the marker horizon)", report.reused_ids),
        ("archived content that does not hash to its digest", report.digest_mismatches),
        ("batches archived before their deltas landed, not seen landed (values unsettled)", report.not_landed),
    ):
        if ids:
            out.print(f"{label}: {len(ids)}: {', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''}")
    out.print("no drift" if document["ok"] else "DRIFT: tally audit --fix --dry-run shows the repairs")


def _print_plan(out: Console, plan: RepairPlan, *, dry_run: bool) -> None:
    title = "repairs (dry run: nothing published)" if dry_run else "repairs published"
    rows = table(title, ["id", "key", "change", "ts"], right=["ts"])
    for correction in plan.corrections:
        if correction.reset:
            change = ", ".join(f"{name} = {value} (reset)" for name, value in correction.deltas.items())
        else:
            change = ", ".join(f"{name} {delta:+}" for name, delta in correction.deltas.items())
        rows.add_row(correction.message_id, correction.key, change, str(correction.ts_ms or ""))
    out.print(rows if plan.corrections else "nothing to repair")
    for unrepairable in plan.unrepairable:
        what = f"{item_label(unrepairable.key)} {unrepairable.window} {unrepairable.name}"
        out.print(f"not repaired: {what}: {unrepairable.reason}")


def _text(value: object) -> str:
    return "" if value is None else str(value)
