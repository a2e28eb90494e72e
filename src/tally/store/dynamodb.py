"""The DynamoDB counter store: direct transactions, and reads of counters and markers.

A direct transaction commits a chunk of messages in one ``TransactWriteItems``: a conditional marker
``Put`` per message and one ``ADD`` per key, all or nothing. Larger units of a batch go through the
commit journal (``tally.store.journal``); both share the item schema in ``tally.store.schema``.
"""

from __future__ import annotations

import threading
from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.bounds import NO_BOUNDS, CounterBounds, bound_checks
from tally.core.defaults import NO_DEFAULTS, CounterDefaults
from tally.core.items import item_parts, split_window_counter
from tally.core.ledger import Claim, MarkerRecord
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.moved import moved_part
from tally.core.numbers import EXACT
from tally.core.plan import ConditionRefusedError
from tally.core.sharding import HotKeys
from tally.core.thresholds import (
    NO_THRESHOLDS,
    CounterThresholds,
    crossing_free,
    crossings,
    exact_checks,
    reset_counters,
    window_reads,
    window_unit,
)
from tally.core.windows import WindowSpec
from tally.errors import WriteRejectedError
from tally.store.actions import MovesSeen, add_update, bound_check, replaced_batch_check
from tally.store.expressions import condition_fits
from tally.store.markers import marker_actions, marker_id, marker_records
from tally.store.notifications import notification_put
from tally.store.requests import batch_get, translate
from tally.store.schema import (
    ALL_TIME,
    LEDGER_ID,
    PARTITION_KEY,
    SORT_KEY,
    WINDOW_MOVES,
    counters_from_item,
    item_counters,
    item_key,
    moved_pointer_attributes,
    moved_pointer_from_item,
)
from tally.store.windows import moved_home, moves_of

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from tally.core.items import ItemKey
    from tally.core.numbers import Number
    from tally.core.plan import Chunk
    from tally.core.resets import OperatorStamp
    from tally.store.actions import Role

__all__ = [
    "ALL_TIME",
    "COUNTER_PREFIX",
    "PARTITION_KEY",
    "SORT_KEY",
    "DynamoDBCounterStore",
    "MarkerRecord",
    "counters_from_item",
]

from tally.store.schema import COUNTER_PREFIX

POINTERS_WINDOW = "pointers window"
NEWER_WINDOW = "newer window"
WINDOW_ITEM = "window item"

MAX_REMEMBERED_SNAPSHOTS = 10_000
"""Key items whose moves and pointers one store remembers for a write's next attempt; beyond, it forgets all
(a forgotten one is read again)."""


