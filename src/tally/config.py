"""Settings of the Lambda function and the CLI, read from the environment at the edge, once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tally.core.declarations import NO_DECLARATIONS, Declarations, parse_declarations
from tally.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping

COUNTERS_TABLE = "TALLY_COUNTERS_TABLE"
MARKERS_TABLE = "TALLY_MARKERS_TABLE"
DLQ_URL = "TALLY_DLQ_URL"
MARKER_TTL_DAYS = "TALLY_MARKER_TTL_DAYS"
WINDOWS = "TALLY_WINDOWS"
WINDOW_RETENTION = "TALLY_WINDOW_RETENTION"
HOT_KEYS = "TALLY_HOT_KEYS"
COUNTER_DEFAULTS = "TALLY_COUNTER_DEFAULTS"
COUNTER_BOUNDS = "TALLY_COUNTER_BOUNDS"
COUNTER_THRESHOLDS = "TALLY_COUNTER_THRESHOLDS"
COUNTER_VIEWS = "TALLY_COUNTER_VIEWS"
NOTIFICATIONS_TABLE = "TALLY_NOTIFICATIONS_TABLE"
WRITE_CONCURRENCY = "TALLY_WRITE_CONCURRENCY"
ARCHIVE_BUCKET = "TALLY_ARCHIVE_BUCKET"
ARCHIVE_PREFIX = "TALLY_ARCHIVE_PREFIX"
FENCED_APPLY = "TALLY_FENCED_APPLY"
DEFAULT_ARCHIVE_PREFIX = "events/"
DEFAULT_WRITE_CONCURRENCY = 4
"""A round's key-disjoint direct transactions in flight at once. Four is the most whose
gain ``python -m bench.duration --proxy`` could measure: beyond it DynamoDB Local, which serialises
transactions, answers later than AWS would and the proxy can no longer hide it (docs/explanation/costs.md,
"Handler duration"). At most 10, botocore's default connection pool; 1 writes them one at a time."""
MAX_WRITE_CONCURRENCY = 10

DEFAULT_MARKER_TTL_DAYS = 35
"""Longer than SQS's 14-day maximum retention plus a 14-day dead-letter stay, with a week to spare."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything deployment-specific, named after the template's environment variables."""

    counters_table: str
    markers_table: str
    dlq_url: str | None
    marker_ttl_days: int = DEFAULT_MARKER_TTL_DAYS
    declarations: Declarations = NO_DECLARATIONS
    """The counters' declarations, parsed once (``TALLY_WINDOWS``, ``TALLY_WINDOW_RETENTION``, ``TALLY_HOT_KEYS``,
    ``TALLY_COUNTER_DEFAULTS``, ``TALLY_COUNTER_BOUNDS``, ``TALLY_COUNTER_THRESHOLDS``, ``TALLY_COUNTER_VIEWS``:
    ``tally.core.declarations``)."""
    notifications_table: str | None = None
    """Where crossings are recorded (``TALLY_NOTIFICATIONS_TABLE``): required when thresholds are declared."""
    write_concurrency: int = DEFAULT_WRITE_CONCURRENCY
    """Direct transactions of a round in flight at once (``TALLY_WRITE_CONCURRENCY``, optional)."""
    archive_bucket: str | None = None
    """Where every counted message is archived (``TALLY_ARCHIVE_BUCKET``); None or empty: the archive is off."""
    archive_prefix: str = DEFAULT_ARCHIVE_PREFIX
    """The key prefix of the archive's objects (``TALLY_ARCHIVE_PREFIX``), ending in ``/``."""
    fenced_apply: bool = True
    """Journal batches applied by fenced single-item writes (``TALLY_FENCED_APPLY``, ``true`` unless ``false``:
    the template's ``FencedApply``); off, by chunk transactions, as before: the rollback lever (docs/journal.md,
    "Rolling out"). Batches already committed are finished as their header says either way."""

    @property
    def marker_ttl_seconds(self) -> int:
        return self.marker_ttl_days * 86_400

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, require_dlq: bool = True) -> Settings:
        """Read the settings; the CLI's read paths do not need the dead-letter queue."""
        missing = [name for name in (COUNTERS_TABLE, MARKERS_TABLE) if not env.get(name)]
        if require_dlq and not env.get(DLQ_URL):
            missing.append(DLQ_URL)
        if missing:
            raise ConfigurationError("missing environment variable(s): " + ", ".join(missing))
        raw_ttl = env.get(MARKER_TTL_DAYS, str(DEFAULT_MARKER_TTL_DAYS))
        try:
            ttl_days = int(raw_ttl)
        except ValueError as exc:
            raise ConfigurationError(f"{MARKER_TTL_DAYS} must be a whole number of days, not {raw_ttl!r}") from exc
        if ttl_days < 1:
            raise ConfigurationError(f"{MARKER_TTL_DAYS} must be at least 1")
        raw_concurrency = env.get(WRITE_CONCURRENCY) or str(DEFAULT_WRITE_CONCURRENCY)
        if not (raw_concurrency.isascii() and raw_concurrency.isdigit()) or not (
            1 <= int(raw_concurrency) <= MAX_WRITE_CONCURRENCY
        ):
            raise ConfigurationError(
                f"{WRITE_CONCURRENCY} must be 1 to {MAX_WRITE_CONCURRENCY}, not {raw_concurrency!r}"
            )
        try:
            declarations = parse_declarations(
                windows=env.get(WINDOWS, ""),
                window_retention=env.get(WINDOW_RETENTION, ""),
                hot_keys=env.get(HOT_KEYS, ""),
                defaults=env.get(COUNTER_DEFAULTS, ""),
                bounds=env.get(COUNTER_BOUNDS, ""),
                thresholds=env.get(COUNTER_THRESHOLDS, ""),
                views=env.get(COUNTER_VIEWS, ""),
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from exc
        archive_prefix = env.get(ARCHIVE_PREFIX) or DEFAULT_ARCHIVE_PREFIX
        if not archive_prefix.endswith("/") or archive_prefix.startswith("/"):
            raise ConfigurationError(
                f"{ARCHIVE_PREFIX} must end with '/' and not start with one, not {archive_prefix!r}"
            )
        raw_fenced = env.get(FENCED_APPLY) or "true"
        if raw_fenced not in ("true", "false"):
            raise ConfigurationError(f"{FENCED_APPLY} must be true or false, not {raw_fenced!r}")
        if declarations.thresholds.rules and not env.get(NOTIFICATIONS_TABLE):
            raise ConfigurationError(f"{COUNTER_THRESHOLDS} needs {NOTIFICATIONS_TABLE}: where crossings are recorded")
        return cls(
            counters_table=env[COUNTERS_TABLE],
            markers_table=env[MARKERS_TABLE],
            dlq_url=env.get(DLQ_URL) or None,
            marker_ttl_days=ttl_days,
            declarations=declarations,
            notifications_table=env.get(NOTIFICATIONS_TABLE) or None,
            write_concurrency=int(raw_concurrency),
            archive_bucket=env.get(ARCHIVE_BUCKET) or None,
            archive_prefix=archive_prefix,
            fenced_apply=raw_fenced == "true",
        )
