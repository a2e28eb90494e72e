"""Moving ended windows off a key's item into window items, exactly once.

A batch counts an event's hour, day and month windows on the key's own item (``w#<window id>\x1f<counter>``,
``tally.store.schema``), so it writes one item per key. Ended windows are later moved off it: a day to its
day item (``sk`` = ``d#...``, ``c#<counter>``, TTL of its retention), a month likewise to its month item
(``mo#...``), an hour to its day's item as a ``w#``
attribute beside the day's total (or, when the day item would not live as long as its hours, or days are
not counted, to an hour item of its own). Per key item, in ONE ``TransactWriteItems`` with other key items:

- an ``Update`` of the key's item: ``REMOVE`` of the ended windows' attributes, on the condition that each
  still equals the value read (``ReturnValuesOnConditionCheckFailure=ALL_OLD``);
- per window item, one ``ADD`` of the same values (its expiry set if not set yet, as a direct write would).
  A window past its retention is only removed: writing it would resurrect an expired counter
  (``WindowSpec.windows_of``).

Both or neither, so a window's counts are on the key's item or on a window item, never both and never
neither: readers add the two (``tally.reader``), before and after a move alike. The key item's ``REMOVE``
also adds 1 to its ``moves`` attribute, so that a reader whose requests a move fell between knows it and
reads again. A late event that changed an attribute between the read and the transaction fails the
condition: the item the cancellation returns is the new read, and the move is sent again from it. Each
send goes through the caller's ``Attempt`` (``tally.store.requests``): the window step's sends again under
the commit's retry policy while the invocation has time (``tally.post_commit``), and what it gives up on is
left for a later batch. Two containers moving the same window: one commits, the other's condition fails
(the attribute is gone) and it finds nothing left to move. A container whose clock runs fast may move a
window another container still adds to: that ADD re-creates the attribute, which a later move takes. So
correctness depends on no clock; only how soon a window leaves the key's item does.

Pointers: for each window unit with declared levels on a key (``@hour``, ``@day``, ``@month``), the key item's
``REMOVE`` also rewrites the unit's pointer to the newest window moved and its moved totals (``tally.core.moved``,
``MOVED_PREFIX``), on the condition that ``moves`` is still what was read: a late write of a thresholded window
then learns the window's moved part from the key item alone (``tally.store.dynamodb``), instead of reading its
window item too.

When: reads are exact wherever a window is, so moving is worth its writes only to keep the key's item small
(each batch's write of it is billed per KB) and to let TTL delete what has expired. Ended windows wait on
the item until one of them began before today (UTC) or the item reaches ``MOVE_AT_BYTES``, then move
together: per key and day about one key-item update and one day-item write, instead of two items per key
and hour.

Who: ``after_batch`` (the window step, ``tally.post_commit.windows``, after the commit, like gauges and distinct
members) checks the key items the batch just wrote that this container has not checked since the hour began (a
per-container memory, lost on a cold start: a second check costs a read, nothing more), with one
``BatchGetItem``, and moves what is due. A kill anywhere here leaves attributes that readers still count and a
later batch writing the key moves. ``close_all`` (``tally windows close``) moves every key's ended windows, for keys
no batch writes again.

Marks: a key item written by fenced journal batches carries their writer epochs' marks (``f#<epoch>``,
``tally.core.fence``). A move is a write the item gets anyway, so its ``REMOVE`` also takes the marks the container
knows may go (``marks_due``: the applier's ``prunable_marks``, from the headers it has read), each on the condition
that it still holds the value read; a mark that moved on cancels the move, which is planned again from the item the
cancellation returned, where that mark is no longer due.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from tally.core.batching import group
from tally.core.items import CounterItem, ItemKey, window_counter
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.moved import anchor_window, next_pointer
from tally.core.numbers import EXACT, to_wire
from tally.core.thresholds import NO_THRESHOLDS, CounterThresholds
from tally.core.windows import DAY_MS, HOUR_MS, MOVE_AT_BYTES, closed_windows, hours_on_day_items
from tally.errors import RetryableStoreError, StoreError
from tally.store.actions import add_update
from tally.store.requests import RETRYABLE_REASONS, batch_get, scan_all_time_items, send_once, translate
from tally.store.schema import (
    WINDOW_MOVES,
    counter_item_of,
    fence_attribute,
    fence_from_item,
    item_key,
    moved_pointer_attributes,
    moved_pointer_from_item,
    moved_pointer_values,
    moves_of,
    open_windows_from_item,
    window_attribute,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

    from tally.core.windows import EndedWindow, WindowSpec
    from tally.store.requests import Attempt

logger = logging.getLogger(__name__)


MAX_MOVED_ATTRIBUTES: Final = 100
"""Attributes one key item's ``REMOVE`` takes: its condition holds two operators each (``=``, ``AND``),
within DynamoDB's 300 per expression, and about 17 bytes each, within its 4 KB. More wait for the next move."""
MAX_REMEMBERED: Final = 200_000
"""Key items one container remembers having checked this hour (about 100 bytes each); beyond, it forgets all."""


