"""DynamoDB item sizes and capacity units, from AWS's documented rules (no I/O).

Why compute them: DynamoDB Local's ``ConsumedCapacity`` is right for single-item writes but wrong for
``TransactWriteItems`` (it reports 2.0 per table per call, whatever the item count), and tally writes
through transactions. So every peer is billed here, by the same rules:

- Item size (developer guide, "DynamoDB item sizes and formats"): the sum over attributes of the UTF-8
  length of the name plus the size of the value. A String is its UTF-8 length; a Number is 1 byte per two
  significant digits (leading and trailing zeroes trimmed) plus 1 byte; a Binary its raw length; a Boolean
  or Null 1 byte; a List or Map 3 bytes plus, per element, 1 byte plus the element's size (for a Map the
  element's name counts too); a set the sum of its elements.
- Writes: 1 write unit per started KB of the item (``PutItem``, ``UpdateItem``, ``DeleteItem``), on the
  larger of the item's size before and after the write. A failed conditional write still consumes write
  units, on the larger of the existing item and the one attempted.
- Transactions: each item costs twice (prepare + commit), per started KB, ``ConditionCheck`` included.
- Reads: 1 read unit per started 4 KB for a strongly consistent read, half for an eventually
  consistent one, and at least that minimum for a key that holds no item.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

# The write rules are the planner's too (it chooses a path by them): declared once, in the core.
from tally.core.write_cost import TRANSACTION_FACTOR, WRITE_UNIT_BYTES, transactional_write_units, write_units

__all__ = [
    "READ_UNIT_BYTES",
    "TRANSACTION_FACTOR",
    "WRITE_UNIT_BYTES",
    "AttributeValue",
    "Item",
    "item_size",
    "number_size",
    "read_units",
    "transactional_write_units",
    "value_size",
    "write_units",
]

READ_UNIT_BYTES: Final = 4096

CONTAINER_OVERHEAD: Final = 3
ELEMENT_OVERHEAD: Final = 1

AttributeValue = Mapping[str, Any]
"""A value in DynamoDB's wire shape: ``{"S": "text"}``, ``{"N": "1.5"}``, ``{"M": {...}}``, ..."""
Item = Mapping[str, AttributeValue]


def number_size(text: str) -> int:
    """Bytes DynamoDB counts for a Number: one per two significant digits, plus one."""
    # Strip zeroes from the digit tuple itself: Decimal.normalize() would round to the context's precision.
    digits = "".join(map(str, Decimal(text).as_tuple().digits)).strip("0")
    return math.ceil(max(len(digits), 1) / 2) + 1


def value_size(value: AttributeValue) -> int:
    """The size of one attribute value (without its name)."""
    if len(value) != 1:
        raise ValueError(f"an attribute value has exactly one type, got {sorted(value)}")
    ((kind, data),) = value.items()
    match kind:
        case "S":
            return len(str(data).encode("utf-8"))
        case "N":
            return number_size(str(data))
        case "B":
            return len(_raw_bytes(data))
        case "BOOL" | "NULL":
            return 1
        case "SS":
            return sum(len(str(element).encode("utf-8")) for element in data)
        case "NS":
            return sum(number_size(str(element)) for element in data)
        case "BS":
            return sum(len(_raw_bytes(element)) for element in data)
        case "L":
            return CONTAINER_OVERHEAD + sum(ELEMENT_OVERHEAD + value_size(element) for element in data)
        case "M":
            return CONTAINER_OVERHEAD + sum(
                ELEMENT_OVERHEAD + len(name.encode("utf-8")) + value_size(element) for name, element in data.items()
            )
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: Item | None) -> int:
    """The size of an item: its attribute names plus their values (0 for no item)."""
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def read_units(size_bytes: int, *, consistent: bool) -> float:
    """Read units of one item read: per started 4 KB, halved when eventually consistent."""
    units = max(1, math.ceil(size_bytes / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


def _raw_bytes(data: object) -> bytes:
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    if isinstance(data, str):  # botocore encodes a str given for a Binary as UTF-8
        return data.encode("utf-8")
    raise ValueError(f"a Binary value must be bytes or str, got {type(data).__name__}")
