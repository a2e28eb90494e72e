"""``make demo``: the whole pipeline on one machine, with no AWS account and no Docker.

1. **Local stack** (``tally_local.stack``): DynamoDB Local and a moto server, with the tables, queues
   and stream of ``template.yaml`` (``Source=Both``, a provisioned stream of two shards, one hot key),
   and the event source pollers of ``tally_local.mappings`` driving the real handlers, each function in
   its own execution environments.
2. **Sample events**: every ``events/*.json`` through its handler, twice (the second delivery is a
   redelivery of the same batch), checked against ``events/expected.json``: counters, gauges, distinct counts,
   operator records, and each view value of the events with dimensions (``api[customer=acme]``, read by
   ``CounterReader.group``, a ``Query`` of the view).
3. **Load**: ``--events`` events (100,000 by default) from several concurrent producers (the producer
   library: packed and single messages, a few percent re-sent with the same ids) on SQS and Kinesis,
   with poison among them, processed by concurrent pollers while they publish (progress bars).
4. **Check**: every key, read back two ways (``read_counters`` as ``tally get`` does, and the scan
   behind ``tally top``), against totals computed independently when the events were generated;
   events counted, duplicates dropped, poison in the dead-letter queue with its reasons, DynamoDB
   writes per event (measured in the functions by a botocore hook).
5. **Redrive**: copies of messages already counted are added to the dead-letter queue (as SQS leaves
   them after a consumer outage), then ``tally dlq redrive``'s logic sends everything back: no counter
   may change, and the poison must come back to the dead-letter queue with its reasons.
6. **Audit**: ``tally audit``'s work (``tally.audit.auditor``) recounts the archive the functions wrote to
   moto's S3 and compares every all-time value, window, gauge and distinct count with the table, view items
   included: 0 drift.

Everything started is stopped at the end, also on Ctrl-C or SIGTERM. The exit status is 1 if any
count or check is wrong.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from tally.audit.auditor import Auditor, AuditSettings
from tally.audit.compare import Verdict as Found
from tally.audit.compare import summarise
from tally.cli.archive import progress_bar
from tally.config import Settings
from tally.core.items import item_label
from tally.ops.dead_letters import list_letters, redrive
from tally.reader.dynamodb import CounterReader
from tally.reader.store_view import read_counters
from tally.store.dynamodb import DynamoDBCounterStore
from tally.store.journal import landed_batches
from tally_local.demo_report import (
    OK,
    WRONG,
    KeyCheck,
    dead_letter_table,
    figures_table,
    key_table,
    sample_keys,
    totals_table,
    writes_rows,
)
from tally_local.load import plan_load
from tally_local.mappings import EventSourceMappings
from tally_local.pipe import LocalNotificationsPipe, received
from tally_local.produce import Producer
from tally_local.stack import LocalStack, handle_termination

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from tally.core.sharding import HotKeys
    from tally_local.kit.writes import DynamoDBWrites
    from tally_local.load import DemoLoad, Source
    from tally_local.poller import SourceStats
    from tally_local.resources import LocalResources

ROOT: Final = Path(__file__).resolve().parents[2]
EVENTS: Final = ROOT / "events"
HOT_KEY: Final = "demo:000"


def _declared(field: str) -> str:
    """Every sample's declaration of ``field`` in events/expected.json, joined as the template parameter."""
    specs = json.loads((EVENTS / "expected.json").read_text()).values()
    return ";".join(dict.fromkeys(spec[field] for spec in specs if field in spec))


DEMO_PARAMETERS: Final = {
    "Source": "Both",
    "StreamMode": "PROVISIONED",
    "ShardCount": "2",
    "HotKeys": f"{HOT_KEY}=4",
    # The sample events' start values, default deltas, bounds, thresholds and views (events/expected.json,
    # "counter_defaults", "counter_bounds", "counter_thresholds", "counter_views").
    "CounterViews": _declared("counter_views"),
    "CounterDefaults": _declared("counter_defaults"),
    "CounterBounds": _declared("counter_bounds"),
    "CounterThresholds": _declared("counter_thresholds"),
    # The demo shows exactness, not the bill: 1 s batching windows (the template's 20 s default is for
    # cost) keep it fast and stay below the demo queue's 30 s visibility timeout.
    "BatchingWindowSeconds": "1",
    "StreamBatchingWindowSeconds": "1",
}
"""Template parameter overrides (as ``sam deploy --parameter-overrides``): both sources, two shards so
two shard pollers run side by side, the busiest key written to four shard items, the samples' counter
declarations, and short batching windows."""
VISIBILITY_TIMEOUT_S: Final = 30
"""The template's queue visibility timeout (6 x the function timeout + 60 s) would hold a retried
record for minutes; the demo's queue uses this instead, still above any local invocation's duration."""
SQS_SOURCE: Final = "EventsQueueBatch"
KINESIS_SOURCE: Final = "EventStreamBatch"
REDRIVE_COPIES: Final = 20
DRAIN_TIMEOUT_S: Final = 900


