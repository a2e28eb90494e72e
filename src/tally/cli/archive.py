"""What ``tally audit``, ``tally void`` and ``tally events`` share: where the archive is, how the stack counts, the
archive read with a progress bar, and corrections published through the normal pipeline.

The archive's bucket is found like every resource (``tally.cli.resolve``): ``--archive-bucket``, else the stack's
``ArchiveBucketName`` output, else ``$TALLY_ARCHIVE_BUCKET`` (what the functions write to), else
``$TALLY_STACK``'s; its key prefix is ``--archive-prefix``, else ``$TALLY_ARCHIVE_PREFIX``, else ``events/``. A
recount needs the stack's ``Windows``, ``WindowRetentionDays``, ``CounterDefaults``, ``HotKeys`` and
``CounterViews``, read the same way.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import click

from tally.cli.output import console
from tally.cli.resolve import Resolver, kind_option, stack_option
from tally.core.views import NO_VIEWS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from rich.progress import Progress, TaskID

    from tally.audit.corrections import PlannedCorrection
    from tally.audit.recount import Counting
    from tally.core.defaults import CounterDefaults
    from tally.core.sharding import HotKeys
    from tally.core.views import CounterViews
    from tally.core.windows import WindowSpec

DEFAULT_PREFIX: Final = "events/"
COUNTING_SETTINGS: Final = (
    "TALLY_COUNTERS_TABLE",
    "TALLY_HOT_KEYS",
    "TALLY_WINDOWS",
    "TALLY_WINDOW_RETENTION",
    "TALLY_COUNTER_DEFAULTS",
    "TALLY_COUNTER_VIEWS",
)
"""What a recount needs of the stack: how it counts (the table only to compare with)."""


def archive_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--archive-bucket``, ``--archive-prefix``, ``--stack``."""
    for option in reversed(
        (
            click.option(
                "--archive-bucket",
                help="The archive's S3 bucket (default: the stack's ArchiveBucketName, or $TALLY_ARCHIVE_BUCKET).",
            ),
            click.option(
                "--archive-prefix",
                help=f"The archive's key prefix (default: $TALLY_ARCHIVE_PREFIX, or {DEFAULT_PREFIX}).",
            ),
            stack_option,
        )
    ):
        command = option(command)
    return command


def target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Where corrections are published (``tally publish``'s targets)."""
    for option in reversed(
        (
            click.option("--queue-url", help="Publish corrections to this SQS queue (default: $TALLY_QUEUE_URL)."),
            click.option(
                "--stream-name", help="Publish corrections to this Kinesis stream (default: $TALLY_STREAM_NAME)."
            ),
            kind_option,
        )
    ):
        command = option(command)
    return command


@dataclass(frozen=True, slots=True)
class Archive:
    """Where the archive is, and how the stack that wrote it counts."""

    bucket: str
    prefix: str
    windows: WindowSpec
    hot_keys: HotKeys
    defaults: CounterDefaults
    settings: dict[str, str]
    """The stack's ``TALLY_*`` settings as read (for a ``CounterReader``)."""
    views: CounterViews = NO_VIEWS

    def client(self) -> Any:
        from tally.audit.objects import READ_WORKERS
        from tally.cli.aws import client

        return client("s3", connections=READ_WORKERS)


def resolve_archive(resolver: Resolver, bucket: str | None, prefix: str | None) -> Archive:
    """The archive and the stack's counting settings, by ``tally.cli.resolve``'s rule."""
    import os

    from tally.core.defaults import parse_counter_defaults
    from tally.core.sharding import parse_hot_keys
    from tally.core.views import parse_counter_views
    from tally.core.windows import parse_window_spec

    found = resolver.required("TALLY_ARCHIVE_BUCKET", bucket, "the archive bucket", "--archive-bucket")
    chosen = prefix or os.environ.get("TALLY_ARCHIVE_PREFIX") or DEFAULT_PREFIX
    if not chosen.endswith("/") or chosen.startswith("/"):
        raise click.UsageError(f"the archive prefix must end with '/' and not start with one, not {chosen!r}")
    settings = resolver.settings(COUNTING_SETTINGS)
    try:
        views = parse_counter_views(settings.get("TALLY_COUNTER_VIEWS", ""))
        hot_keys = parse_hot_keys(settings.get("TALLY_HOT_KEYS", ""), views)
        windows = parse_window_spec(settings.get("TALLY_WINDOWS", ""), settings.get("TALLY_WINDOW_RETENTION", ""))
        defaults = parse_counter_defaults(settings.get("TALLY_COUNTER_DEFAULTS", ""), hot_keys, views)
    except ValueError as exc:
        raise click.ClickException(f"the stack's settings cannot be read: {exc}") from exc
    return Archive(found, chosen, windows, hot_keys, defaults, settings, views)


class BarProgress:
    """``tally.audit.auditor.Progress`` on a rich progress bar: one line, its phase and count."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID = progress.add_task("starting", total=None)

    def phase(self, name: str, total: int | None = None) -> None:
        self._progress.reset(self._task, total=total, description=name)

    def advance(self, amount: int = 1) -> None:
        self._progress.advance(self._task, amount)


@contextmanager
def progress_bar() -> Iterator[BarProgress]:
    """A progress bar on stderr, gone when done (stdout keeps only the table or the JSON)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console(stderr=True), transient=True) as progress:
        yield BarProgress(progress)


