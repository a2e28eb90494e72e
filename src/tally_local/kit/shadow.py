"""A model of the items the benchmarked code wrote, so each write can be billed on its old and new size.

DynamoDB bills a write on the larger of the item before and after it; the request alone does not say how
large the item was before (or, for an ``UpdateItem``, will be after). The meter keeps every item written
through the metered client here and applies each successful write to it, including the small subset of
update expressions the peers use (``SET`` of values, sums and ``if_not_exists``, ``ADD`` of numbers,
``REMOVE``). Anything outside that subset raises ``UnsupportedRequest``: a bill that silently ignored a
request would be a wrong number, and this suite publishes none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tally.cost.capacity import AttributeValue, Item

_NUMBERS: Final = Context(prec=38)
"""DynamoDB's Number precision: 38 significant digits."""
_CLAUSE: Final = re.compile(r"\b(SET|ADD|REMOVE|DELETE)\b", re.IGNORECASE)
_PATH: Final = re.compile(r"^#?[A-Za-z0-9_]+$")
_IF_NOT_EXISTS: Final = re.compile(r"^if_not_exists\s*\(\s*([^,\s]+)\s*,\s*([^)\s]+)\s*\)$", re.IGNORECASE)


class UnsupportedRequest(Exception):
    """The request uses something the meter cannot bill exactly; it refuses rather than guess."""


@dataclass(frozen=True, slots=True)
class Expression:
    """An update or key expression's placeholders: ``#name`` -> attribute name, ``:value`` -> value."""

    names: Mapping[str, str] = field(default_factory=dict)
    values: Mapping[str, AttributeValue] = field(default_factory=dict)

    def attribute(self, path: str) -> str:
        """The attribute a top-level path names (nested paths are not supported)."""
        path = path.strip()
        if not _PATH.match(path):
            raise UnsupportedRequest(f"only top-level attribute paths are supported, got {path!r}")
        return self.names[path] if path.startswith("#") else path

    def value(self, placeholder: str) -> AttributeValue:
        return self.values[placeholder.strip()]


def apply_update(item: Item | None, key: Item, expression: str, placeholders: Expression) -> dict[str, AttributeValue]:
    """The item after ``UpdateItem`` applies ``expression`` (every operand is read from the old item)."""
    old: dict[str, AttributeValue] = dict(item) if item else dict(key)
    new = dict(old)
    for verb, body in _clauses(expression):
        for action in _split_actions(body):
            if verb == "SET":
                path, _, operand = action.partition("=")
                if not operand:
                    raise UnsupportedRequest(f"SET action without '=': {action!r}")
                new[placeholders.attribute(path)] = _evaluate(operand.strip(), old, placeholders)
            elif verb == "ADD":
                path, _, operand = action.strip().partition(" ")
                name = placeholders.attribute(path)
                addend = placeholders.value(operand)
                new[name] = _add(old.get(name), addend)
            elif verb == "REMOVE":
                new.pop(placeholders.attribute(action), None)
            else:
                raise UnsupportedRequest(f"update clause {verb} is not supported")
    return new


def _clauses(expression: str) -> list[tuple[str, str]]:
    parts = _CLAUSE.split(expression)
    if parts[0].strip():
        raise UnsupportedRequest(f"update expression must start with a clause: {expression!r}")
    return [(parts[i].upper(), parts[i + 1]) for i in range(1, len(parts), 2)]


def _split_actions(body: str) -> list[str]:
    """Split a clause's actions on the commas that are not inside parentheses."""
    actions: list[str] = []
    depth = 0
    current: list[str] = []
    for char in body:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            actions.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        actions.append("".join(current).strip())
    return actions


def _evaluate(operand: str, old: Mapping[str, AttributeValue], placeholders: Expression) -> AttributeValue:
    """A SET operand: a value, a path, ``if_not_exists(path, value)``, or a sum/difference of two of these."""
    for operator in ("+", "-"):
        left, found, right = operand.partition(f" {operator} ")
        if found:
            a = _number(_evaluate(left.strip(), old, placeholders))
            b = _number(_evaluate(right.strip(), old, placeholders))
            result = _NUMBERS.add(a, b) if operator == "+" else _NUMBERS.subtract(a, b)
            return {"N": _wire(result)}
    conditional = _IF_NOT_EXISTS.match(operand)
    if conditional:
        existing = old.get(placeholders.attribute(conditional.group(1)))
        return existing if existing is not None else _evaluate(conditional.group(2), old, placeholders)
    if operand.startswith(":"):
        return placeholders.value(operand)
    name = placeholders.attribute(operand)
    if name not in old:
        raise UnsupportedRequest(f"SET reads attribute {name!r}, which the item does not have")
    return old[name]


def _add(existing: AttributeValue | None, addend: AttributeValue) -> AttributeValue:
    if "N" not in addend:
        raise UnsupportedRequest("ADD of sets is not supported")
    if existing is None:  # ADD on a missing attribute starts from 0
        return {"N": _wire(Decimal(addend["N"]))}
    return {"N": _wire(_NUMBERS.add(_number(existing), Decimal(addend["N"])))}


def _number(value: AttributeValue) -> Decimal:
    if "N" not in value:
        raise UnsupportedRequest(f"arithmetic on a non-number {value!r}")
    return Decimal(value["N"])


def _wire(number: Decimal) -> str:
    return format(number.normalize(_NUMBERS), "f")


class ShadowTables:
    """The items of every metered table, kept as DynamoDB would hold them after each successful write."""

    def __init__(self) -> None:
        self._key_names: dict[str, tuple[str, ...]] = {}
        self._items: dict[tuple[str, tuple[Any, ...]], dict[str, AttributeValue]] = {}

    def track(self, table: str, key_names: Sequence[str]) -> None:
        """Declare a table and its key attribute names (partition key first)."""
        self._key_names[table] = tuple(key_names)

    def get(self, table: str, key: Item) -> dict[str, AttributeValue] | None:
        return self._items.get(self._address(table, key))

    def key_of(self, table: str, item: Item) -> dict[str, AttributeValue]:
        """The key attributes of a full item (as ``PutItem`` sends it)."""
        names = self._names(table)
        try:
            return {name: item[name] for name in names}
        except KeyError as exc:
            raise UnsupportedRequest(f"item for {table!r} lacks key attribute {exc}") from exc

    def put(self, table: str, item: Item) -> None:
        self._items[self._address(table, item)] = dict(item)

    def delete(self, table: str, key: Item) -> None:
        self._items.pop(self._address(table, key), None)

    def _names(self, table: str) -> tuple[str, ...]:
        try:
            return self._key_names[table]
        except KeyError as exc:
            raise UnsupportedRequest(f"table {table!r} is not tracked by the meter") from exc

    def _address(self, table: str, key: Item) -> tuple[str, tuple[Any, ...]]:
        parts = []
        for name in self._names(table):
            ((kind, data),) = key[name].items()
            parts.append((kind, bytes(data) if isinstance(data, bytearray) else data))
        return table, tuple(parts)