@dataclass
class Verdict:
    """Every check of the run, in order; the run is good only if all are."""

    checks: list[tuple[str, bool]] = field(default_factory=list)

    def add(self, name: str, ok: bool) -> bool:
        self.checks.append((name, ok))
        return ok

    @property
    def ok(self) -> bool:
        return all(ok for _, ok in self.checks)


@click.command()
@click.option("--events", type=click.IntRange(min=100), default=100_000, show_default=True, help="Events to publish.")
@click.option("--keys", type=click.IntRange(min=2), default=200, show_default=True, help="Distinct counter keys.")
@click.option("--producers", type=click.IntRange(min=2), default=4, show_default=True, help="Concurrent producers.")
@click.option("--seed", type=int, default=None, help="Seed of the load (random if not given; printed).")
@click.option("--logs", type=click.Path(file_okay=False, path_type=Path), help="Keep the functions' logs here.")
def main(events: int, keys: int, producers: int, seed: int | None, logs: Path | None) -> None:
    """The whole pipeline on one machine: publish, poll, count, check, redrive."""
    logging.basicConfig(level=logging.ERROR)
    console = Console()
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    started = time.monotonic()
    try:
        with handle_termination():
            ok = run(console, events=events, keys=keys, producers=producers, seed=seed, logs=logs)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: everything started was stopped[/]")
        sys.exit(130)
    console.print(f"finished in {time.monotonic() - started:.0f} s (seed {seed})")
    sys.exit(0 if ok else 1)