def read_countings(archive: Archive, since_ms: int | None) -> list[Counting]:
    """Every counting of the archive (of the objects written since ``since_ms``), copies dropped, oldest first."""
    from tally.audit.objects import archive_keys, read_objects, written_since
    from tally.audit.recount import countings, gc_paused

    s3 = archive.client()
    with progress_bar() as bar, gc_paused():
        bar.phase("listing the archive")
        if since_ms is None:
            keys = list(archive_keys(s3, archive.bucket, archive.prefix))
        else:
            keys = list(written_since(s3, archive.bucket, archive.prefix, since_ms))
        bar.phase("reading the archive", len(keys))
        records = []
        for batch in read_objects(s3, archive.bucket, keys):
            records.extend(batch)
            bar.advance()
        return countings(records)


def counting_kind(counting: Counting) -> str:
    """``event``, ``correction``, ``reset``, ``void`` (``tally void``'s) or ``repair`` (``tally audit --fix``'s)."""
    from tally.audit.corrections import REPAIR_PREFIX, VOID_PREFIX

    if counting.record.id.startswith(REPAIR_PREFIX):
        return "repair"
    if counting.record.id.startswith(VOID_PREFIX):
        return "void"
    first = counting.message.events[0] if counting.message.events else None
    if first is not None and first.reset is not None:
        return "reset"
    if first is not None and first.correction:
        return "correction"
    return "event"


def correction_json(correction: PlannedCorrection) -> dict[str, Any]:
    """``{"id", "key", "deltas" (or, a reset, "reset"), "ts"}``."""
    amounts = "reset" if correction.reset else "deltas"
    amounts_json = dict(correction.deltas)
    return {"id": correction.message_id, "key": correction.key, amounts: amounts_json, "ts": correction.ts_ms}


def publish_corrections(
    corrections: Sequence[PlannedCorrection],
    resolver: Resolver,
    *,
    queue_url: str | None,
    stream_name: str | None,
    kind: str | None,
) -> tuple[str, list[str]]:
    """Send each as a message of its own (``Event.correct``, ``Event.reset_to``): where it went, what failed."""
    from tally.cli.publish import _publisher
    from tally.producer import Event

    target = resolver.publish_target(queue_url, stream_name, kind)
    publisher = _publisher(target, pack=False, max_message_bytes=None)
    events = [
        Event.reset_to(c.key, dict(c.deltas), id=c.message_id, ts=c.ts_ms)
        if c.reset
        else Event.correct(c.key, dict(c.deltas), id=c.message_id, ts=c.ts_ms)
        for c in corrections
    ]
    result = publisher.send(publisher.prepare(events))
    return target.address, [f"{failure.code}: {failure.reason}" for failure in result.failed]


def exit_with(code: int) -> None:
    sys.stdout.flush()
    sys.exit(code)
