"""The one summary of a chaos run: a rich table for the terminal and the same figures as JSON."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from tally_local.chaos.harness import ChaosResult


def summary_table(result: ChaosResult) -> Table:
    config = result.config
    table = Table(title=f"chaos run '{config.name}' (seed {config.seed}): {'PASS' if result.passed else 'FAIL'}")
    table.add_column("figure")
    table.add_column("value", justify="right")

    def section(title: str) -> None:
        table.add_row(f"[bold]{title}[/bold]", "")

    section("load")
    table.add_row("events (distinct, valid)", f"{result.events:,}")
    table.add_row("messages (distinct, valid)", f"{result.messages:,}")
    table.add_row("messages published (re-sends and poison included)", f"{result.publications:,}")
    table.add_row("invocations", f"{result.counts.get('invocations', 0):,}")
    table.add_row("messages with 100+ counters on one key", f"{result.wide_messages:,}")
    table.add_row("items with more counter names than one ADD carries (331)", f"{result.wide_items:,}")
    section(f"faults injected: {sum(result.faults.values()):,}")
    for name, count in result.faults.items():
        table.add_row(f"  {name}", f"{count:,}")
    section("situations")
    for name, count in result.situations.items():
        table.add_row(f"  {name}", f"{count:,}")
    section("redeliveries")
    for name, count in result.redeliveries.items():
        table.add_row(f"  {name}", f"{count:,}")
    for name in ("delivery.sqs_moved_to_dlq", "delivery.kinesis_given_up_records"):
        table.add_row(f"  {name}", f"{result.counts.get(name, 0):,}")
    outcomes = {name: count for name, count in sorted(result.counts.items()) if name.startswith(("outcome.", "error."))}
    for name, count in outcomes.items():
        table.add_row(f"  {escape(name)}", f"{count:,}")
    section("pipeline (summed BatchResult figures)")
    for name, count in sorted(result.counts.items()):
        if name.startswith("pipeline."):
            table.add_row(f"  {name.removeprefix('pipeline.')}", f"{count:,}")
    section("verdict")
    _verdict_rows(table, result)
    table.add_row("time (virtual time skipped)", f"{result.seconds:,.1f} s ({result.virtual_seconds:,.0f} s)")
    return table


def _verdict_rows(table: Table, result: ChaosResult) -> None:
    """What the run checked, each figure red when it is not what exactly-once requires."""
    verdict = result.verdict
    table.add_row("lost events", _flag(verdict.lost_events))
    table.add_row("doubled events", _flag(verdict.doubled_events))
    table.add_row(f"counters wrong (of {verdict.counters_checked:,} checked exactly)", _flag(verdict.counters_wrong))
    table.add_row(f"gauges wrong (of {verdict.gauges_checked:,}: max, min, latest)", _flag(verdict.gauges_wrong))
    table.add_row(f"distinct counts wrong (of {verdict.distinct_checked:,})", _flag(verdict.distinct_wrong))
    table.add_row(
        f"hour, day and month windows wrong after moves and the final close (of {verdict.windows_checked:,})",
        _flag(verdict.windows_wrong),
    )
    table.add_row(
        "bounded messages: counted / refused by a bound (in DLQ)",
        f"{verdict.bounded_counted:,} / {verdict.bounded_refused:,} of {verdict.bounded_messages:,}",
    )
    table.add_row("bounded messages neither counted nor refused", _flag(verdict.bounded_unaccounted))
    table.add_row("bounded counters outside their bounds", _flag(verdict.bound_violations))
    table.add_row(
        "reset keys judged in the shard's order / left unjudged (a record replayed out of order)",
        f"{verdict.levels_checked:,} / {verdict.levels_unjudged:,}",
    )
    table.add_row("keys counted from poison", _flag(len(verdict.stray_keys)))
    table.add_row(
        "poison accounted (in DLQ with its reason)",
        _ratio(verdict.poison_accounted, verdict.poison_messages) + f" ({verdict.poison_letters:,} letters)",
    )
    table.add_row("unrecoverable (injected) in DLQ", _ratio(verdict.doomed_in_dlq, verdict.doomed))
    table.add_row(
        "counted, gauge/member write refused for good: in DLQ with that step's code",
        _ratio(verdict.step_refused_in_dlq, verdict.step_refused),
    )
    table.add_row("valid messages in DLQ (not injected)", _flag(verdict.valid_in_dlq))
    table.add_row("valid messages ever refused (redriven or not)", _flag(verdict.valid_refused))
    table.add_row("bounded messages counted through the journal", _flag(verdict.bounded_journaled))
    table.add_row(
        "ids reused: one content counted, the other in DLQ as id_conflict",
        _ratio(verdict.ids_reused_resolved, verdict.ids_reused)
        + f" (second content won {verdict.ids_reused_second_won:,})",
    )
    table.add_row("Kinesis records left given up", _flag(verdict.given_up_left))
    table.add_row("valid Kinesis records ever given up (replayed or not)", _flag(verdict.valid_given_up))
    table.add_row(
        f"Jepsen reads outside \\[acked, attempted] (of {result.jepsen_reads:,})", _flag(len(result.jepsen_violations))
    )
    table.add_row(
        f"series reads during the run outside \\[acked, attempted] (of {result.series_reads:,})",
        _flag(len(result.series_read_violations)),
    )
    table.add_row("ids met past their horizon after a TTL sweep, wrong", _flag(len(result.past_horizon_problems)))
    table.add_row(
        "dead batches' claims met while TTL swept between two requests, wrong",
        _flag(len(result.expired_claim_problems)),
    )
    table.add_row("requests over one of DynamoDB's limits", _flag(len(result.requests_over_limits)))
    _archive_rows(table, result)
    table.add_row("unexpected errors", _flag(len(result.unexpected_errors)))
    for example in (*verdict.examples, *(result.archive.examples if result.archive is not None else ())):
        table.add_row(f"  [red]{escape(example)}[/red]", "")
    problems = [
        *map(str, result.series_read_violations[:3]),
        *result.past_horizon_problems[:3],
        *result.expired_claim_problems[:3],
        *result.requests_over_limits[:3],
    ]
    for problem in problems:
        table.add_row(f"  [red]{escape(problem)}[/red]", "")
    for line in result.explanation:
        table.add_row(f"  {escape(line)}", "")


def _archive_rows(table: Table, result: ChaosResult) -> None:
    """The archive's recount against the tables (or why there is none: a run that archives nothing)."""
    archive = result.archive
    if archive is None:
        table.add_row("archive recount", "[red]missing[/red]" if result.config.archive else "not archived")
        return
    table.add_row(
        f"archive: countings recounted (of {archive.records:,} records, copies included)", _positive(archive.countings)
    )
    table.add_row(f"archive recount: counters wrong (of {archive.counters_checked:,})", _flag(archive.counters_wrong))
    table.add_row(f"archive recount: windows wrong (of {archive.windows_checked:,})", _flag(archive.windows_wrong))
    table.add_row(
        f"archive recount: gauges and distinct counts wrong (of {archive.patterns_checked:,})",
        _flag(archive.patterns_wrong),
    )
    table.add_row("archive recount: counters not judged (a reset it cannot order)", f"{archive.unjudged:,}")
    table.add_row(
        f"archive recount: keys whose windows it cannot place (countings placed by their markers: "
        f"{archive.placed_by_markers:,})",
        _flag(archive.unplaced),
    )
    table.add_row("archive records whose digest is not their content's", _flag(archive.digest_mismatches))
    table.add_row(
        "archive: countings recorded while their fenced batch was landing", f"{archive.written_before_landing:,}"
    )


