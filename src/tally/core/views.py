"""Views: publish an event once, count it under every group of its dimensions its key declares.

The ``CounterViews`` parameter (``TALLY_COUNTER_VIEWS``) declares, per key pattern, the views to count: rules
separated by ``;``, each ``PATTERN=VIEW,VIEW,...``, the pattern as in ``HotKeys`` (a key, or a prefix ending in
``*``), each view one to ``MAX_VIEW_DIMENSIONS`` dimension names joined by ``+``; for each key the first matching
rule wins::

    api*=customer,route,customer+route;usage:*=region

**Events.** An event of a key with views carries every dimension its views name (``"dims": {"customer": "acme",
"route": "/v1/users"}``) and no other; it counts under its own key, as always, and once more under each view: the
item of ``api`` for ``customer=acme``, the item for ``route=/v1/users``, the item for both. An event without
``dims``, with a dimension no view of its key names, or without one a view needs is dead-lettered with its reason
(``check_dims``): a view never silently misses an event. Dimension names are 1 to 64 of ``[A-Za-z0-9_-]``,
values 1 to 256 bytes of UTF-8 without U+001F.

**Items.** A view's item is an ordinary counter item whose key the core derives (``view_keys``,
``tally.core.items.view_item_key``), in the same message totals as the event's own key: counted in the same
commit (so exactly once), netted per batch like any key (10,000 events of 50 customers write 50 customer items),
windowed, sharded, bounded and thresholded by the same declarations, which name views with a pattern of their
own (``pattern``)::

    api[customer]                       every customer's item of key api (and its windows)
    api[customer+route]                 every item of the view customer+route (also api[customer,route])
    api[customer=acme]                  one of them
    api[customer=acme,route=/v1/*]      customer acme's routes starting /v1/ (values in the view's order)
    usage:*[region]                     every region's item of every key starting usage:

Such a pattern names a view some rule declares; it never matches a published key, and a key pattern never
matches a view's item (``*`` alone excepted: it matches everything). The store lays a view's items out as one
item collection per key and view, so a ``Query`` lists its values (``tally.store.schema``).

**Operators.** A correction carries the dimensions an event would and counts into the views like one; a reset sets
one item: the key's own without ``dims``, the view's whose dimensions are exactly its ``dims`` otherwise.

Plain data for the core: parsed at the edge (``tally.config``), never read from the environment here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Final, cast

from tally.core.items import VIEW_MARK, view_item_key
from tally.core.limits import (
    MAX_DIMENSION_NAME_CHARS,
    MAX_DIMENSION_VALUE_BYTES,
    MAX_DIMENSIONS,
    MAX_VIEW_DIMENSIONS,
    MAX_VIEWS,
    PARTITION_KEY_MAX_BYTES,
    VIEW_PARTITION_ROOM,
)
from tally.core.patterns import WILDCARD, KeyPattern

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_DIMENSION_NAME_CHARS}}}\Z")

INVALID_DIMENSION: Final = "invalid_dimension"
TOO_MANY_DIMENSIONS: Final = "too_many_dimensions"
UNKNOWN_DIMENSION: Final = "unknown_dimension"
MISSING_DIMENSION: Final = "missing_dimension"
KEY_TOO_LONG: Final = "key_too_long"
INVALID_RESET: Final = "invalid_reset"
"""The dead-letter codes a ``DimsProblem`` names (``tally.core.model.RejectCode``'s values: this module imports no
msgspec, so that the producer library, which checks dims before sending, stays importable with boto3 alone)."""


@dataclass(frozen=True, slots=True)
class DimsProblem:
    """Why an event's ``dims`` cannot count: a dead-letter code (``RejectCode``'s value) and the detail."""

    code: str
    detail: str


def is_dimension_name(name: str) -> bool:
    return _NAME.match(name) is not None


@dataclass(frozen=True, slots=True, order=True)
class View:
    """A group of dimensions: its items count the events of each combination of their values."""

    dims: tuple[str, ...]
    """Dimension names, sorted (a view is the set of its dimensions: ``route+customer`` is ``customer+route``)."""

    @property
    def name(self) -> str:
        """``customer+route``: how the declaration, the CLI and the store name the view."""
        return "+".join(self.dims)

    @classmethod
    def of(cls, names: Iterable[str]) -> View:
        return cls(tuple(sorted(names)))


@dataclass(frozen=True, slots=True)
class ViewRule:
    """One declaration: the views of the keys matching ``pattern``."""

    pattern: str
    views: tuple[View, ...]

    @property
    def dimensions(self) -> frozenset[str]:
        """Every dimension an event of a matching key carries: those its views name."""
        return frozenset(dim for view in self.views for dim in view.dims)

    def matches(self, key: str) -> bool:
        return KeyPattern(self.pattern).matches(key)


@lru_cache(maxsize=4096)
def _rule_for(rules: tuple[ViewRule, ...], key: str) -> ViewRule | None:
    """The first rule matching ``key``, remembered: a batch's events repeat a few keys."""
    for rule in rules:
        if rule.matches(key):
            return rule
    return None


