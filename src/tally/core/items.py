"""Which DynamoDB item a delta lands in: a key's all-time item, one of its time windows, one of its shards.

A plain ``str`` stands for a key's all-time, unsharded item (the common case stays cheap and readable);
a ``CounterItem`` names a window (``window`` is a window id, see ``tally.core.windows``) and/or a shard.
The store adapter turns either into partition and sort keys.

A **view's** item (``tally.core.views``: an event counted again under a declared group of its dimensions) is an
ordinary counter item whose key is derived (``view_item_key``): ``<U+001F><view><U+001F><key><U+001F><value>...``.
No key a producer publishes holds U+001F (the decoder refuses it), so a derived key is never a published one;
neither a view's name (dimension names of ``[A-Za-z0-9_-]`` joined by ``+``), a key nor a value holds U+001F,
and a view's name says how many values follow, so two (view, key, values) never derive the same key. Every
declaration matches it as a key (``tally.core.views.CounterViews.pattern`` spells view patterns that way), so
windows, start values, bounds, thresholds, hot-key shards and resets apply to it unchanged.
"""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

ALL_TIME = "all"
"""The window id of the all-time value."""
SHARD_SEPARATOR = "\x1f"
"""Separates a key from its shard number in a shard item's partition key; keys may not contain it."""


class CounterItem(NamedTuple):
    """A counter item other than a key's plain all-time item."""

    key: str
    window: str = ALL_TIME
    shard: int = 0
    expires_at_s: int | None = None
    """When a window's counters may be deleted (TTL); None keeps them."""


ItemKey: TypeAlias = str | CounterItem

VIEW_MARK = "\x1f"
"""Starts every view item's key (``view_item_key``); separates its parts."""


class ViewParts(NamedTuple):
    """What a view item's key is made of: the view (dimension names joined by ``+``, sorted), the event's key,
    and the event's value of each of the view's dimensions, in the view's order."""

    view: str
    key: str
    values: tuple[str, ...]


def view_item_key(view: str, key: str, values: tuple[str, ...]) -> str:
    """The key of ``key``'s item in ``view`` for ``values``: never a key a producer can publish (it holds U+001F)."""
    return VIEW_MARK + view + VIEW_MARK + key + VIEW_MARK + VIEW_MARK.join(values)


def view_parts(key: str) -> ViewParts | None:
    """The parts of a view item's key; None for a published key."""
    if not key.startswith(VIEW_MARK):
        return None
    view, key, *values = key[1:].split(VIEW_MARK)
    return ViewParts(view, key, tuple(values))


def owner_key(key: str) -> str:
    """The published key an item's key counts for: a view item's event key, any other key itself."""
    parts = view_parts(key)
    return key if parts is None else parts.key


def view_label(parts: ViewParts) -> str:
    """``api[customer=acme,route=/v1/users]``: how people read a view item (never an identity)."""
    named = ",".join(f"{dim}={value}" for dim, value in zip(parts.view.split("+"), parts.values, strict=True))
    return f"{parts.key}[{named}]"


WINDOW_COUNTER_MARK = "\x1f"
"""Starts the name of an open window's counter on a key's item: user counter names may not hold
U+001F (``tally.core.decode``), so ``<mark><window id><mark><counter>`` can never be a user's counter."""


def window_counter(window: str, counter: str) -> str:
    """The name, in a batch's totals, of ``counter``'s delta in the open ``window`` on the key's item.

    Riding on the key's item as one more counter, it travels with the all-time counters: one ADD per item,
    the planner's action count, the journal's pages and apply chunks and the 4 KB bound
    (``counters_per_add``) all see it as what it is, one more counter of that item.
    """
    return f"{WINDOW_COUNTER_MARK}{window}{WINDOW_COUNTER_MARK}{counter}"


def split_window_counter(name: str) -> tuple[str, str] | None:
    """(window id, counter) of a ``window_counter`` name; None for a user's (all-time) counter."""
    if not name.startswith(WINDOW_COUNTER_MARK):
        return None
    window, _, counter = name[1:].partition(WINDOW_COUNTER_MARK)
    return window, counter


def item_parts(item: ItemKey) -> CounterItem:
    """The (key, window, shard) of any item key."""
    return CounterItem(item) if isinstance(item, str) else item


def make_item(key: str, window: str = ALL_TIME, shard: int = 0, expires_at_s: int | None = None) -> ItemKey:
    """The canonical item key: the plain ``str`` for an unsharded all-time item."""
    if window == ALL_TIME and shard == 0 and expires_at_s is None:
        return key
    return CounterItem(key, window, shard, expires_at_s)


def item_label(item: ItemKey) -> str:
    """A readable name for logs and rejection details, never an identity: keys may hold ``@`` and ``#``, so key
    ``a``'s minute item and the key named ``a@m#2027-01-15T08:00Z`` print alike (as do ``a#shard1`` and shard 1
    of hot key ``a``). Whatever must tell items apart keys by the ``ItemKey`` itself."""
    parts = item_parts(item)
    view = view_parts(parts.key)
    key = parts.key if view is None else view_label(view)
    label = key if parts.window == ALL_TIME else f"{key}@{parts.window}"
    return label if parts.shard == 0 else f"{label}#shard{parts.shard}"
