"""The counter ``ADD`` update expression, and exactly how many counters one such expression can carry.

DynamoDB refuses any expression string longer than 4 KB ("The maximum length of any expression string is
4 KB", Constraints > Expression parameters), counted on the string as sent: placeholders, not the names
and values they stand for. ``tally.store.schema.add_update`` builds its expression here, so the bound the
planner respects (``counters_per_add``) is measured on the very string DynamoDB receives. It depends on how
many counters an ADD carries and on whether it also sets a window's expiry, never on the counter names
(``#c0``, ``#c1``... stand for them): names up to 255 bytes cost nothing here.

Pure (no boto3): the applier hands ``counters_per_add`` to the planner (``tally.core.plan``).
"""

from __future__ import annotations

from functools import cache
from typing import Final

from tally.core.items import ItemKey, item_parts

MAX_EXPRESSION_BYTES: Final = 4096
"""DynamoDB's limit on any expression string (4 KB, binary units)."""
_EXPIRY_CLAUSE: Final = " SET #expires = if_not_exists(#expires, :expires)"


def name_placeholder(index: int) -> str:
    return f"#c{index}"


def value_placeholder(index: int) -> str:
    return f":v{index}"


def add_expression(counter_count: int, *, sets_expiry: bool) -> str:
    """``ADD #c0 :v0, #c1 :v1, ...`` (and the expiry of a window item, set once)."""
    clauses = (f"{name_placeholder(i)} {value_placeholder(i)}" for i in range(counter_count))
    return "ADD " + ", ".join(clauses) + (_EXPIRY_CLAUSE if sets_expiry else "")


@cache
def _most_counters(sets_expiry: bool) -> int:
    # The length grows with the count (by 9 to 13 bytes a counter): walk up to the first that overflows.
    count = 1
    while len(add_expression(count + 1, sets_expiry=sets_expiry).encode("utf-8")) <= MAX_EXPRESSION_BYTES:
        count += 1
    return count


def counters_per_add(item: ItemKey) -> int:
    """The most counters one ``ADD`` on ``item`` can carry within DynamoDB's 4 KB (331; 328 for a window)."""
    return _most_counters(item_parts(item).expires_at_s is not None)
