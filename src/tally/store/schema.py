"""The item schema of tally's two tables: keys, attribute names, and reading attributes back into values.

Counters table: one item per key, ``pk`` = the counter key, ``sk`` = ``"all"`` for all-time values; each
named counter is a Number attribute ``c#<name>`` (the prefix keeps any user counter name clear of the key
attributes). An open hour or day window's counter is ``w#<window id>\x1f<name>`` on the same item
(``w#h#2026-11-22T03:00Z\x1fcount``: so a batch writes one item per key) until the window has ended
and ``tally.store.windows`` moves it to the window's own item (``sk`` = the window id, ``c#<name>``, TTL).
Gauges live on the key's all-time item too: ``max#<name>``, ``min#<name>``,
``latest#<name>`` (Number, or String for a latest text) with ``latest_order#<name>`` (Binary). Distinct
counts are ``dc#<set>`` on the key's all-time and window items (on a hot key, on its shards: the
reader sums them), and each counted member is an item of its own in the key's member partition
``<key>\x1fd`` (``member_key``; written by ``tally.store.distinct``).

Markers table (the idempotency ledger), partition key ``id`` with a prefix per kind of item:

- ``m#<message id>``: a message's marker. Without ``batch`` it was written in the same transaction as
  the message's deltas (a direct transaction). With ``batch`` it belongs to that journal batch and counts
  as applied exactly when that batch is COMMITTED or DONE. ``digest`` (Binary, 16 bytes) is the digest of
  the content it counts (``tally.core.digest``); markers written before digests existed have none.
  ``placed_at`` (epoch ms), only on the marker of a message with an event without ``ts`` that counted in a
  window: the receive time that placed it there, which a later delivery archives (``tally.core.archive``).
- ``s#<session>#<block>``: the markers of numbered messages ``<session>.<seq>``
  (``tally.core.numbered_ids``) whose ``seq // 16`` is ``block``, one per attribute: ``<seq % 16>`` (Binary:
  the applied time, 6 bytes of epoch ms, then the 16-byte digest if any), for a journal claim
  ``b<seq % 16>`` (the batch), and ``p<seq % 16>`` (Binary, 6 bytes of epoch ms) where an ``m#`` marker would
  have ``placed_at``. Each says what an ``m#`` marker says about its message
  (``marker_records`` reads both kinds into the same ``MarkerRecord``).
- ``b#<batch id>``: a journal header (``state``, ``lease_until``, ``chunks``).
- ``b#<batch id>#p<i>``: page ``i`` of a committed batch, the encoded increments of apply chunk ``i`` (``data``),
  or the crossings it records (``crossings``: a message whose crossings did not fit the transaction that
  committed it).
- ``b#<batch id>#a<i>``: the record that apply chunk ``i`` was applied.

Every item carries ``expires_at`` (epoch seconds, the table's TTL attribute).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from tally.core.items import (
    ALL_TIME,
    SHARD_SEPARATOR,
    WINDOW_COUNTER_MARK,
    CounterItem,
    ItemKey,
    item_parts,
    view_item_key,
    view_parts,
    window_counter,
)
from tally.core.moved import MovedPointer
from tally.core.numbers import to_wire
from tally.core.windows import UNITS
from tally.core.write import ItemRead

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef

RawItem: TypeAlias = "Mapping[str, AttributeValueTypeDef]"
"""An item as DynamoDB sends it (a read's, or a refused condition's ``ALL_OLD``): attribute name -> typed value."""

__all__ = ["ALL_TIME"]  # re-exported: the sort key value of all-time items

PARTITION_KEY: Final = "pk"


SORT_KEY: Final = "sk"


COUNTER_PREFIX: Final = "c#"


WINDOW_PREFIX: Final = "w#"
"""An open window's counter on a key's item: ``w#<window id>\x1f<counter>`` (``counter_attribute``)."""
WINDOW_MOVES: Final = "moves"
"""How many window moves have taken attributes off a key item (Number, absent: none): each move's ``REMOVE``
adds 1 in the same action, so a reader that reads the key item before and after its window items knows
whether a move committed in between (``tally.reader``'s series)."""
MOVED_PREFIX: Final = "mp#"
"""A window unit's pointer on a key's item (``tally.core.moved``), kept by ``tally.store.windows`` for the units
with per-window levels on that key only: ``mp#<unit>`` (String: the newest window of the unit moved),
``mp#<unit>\x1f<counter>`` (Number: the total moved so far for it, per counter with levels), and
``mpk#<unit>`` (Number: the count of moves right after the last move that kept it)."""
MOVED_KEPT_PREFIX: Final = "mpk#"


