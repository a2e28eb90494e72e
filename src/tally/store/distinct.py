"""Distinct counts on DynamoDB: one member item per counted member, written with the count it adds.

For a whole batch, after the counters' commit (``tally.pipeline``):

1. strongly consistent ``BatchGetItem``s of the member items the batch names, every key's together (100
   items a call): a member already counted costs this read and nothing else;
2. the new members, every key's together, in ``TransactWriteItems`` of at most 100 actions: a ``Put`` of
   each member item on the condition ``attribute_not_exists(pk)``, and per counter item (a key's all-time
   item, each window) one ``ADD dc#<set> :n`` of that transaction's members. Both or neither: a member item
   exists exactly when it was counted, so the count equals the number of member items, whatever else runs
   at the same time;
3. a transaction cancelled because a member item now exists (another invocation wrote it between our read
   and our write: ``ConditionalCheckFailed`` on its ``Put``) is sent again at once without the members that
   exist; one that fails for now (a conflict, throttling, a lost answer: its outcome unknown) raises
   ``RetryableStoreError``, and the caller's ``attempt`` sends it again (the post-commit step retries it under
   the commit's policy), which is safe for the same reason: a member it did count fails its condition the
   second time.

Why not ride in the counters' transaction or the journal: membership is idempotent (the member item is its
own marker), and a member's failed condition inside the counters' transaction would cancel their ADDs and
markers. A crash between the counters' commit and these writes is repaired by the redelivery, which finds
the markers (already applied) and writes the members again.

The count of a hot key (``HotKeys``) is added to one of its shard items, chosen per batch like its
counters' increments, and the reader sums the shards; the member items are per key, never sharded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.items import ALL_TIME, make_item
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.sharding import HotKeys
from tally.errors import RetryableStoreError, StoreError
from tally.store.expressions import add_expression, name_placeholder, value_placeholder
from tally.store.requests import RETRYABLE_REASONS, batch_get, send_once, translate
from tally.store.schema import (
    EXPIRES_AT,
    MEMBER_PARTITION_SUFFIX,
    PARTITION_KEY,
    distinct_attribute,
    item_key,
    member_key,
    member_of_item,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient

    from tally.core.distinct import MemberSet
    from tally.store.requests import Attempt

_CONDITION_FAILED: Final = "ConditionalCheckFailed"


class _Refused(StoreError):
    """A member transaction DynamoDB refuses for good (not retried): its keys are refused, or split."""


_Counted = tuple["MemberSet", str]
"""(set, member): one member of one set in one window."""


@dataclass(slots=True)
class _Sending:
    """One member transaction across its sends: what is left to count, and what the sends cost and counted."""

    pending: list[_Counted]
    calls: int = 0
    counted: int = 0


@dataclass(frozen=True, slots=True)
class DistinctWrite:
    """What writing a batch's members cost and did."""

    read: int
    """Member items looked up (one read unit each: strongly consistent, under 4 KB)."""
    transactions: int
    """``TransactWriteItems`` calls, retries included."""
    added: int
    """Members counted by this call (new member items written)."""
    unwritten: frozenset[str] = frozenset()
    """Keys some of whose new members may be uncounted (their transaction's attempts gave up): written again later."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Keys whose members DynamoDB refuses for good (e.g. the key's item is at the 400 KB item limit), and
    why: writing them again would fail again."""