@dataclass(frozen=True, slots=True)
class WindowsMoved:
    """What a move cost and did."""

    checked: int = 0
    """Key items read (``BatchGetItem``; strongly consistent, one read unit per 4 KB)."""
    moved_items: int = 0
    """Key items whose ended windows were moved (or, past retention, removed)."""
    windows: int = 0
    """(key item, window) pairs moved or removed."""
    window_items: int = 0
    """Window items written (each ``ADD`` of a move)."""
    transactions: int = 0
    """``TransactWriteItems`` calls, cancelled ones included."""
    left: int = 0
    """Key items whose ended windows are still on them (conditions kept failing, or a conflict): moved later."""

    def __add__(self, other: WindowsMoved) -> WindowsMoved:
        return WindowsMoved(
            self.checked + other.checked,
            self.moved_items + other.moved_items,
            self.windows + other.windows,
            self.window_items + other.window_items,
            self.transactions + other.transactions,
            self.left + other.left,
        )


@dataclass(slots=True)
class _Sending:
    """One group's move across its sends: the moves still to commit (re-planned after a refused condition),
    and the transactions sent."""

    group: list[_Move]
    calls: int = 0


@dataclass(frozen=True, slots=True)
class _Move:
    """One key item's move: the attributes removed (with the values read) and the window items added to."""

    item: CounterItem
    removed: Mapping[str, Decimal]
    """Attribute -> the value read (the condition)."""
    adds: tuple[tuple[CounterItem, Mapping[str, Decimal]], ...]
    """Window item -> what it gets: ``c#`` totals of its own window, ``w#`` attributes of the hours it keeps."""
    windows: int
    pointers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """The pointer attributes it sets on the key item (``tally.core.moved``): name -> wire value."""
    dropped: tuple[str, ...] = ()
    """The pointer attributes it removes (totals no longer kept, units without levels now)."""
    moves: Decimal | None = None
    """The key item's count of moves as read: the move's condition when it keeps a pointer (planned from it)."""
    pruned: Mapping[str, int] = field(default_factory=dict)
    """Writer epochs' marks the move removes (epoch -> the value read, its condition)."""

    @property
    def keeps_pointers(self) -> bool:
        return bool(self.pointers or self.dropped)