LEDGER_ID: Final = "id"


EXPIRES_AT: Final = "expires_at"


MARKER_APPLIED_AT: Final = "applied_at"


MARKER_BATCH: Final = "batch"


MARKER_DIGEST: Final = "digest"


MARKER_PLACED_AT: Final = "placed_at"


HEADER_STATE: Final = "state"


HEADER_LEASE_UNTIL: Final = "lease_until"


HEADER_CHUNKS: Final = "chunks"
HEADER_DONE_AT: Final = "done_at"
"""When a fenced batch was marked DONE (epoch ms, the marker's clock): its marks may go a horizon later."""


PAGE_DATA: Final = "data"


PAGE_CROSSINGS: Final = "crossings"
"""A crossing page's attribute, in place of ``data``: the crossings its apply chunk records (``encode_crossings``)."""


APPLIED_REFUSED: Final = "refused"


def header_id(batch_id: str) -> str:
    return "b#" + batch_id


FENCE_PREFIX: Final = "f#"
"""An epoch's mark on a counter item: ``f#<epoch>`` = the sequence and part of the last batch part it applied there
(``tally.core.fence``), beside the ``c#`` counters."""


def fence_attribute(epoch: str) -> str:
    return FENCE_PREFIX + epoch


def fence_from_item(item: RawItem) -> dict[str, int]:
    """The epochs' marks of a raw counter item: epoch -> value."""
    return {
        name[len(FENCE_PREFIX) :]: int(value["N"])
        for name, value in item.items()
        if name.startswith(FENCE_PREFIX) and "N" in value
    }


def page_id(batch_id: str, index: int) -> str:
    return f"b#{batch_id}#p{index}"


def applied_id(batch_id: str, index: int) -> str:
    return f"b#{batch_id}#a{index}"


VIEW_PARTITION_MARK: Final = SHARD_SEPARATOR + "v" + SHARD_SEPARATOR
"""A view's items live in partition ``<key>v<view>`` (and a hot view's shard ``n`` in
``<key>v<view><n>``), sort key ``<window><value><value>...``: one item collection per key and
view, so a ``Query`` on a window's prefix (``all``, ``d#2026-11-22``) lists every value counted there. A
sort key is never ``all`` alone (``top``'s scan skips them), and the partition apart from the key's own (a
``series`` query never meets them). Partition keys stay apart: a key never holds U+001F, and after
``<key>`` a shard is a number, a member partition ``d``, a view ``v``."""


def item_where(key: Mapping[str, Any]) -> tuple[str, str]:
    """(pk, sk) of an item's key or of the item itself: a key's window items share its partition key, so two
    ``ItemKey``s may name one item, which a ``BatchGetItem`` must ask for once."""
    return key[PARTITION_KEY]["S"], key[SORT_KEY]["S"]


def item_key(item: ItemKey) -> dict[str, Any]:
    """The primary key of a counter item: shards get their own partition key, windows their sort key; a view's
    item (``tally.core.items.view_item_key``) its view's partition (``VIEW_PARTITION_MARK``)."""
    parts = item_parts(item)
    view = view_parts(parts.key)
    if view is not None:
        partition = view_partition(view.key, view.view, parts.shard)
        return {PARTITION_KEY: {"S": partition}, SORT_KEY: {"S": view_sort_key(parts.window, view.values)}}
    partition = parts.key if parts.shard == 0 else f"{parts.key}{SHARD_SEPARATOR}{parts.shard}"
    return {PARTITION_KEY: {"S": partition}, SORT_KEY: {"S": parts.window}}


def view_partition(key: str, view: str, shard: int = 0) -> str:
    """The partition holding ``key``'s items in ``view`` (shard ``shard`` of it: 0 for a view not hot)."""
    partition = key + VIEW_PARTITION_MARK + view
    return partition if shard == 0 else f"{partition}{SHARD_SEPARATOR}{shard}"


def view_sort_key(window: str, values: Sequence[str]) -> str:
    """The sort key of a view's item for ``values`` in ``window`` (``all``: all-time)."""
    return window + SHARD_SEPARATOR + SHARD_SEPARATOR.join(values)


def view_window_prefix(window: str) -> str:
    """What every sort key of a view's items in ``window`` starts with (a ``Query``'s ``begins_with``)."""
    return window + SHARD_SEPARATOR


def counter_item_of(raw: Mapping[str, Any]) -> CounterItem:
    """The ``CounterItem`` of a raw counter item (a key's, a shard's, a window's, a view's): ``item_key``'s
    inverse. ``ValueError`` for an item that is not a counter item (a distinct-count member)."""
    partition, sort = raw[PARTITION_KEY]["S"], raw[SORT_KEY]["S"]
    key, _, rest = partition.partition(SHARD_SEPARATOR)
    if not rest:
        return CounterItem(key, sort)
    if rest.isdigit():
        return CounterItem(key, sort, int(rest))
    if rest.startswith("v" + SHARD_SEPARATOR):
        view, _, shard = rest[2:].partition(SHARD_SEPARATOR)
        window, _, values = sort.partition(SHARD_SEPARATOR)
        return CounterItem(view_item_key(view, key, tuple(values.split(SHARD_SEPARATOR))), window, int(shard or 0))
    raise ValueError(f"not a counter item: {partition!r}")


OPERATOR_PREFIXES: Final = {
    "reset": ("reset_at#", "reset_id#", "reset_to#"),
    "correction": ("corrected_at#", "corrected_id#", "corrected_by#"),
}
"""The record of a counter's last reset or correction: when (epoch ms), by which message id, and the value it
was reset to or the delta it was corrected by (on the key's all-time item, beside the ``c#`` counters)."""


def operators_from_item(item: RawItem) -> dict[str, dict[str, tuple[int, str, Decimal]]]:
    """The operator records of a raw counters-table item: kind -> counter -> (at ms, message id, amount)."""
    found: dict[str, dict[str, tuple[int, str, Decimal]]] = {}
    for kind, (at_prefix, id_prefix, value_prefix) in OPERATOR_PREFIXES.items():
        for attribute, value in item.items():
            if attribute.startswith(at_prefix):
                name = attribute[len(at_prefix) :]
                by, amount = item.get(id_prefix + name), item.get(value_prefix + name)
                if by is not None and amount is not None:
                    found.setdefault(kind, {})[name] = (int(value["N"]), by["S"], Decimal(amount["N"]))
    return found


GAUGE_PREFIXES: Final = {"max": "max#", "min": "min#", "latest": "latest#"}
"""A gauge's attribute: ``max#<name>``, ``min#<name>``, ``latest#<name>`` (beside the ``c#`` counters)."""


LATEST_ORDER_PREFIX: Final = "latest_order#"
"""A latest gauge's order (Binary: ``tally.core.gauges.latest_order``), which its writes are conditioned on."""


def gauge_attribute(kind: str, name: str) -> str:
    return GAUGE_PREFIXES[kind] + name


def latest_order_attribute(name: str) -> str:
    return LATEST_ORDER_PREFIX + name


def gauges_from_item(item: RawItem) -> dict[str, dict[str, Decimal | str]]:
    """The gauges of a raw counters-table item: kind (max, min, latest) -> gauge name -> value."""
    gauges: dict[str, dict[str, Decimal | str]] = {}
    for attribute, value in item.items():
        for kind, prefix in GAUGE_PREFIXES.items():
            if attribute.startswith(prefix):
                text = value.get("S")
                gauges.setdefault(kind, {})[attribute[len(prefix) :]] = (
                    text if text is not None else Decimal(value["N"])
                )
    return gauges


DISTINCT_PREFIX: Final = "dc#"
"""A distinct count's attribute on a key's counter items: ``dc#<set>`` (beside ``c#``)."""
MEMBER_PARTITION_SUFFIX: Final = SHARD_SEPARATOR + "d"
"""A key's member items live in partition ``<key>\x1fd`` (a key never holds U+001F; a shard's suffix is a
number), one item per (window, set, member), sort key ``<window>\x1f<set>\x1f<member>``: never ``all``, so
``top``'s scan skips them, and apart from the key's counter items, so a ``series`` query never meets them."""


def member_key(key: str, window: str, name: str, member: str) -> dict[str, Any]:
    """The primary key of the member item that records ``member`` counted in ``key``'s set ``name``."""
    sort = f"{window}{SHARD_SEPARATOR}{name}{SHARD_SEPARATOR}{member}"
    return {PARTITION_KEY: {"S": key + MEMBER_PARTITION_SUFFIX}, SORT_KEY: {"S": sort}}


def member_of_item(item: RawItem) -> tuple[str, str, str]:
    """(window, set, member) of a raw member item (its sort key)."""
    window, name, member = item[SORT_KEY]["S"].split(SHARD_SEPARATOR, 2)
    return window, name, member


def distinct_attribute(name: str) -> str:
    return DISTINCT_PREFIX + name


def distinct_from_item(item: RawItem) -> dict[str, Decimal]:
    """The distinct counts of a raw counter item: set name -> members counted (on this item)."""
    return {
        name[len(DISTINCT_PREFIX) :]: Decimal(value["N"])
        for name, value in item.items()
        if name.startswith(DISTINCT_PREFIX)
    }


