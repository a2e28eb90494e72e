"""Write units of each write path, by DynamoDB's billing rules: what the planner chooses a path by
(``tally.core.plan.plan_batch``) and what the cost model bills (``tally.cost.model``, ``tally plan``), one formula.

DynamoDB bills a plain item write 1 write unit per started KB of the item, and an item in ``TransactWriteItems``
twice that (prepare and commit). A unit of messages costs, on each path:

- **direct**: one transaction action per marker item and per item its messages add to, each at 2 units per KB;
- **fenced journal** (``FencedApply``, ``tally.core.fence``): claim transactions (each the header, or a check of
  it, and up to 99 marker items, 2 units per KB each), the pages (1 unit per KB each), the header's commit and its
  DONE (plain writes), and one plain conditional write per item, at 1 unit per KB.

So the fenced path saves one unit per item and pays the header, the pages and one header action per claim
transaction; it also reads each item once before its commit, priced at ``READ_UNIT_PRICE`` (``fenced_journal_price``).
For items under 1 KB and one page under 1 KB it is the cheaper path from 7 items (6 by write units alone). Pure: no
I/O, sizes passed in.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Final, TypeAlias

from tally.core.items import item_parts
from tally.core.limits import TRANSACT_MAX_ACTIONS

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    from tally.core.aggregate import Totals
    from tally.core.items import ItemKey

WRITE_UNIT_BYTES: Final = 1024
TRANSACTION_FACTOR: Final = 2
"""A transactional write does two underlying writes of every item: prepare and commit."""
MARKER_BYTES: Final = 127
"""A marker item with its digest (docs/journal.md, "Cost"): under 1 KB."""
HEADER_BYTES: Final = 120
"""A journal header or applied-record: id, state, lease, chunks, expiry: well under 1 KB."""
PAGE_OVERHEAD_BYTES: Final = 60
"""A page item besides its data: ``id`` (``b#<32 hex>#p<i>``), ``data``'s name, ``expires_at``."""
CLAIMS_PER_TRANSACTION: Final = TRANSACT_MAX_ACTIONS - 1
"""A claim transaction holds the header (or its check) and up to 99 marker items."""
PAGE_BYTES_PER_COUNTER: Final = 48
"""What the planner's bound on a page's size allows a counter beside its name (its number and framing)."""

READ_UNIT_PRICE: Final = Fraction(1, 5)
"""A read request unit's price in write units: DynamoDB prices reads at a fifth of writes (on demand, $0.125 and
$0.625 per million: ``tally.cost.model.Prices``, whose ratio a test holds to this). The fenced path reads each item it
writes once, strongly consistently, before its commit (1 read unit per item under 4 KB); the planner weighs that."""

PageBytes: TypeAlias = "Callable[[Totals], int]"
"""Bytes of one journal page's data for a chunk's increments (the store's encoding, passed in)."""


def write_units(size_bytes: int) -> int:
    """Write units of one non-transactional item write: per started KB, at least one."""
    return max(1, math.ceil(size_bytes / WRITE_UNIT_BYTES))


def transactional_write_units(size_bytes: int) -> int:
    """Write units of one item in ``TransactWriteItems`` (prepare + commit)."""
    return TRANSACTION_FACTOR * write_units(size_bytes)


def page_entry_bytes(key: ItemKey, counters: Collection[str]) -> int:
    """The planner's bound on what one item's counters take in a journal page."""
    parts = item_parts(key)
    names = sum(map(len, map(str.encode, counters)))  # UTF-8, in C: the planner sizes every item of a journal unit
    return len(parts.key.encode("utf-8")) + len(parts.window) + names + PAGE_BYTES_PER_COUNTER * len(counters)


def planner_page_bytes(increments: Totals) -> int:
    """The planner's own bound on a page's size (``plan_apply_chunks`` cuts pages by it): used when no encoder is
    given."""
    return sum(page_entry_bytes(key, counters) for key, counters in increments.items())


def direct_write_units(marker_items: int, item_units: Iterable[int]) -> int:
    """A direct transaction's write units: its marker items and its items (``item_units``: each item's plain write
    units, 1 per started KB), all billed twice."""
    return transactional_write_units(MARKER_BYTES) * marker_items + TRANSACTION_FACTOR * sum(item_units)


def claim_transactions(marker_items: int) -> int:
    """Claim transactions of a journal unit with ``marker_items`` marker items."""
    return -(-marker_items // CLAIMS_PER_TRANSACTION)


def fenced_journal_write_units(marker_items: int, item_units: Iterable[int], page_sizes: Iterable[int]) -> int:
    """A fenced journal unit's write units: its claim transactions (header and marker items), its pages
    (``page_sizes``: each page's data in bytes), the header's commit and DONE, and one plain write per item."""
    claims = transactional_write_units(MARKER_BYTES) * marker_items + transactional_write_units(
        HEADER_BYTES
    ) * claim_transactions(marker_items)
    pages = sum(write_units(PAGE_OVERHEAD_BYTES + size) for size in page_sizes)
    return claims + pages + 2 * write_units(HEADER_BYTES) + sum(item_units)


def fenced_journal_price(
    marker_items: int, item_units: Iterable[int], page_sizes: Iterable[int], items_read: int
) -> Fraction:
    """A fenced journal unit's price in write units: its write units (``fenced_journal_write_units``) and the strong
    read of each of its ``items_read`` items before the commit, at ``READ_UNIT_PRICE``. A direct transaction reads
    nothing more than a journal unit does (both read the markers first): its price is its write units."""
    return fenced_journal_write_units(marker_items, item_units, page_sizes) + READ_UNIT_PRICE * items_read