class DynamoDBCounterStore:
    """Counter store on two DynamoDB tables; the client is injected so tests and local runs can point it."""

    def __init__(
        self,
        client: DynamoDBClient,
        counters_table: str,
        markers_table: str,
        marker_ttl_seconds: int,
        hot_keys: HotKeys | None = None,
        *,
        defaults: CounterDefaults = NO_DEFAULTS,
        bounds: CounterBounds = NO_BOUNDS,
        thresholds: CounterThresholds = NO_THRESHOLDS,
        notifications_table: str | None = None,
        windows: WindowSpec | None = None,
    ) -> None:
        if thresholds.rules and not notifications_table:
            raise ValueError("declared thresholds need a notifications table")
        self.windows = windows or WindowSpec()
        """The windows counted (``TALLY_WINDOWS``): where a move puts an ended window (``moved_home``), which a
        per-window threshold's write reads."""
        counted = {unit.name for unit in self.windows.units}
        missing = {rule.window for rule in thresholds.rules} - counted - {ALL_TIME}
        if missing:
            raise ValueError(f"per-window thresholds need their windows counted: {', '.join(sorted(missing))}")
        self.thresholds = thresholds
        """Declared levels (``tally.core.thresholds``): a thresholded counter's write carries a crossing
        condition, and, planned from the values a refused one met, the crossings it makes."""
        self.notifications_table = notifications_table or ""
        self.hot_keys = hot_keys or HotKeys()
        self.defaults = defaults
        """Declared start values (``tally.core.defaults``): the all-time ADD of such a counter starts there."""
        self.bounds = bounds
        """Declared floors and ceilings (``tally.core.bounds``): a bounded counter's write is conditional."""
        self.client = client
        self.counters_table = counters_table
        self.markers_table = markers_table
        self.marker_ttl_seconds = marker_ttl_seconds
        self._snapshots: dict[ItemKey, tuple[int, Mapping[str, Any]]] = {}
        """Key item -> (the batch's clock, its count of moves and pointers as last read or returned by a
        refusal) (``_moved_parts``): the batch's next write of the key reads no key item."""
        self.window_item_reads = 0
        """Window items read for a moved part the key item's pointers could not say (``_moved_parts``)."""
        self.moved_part_sources: Counter[str] = Counter()
        """How each moved part a write needed was known: ``POINTERS_WINDOW``, ``NEWER_WINDOW`` (said by the key
        item's pointer) or ``WINDOW_ITEM`` (read)."""
        self._counting = threading.Lock()

    def write_direct(self, chunk: Chunk, now_ms: int) -> None:
        """Commit one chunk atomically: all its markers and all its increments, or nothing.

        Raises ``MarkersExistError`` naming the messages that already have markers (with the batch and
        content digest of each), ``RetryableStoreError`` for throttling, conflicts and unknown outcomes,
        ``WriteRejectedError`` when DynamoDB refuses an increment itself, ``ConditionRefusedError`` when a
        bounded or thresholded counter's condition fails (``tally.core.bounds``: some step of the chunk's messages, in
        their order, would cross a floor or a ceiling).
        """
        expires_at = now_ms // 1000 + self.marker_ttl_seconds
        claims = [
            Claim(message.message_id, chunk.replaces.get(message.message_id), message.digest)
            for message in chunk.messages
        ]
        # Markers naming the spill's batch, when crossings did not fit: they commit its pages (``Spill``).
        spill = chunk.spill
        actions = marker_actions(
            self.markers_table, claims, now_ms, expires_at, batch_id=spill.batch_id if spill is not None else None
        )
        # A marker naming a journal batch is replaced only while that batch is certainly aborted, or its header
        # gone past its horizon: the same check as a journal claim's, once per batch (one action per item).
        actions += [replaced_batch_check(self.markers_table, batch) for batch in dict.fromkeys(chunk.replaces.values())]
        operator = any(message.stamp is not None for message in chunk.messages)
        steps = [message.totals for message in chunk.messages]
        # An operator's reset or correction is applied as given: a bound does not refuse it
        # (docs/explanation/counter-patterns.md). A level's condition refuses nothing for good: a write that would
        # cross one is sent again from the value it met, recording the crossing, whoever's message made it.
        checks = {} if operator else bound_checks(steps, self.bounds, self.defaults)
        resets = reset_counters(chunk.messages, self.thresholds) if self.thresholds.rules else {}
        before = chunk.before
        unread = [item for item in resets if item not in before]
        if unread:
            before = {**self._values_of(unread), **before}
        reads = window_reads(steps, self.thresholds, now_ms) if self.thresholds.rules else {}
        parts, moves = self._moved_parts(reads, now_ms) if reads else ({}, {})
        free = crossing_free(steps, self.thresholds, self.defaults, parts=parts)
        exact = (
            exact_checks(steps, self.thresholds, before, self.defaults, parts=parts, resets=resets) if before else {}
        )
        free = {item: levels for item, levels in free.items() if item not in exact}
        sets, stamps = _operator_writes(chunk)
        written = list(dict.fromkeys([*chunk.increments, *sets, *stamps]))
        table = self.counters_table
        actions += [
            add_update(
                table,
                item,
                chunk.increments.get(item, {}),
                self.defaults.starts(item_parts(item).key),
                checks.get(item, ()),
                sets=sets.get(item),
                stamp=stamps.get(item) if isinstance(item, str) else None,
                free=free.get(item, ()),
                exact=exact.get(item, ()),
                moves=moves.get(item),
            )
            for item in written
        ]
        # A bounded or thresholded item whose steps net to zero in this chunk is still checked (the planner
        # counted its action).
        actions += [
            bound_check(table, key, checks.get(key, ()), free.get(key, ()), exact.get(key, ()), moves=moves.get(key))
            for key in dict.fromkeys([*checks, *free, *exact])
            if key not in written
        ]
        if before:
            found = crossings(chunk.messages, self.thresholds, before, self.defaults, at_ms=now_ms)
            paged = spill.paged if spill is not None else frozenset()
            actions += [
                notification_put(self.notifications_table, crossing, expires_at)
                for crossing in found
                if crossing.notification_id not in paged
            ]
        if len(actions) > TRANSACT_MAX_ACTIONS:
            # The protocol leaves room for every action (``transaction_actions``, ``Spill``): refuse as DynamoDB
            # would rather than send what it refuses, so the message is settled (dead-lettered) like any refusal.
            raise WriteRejectedError(
                f"{len(actions)} actions in one transaction (DynamoDB takes {TRANSACT_MAX_ACTIONS})", number_range=False
            )
        if any(role.kind == "add" and not _fits(action) for action, role in actions):
            raise WriteRejectedError(
                "a crossing condition over DynamoDB's 300 operators or 4 KB per expression (a thresholded counter "
                "moved in too many windows by one write)",
                number_range=False,
            )
        try:
            self.client.transact_write_items(TransactItems=[action for action, _ in actions])
        except (ClientError, BotoCoreError) as exc:
            error = translate(exc, [role for _, role in actions])
            if isinstance(error, ConditionRefusedError):
                met = self._refused_snapshots(exc, [role for _, role in actions], reads, now_ms)
                error = ConditionRefusedError(
                    {
                        item: self._as_met(item, stored, {**parts.get(item, {}), **met.get(item, {})})
                        for item, stored in error.stored.items()
                    }
                )
            raise error from exc

    def _as_met(self, item: ItemKey, stored: Mapping[str, Decimal], moved: Mapping[str, Number]) -> dict[str, Decimal]:
        """A refused item's counters as its condition met them: a missing counter holds its start value (on a
        key's all-time item only: windows count from zero), and an ended window's value is what the key item
        holds plus the part this attempt read as moved (``_moved_parts``; if a move came between, that sum is
        stale, and the write planned from it fails its exact condition and is planned again)."""
        parts = item_parts(item)
        starts = self.defaults.starts(parts.key) if parts.window == ALL_TIME and parts.shard == 0 else {}
        met = {**{name: Decimal(start) for name, start in starts.items()}, **stored}
        for name, part in moved.items():
            met[name] = EXACT.add(met.get(name, Decimal(0)), Decimal(part))
        return met

    def _moved_parts(
        self, reads: Mapping[ItemKey, Sequence[str]], now_ms: int
    ) -> tuple[dict[ItemKey, dict[str, Number]], dict[ItemKey, MovesSeen]]:
        """The parts of ended thresholded windows already moved onto window items (key item -> window counter
        -> value), and each key item's count of moves as read with them.

        The key items first, strongly consistent: each one's count of moves and its pointers
        (``tally.core.moved``) say the moved part of a window newer than, or equal to, its unit's pointer. Only
        a window they cannot say (an older one, a pointer some move did not keep) has its window item read,
        after, strongly consistent too: a move that commits after the first read has added to the count the
        write is conditioned on, so the write fails and is planned again; one that committed before it is in
        both reads. A key item this batch (``now_ms``, the batch's clock) has already read, or had returned by
        a refusal (``ALL_OLD``), is not read again: what it said of a window stays true while its count of moves
        does, which the write is conditioned on (an attempt after a refusal, a chunk split to make room for its
        notifications, reads no key item)."""
        snapshots: dict[ItemKey, Mapping[str, Any]] = {}
        unread: list[ItemKey] = []
        for item in reads:
            taken_ms, known = self._snapshots.get(item, (None, None))
            if known is None or taken_ms != now_ms:
                unread.append(item)
            else:
                snapshots[item] = known
        if unread:
            found = {
                (raw[PARTITION_KEY]["S"], raw[SORT_KEY]["S"]): raw
                for raw in batch_get(self.client, self.counters_table, map(item_key, unread))
            }
            for item in unread:
                primary = item_key(item)  # a view's items share a partition key: the sort key tells them apart
                snapshots[item] = self._remember(
                    item, found.get((primary[PARTITION_KEY]["S"], primary[SORT_KEY]["S"]), {}), now_ms
                )
        moves = {item: MovesSeen(moves_of(snapshots[item])) for item in reads}
        parts: dict[ItemKey, dict[str, Number]] = {}
        homes: dict[tuple[ItemKey, str], tuple[tuple[str, str], str]] = {}
        wanted: dict[tuple[str, str], Mapping[str, Any]] = {}
        for item, names in reads.items():
            known_parts, unknown = self._known_parts(snapshots[item], names)
            parts[item] = dict(known_parts)
            for name in unknown:
                window, counter = split_window_counter(name) or ("", name)
                home, attribute = moved_home(item_parts(item).key, window, counter, self.windows)
                primary = item_key(home)
                where = (primary[PARTITION_KEY]["S"], primary[SORT_KEY]["S"])
                wanted[where] = primary
                homes[(item, name)] = (where, attribute)
        with self._counting:
            self.window_item_reads += len(wanted)
        stored = (
            {
                (raw[PARTITION_KEY]["S"], raw[SORT_KEY]["S"]): raw
                for raw in batch_get(self.client, self.counters_table, list(wanted.values()))
            }
            if wanted
            else {}
        )
        for (item, name), (where, attribute) in homes.items():
            value = stored.get(where, {}).get(attribute)
            parts[item][name] = Decimal(value["N"]) if value is not None else 0
        return parts, moves

    def _known_parts(self, snapshot: Mapping[str, Any], names: Iterable[str]) -> tuple[dict[str, Number], list[str]]:
        """What a key item's snapshot says of its windows' moved parts (``moved_part``): (window counter -> part,
        the window counters it cannot say). Counted in ``moved_part_sources``."""
        moves = moves_of(snapshot)
        known: dict[str, Number] = {}
        unknown: list[str] = []
        sources: Counter[str] = Counter()
        for name in names:
            window, counter = split_window_counter(name) or ("", name)
            unit = window_unit(window)
            pointer = moved_pointer_from_item(snapshot, unit) if unit else None
            part = moved_part(pointer, moves, window, counter) if pointer is not None else None
            if part is None:
                unknown.append(name)
                sources[WINDOW_ITEM] += 1
            else:
                known[name] = part
                sources[POINTERS_WINDOW if pointer is not None and pointer.window == window else NEWER_WINDOW] += 1
        with self._counting:
            self.moved_part_sources.update(sources)
        return known, unknown

    def _remember(self, item: ItemKey, raw: Mapping[str, Any], now_ms: int) -> Mapping[str, Any]:
        """Keep what a key item's read or refusal said of its moves (its count and pointers) for the batch's
        next write of it."""
        snapshot = {name: raw[name] for name in [WINDOW_MOVES, *moved_pointer_attributes(raw)] if name in raw}
        if len(self._snapshots) >= MAX_REMEMBERED_SNAPSHOTS:
            self._snapshots.clear()
        self._snapshots[item] = (now_ms, snapshot)
        return snapshot

    def _refused_snapshots(
        self, exc: Exception, roles: Sequence[Role], reads: Mapping[ItemKey, Sequence[str]], now_ms: int
    ) -> dict[ItemKey, dict[str, Number]]:
        """The moved parts a refusal's ``ALL_OLD`` says (key item -> window counter -> part), each such item
        remembered for the next attempt: its value is then ``ALL_OLD``'s attribute plus a part of the same snapshot."""
        if not isinstance(exc, ClientError):
            return {}
        said: dict[ItemKey, dict[str, Number]] = {}
        for role, reason in zip(roles, exc.response.get("CancellationReasons", []), strict=False):
            item = role.item
            if role.kind != "add" or item is None or item not in reads or "Item" not in reason:
                continue
            snapshot = self._remember(item, reason["Item"], now_ms)
            said[item] = self._known_parts(snapshot, reads[item])[0]
        return said

    def _values_of(self, items: Sequence[ItemKey]) -> dict[ItemKey, dict[str, Decimal]]:
        """The counters of ``items`` as a write planned from them meets them (``_as_met``; an item not there yet
        holds its start values), read strongly consistent: what a reset of a thresholded counter is planned from
        (the write is then conditioned on exactly these values)."""

        def primary(key: Mapping[str, Any]) -> tuple[str, str]:  # a key's window items share its partition key
            return key[PARTITION_KEY]["S"], key[SORT_KEY]["S"]

        found = {
            primary(raw): raw for raw in batch_get(self.client, self.counters_table, [item_key(item) for item in items])
        }
        return {item: self._as_met(item, item_counters(found.get(primary(item_key(item)), {})), {}) for item in items}

    def read_markers(self, message_ids: Sequence[str]) -> dict[str, MarkerRecord]:
        """The markers that exist among ``message_ids`` (eventually consistent ``BatchGetItem``s of 100).

        Read before writing so that a batch's redelivered or re-sent messages do not cancel, and waste,
        whole transactions: a read unit costs a fifth of a write unit. The read is only advice, so it is
        eventually consistent, at half the read units: the conditional marker writes are what guard
        exactly-once. A marker the read misses cancels one transaction (whose cancellation reasons,
        strongly consistent, then name it); a stale marker of an aborted batch that has since been
        replaced fails the replacing claim's condition the same way.
        """
        by_item: dict[str, list[str]] = {}
        for message_id in message_ids:
            by_item.setdefault(marker_id(message_id), []).append(message_id)
        keys = ({LEDGER_ID: {"S": item_id}} for item_id in by_item)  # a block is asked for once
        found: dict[str, MarkerRecord] = {}
        for item in batch_get(self.client, self.markers_table, keys, consistent=False):
            found.update(marker_records(item, by_item[item[LEDGER_ID]["S"]]))
        return found

    def read_marker(self, message_id: str) -> MarkerRecord | None:
        """The marker of ``message_id``, if it has one (strongly consistent)."""
        try:
            response = self.client.get_item(
                TableName=self.markers_table,
                Key={LEDGER_ID: {"S": marker_id(message_id)}},
                ConsistentRead=True,
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc) from exc
        item = response.get("Item")
        return None if item is None else marker_records(item, [message_id]).get(message_id)


def _operator_writes(chunk: Chunk) -> tuple[dict[ItemKey, Mapping[str, Number]], dict[ItemKey, OperatorStamp]]:
    """What a chunk's reset or correction writes beside its ADDs: the items a reset sets (and to what), and the
    operator's record, on the key's own all-time item (also when a hot key's correction lands on a shard). Each
    rides in its item's one action (a transaction takes one action per item)."""
    sets: dict[ItemKey, Mapping[str, Number]] = {}
    stamps: dict[ItemKey, OperatorStamp] = {}
    for message in chunk.messages:
        sets.update(message.sets)
        if message.stamp is not None:
            stamps[message.stamp.key] = message.stamp
    return sets, stamps


def _fits(action: TransactWriteItemTypeDef) -> bool:
    body: Mapping[str, Any] = action.get("Update") or action.get("ConditionCheck") or {}
    return condition_fits(str(body.get("ConditionExpression", "")))