def counter_attribute(name: str) -> str:
    """The attribute of a counter in a batch's totals: ``c#<name>``, or, for an open window's counter
    (``tally.core.items.window_counter``), ``w#<window id>\x1f<name>``."""
    if name.startswith(WINDOW_COUNTER_MARK):
        return WINDOW_PREFIX + name[1:]
    return COUNTER_PREFIX + name


def open_windows_from_item(item: RawItem) -> dict[str, dict[str, Decimal]]:
    """The open windows' counters on a raw key item: window id -> counter -> value (``w#`` attributes)."""
    found: dict[str, dict[str, Decimal]] = {}
    for attribute, value in item.items():
        if attribute.startswith(WINDOW_PREFIX):
            window, _, counter = attribute[len(WINDOW_PREFIX) :].partition(SHARD_SEPARATOR)
            found.setdefault(window, {})[counter] = Decimal(value["N"])
    return found


def window_attribute(window: str, counter: str) -> str:
    """The attribute of ``counter`` in the open ``window`` on a key's item."""
    return counter_attribute(window_counter(window, counter))


def item_counters(item: RawItem) -> dict[str, Decimal]:
    """Every counter of a raw item under the name the batch's totals give it: all-time counters by name,
    open windows' by ``window_counter`` (what a journal's range check compares a chunk's increments with)."""
    found = counters_from_item(item)
    for window, counters in open_windows_from_item(item).items():
        found.update({window_counter(window, name): value for name, value in counters.items()})
    return found


def counters_from_item(item: RawItem) -> dict[str, Decimal]:
    """Decode the counters of a raw counters-table item (also for operator tools that scan or query)."""
    return {
        name[len(COUNTER_PREFIX) :]: Decimal(value["N"])
        for name, value in item.items()
        if name.startswith(COUNTER_PREFIX)
    }


def moved_pointer_from_item(item: RawItem, unit: str) -> MovedPointer:
    """``unit``'s pointer on a raw key item (``MOVED_PREFIX``; none: a pointer that moved nothing, kept never)."""
    window = item.get(MOVED_PREFIX + unit)
    kept = item.get(MOVED_KEPT_PREFIX + unit)
    totals_prefix = f"{MOVED_PREFIX}{unit}{SHARD_SEPARATOR}"
    return MovedPointer(
        window["S"] if window is not None else None,
        {
            name[len(totals_prefix) :]: Decimal(value["N"])
            for name, value in item.items()
            if name.startswith(totals_prefix)
        },
        Decimal(kept["N"]) if kept is not None else None,
    )


def moved_pointer_attributes(item: RawItem, unit: str | None = None) -> list[str]:
    """The pointer attributes on a raw key item: ``unit``'s, or every unit's (None)."""
    if unit is None:
        return [name for name in item if name.startswith((MOVED_PREFIX, MOVED_KEPT_PREFIX))]
    own = {MOVED_PREFIX + unit, MOVED_KEPT_PREFIX + unit}
    return [name for name in item if name in own or name.startswith(f"{MOVED_PREFIX}{unit}{SHARD_SEPARATOR}")]


def moved_pointer_values(unit: str, pointer: MovedPointer) -> dict[str, dict[str, str]]:
    """The attributes (name -> wire value) that hold ``unit``'s ``pointer``; any other of its attributes on the
    item is removed beside them."""
    values: dict[str, dict[str, str]] = {}
    if pointer.window is not None:
        values[MOVED_PREFIX + unit] = {"S": pointer.window}
    for name, total in pointer.totals.items():
        values[f"{MOVED_PREFIX}{unit}{SHARD_SEPARATOR}{name}"] = {"N": to_wire(total)}
    if pointer.kept_at is not None:
        values[MOVED_KEPT_PREFIX + unit] = {"N": to_wire(pointer.kept_at)}
    return values


def moves_of(raw: RawItem) -> Decimal | None:
    """A raw key item's count of window moves (``WINDOW_MOVES``; None: never moved)."""
    value = raw.get(WINDOW_MOVES)
    return Decimal(value["N"]) if value is not None else None


def item_read(raw: RawItem) -> ItemRead:
    """What a write is planned from, of a raw item: its counters (``item_counters``), and, of a key's item, its count
    of window moves and its pointers (``tally.core.moved``)."""
    pointers = {unit: moved_pointer_from_item(raw, unit) for unit in UNITS if moved_pointer_attributes(raw, unit)}
    return ItemRead(item_counters(raw), moves_of(raw), pointers)
