"""The ports the commit protocol speaks to: the counter store, the journal, and the step runner.

The protocol (``tally.commit.protocol``) calls these and nothing else; the DynamoDB adapters
(``tally.store.dynamodb``, ``tally.store.journal``) and the retrying runner (``tally.commit.retrying``)
implement them, and the unit tests' fakes do too. This module holds only signatures: no behaviour, no
imports at run time beyond the standard library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from tally.core.aggregate import Totals
    from tally.core.epochs import FencedBatch
    from tally.core.fence import HeaderSeen
    from tally.core.items import ItemKey
    from tally.core.ledger import BatchRecord, Claim, MarkerRecord
    from tally.core.numbers import Number
    from tally.core.plan import JournalPage
    from tally.core.thresholds import CrossingPage
    from tally.core.write import DirectWrite, FenceAnswer, FencedWrite, ItemRead

T = TypeVar("T")


class CounterStore(Protocol):
    """Direct transactions as the core planned them, the reads they are planned from, and marker reads
    (``tally.store.dynamodb.DynamoDBCounterStore``)."""

    def write(self, write: DirectWrite) -> None: ...

    def read_items(self, items: Sequence[ItemKey]) -> Mapping[ItemKey, ItemRead]: ...

    def read_marker(self, message_id: str) -> MarkerRecord | None: ...

    def read_markers(self, message_ids: Sequence[str]) -> Mapping[str, MarkerRecord]: ...


class JournalStore(Protocol):
    """The journal steps, each one conditional request (``tally.store.journal.DynamoDBJournal``)."""

    def open(self, batch_id: str, lease_until_ms: int, claims: Sequence[Claim], now_ms: int) -> None: ...

    def claim(self, batch_id: str, claims: Sequence[Claim], now_ms: int) -> None: ...

    def commit_single(self, batch_id: str, increments: Totals) -> None: ...

    def write_pages(self, batch_id: str, pages: Sequence[JournalPage], lease_until_ms: int) -> None: ...

    def write_spill(self, batch_id: str, pages: Sequence[CrossingPage], lease_until_ms: int) -> None: ...

    def commit(self, batch_id: str, chunk_count: int, first_chunk: Totals, lease_until_ms: int) -> None: ...

    def add_chunk(self, batch_id: str, index: int, page: JournalPage, lease_until_ms: int) -> None: ...

    def refuse_chunk(self, batch_id: str, index: int, reason: str, lease_until_ms: int) -> None: ...

    def finish(self, batch_id: str) -> None: ...

    def commit_header(self, batch_id: str, chunk_count: int) -> None: ...

    def apply_fenced(self, write: FencedWrite) -> FenceAnswer: ...

    def read_marks(self, items: Sequence[ItemKey], epoch: str) -> Mapping[ItemKey, int]: ...

    def mark_done(self, batch_id: str, now_ms: int) -> None: ...

    def abort(self, batch_id: str, now_ms: int, *, expired_only: bool) -> bool: ...

    def read(self, batch_id: str) -> BatchRecord | None: ...

    def read_headers(self, batch_ids: Sequence[str]) -> Mapping[str, BatchRecord | None]: ...

    def read_progress(self, batch_id: str, chunk_count: int) -> tuple[Sequence[JournalPage], set[int]]: ...

    def read_counters(self, items: Sequence[ItemKey]) -> Mapping[ItemKey, Mapping[str, Number]]: ...


class BatchNumbers(Protocol):
    """The container's writer epoch (``tally.core.epochs``): the next fenced batch, and the end of the epoch when
    one of its batches is left unfinished; and what the container has seen of items' marks and of other epochs'
    headers, from which its writes prune marks (``tally.core.fence.prunable``)."""

    @property
    def current(self) -> str | None: ...

    def next_batch(self) -> FencedBatch: ...

    def end_epoch(self) -> None: ...

    def marks_of(self, item: ItemKey) -> Mapping[str, int]: ...

    def remember_marks(self, item: ItemKey, fence: Mapping[str, int]) -> None: ...

    def headers_seen(self) -> Mapping[FencedBatch, HeaderSeen]: ...

    def remember_header(self, batch: FencedBatch, seen: HeaderSeen) -> None: ...


class Steps(Protocol):
    """How the protocol runs each store call (``tally.commit.retrying.RetryingSteps``).

    The protocol says *what* to call and what each outcome means; the runner decides how often to try,
    how long to wait, when time is up, and what to count. A ``RetryableStoreError`` coming out of
    ``write`` or ``read`` means the runner gave up: the step's outcome is unknown.
    """

    def write(self, step: Callable[[], T]) -> T:
        """Run a write (a transaction or batch write: billed, and counted as a request)."""
        ...

    def read(self, step: Callable[[], T]) -> T:
        """Run a read (not counted as a transaction)."""
        ...

    def may_start(self) -> bool:
        """Whether the invocation has time left to start new work (a transaction, a journal batch)."""
        ...

    def lease_until_ms(self) -> int:
        """The lease of a journal batch started now: past it, anyone may abort the batch."""
        ...