@dataclass(frozen=True)
class CounterViews:
    """Every declared view (empty: events carry no ``dims``, and nothing is counted twice)."""

    rules: tuple[ViewRule, ...] = ()

    def rule_for(self, key: str) -> ViewRule | None:
        """The views of ``key``: the first rule matching it; None when it has none."""
        return _rule_for(self.rules, key) if self.rules else None

    def view_keys(self, key: str, dims: Mapping[str, str] | None) -> tuple[str, ...]:
        """The keys of the view items an event of ``key`` with ``dims`` counts in, besides ``key`` itself: the one
        derivation the commit, the recount and the producer share (``dims`` already checked: ``check_dims``)."""
        rule = self.rule_for(key)
        if rule is None or not dims:
            return ()
        return tuple(view_item_key(view.name, key, tuple(dims[dim] for dim in view.dims)) for view in rule.views)

    def reset_target(self, key: str, dims: Mapping[str, str] | None) -> str:
        """The item a reset sets: ``key``'s own without ``dims``, else the view's whose dimensions are exactly
        ``dims`` (checked: ``check_dims``)."""
        if not dims:
            return key
        view = View.of(dims)
        return view_item_key(view.name, key, tuple(dims[dim] for dim in view.dims))

    @cached_property
    def declared(self) -> dict[View, tuple[str, ...]]:
        """Each declared view -> the patterns of the rules declaring it."""
        found: dict[View, tuple[str, ...]] = {}
        for rule in self.rules:
            for view in rule.views:
                found[view] = (*found.get(view, ()), rule.pattern)
        return found

    def pattern(self, text: str) -> str:
        """A declaration's pattern as it matches counter items: a view pattern (``api[customer]``,
        ``api[customer=acme]``, ``usage:*[region]``: see the module) spelled as the view items' keys it names, any
        other pattern unchanged. ``ValueError`` for a view pattern naming no declared view, or malformed."""
        if not self.rules or not text.endswith("]"):
            return text
        head, bracket, inner = text[:-1].rpartition("[")
        if not bracket or not head:
            return text
        named: dict[str, str | None] = {}
        # Without values the view may be spelled as declared, customer+route, or customer,route.
        for part in inner.split(",") if "=" in inner else re.split("[,+]", inner):
            name, equals, value = part.partition("=")
            if not is_dimension_name(name):
                return text  # not a view pattern: a key that happens to end in "]"
            if name in named:
                raise ValueError(f"view pattern {text!r} names {name!r} twice")
            named[name] = value if equals else None
        view = View.of(named)
        patterns = self.declared.get(view)
        if patterns is None or not any(KeyPattern(head).overlaps(KeyPattern(pattern)) for pattern in patterns):
            raise ValueError(
                f"view pattern {text!r}: no CounterViews rule declares the view {view.name} for keys matching "
                f"{head!r} (declared: {'; '.join(f'{rule.pattern}={_names(rule)}' for rule in self.rules)})"
            )
        given = [named[dim] for dim in view.dims]
        if head.endswith(WILDCARD):
            if any(value is not None for value in given):
                raise ValueError(f"view pattern {text!r}: values need an exact key, not a prefix")
            return VIEW_MARK + view.name + VIEW_MARK + head
        if all(value is None for value in given):
            return VIEW_MARK + view.name + VIEW_MARK + head + VIEW_MARK + WILDCARD
        values = [value for value in given if value is not None]
        if len(values) != len(given) or any(not value for value in values):
            raise ValueError(f"view pattern {text!r}: give every dimension of the view a value, or none")
        last = values[-1]
        if WILDCARD in "".join(values[:-1]) or WILDCARD in last[:-1]:
            raise ValueError(f"view pattern {text!r}: only the last value may end in '*' (a prefix)")
        if last.endswith(WILDCARD):
            return view_item_key(view.name, head, (*values[:-1], last[:-1])) + WILDCARD
        return view_item_key(view.name, head, tuple(values))

    def check_dims(self, key: str, raw: object, *, where: str = "$", reset: bool = False) -> DimsProblem | None:
        """Why an event of ``key`` with ``raw`` as its ``dims`` (None: none) cannot count; None when it can.

        The codes: ``invalid_dimension`` (not an object of names to strings, a bad name or value),
        ``too_many_dimensions``, ``unknown_dimension`` (one no view of the key names, or dims on a key with
        no views), ``missing_dimension`` (one of the key's views needs it), ``key_too_long`` (the key with its
        longest view name over a partition key), ``invalid_reset`` (a reset's dims that name no declared view).
        """
        if raw is not None:
            problem = dims_shape_problem(raw, f"{where}.dims")
            if problem is not None:
                return problem
        dims = cast("Mapping[str, str]", raw) if raw is not None else {}  # checked above: names to strings
        rule = self.rule_for(key)
        if rule is None:
            if dims:
                return DimsProblem(UNKNOWN_DIMENSION, f"key {key!r} declares no views (CounterViews) at `{where}.dims`")
            return None
        if reset:
            if dims and View.of(dims) not in rule.views:
                return DimsProblem(
                    INVALID_RESET,
                    f"a reset's dims name one view of its key ({_names(rule)}), not {View.of(dims).name} at "
                    f"`{where}.dims`",
                )
            return _key_length_problem(key, rule, where)
        unknown = sorted(set(dims) - rule.dimensions)
        if unknown:
            return DimsProblem(
                UNKNOWN_DIMENSION,
                f"dimension {unknown[0]!r} is in no view of key {key!r} ({_names(rule)}) at `{where}.dims`",
            )
        missing = sorted(rule.dimensions - set(dims))
        if missing:
            needing = next(view for view in rule.views if missing[0] in view.dims)
            return DimsProblem(
                MISSING_DIMENSION,
                f"dimension {missing[0]!r} is missing: view {needing.name} of key {key!r} needs it at `{where}`",
            )
        return _key_length_problem(key, rule, where)