def plan_move(
    raw: Mapping[str, Any],
    windows: WindowSpec,
    now_ms: int,
    *,
    move_at_bytes: int = MOVE_AT_BYTES,
    thresholds: CounterThresholds = NO_THRESHOLDS,
    marks_due: Callable[[Mapping[str, int], int], Mapping[str, int]] | None = None,
) -> _Move | None:
    """What moving ``raw``'s ended windows writes; None when none has ended, or while none need move yet.

    Reads are exact wherever a window is, so a move is only worth its writes when it keeps the key's item
    small (every batch pays for its size, per KB) or lets TTL see a window: ended windows wait on the item,
    and go together, once one of them began before today (UTC; a day that has ended always did) or the item
    reaches ``move_at_bytes`` (0: as soon as one has ended, as ``close_all`` does). Ended hours go to their
    day's item as ``w#`` attributes beside the day's total when that item lives as long as they do
    (``hours_on_day_items``): one window item written for a day's hours, not one per hour. At most
    ``MAX_MOVED_ATTRIBUTES`` attributes and ``TRANSACT_MAX_ACTIONS - 1`` window items, oldest windows first: the rest
    waits for the next move.

    For each window unit with levels on the key (``thresholds``), the move also rewrites the unit's pointer
    (``tally.core.moved.next_pointer``) from the one read, and is then conditioned on the count of moves read.
    ``marks_due`` names the writer epochs' marks the move removes besides (see the module's docstring).
    """
    ended = closed_windows(open_windows_from_item(raw), windows, now_ms)
    if not ended:
        return None
    today = now_ms - now_ms % DAY_MS
    if move_at_bytes and _item_bytes(raw) < move_at_bytes and all(found.start_ms >= today for found in ended):
        return None  # only hours of today have ended, and the item is small: they wait
    item = counter_item_of(raw)
    on_days = hours_on_day_items(windows)
    day = windows.unit("day") if on_days else None
    removed: dict[str, Decimal] = {}
    adds: dict[CounterItem, dict[str, Decimal]] = {}
    taken: list[EndedWindow] = []
    for found in ended:
        if len(removed) + len(found.counters) > MAX_MOVED_ATTRIBUTES or len(adds) >= TRANSACT_MAX_ACTIONS - 1:
            break
        removed.update({window_attribute(found.window, name): value for name, value in found.counters.items()})
        taken.append(found)
        if not found.kept:
            continue  # past its retention: removed, never written (it would resurrect an expired counter)
        if day is not None and found.unit == "hour":
            day_start = day.start_ms(found.start_ms)
            target = CounterItem(item.key, day.window_id(day_start), item.shard, day.expires_at_s(day_start))
            named = {window_counter(found.window, name): value for name, value in found.counters.items()}
        else:
            target = CounterItem(item.key, found.window, item.shard, found.expires_at_s)
            named = dict(found.counters)
        into = adds.setdefault(target, {})
        for name, value in named.items():
            into[name] = EXACT.add(into.get(name, Decimal(0)), value)
    if not removed:
        return None
    due = dict(marks_due(fence_from_item(raw), now_ms)) if marks_due is not None else {}
    move = _Move(item, removed, tuple(adds.items()), len(taken), pruned=due)
    return _with_pointers(move, raw, taken, windows, thresholds, now_ms=now_ms) if thresholds.rules else move


def _with_pointers(
    move: _Move,
    raw: Mapping[str, Any],
    taken: Sequence[EndedWindow],
    windows: WindowSpec,
    thresholds: CounterThresholds,
    *,
    now_ms: int,
) -> _Move:
    """``move`` keeping the pointer of each window unit with levels on its key (``tally.core.moved``), and
    removing any other pointer attribute (a unit or counter whose levels are gone)."""
    pointers: dict[str, Mapping[str, str]] = {}
    moves = moves_of(raw)
    if move.item.shard == 0:  # a hot key's shards carry no levels (refused at configuration)
        for unit in windows.units:
            counters = thresholds.thresholds(move.item.key, unit.name) if unit.on_key_item else {}
            if not counters:
                continue
            moved = {found.window: found.counters for found in taken if found.unit == unit.name}
            read = moved_pointer_from_item(raw, unit.name)
            pointers.update(
                moved_pointer_values(unit.name, next_pointer(read, moves, moved, counters, anchor_window(unit, now_ms)))
            )
    dropped = tuple(name for name in moved_pointer_attributes(raw) if name not in pointers)
    if not pointers and not dropped:
        return move
    return replace(move, pointers=pointers, dropped=dropped, moves=moves)


def _item_bytes(raw: Mapping[str, Any]) -> int:
    """About what DynamoDB bills ``raw`` at: attribute names plus values (a number as its digits; close enough
    for a move's threshold, and ``tally.cost``, which bills exactly, is not shipped with the function)."""
    total = 0
    for name, value in raw.items():
        total += len(name.encode("utf-8"))
        for kind, data in value.items():
            total += len(data) if kind == "B" else len(str(data).encode("utf-8"))
    return total