class DynamoDBDistinctStore:
    """Writes distinct-count members and counts to the counters table."""

    def __init__(
        self,
        client: DynamoDBClient,
        counters_table: str,
        hot_keys: HotKeys | None = None,
        *,
        rng: random.Random | None = None,
        max_actions: int = TRANSACT_MAX_ACTIONS,
    ) -> None:
        self._client = client
        self._table = counters_table
        self._hot_keys = hot_keys or HotKeys()
        self._rng = rng or random.Random()
        self._max_actions = max_actions

    def write_members(
        self, members: Mapping[str, Mapping[MemberSet, frozenset[str]]], attempt: Attempt = send_once
    ) -> DistinctWrite:
        """Count the members of each key's sets that are not counted yet; returns what it cost, the keys
        whose members may be uncounted (``attempt`` gave up on their transaction: writing again is safe), and
        the keys DynamoDB refuses for good (a transaction of several keys refused so is sent again key by key,
        so that only the culprit is named). Each transaction is sent through ``attempt``.

        Raises ``RetryableStoreError`` when the member read fails (every key is then unwritten) or
        ``StoreError`` (the read refused: every key).
        """
        wanted = [
            (member_set, member)
            for sets in members.values()
            for member_set, names in sets.items()
            for member in sorted(names)
        ]
        keys = [member_key(s.key, s.window, s.name, member) for s, member in wanted]
        stored = {
            (item[PARTITION_KEY]["S"].removesuffix(MEMBER_PARTITION_SUFFIX), *member_of_item(item))
            for item in attempt(partial(batch_get, self._client, self._table, keys))
        }
        new = [(s, member) for s, member in wanted if (s.key, s.window, s.name, member) not in stored]
        shards = {key: self._rng.randrange(self._hot_keys.shards_for(key)) for key in members}
        transactions = added = 0
        unwritten: set[str] = set()
        refused: dict[str, str] = {}
        chunks = self._chunks(new)
        while chunks:
            chunk = chunks.pop(0)
            sending = _Sending(list(chunk))
            try:
                attempt(partial(self._send, shards, sending))
            except RetryableStoreError:
                unwritten.update(member_set.key for member_set, _ in chunk)
            except _Refused as exc:
                by_key: dict[str, list[_Counted]] = {}
                for counted_member in chunk:
                    by_key.setdefault(counted_member[0].key, []).append(counted_member)
                if len(by_key) > 1:  # which key refused is unknown: each alone, so only the culprit is refused
                    chunks[:0] = list(by_key.values())
                else:
                    refused.update(dict.fromkeys(by_key, str(exc)))
            transactions += sending.calls
            added += sending.counted
        return DistinctWrite(len(wanted), transactions, added, frozenset(unwritten), refused)

    def _chunks(self, new: Sequence[_Counted]) -> list[list[_Counted]]:
        """Transactions of at most ``max_actions``: each member's Put, and one ADD per counter item in it."""
        chunks: list[list[_Counted]] = []
        chunk: list[_Counted] = []
        items: set[tuple[str, str, int | None]] = set()
        for counted in new:
            item = (counted[0].key, counted[0].window, counted[0].expires_at_s)
            cost = 1 if item in items else 2
            if len(chunk) + len(items) + cost > self._max_actions:
                chunks.append(chunk)
                chunk, items = [], set()
            chunk.append(counted)
            items.add(item)
        if chunk:
            chunks.append(chunk)
        return chunks

    def _send(self, shards: Mapping[str, int], sending: _Sending) -> None:
        """Send the transaction of ``sending.pending`` until it commits or fails: a member counted meanwhile by
        another invocation is dropped and the rest sent again at once; a failure for now raises
        ``RetryableStoreError`` (the caller's ``attempt`` decides whether to send again), one for good
        ``_Refused``."""
        while sending.pending:
            sending.calls += 1
            try:
                self._client.transact_write_items(TransactItems=self._actions(shards, sending.pending))  # type: ignore[arg-type]
            except ClientError as exc:
                error = exc.response.get("Error", {})
                if error.get("Code") != "TransactionCanceledException":
                    failure = translate(exc)
                    if not isinstance(failure, RetryableStoreError):
                        raise _Refused(str(failure)) from exc
                    raise failure from exc
                reasons = [reason.get("Code") or "None" for reason in exc.response.get("CancellationReasons", [])]
                exists = {i for i, code in enumerate(reasons[: len(sending.pending)]) if code == _CONDITION_FAILED}
                if exists:  # counted by someone else since our read: send the rest
                    sending.pending = [counted for i, counted in enumerate(sending.pending) if i not in exists]
                    continue
                if not any(code in RETRYABLE_REASONS for code in reasons):
                    raise _Refused(str(translate(exc))) from exc
                raise RetryableStoreError("member transaction cancelled") from exc
            except BotoCoreError as exc:  # the answer was lost: it may have committed; the conditions tell
                raise translate(exc) from exc
            sending.counted += len(sending.pending)
            sending.pending = []

    def _actions(self, shards: Mapping[str, int], pending: Sequence[_Counted]) -> list[dict[str, Any]]:
        """The member Puts first (their positions name them in a cancellation), then one ADD per counter item."""
        actions: list[dict[str, Any]] = []
        counts: dict[tuple[str, str, int | None], dict[str, int]] = {}
        for member_set, member in pending:
            item: dict[str, Any] = dict(member_key(member_set.key, member_set.window, member_set.name, member))
            if member_set.expires_at_s is not None:
                item[EXPIRES_AT] = {"N": str(member_set.expires_at_s)}
            actions.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": item,
                        "ConditionExpression": "attribute_not_exists(#pk)",
                        "ExpressionAttributeNames": {"#pk": PARTITION_KEY},
                    }
                }
            )
            slot = counts.setdefault((member_set.key, member_set.window, member_set.expires_at_s), {})
            slot[member_set.name] = slot.get(member_set.name, 0) + 1
        for (key, window, expires_at_s), by_set in counts.items():
            target = make_item(key, window, shards[key], expires_at_s)
            names: dict[str, str] = {}
            values: dict[str, Any] = {}
            for index, (name, count) in enumerate(sorted(by_set.items())):
                names[name_placeholder(index)] = distinct_attribute(name)
                values[value_placeholder(index)] = {"N": str(count)}
            if expires_at_s is not None and window != ALL_TIME:
                names["#expires"] = EXPIRES_AT
                values[":expires"] = {"N": str(expires_at_s)}
            actions.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": item_key(target),
                        "UpdateExpression": add_expression(len(by_set), sets_expiry=":expires" in values),
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                }
            )
        return actions