def _positive(value: int) -> str:
    return f"{value:,}" if value > 0 else f"[red]{value:,}[/red]"


def _flag(value: int) -> str:
    return f"{value:,}" if value == 0 else f"[red]{value:,}[/red]"


def _ratio(have: int, want: int) -> str:
    text = f"{have:,} / {want:,}"
    return text if have == want else f"[red]{text}[/red]"


def as_json(result: ChaosResult) -> dict[str, Any]:
    return {
        "config": asdict(result.config),
        "passed": result.passed,
        "events": result.events,
        "messages": result.messages,
        "publications": result.publications,
        "wide_messages": result.wide_messages,
        "wide_items": result.wide_items,
        "faults": result.faults,
        "faults_total": sum(result.faults.values()),
        "redeliveries": result.redeliveries,
        "situations": result.situations,
        "counts": result.counts,
        "verdict": asdict(result.verdict),
        "archive": asdict(result.archive) if result.archive is not None else None,
        "jepsen_reads": result.jepsen_reads,
        "jepsen_violations": [asdict(v) | {k: str(v) for k, v in asdict(v).items()} for v in result.jepsen_violations],
        "series_reads": result.series_reads,
        "series_read_violations": [str(violation) for violation in result.series_read_violations],
        "past_horizon_problems": list(result.past_horizon_problems),
        "expired_claim_problems": list(result.expired_claim_problems),
        "requests_over_limits": list(result.requests_over_limits),
        "unexpected_errors": list(result.unexpected_errors),
        "seconds": round(result.seconds, 1),
        "virtual_seconds": round(result.virtual_seconds),
    }
