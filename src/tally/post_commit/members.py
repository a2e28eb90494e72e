"""The distinct-members step: count the batch's new members (``tally.store.distinct``) after the commit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tally.core.distinct import batch_members, carries_members
from tally.core.model import RejectCode, Rejection
from tally.errors import RetryableStoreError, StoreError
from tally.post_commit.step import StepResult

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tally.core.distinct import MemberSet
    from tally.core.model import Message
    from tally.core.windows import WindowSpec
    from tally.post_commit.step import SettledBatch
    from tally.store.distinct import DistinctWrite
    from tally.store.requests import Attempt

MEMBER_READS = "MemberReads"
"""Member items looked up: one read unit each."""
MEMBER_TRANSACTIONS = "MemberTransactions"
"""Member transactions sent (retries included)."""
MEMBERS_ADDED = "MembersAdded"
"""Members counted by this batch (new member items)."""


class DistinctStore(Protocol):
    """The port distinct-count members go to (``tally.store.distinct.DynamoDBDistinctStore``): idempotent.

    Takes every key's members of the batch at once, and sends each of its requests (the member read, each
    transaction) through ``attempt``.
    Names the keys whose members may be uncounted in ``DistinctWrite.unwritten`` and those refused for good in
    ``DistinctWrite.refused``; raises ``RetryableStoreError`` when that may be any key, ``StoreError`` when every
    key is refused.
    """

    def write_members(
        self, members: Mapping[str, Mapping[MemberSet, frozenset[str]]], attempt: Attempt
    ) -> DistinctWrite: ...


class MemberStep:
    """Counts the distinct members of every message whose counters count (a counted member never twice).

    A member transaction that fails for now is sent again within the invocation, as a gauge write is
    (``SettledBatch.attempt``), and none starts inside the time kept for reporting.
    """

    def __init__(self, store: DistinctStore | None, windows: WindowSpec) -> None:
        self._store = store
        """None: this pipeline counts no distinct members, and dead-letters messages that name some."""
        self._windows = windows

    def admit(self, message: Message) -> Rejection | None:
        if self._store is None and carries_members(message):
            return Rejection(RejectCode.INVALID_DISTINCT, "this pipeline has no distinct-count store")
        return None

    def settle(self, batch: SettledBatch) -> StepResult:
        carrying = [message for message in batch.messages if carries_members(message)]
        none = dict.fromkeys((MEMBER_READS, MEMBER_TRANSACTIONS, MEMBERS_ADDED), 0)
        if self._store is None or not carrying:
            return StepResult(none)
        members = batch_members(carrying, self._windows, batch.now_ms)
        every = frozenset().union(*members.sources.values())
        try:
            written = self._store.write_members(members.members, batch.attempt)
        except RetryableStoreError:
            return StepResult(none, retry=every)
        except StoreError as exc:  # the member read itself refused: no key's members can be written
            why = Rejection(RejectCode.MEMBERS_REFUSED, f"counters counted; distinct members refused: {exc}")
            return StepResult(none, refused=dict.fromkeys(every, why))
        refused: dict[str, Rejection] = {}
        for key, detail in written.refused.items():
            why = Rejection(RejectCode.MEMBERS_REFUSED, f"counters counted; members of {key[:200]!r} refused: {detail}")
            refused.update(dict.fromkeys(members.sources[key], why))
        figures = {MEMBER_READS: written.read, MEMBER_TRANSACTIONS: written.transactions, MEMBERS_ADDED: written.added}
        return StepResult(figures, frozenset().union(*(members.sources[key] for key in written.unwritten)), refused)
