"""The commit journal: one ADD per key for a whole unit of a batch, exactly once, across transactions.

The steps (docs/journal.md has the diagram, the invariant and why each condition is there):

1. **Claim.** A header ``PREPARING`` (with a lease: the invocation's deadline plus a margin) is created
   atomically with the first markers; further markers are claimed in transactions that check the header
   is still ``PREPARING``. Each marker names the batch and is conditional on no marker existing (or on
   the existing one naming an aborted batch, checked in the same transaction).
2. **Aggregate** the claimed messages only, and split the increments into apply chunks.
3. **Commit.** One chunk: ``PREPARING -> DONE`` in the same transaction as every ADD (no pages needed).
   Several: write the pages (each chunk's increments), then ``PREPARING -> COMMITTED`` atomically with
   chunk 0's ADDs and its applied-record. From here on the batch *will* be applied, by this invocation or
   by any later one that meets its markers.
4. **Apply** chunks 1..n-1, each atomically with its applied-record (``attribute_not_exists``), so each
   chunk applies once whoever applies it; then ``COMMITTED -> DONE``.

Until the commit, anyone who finds the lease expired may abort the batch (only from ``PREPARING``), and
markers of an aborted batch count as absent. Once committed, a batch is never aborted.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import TYPE_CHECKING

from tally.core.aggregate import merge_totals
from tally.core.items import item_label
from tally.core.ledger import BatchRecord, BatchState, Claim
from tally.core.model import RejectCode, Rejection
from tally.core.numbers import add, storage_problem
from tally.core.plan import nonzero_increments, plan_apply_chunks
from tally.errors import (
    BatchStateError,
    ChunkAppliedError,
    MarkersExistError,
    RetryableStoreError,
    StoreError,
    WriteRejectedError,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tally.apply import Applier, Run
    from tally.core.aggregate import MessageTotals, Totals
    from tally.core.items import ItemKey


class JournalRunner:
    """Runs journal batches for one invocation (``Run``) of an ``Applier``."""

    def __init__(self, applier: Applier, run: Run) -> None:
        self._applier = applier
        self._journal = applier.journal
        self._run = run

    def run(self, unit: Sequence[MessageTotals], *, isolate: bool = False) -> list[MessageTotals]:
        """Apply one unit through a new batch; returns messages to plan again."""
        applier, run = self._applier, self._run
        if not applier.has_time(run):
            run.unapplied.update(message.message_id for message in unit)
            return []
        batch_id = applier.new_batch_id()
        lease_until_ms = run.now_ms + run.remaining_ms() + applier.policy.lease_margin_ms
        run.journal_batches += 1
        claimed = self._claim(batch_id, lease_until_ms, unit)
        if claimed is None:
            return []
        if not claimed:
            self._abort_own(batch_id)
            return []
        increments = nonzero_increments(merge_totals(message.totals for message in claimed))
        chunks = plan_apply_chunks(increments, max_keys=applier.max_actions - 2, counter_limit=applier.counter_limit)
        if len(chunks) > 1:
            # Only chunk 0 travels with the commit; a later chunk DynamoDB refuses could no longer be
            # undone (issue 14, defect 3). Check them against the stored values while we can still abort.
            try:
                unstorable = self._unstorable(chunks[1:])
            except RetryableStoreError:
                self._abort_own(batch_id)
                run.unapplied.update(message.message_id for message in claimed)
                return []
            if unstorable:
                return self._isolate(batch_id, claimed, unstorable, isolate=isolate)
        try:
            if len(chunks) <= 1:
                applier.attempt(run, lambda: self._journal.commit_single(batch_id, chunks[0] if chunks else {}))
                run.mark_applied(claimed)
                return []
            applier.attempt(run, lambda: self._journal.write_pages(batch_id, chunks, lease_until_ms))
            applier.attempt(run, lambda: self._journal.commit(batch_id, len(chunks), chunks[0], lease_until_ms))
        except (BatchStateError, RetryableStoreError):
            # Either the answer to our commit was lost (the retry then finds the header moved on), or
            # our lease expired and someone aborted us, or DynamoDB kept throttling: look before deciding.
            state = self._state(batch_id)
            if state is BatchState.DONE:
                run.mark_applied(claimed)
                return []
            if state is not BatchState.COMMITTED:
                if state is BatchState.PREPARING:
                    self._abort_own(batch_id)
                run.unapplied.update(message.message_id for message in claimed)
                return []
        except WriteRejectedError as refused:
            # A counter would leave the Number range (or an action a size limit): nothing was committed.
            # Abort, then settle each message alone so that only the culprit is dead-lettered.
            return self._isolate(batch_id, claimed, {}, isolate=isolate, refused=refused)
        record = BatchRecord(batch_id, BatchState.COMMITTED, lease_until_ms, len(chunks))
        if self.finish(record, pages=chunks, first_applied=True):
            run.mark_applied(claimed)
        else:
            run.unapplied.update(message.message_id for message in claimed)
        return []

    def _claim(self, batch_id: str, lease_until_ms: int, unit: Sequence[MessageTotals]) -> list[MessageTotals] | None:
        """Claim what can be claimed for the batch; None if the batch was aborted under us."""
        applier, run = self._applier, self._run
        by_id = {message.message_id: message for message in unit}
        to_claim = [message.message_id for message in unit]
        claimed: list[MessageTotals] = []
        opened = False
        while to_claim:
            if not applier.has_time(run):
                run.unapplied.update(to_claim)
                break
            claims = self._next_claims(to_claim)
            try:
                if opened:
                    applier.attempt(run, partial(self._journal.claim, batch_id, claims, run.now_ms))
                else:
                    applier.attempt(run, partial(self._journal.open, batch_id, lease_until_ms, claims, run.now_ms))
            except MarkersExistError as exists:
                # Markers naming our own batch come from our own attempt whose answer was lost.
                mine = [mid for mid in exists.message_ids if exists.batches.get(mid) == batch_id]
                opened = opened or bool(mine)
                claimed.extend(by_id[mid] for mid in mine)
                claimable = applier.settle_existing(exists, run, own_batch=batch_id)
                to_claim = [mid for mid in to_claim if mid not in exists.message_ids or mid in claimable]
                continue
            except BatchStateError:
                if not opened and self._state(batch_id) is BatchState.PREPARING:
                    opened = True  # our header exists: an earlier attempt went through, its answer was lost
                    continue
                run.unapplied.update(message.message_id for message in claimed)
                run.unapplied.update(to_claim)
                return None
            except RetryableStoreError:
                # The last attempt's outcome is unknown: its claims may have committed, naming this batch.
                # Committing the rest would then mark them applied without their deltas (issue 14, defect
                # 2), and re-reading them cannot rule out a claim still in flight. Abort instead: markers
                # of an aborted batch count as absent, and a late claim fails on the header check.
                self._abort_own(batch_id)
                run.unapplied.update(message.message_id for message in claimed)
                run.unapplied.update(to_claim)
                return None
            opened = True
            done = {claim.message_id for claim in claims}
            claimed.extend(by_id[mid] for mid in to_claim if mid in done)
            to_claim = [mid for mid in to_claim if mid not in done]
        return claimed if opened else []

    def _next_claims(self, to_claim: Sequence[str]) -> list[Claim]:
        """As many claims as fit one transaction besides the header action (a replacing claim takes two)."""
        claims: list[Claim] = []
        actions = 1
        for message_id in to_claim:
            replaces = self._run.replaces.get(message_id)
            cost = 1 if replaces is None else 2
            if actions + cost > self._applier.max_actions:
                break
            claims.append(Claim(message_id, replaces, self._run.digests.get(message_id, b"")))
            actions += cost
        return claims

    def finish(self, record: BatchRecord, pages: Sequence[Totals] | None, *, first_applied: bool = False) -> bool:
        """Apply every chunk of a COMMITTED batch not applied yet, then mark it DONE.

        False if that must wait (out of time, or DynamoDB kept throttling): whoever meets the batch's
        markers next finishes it.
        """
        applier, run = self._applier, self._run
        if pages is None or not first_applied:
            try:
                stored_pages, done = applier.attempt(
                    run, lambda: self._journal.read_progress(record.batch_id, record.chunks), counts_as_request=False
                )
            except RetryableStoreError:
                return False  # committed batches are finished by whoever meets their markers next
            pages = pages if pages is not None else stored_pages
        else:
            done = {0}
        for index, page in enumerate(pages):
            if index in done:
                continue
            if not applier.has_time(run):
                return False
            try:
                applier.attempt(
                    run, partial(self._journal.apply_chunk, record.batch_id, index, page, record.lease_until_ms)
                )
            except ChunkAppliedError:
                continue
            except WriteRejectedError as refused:
                # Committed increments DynamoDB refuses (a counter would leave the Number range) cannot be
                # un-committed; they are recorded on the chunk, alarmed, and the batch can finish.
                run.refused_chunks += 1
                try:
                    applier.attempt(
                        run,
                        partial(
                            self._journal.refuse_chunk, record.batch_id, index, refused.detail, record.lease_until_ms
                        ),
                    )
                except ChunkAppliedError:
                    continue
            except RetryableStoreError:
                return False
        try:
            applier.attempt(run, lambda: self._journal.finish(record.batch_id))
        except RetryableStoreError:
            return False
        return True

    def _unstorable(self, chunks: Sequence[Totals]) -> dict[ItemKey, str]:
        """The items whose stored value plus this batch's increment DynamoDB would refuse, with why.

        A consistent read just before the commit; the sums are exact (``numbers.add``). The docs
        (docs/journal.md, "A later chunk DynamoDB would refuse") give the exactness argument and its limit.
        """
        applier, run = self._applier, self._run
        # An item whose counters need more than one ADD spans chunks (its counter names split between them).
        items = list(dict.fromkeys(item for chunk in chunks for item in chunk))
        stored = applier.attempt(run, lambda: self._journal.read_counters(items), counts_as_request=False)
        problems: dict[ItemKey, str] = {}
        for chunk in chunks:
            for item, counters in chunk.items():
                values = stored.get(item, {})
                for name, increment in counters.items():
                    problem = storage_problem(add(values.get(name, 0), increment))
                    if problem is not None:
                        problems[item] = f"{item_label(item)!r}/{name!r}: the stored value plus {increment}: {problem}"
        return problems

    def _isolate(
        self,
        batch_id: str,
        claimed: Sequence[MessageTotals],
        culprits: Mapping[ItemKey, str],
        *,
        isolate: bool,
        refused: WriteRejectedError | None = None,
    ) -> list[MessageTotals]:
        """Abort our uncommitted batch, then count what can be counted and reject only the culprits.

        ``culprits`` names the items DynamoDB would refuse (empty when it did not say which: every message
        is then a suspect). Messages that touch none of them are claimed again together; each suspect is
        claimed alone, so that a message is rejected only when its own increment cannot be stored.
        """
        run = self._run
        self._abort_own(batch_id)
        for message in claimed:
            run.replaces[message.message_id] = batch_id
        if isolate or len(claimed) == 1:
            reasons = [culprits[item] for message in claimed for item in message.totals if item in culprits]
            self._reject(claimed, "; ".join(reasons[:3]) or None, refused)
            return []
        suspects = [m for m in claimed if not culprits or any(item in culprits for item in m.totals)]
        innocent = [m for m in claimed if m not in suspects]
        again = self.run(innocent) if innocent else []
        return again + [retry for message in suspects for retry in self.run([message], isolate=True)]

    def _reject(
        self, messages: Sequence[MessageTotals], detail: str | None, refused: WriteRejectedError | None
    ) -> None:
        """Dead-letter ``messages``: DynamoDB refused (or would refuse) their increments."""
        from tally.apply import refusal_code  # noqa: PLC0415  (apply imports this module)

        code = RejectCode.COUNTER_OUT_OF_RANGE if refused is None else refusal_code(refused)
        if detail is None and refused is not None and not refused.number_range:
            detail = refused.detail
        reason = f"DynamoDB refused the increment: {detail or 'a counter would leave the Number range'}"
        for message in messages:
            self._run.rejected[message.message_id] = Rejection(code, reason[:1000])

    def _abort_own(self, batch_id: str) -> None:
        # If this fails, the lease will expire and anyone may abort the batch then.
        with contextlib.suppress(RetryableStoreError):
            self._applier.attempt(
                self._run, partial(self._journal.abort, batch_id, self._run.now_ms, expired_only=False)
            )

    def _state(self, batch_id: str) -> BatchState | None:
        record = self._read(batch_id)
        return record.state if record is not None else None

    def _read(self, batch_id: str) -> BatchRecord | None:
        try:
            return self._applier.attempt(self._run, lambda: self._journal.read(batch_id), counts_as_request=False)
        except RetryableStoreError as exc:
            raise StoreError(f"cannot learn the state of batch {batch_id}") from exc