NO_VIEWS = CounterViews()


def _names(rule: ViewRule) -> str:
    return ",".join(view.name for view in rule.views)


def dims_shape_problem(raw: object, where: str) -> DimsProblem | None:
    """Why ``raw`` is not a ``dims`` at all (whatever the views): its shape, names, values and count."""
    if not isinstance(raw, dict) or not raw:
        return DimsProblem(INVALID_DIMENSION, f"dims is an object of dimension names to values at `{where}`")
    if len(raw) > MAX_DIMENSIONS:
        return DimsProblem(TOO_MANY_DIMENSIONS, f"{len(raw)} dimensions at `{where}` (at most {MAX_DIMENSIONS})")
    for name, value in raw.items():
        if not is_dimension_name(name):
            return DimsProblem(
                INVALID_DIMENSION,
                f"dimension names are 1 to {MAX_DIMENSION_NAME_CHARS} of A-Z a-z 0-9 _ - at `{where}`",
            )
        if (
            not isinstance(value, str)
            or not value
            or "\x1f" in value
            or (len(value) * 4 > MAX_DIMENSION_VALUE_BYTES and len(value.encode("utf-8")) > MAX_DIMENSION_VALUE_BYTES)
        ):
            return DimsProblem(
                INVALID_DIMENSION,
                f"a dimension's value is a string of 1 to {MAX_DIMENSION_VALUE_BYTES} bytes of UTF-8 without U+001F "
                f"at `{where}.{name}`",
            )
    return None


def _key_length_problem(key: str, rule: ViewRule, where: str) -> DimsProblem | None:
    longest = max(len(view.name) for view in rule.views)
    if len(key.encode("utf-8")) + longest + VIEW_PARTITION_ROOM > PARTITION_KEY_MAX_BYTES:
        return DimsProblem(
            KEY_TOO_LONG,
            f"key is over {PARTITION_KEY_MAX_BYTES - longest - VIEW_PARTITION_ROOM} bytes of UTF-8, the most its "
            f"views leave room for, at `{where}`",
        )
    return None


def parse_counter_views(text: str) -> CounterViews:
    """``"api*=customer,route,customer+route;usage:*=region"`` -> ``CounterViews``; ``ValueError`` naming the rule
    for anything malformed."""
    rules: list[ViewRule] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        pattern, equals, names = part.rpartition("=")
        if not equals or not pattern or not names.strip():
            raise ValueError(f"bad counter view {part!r}: expected PATTERN=VIEW,VIEW,... (a view: DIM or DIM+DIM)")
        if pattern.endswith("]"):
            raise ValueError(f"bad counter view {part!r}: views are declared for keys, not for views")
        views: list[View] = []
        for spelled in (v.strip() for v in names.split(",")):
            dims = spelled.split("+")
            if not all(is_dimension_name(dim) for dim in dims):
                raise ValueError(
                    f"bad counter view {part!r}: {spelled!r} is not DIM or DIM+DIM+... (names of A-Z a-z 0-9 _ -, "
                    f"at most {MAX_DIMENSION_NAME_CHARS} characters)"
                )
            if len(set(dims)) != len(dims) or len(dims) > MAX_VIEW_DIMENSIONS:
                raise ValueError(
                    f"bad counter view {part!r}: {spelled!r} names 1 to {MAX_VIEW_DIMENSIONS} different dimensions"
                )
            view = View.of(dims)
            if view in views:
                raise ValueError(f"bad counter view {part!r}: {view.name} is declared twice")
            views.append(view)
        rule = ViewRule(pattern, tuple(views))
        if len(views) > MAX_VIEWS or len(rule.dimensions) > MAX_DIMENSIONS:
            raise ValueError(
                f"bad counter view {part!r}: at most {MAX_VIEWS} views over at most {MAX_DIMENSIONS} dimensions per "
                "pattern (each view is one more item per event)"
            )
        rules.append(rule)
    return CounterViews(tuple(rules))


def split_outside_views(text: str, separator: str, views: CounterViews) -> list[str]:
    """``text`` cut at each ``separator`` outside a view pattern's brackets, where declarations separate their rules
    or fields (``HotKeys=api[customer,route]=8,page:/home=4``); at every one when no view is declared."""
    if not views.rules:
        return text.split(separator)
    parts: list[str] = []
    depth = start = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
        elif char == separator and not depth:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts
