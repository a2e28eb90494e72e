"""The archive step: every message whose counters count, written to the archive after the commit.

One object per invocation (``tally.core.archive``: gzip JSON lines, one record per counted message), sent through
the batch's attempt (``SettledBatch.attempt``: the commit's retry policy, and nothing started inside the time it
keeps for reporting). What makes the
archive exact:

- **Only what counts, after it counts.** The step sees the messages whose counters count: applied by this
  invocation (``counted_here``) or before it (a marker met). A refused message never reaches it (it is in the
  dead-letter queue with its reason); a message handed back to the source is archived by the delivery that
  counts it.
- **Every counted message, at least once.** A message whose object write fails for now (throttled, an answer
  lost, out of time) is reported failed: its redelivery meets its marker and archives it then, under the same
  commit (``tally.core.ledger.Commit``: the marker's). So does a crash between the commit and this step, and a
  message settled as a duplicate of one counted earlier (its copy names the first one's commit). A write S3
  refuses for good (access denied, no such bucket) dead-letters the messages as ``archive_refused``: counted,
  not archived, and a redrive once the cause is gone archives them (``COUNTED_REFUSALS``).
- **At most once at read.** Every copy names its (message id, commit): readers keep one per pair
  (``tally.audit.recount.countings``). A retried write of the same object reuses its key and bytes.

A marker met without its applied time cannot name its commit: that message is left to a redelivery (which
reads the marker again), never archived under a guessed commit.
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import TYPE_CHECKING, Protocol

from tally.core.archive import archive_record, encode_records, object_key
from tally.core.model import RejectCode, Rejection
from tally.errors import RetryableStoreError, StoreError
from tally.post_commit.step import StepResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.core.archive import ArchiveRecord
    from tally.core.model import Message
    from tally.post_commit.step import SettledBatch

ARCHIVE_OBJECTS = "ArchiveObjects"
"""Archive objects written (one per invocation that counted something; retries not included)."""
ARCHIVED_MESSAGES = "ArchivedMessages"
"""Records in them: the counted messages archived by this batch (duplicates and repairs included)."""
ARCHIVE_BYTES = "ArchiveBytes"
"""Compressed bytes written."""
_NAMES = (ARCHIVE_OBJECTS, ARCHIVED_MESSAGES, ARCHIVE_BYTES)
DEFAULT_PREFIX = "events/"


class ArchiveWriter(Protocol):
    """The port archive objects go to (``tally.archive_writer.S3ArchiveWriter``).

    ``put`` stores ``body`` under ``key``, replacing what is there (a retry of the same object). Raises
    ``RetryableStoreError`` when it may succeed later, ``StoreError`` when it never will.
    """

    def put(self, key: str, body: bytes) -> None: ...


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ArchiveStep:
    """Writes the records of every counted message of the batch in one object (see the module)."""

    beside_landing = True
    """It needs only the messages' fates and commits: the pipeline runs it while the last FENCED batch's item writes
    land, and the records of that batch's messages say so (``before_landing``: their ``archived_ms`` does not
    bound the landing; an audit reads the batch's header instead, ``tally.audit.cut``)."""

    def __init__(
        self,
        writer: ArchiveWriter | None,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], int] = wall_clock_ms,
        new_delivery: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._writer = writer
        """None: the archive is off (the template's ``ArchiveEnabled=false``); nothing is written."""
        self._prefix = prefix
        self._clock = clock
        """Read after the commit: the records' ``archived_ms``, by which their deltas had landed (save those of
        ``SettledBatch.landing``, written before their landing)."""
        self._new_delivery = new_delivery

    def admit(self, message: Message) -> Rejection | None:
        return None

    def settle(self, batch: SettledBatch) -> StepResult:
        writer = self._writer
        if writer is None or not batch.messages:
            return StepResult(dict.fromkeys(_NAMES, 0))
        archived_ms = self._clock()
        delivery = self._new_delivery()
        records: list[ArchiveRecord] = []
        unnamed: set[str] = set()
        for seq, (message, net) in enumerate(zip(batch.messages, batch.totals, strict=True)):
            commit = batch.commits.get(message.message_id)
            if commit is None:
                unnamed.add(message.message_id)
                continue
            records.append(
                archive_record(
                    message,
                    commit,
                    batch.sources[message.message_id],
                    digest=net.digest,
                    archived_ms=archived_ms,
                    delivery=delivery,
                    seq=seq,
                    counted_here=message.message_id in batch.counted_here,
                    before_landing=message.message_id in batch.landing,
                )
            )
        if not records:
            return StepResult(dict.fromkeys(_NAMES, 0), retry=frozenset(unnamed))
        body = encode_records(records)
        key = object_key(self._prefix, archived_ms, delivery)
        ids = frozenset(record.id for record in records)
        try:
            batch.attempt(partial(writer.put, key, body))
        except RetryableStoreError:
            return StepResult(dict.fromkeys(_NAMES, 0), retry=ids | unnamed)
        except StoreError as exc:
            why = Rejection(RejectCode.ARCHIVE_REFUSED, f"counters counted; archive write refused: {exc}")
            return StepResult(dict.fromkeys(_NAMES, 0), retry=frozenset(unnamed), refused=dict.fromkeys(ids, why))
        figures = {ARCHIVE_OBJECTS: 1, ARCHIVED_MESSAGES: len(records), ARCHIVE_BYTES: len(body)}
        return StepResult(figures, retry=frozenset(unnamed))