def run(console: Console, *, events: int, keys: int, producers: int, seed: int, logs: Path | None) -> bool:
    verdict = Verdict()
    sources: list[Source] = ["sqs" if index % 2 == 0 else "kinesis" for index in range(producers)]
    load = plan_load(events, sources, keys=keys, seed=seed, now_ms=time.time_ns() // 1_000_000)
    console.rule("[bold]tally: the whole pipeline on one machine")
    with ExitStack() as stack:
        log_dir = logs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tally-demo-logs-")))
        console.print("starting DynamoDB Local and a moto server (SQS, Kinesis, CloudFormation) ...")
        resources = stack.enter_context(LocalStack(DEMO_PARAMETERS))
        sqs = resources.client("sqs")
        sqs.set_queue_attributes(
            QueueUrl=resources.queue_url or "", Attributes={"VisibilityTimeout": str(VISIBILITY_TIMEOUT_S)}
        )
        mappings = stack.enter_context(EventSourceMappings(resources, log_dir=log_dir))
        pipe = LocalNotificationsPipe(resources)
        inbox = pipe.inbox()
        stack.enter_context(pipe)
        _print_stack(console, resources, mappings, log_dir)

        console.rule("[bold]1. sample events (events/*.json), each delivered twice")
        verdict.add("sample events", _sample_events(console, resources, mappings))
        verdict.add("each low-stock crossing announced once", _notifications(console, resources, inbox))

        console.rule(f"[bold]2. {load.events:,} events from {producers} concurrent producers")
        elapsed = _publish_and_process(console, resources, mappings, load)

        console.rule("[bold]3. check every counter")
        settings = Settings.from_env(resources.settings, require_dlq=False)
        store = DynamoDBCounterStore(
            resources.client("dynamodb"), resources.counters_table, resources.markers_table, settings.marker_ttl_seconds
        )
        check = _check_counters(
            console, resources, store, load, random.Random(seed), hot_keys=settings.declarations.hot_keys
        )
        verdict.add("every counter exact", check.ok)
        verdict.add("events counted = events published", _events_counted(mappings) == load.events)
        dropped = sum(
            stats.metric(name)
            for stats in mappings.stats.values()
            for name in ("DuplicatesInBatch", "DuplicatesAlreadyApplied")
        )
        verdict.add("every producer re-send dropped as a duplicate", dropped >= load.resent_messages)
        verdict.add("poison dead-lettered with its reasons", _report(console, resources, mappings, load, elapsed))

        console.rule("[bold]4. redrive the dead-letter queue")
        verdict.add("redrive changed no counter", _redrive(console, resources, mappings, load))

        console.rule("[bold]5. audit: the archive recounted against every stored value")
        verdict.add("audit: 0 drift (tally audit)", _audit(console, resources))

        console.rule("[bold]verdict")
        table = Table(show_header=False)
        for name, ok in verdict.checks:
            table.add_row(name, OK if ok else WRONG)
        console.print(table)
        if verdict.ok:
            console.print("[bold green]EXACT[/]: every count matches; duplicates, re-sends and redrives counted once")
        else:
            console.print("[bold red]WRONG COUNTS[/]: see the tables above")
        console.print("stopping everything ...")
    return verdict.ok


def _print_stack(console: Console, resources: LocalResources, mappings: EventSourceMappings, log_dir: Path) -> None:
    table = Table(title=f"local stack {resources.stack_name} (from template.yaml)", show_header=False)
    table.add_column("what")
    table.add_column("value")
    overrides = " ".join(f"{name}={value}" for name, value in DEMO_PARAMETERS.items())
    table.add_row("parameter overrides", overrides)
    table.add_row("DynamoDB Local", resources.dynamodb_endpoint)
    table.add_row("moto (SQS, Kinesis, CloudFormation)", resources.aws_endpoint)
    for key, value in sorted(resources.outputs.items()):
        table.add_row(f"output {key}", value)
    sources = ", ".join(
        f"{name}: {sum(1 for p in mappings.pollers if p.name.startswith(name))} pollers" for name in mappings.stats
    )
    table.add_row("event source pollers", sources)
    table.add_row("queue visibility timeout", f"{VISIBILITY_TIMEOUT_S} s (template: 6 x function timeout + 60 s)")
    table.add_row("function logs", str(log_dir))
    console.print(table)


def _sample_events(console: Console, resources: LocalResources, mappings: EventSourceMappings) -> bool:
    expected: dict[str, Any] = json.loads((EVENTS / "expected.json").read_text())
    functions = {"sqs": mappings.functions["CounterFunction"], "kinesis": mappings.functions["StreamCounterFunction"]}
    failures = 0
    for event_file, spec in sorted(expected.items()):
        event = json.loads((EVENTS / event_file).read_text())
        for _delivery in range(2):
            invocation = functions[spec["source"]].invoke(event)
            failures += 1 if invocation.error else len((invocation.response or {}).get("batchItemFailures", []))
    settings = Settings.from_env(resources.settings, require_dlq=False)
    store = DynamoDBCounterStore(
        resources.client("dynamodb"), resources.counters_table, resources.markers_table, settings.marker_ttl_seconds
    )
    reader = CounterReader.from_environment(resources.settings, client=resources.client("dynamodb"))
    table = Table(title="sample events: expected vs counted")
    for column in ("event file", "key", "counter", "expected", "counted", ""):
        table.add_column(column, justify="right" if column in ("expected", "counted") else "left")
    ok = failures == 0
    for event_file, spec in sorted(expected.items()):
        for key, counters in spec["counters"].items():
            counted = read_counters(store, key, settings.declarations.hot_keys)
            for name, value in counters.items():
                match = counted.get(name) == Decimal(value)
                ok = ok and match
                table.add_row(event_file, key, name, value, str(counted.get(name)), OK if match else WRONG)
        for key, label, value, read in _pattern_readings(spec, reader):
            match = read == value
            ok = ok and match
            table.add_row(event_file, key, label, value, read, OK if match else WRONG)
    console.print(table)
    letters = list_letters(resources.client("sqs"), resources.dead_letter_queue_url)
    want = sorted(code for spec in expected.values() for code in spec["dead_letters"] * 2)
    got = sorted(letter.error_code or "-" for letter in letters)
    console.print(
        f"dead letters: {len(got)} (each poison record once per delivery: it never gets a marker) "
        + (OK if got == want else f"{WRONG}: expected {want}, got {got}")
    )
    resources.client("sqs").purge_queue(QueueUrl=resources.dead_letter_queue_url)  # the load starts with none
    return ok and got == want


def _notifications(console: Console, resources: LocalResources, inbox: str) -> bool:
    """The threshold crossings the samples made, as a consumer of the bus received them (through the local pipe
    and a rule to ``inbox``), against events/expected.json's ``notifications``."""
    expected: dict[str, Any] = json.loads((EVENTS / "expected.json").read_text())
    want = sorted(
        (n["key"], n["level"], n["direction"], n["message_id"])
        for s in expected.values()
        for n in s.get("notifications", [])
    )
    events = received(resources.client("sqs"), inbox, wait_s=10)
    table = Table(title="EventBridge: tally.threshold-crossed (the local pipe, at least once)")
    for column in ("key", "counter", "level", "direction", "value", "message", "notification id"):
        table.add_column(column)
    for event in events:
        detail = event["detail"]
        table.add_row(
            detail["key"],
            detail["counter"],
            detail["level"],
            detail["direction"],
            detail["value"],
            detail["message_id"],
            detail["notification_id"],
        )
    console.print(table)
    distinct = {event["detail"]["notification_id"]: event["detail"] for event in events}
    got = sorted((d["key"], d["level"], d["direction"], d["message_id"]) for d in distinct.values())
    ok = got == want
    console.print(
        f"{len(distinct)} crossings announced ({len(events)} events: a repeat carries its id) "
        + (OK if ok else f"{WRONG}: expected {want}")
    )
    return ok


def _pattern_readings(spec: Mapping[str, Any], reader: CounterReader) -> Iterator[tuple[str, str, str, str]]:
    """(key, what, expected, read) for each gauge, distinct count, operator record and view value a sample's spec
    names."""
    for key, kinds in spec.get("gauges", {}).items():
        stored = reader.get(key).gauges
        for kind, gauges in kinds.items():
            for name, value in gauges.items():
                yield key, f"{kind} {name}", value, str(stored.get(kind, {}).get(name))
    for key, sets in spec.get("distinct", {}).items():
        counted = reader.get(key).distinct
        for name, value in sets.items():
            yield key, f"distinct {name}", value, str(counted.get(name))
    for key, kinds in spec.get("operators", {}).items():
        records = reader.get(key).operators
        for kind, counters in kinds.items():
            for name, (message_id, amount) in counters.items():
                record = records.get(kind, {}).get(name)
                found = "None" if record is None else f"{record.message_id} {record.amount}"
                yield key, f"last {kind} of {name}", f"{message_id} {amount}", found
    for key, views in spec.get("views", {}).items():
        for view, rows in views.items():
            rows_read = {tuple(row.dims.values()): row.counters for row in reader.group(key, view).rows}
            for row in rows:
                values = tuple(row["dims"].values())
                for name, value in row["counters"].items():
                    read = rows_read.get(values, {}).get(name)
                    yield f"{key}[{','.join(f'{d}={v}' for d, v in row['dims'].items())}]", name, value, str(read)


def _publish_and_process(
    console: Console, resources: LocalResources, mappings: EventSourceMappings, load: DemoLoad
) -> float:
    stop = threading.Event()
    producers = [Producer(plan, resources, stop) for plan in load.producers]
    started = time.monotonic()
    columns = (
        TextColumn("{task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=console) as progress:
            tasks = _progress_tasks(progress, load)
            for producer in producers:
                producer.start()
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            published_at: float | None = None
            while True:
                _update(progress, tasks, producers, mappings)
                failed = [p for p in producers if p.progress.error is not None]
                if failed:
                    raise RuntimeError(f"producer {failed[0].name} failed") from failed[0].progress.error
                if published_at is None and all(p.progress.done for p in producers):
                    published_at = time.monotonic()
                if published_at is not None and mappings.drained(published_at):
                    _update(progress, tasks, producers, mappings)
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not drained after {DRAIN_TIMEOUT_S} s: {mappings.stats}")
                time.sleep(0.3)
    finally:
        stop.set()
        for producer in producers:
            producer.join()
    return time.monotonic() - started


def _progress_tasks(progress: Progress, load: DemoLoad) -> dict[str, TaskID]:
    return {
        "publish-sqs": progress.add_task("publish → SQS (messages)", total=load.records("sqs")),
        "publish-kinesis": progress.add_task("publish → Kinesis (records)", total=load.records("kinesis")),
        "poll-sqs": progress.add_task("SQS pollers: messages done", total=load.records("sqs")),
        "poll-kinesis": progress.add_task("Kinesis pollers: records done", total=load.records("kinesis")),
        "counted": progress.add_task("events counted (exactly once)", total=load.events),
    }


def _update(
    progress: Progress, tasks: dict[str, TaskID], producers: Sequence[Producer], mappings: EventSourceMappings
) -> None:
    for source in ("sqs", "kinesis"):
        sent = sum(p.progress.records for p in producers if p.plan.source == source)
        progress.update(tasks[f"publish-{source}"], completed=sent)
    progress.update(tasks["poll-sqs"], completed=_stats(mappings, SQS_SOURCE).records_done)
    progress.update(tasks["poll-kinesis"], completed=_stats(mappings, KINESIS_SOURCE).records_done)
    progress.update(tasks["counted"], completed=_events_counted(mappings))


def _stats(mappings: EventSourceMappings, name: str) -> SourceStats:
    return mappings.stats[name]


def _events_counted(mappings: EventSourceMappings) -> int:
    return sum(stats.metric("EventsApplied") for stats in mappings.stats.values())


def _check_counters(
    console: Console,
    resources: LocalResources,
    store: DynamoDBCounterStore,
    load: DemoLoad,
    rng: random.Random,
    *,
    hot_keys: HotKeys,
) -> KeyCheck:
    counted = {key: read_counters(store, key, hot_keys) for key in load.expected}
    scanned = {key: counters for key, counters in _all_time_totals(resources).items() if key.startswith("demo:")}
    check = KeyCheck(expected=load.expected, counted=counted, scanned=scanned)
    console.print(key_table(check, sample_keys(load.expected, [HOT_KEY], rng), [HOT_KEY]))
    console.print(totals_table(check))
    if check.wrong_keys:
        console.print(f"[bold red]{len(check.wrong_keys)} key(s) wrong[/], e.g. {check.wrong_keys[:5]}")
    return check


def _report(
    console: Console, resources: LocalResources, mappings: EventSourceMappings, load: DemoLoad, elapsed: float
) -> bool:
    sqs, kinesis = _stats(mappings, SQS_SOURCE), _stats(mappings, KINESIS_SOURCE)
    letters = list_letters(resources.client("sqs"), resources.dead_letter_queue_url)
    reasons = {letter.error_code or letter.kind: letter.error_message or "" for letter in letters}
    expected_codes = [poison.code for poison in load.poison]
    found_codes = [letter.error_code or letter.kind for letter in letters]
    console.print(dead_letter_table(expected_codes, found_codes, reasons))

    def metric(name: str) -> int:
        return sqs.metric(name) + kinesis.metric(name)

    messages = sum(len(plan.messages) for plan in load.producers)
    writes: DynamoDBWrites = sqs.writes + kinesis.writes
    rows = [
        ("events published (distinct)", f"{load.events:,}"),
        ("messages published (packed and single)", f"{messages:,}"),
        ("producer re-sends (same ids)", f"{load.resent_messages:,} messages, {load.resent_events:,} events"),
        ("poison published", f"{len(load.poison):,}"),
        ("events counted (EventsApplied)", f"{metric('EventsApplied'):,}"),
        ("messages applied (MessagesApplied)", f"{metric('MessagesApplied'):,}"),
        ("duplicates dropped in a batch (DuplicatesInBatch)", f"{metric('DuplicatesInBatch'):,}"),
        ("duplicates dropped, already applied (DuplicatesAlreadyApplied)", f"{metric('DuplicatesAlreadyApplied'):,}"),
        ("poison dead-lettered (PoisonRecords)", f"{metric('PoisonRecords'):,}"),
        ("records redelivered after a failure report (RecordsFailed)", f"{metric('RecordsFailed'):,}"),
        ("invocations: SQS / Kinesis", f"{sqs.invocations:,} / {kinesis.invocations:,}"),
        ("function errors", f"{sqs.function_errors + kinesis.function_errors:,}"),
        ("service errors the pollers retried", f"{sqs.service_errors + kinesis.service_errors:,}"),
        *writes_rows(writes, load.events, messages),
        ("publish + process, wall clock", f"{elapsed:.1f} s"),
        ("events per second, end to end", f"{load.events / elapsed:,.0f}"),
    ]
    console.print(figures_table(rows, "what happened (from the functions' metrics and the botocore hook)"))
    return sorted(expected_codes) == sorted(found_codes)


def _redrive(console: Console, resources: LocalResources, mappings: EventSourceMappings, load: DemoLoad) -> bool:
    sqs = resources.client("sqs")
    applied = [message for plan in load.producers if plan.source == "sqs" for message in plan.messages]
    copies = random.Random(len(applied)).sample(applied, min(REDRIVE_COPIES, len(applied)))
    for message in copies:  # as SQS moves a message after maxReceiveCount: the original body, no tally attributes
        sqs.send_message(QueueUrl=resources.dead_letter_queue_url, MessageBody=message.body.decode("utf-8"))
    before_letters = list_letters(sqs, resources.dead_letter_queue_url)
    console.print(
        f"dead-letter queue: {len(before_letters)} messages = {len(load.poison)} poison + {len(copies)} copies of "
        "messages already counted (as SQS leaves them after a consumer outage)"
    )
    duplicates_before = sum(stats.metric("DuplicatesAlreadyApplied") for stats in mappings.stats.values())
    before = _all_time_totals(resources)
    result = redrive(
        sqs,
        resources.dead_letter_queue_url,
        kinesis=resources.client("kinesis"),
        default_queue_url=resources.queue_url,
    )
    mappings.wait_until_drained(DRAIN_TIMEOUT_S)
    after = _all_time_totals(resources)
    after_letters = list_letters(sqs, resources.dead_letter_queue_url)
    duplicates = sum(stats.metric("DuplicatesAlreadyApplied") for stats in mappings.stats.values()) - duplicates_before
    changed = sorted(key for key in set(before) | set(after) if before.get(key) != after.get(key))
    poison_back = sorted(letter.error_code or "-" for letter in after_letters) == sorted(p.code for p in load.poison)
    # Every letter the queue held before is accounted for, once: none passed over, none taken for another.
    met = len(result.redriven) + len(result.counted) + len(result.skipped) + result.not_aimed
    accounted = met == len(before_letters)
    rows = [
        ("every dead letter met once", f"{met:,} of {len(before_letters):,} " + (OK if accounted else WRONG)),
        ("redriven (sent back to their source, then deleted)", f"{len(result.redriven):,}"),
        ("left in the dead-letter queue (could not be sent)", f"{len(result.skipped):,}"),
        ("copies already counted: dropped as duplicates", f"{duplicates:,} of {len(copies)}"),
        ("keys whose counters changed", f"{len(changed):,} of {len(before):,}"),
        (
            "poison back in the dead-letter queue, same reasons",
            f"{len(after_letters):,} " + (OK if poison_back else WRONG),
        ),
    ]
    console.print(figures_table(rows, "redrive: idempotency markers make it a no-op for what was counted"))
    if changed:
        console.print(f"[bold red]counters changed by the redrive[/]: {changed[:5]}")
    return result.ok and accounted and not changed and duplicates == len(copies) and poison_back


def _all_time_totals(resources: LocalResources) -> dict[str, dict[str, Decimal]]:
    """Every key's all-time values, shards summed: the scan behind ``tally top``, for the demo's cross-check."""
    return CounterReader(resources.counters_table, client=resources.client("dynamodb")).all_time_totals()


def _audit(console: Console, resources: LocalResources) -> bool:
    """What ``tally audit`` does, on the stack: every value compared; good when none drifted or stayed unsettled."""
    settings = Settings.from_env(resources.settings, require_dlq=False)
    if settings.archive_bucket is None:
        console.print("the archive is off (ArchiveEnabled=false): nothing to audit")
        return False
    reader = CounterReader(
        resources.counters_table,
        client=resources.client("dynamodb"),
        hot_keys=settings.declarations.hot_keys,
        windows=settings.declarations.windows,
        views=settings.declarations.views,
    )
    with progress_bar() as bar:
        report = Auditor(
            resources.client("s3"),
            settings.archive_bucket,
            settings.archive_prefix,
            reader,
            AuditSettings(
                settings.declarations.windows,
                settings.declarations.defaults,
                settle_s=1.0,
                views=settings.declarations.views,
            ),
            progress=bar,
            landings=partial(landed_batches, resources.client("dynamodb"), settings.markers_table),
        ).run()
    counts = summarise(report.findings).values
    seconds = (report.finished_ms - report.started_ms) / 1000
    console.print(
        f"{report.keys:,} keys, {len(report.findings):,} values, recounted from {report.countings:,} countings"
        f" ({report.records:,} archived records, {report.objects:,} objects) in {seconds:.1f} s: "
        + ", ".join(f"{counts.get(verdict, 0):,} {verdict}" for verdict in Found)
    )
    for finding in [f for f in report.findings if f.verdict is not Found.EXACT][:10]:
        slot = finding.slot
        where = f"{item_label(slot.key)} {slot.window} {slot.name}"
        console.print(f"  {where}: stored {finding.stored}, recounted {finding.recounted}")
    return not report.with_verdict(Found.DRIFT, Found.UNSETTLED)


if __name__ == "__main__":
    main()