class DynamoDBWindowMover:
    """Moves ended windows off key items on the counters table (see the module's docstring)."""

    def __init__(
        self,
        client: DynamoDBClient,
        counters_table: str,
        windows: WindowSpec,
        *,
        max_actions: int = TRANSACT_MAX_ACTIONS,
        move_at_bytes: int = MOVE_AT_BYTES,
        thresholds: CounterThresholds = NO_THRESHOLDS,
        marks_due: Callable[[Mapping[str, int], int], Mapping[str, int]] | None = None,
    ) -> None:
        self._marks_due = marks_due
        """Which writer epochs' marks a move may remove (the applier's ``prunable_marks``); None: none."""
        self._move_at_bytes = move_at_bytes
        """0: every ended window is moved as soon as a batch finds it (tests; ``close_all`` always does)."""
        self._client = client
        self._table = counters_table
        self._windows = windows
        self._thresholds = thresholds
        """Declared levels: a move keeps the pointer of each window unit with levels on its key
        (``tally.core.moved``)."""
        self._max_actions = max_actions
        self._checked: dict[ItemKey, int] = {}
        """Key item -> the start of the hour this container last checked it in."""
        self._unmoved: list[CounterItem] = []
        """The last ``move``'s key items whose ended windows are still on them (checked again next batch)."""

    @property
    def counts_on_key_items(self) -> bool:
        """Whether any window of the deployment is counted on key items (else there is never anything to move)."""
        return any(unit.on_key_item for unit in self._windows.units)

    def after_batch(self, items: Iterable[ItemKey], now_ms: int, attempt: Attempt = send_once) -> WindowsMoved:
        """Check the key items a batch wrote that this container has not checked since the hour began, and
        move their ended windows, each transaction sent through ``attempt``. Raises ``StoreError`` only for the
        read (the caller logs it and goes on)."""
        hour = now_ms - now_ms % HOUR_MS
        due = [item for item in dict.fromkeys(items) if self._checked.get(item) != hour]
        if not due:
            return WindowsMoved()
        raws = attempt(partial(batch_get, self._client, self._table, [item_key(item) for item in due]))
        moved = self.move(raws, now_ms, attempt=attempt)
        if len(self._checked) + len(due) > MAX_REMEMBERED:
            self._checked.clear()
        unmoved = set(self._unmoved)
        for item in due:
            if item not in unmoved:
                self._checked[item] = hour
        return WindowsMoved(checked=len(due)) + moved

    def close_all(self, now_ms: int, attempt: Attempt = send_once) -> WindowsMoved:
        """Move every key item's ended windows (a ``Scan`` of the key items): for keys no batch writes again."""
        total = WindowsMoved()
        page: list[Mapping[str, Any]] = []
        for raw in scan_all_time_items(self._client, self._table, views=True):
            total += WindowsMoved(checked=1)
            page.append(raw)
            if len(page) >= 1000:
                total += self.move(page, now_ms, every=True, attempt=attempt)
                page = []
        return total + self.move(page, now_ms, every=True, attempt=attempt)

    def move(
        self, raws: Iterable[Mapping[str, Any]], now_ms: int, *, every: bool = False, attempt: Attempt = send_once
    ) -> WindowsMoved:
        """Move the ended windows of these raw key items that need moving (``plan_move``; ``every``: all of
        them), in transactions of at most ``max_actions`` actions, each sent through ``attempt``."""
        self._unmoved = []
        limit = 0 if every else self._move_at_bytes
        moves = [
            move
            for raw in raws
            if (
                move := plan_move(
                    raw,
                    self._windows,
                    now_ms,
                    move_at_bytes=limit,
                    thresholds=self._thresholds,
                    marks_due=self._marks_due,
                )
            )
            is not None
        ]
        total = WindowsMoved()
        for moving in group(moves, self._max_actions, self._max_actions, lambda move: 1 + len(move.adds)):
            total += self._move_group(moving, now_ms, attempt)
        return total

    # ------------------------------------------------------------------------------------------- helpers
    def _move_group(self, moving: list[_Move], now_ms: int, attempt: Attempt) -> WindowsMoved:
        sending = _Sending(moving)
        try:
            attempt(partial(self._commit, sending, now_ms))
        except StoreError as exc:  # given up for now (retries or time ran out), or refused for good
            logger.warning("window move not done; left for a later batch: %s", exc)
            self._unmoved.extend(move.item for move in sending.group)
            return WindowsMoved(transactions=sending.calls, left=len(sending.group))
        return WindowsMoved(
            moved_items=len(sending.group),
            windows=sum(move.windows for move in sending.group),
            window_items=sum(len(move.adds) for move in sending.group),
            transactions=sending.calls,
        )

    def _commit(self, sending: _Sending, now_ms: int) -> None:
        """Send ``sending.group``'s transaction once. Cancelled, its moves are re-planned from what the
        cancellation returned (``_after_cancellation``) and ``RetryableStoreError`` raises for the caller's
        ``attempt`` to send them again, unless nothing is left to move; any other failure raises as translated
        (a lost answer is retryable: a move that did commit fails its condition the second time, and its
        re-plan finds nothing left)."""
        sending.calls += 1
        actions: list[TransactWriteItemTypeDef] = []
        owners: list[int] = []  # the position in the group of each action's move
        for position, move in enumerate(sending.group):
            actions.append(self._remove(move))
            owners.append(position)
            for target, counters in move.adds:
                update, _ = add_update(self._table, target, counters)
                actions.append(update)
                owners.append(position)
        try:
            self._client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            reasons: Sequence[Mapping[str, Any]] = exc.response.get("CancellationReasons", [])
            if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException" or not reasons:
                raise translate(exc) from exc
            sending.group = self._after_cancellation(sending.group, owners, reasons, now_ms)
            if sending.group:
                raise RetryableStoreError("window move cancelled (a late event, another move, a conflict)") from exc
        except BotoCoreError as exc:
            raise translate(exc) from exc

    def _after_cancellation(
        self, group: list[_Move], owners: Sequence[int], reasons: Sequence[Mapping[str, Any]], now_ms: int
    ) -> list[_Move]:
        """The moves to try again: a key item whose condition failed is re-planned from the item the
        cancellation returned (a late event's ADD, or another container's move); the others as they were."""
        again: list[_Move] = []
        replanned: dict[int, _Move | None] = {}
        for owner, reason in zip(owners, reasons, strict=False):
            code = reason.get("Code") or "None"
            if code == "ConditionalCheckFailed" and "Item" in reason:
                replanned[owner] = plan_move(
                    reason["Item"],
                    self._windows,
                    now_ms,
                    move_at_bytes=0,
                    thresholds=self._thresholds,
                    marks_due=self._marks_due,
                )
            elif code == "ConditionalCheckFailed":
                replanned[owner] = None  # the key item is gone: nothing left to move
            elif code not in RETRYABLE_REASONS and code != "None":
                logger.warning("window move refused (%s): %s", code, reason.get("Message", ""))
                replanned[owner] = None
                self._unmoved.append(group[owner].item)
        for position, move in enumerate(group):
            if position in replanned:
                found = replanned[position]
                if found is not None:
                    again.append(found)
            else:
                again.append(move)
        return again

    def _remove(self, move: _Move) -> TransactWriteItemTypeDef:
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        conditions: list[str] = []
        for index, (attribute, value) in enumerate(move.removed.items()):
            names[f"#w{index}"] = attribute
            values[f":w{index}"] = {"N": to_wire(value)}
            conditions.append(f"#w{index} = :w{index}")
        for index, (epoch, mark) in enumerate(move.pruned.items()):
            names[f"#f{index}"] = fence_attribute(epoch)
            values[f":f{index}"] = {"N": str(mark)}
            conditions.append(f"#f{index} = :f{index}")
        removed = list(names)
        for index, attribute in enumerate(move.dropped):
            names[f"#d{index}"] = attribute
            removed.append(f"#d{index}")
        sets: list[str] = []
        for index, (attribute, wire) in enumerate(move.pointers.items()):
            names[f"#p{index}"] = attribute
            values[f":p{index}"] = wire
            sets.append(f"#p{index} = :p{index}")
        # The key item's count of moves goes up in the same action: a series read spanning it starts over.
        names["#moves"] = WINDOW_MOVES
        values[":one"] = {"N": "1"}
        if move.keeps_pointers:  # the pointers were planned from the count read: it must not have moved since
            if move.moves is None:
                conditions.append("attribute_not_exists(#moves)")
            else:
                values[":moves"] = {"N": to_wire(move.moves)}
                conditions.append("#moves = :moves")
        expression = f"REMOVE {', '.join(removed)} ADD #moves :one" + (f" SET {', '.join(sets)}" if sets else "")
        return {
            "Update": {
                "TableName": self._table,
                "Key": item_key(move.item),
                "UpdateExpression": expression,
                "ConditionExpression": " AND ".join(conditions),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
