"""The counter patterns in the chaos load: what the run declares, and the reference values.

The load's pattern messages (``tally_local.chaos.workload``) exercise, under every fault of the run:

- **start values and default deltas**: the run declares ``COUNTER_DEFAULTS`` (as a deployment's
  ``CounterDefaults`` parameter would): ``stock`` starts at 100 and an event that names no delta takes 1
  off it; ``views`` adds 1 by default. Some ``stock`` events name their own delta. The reference is the
  start plus the exact sum over distinct counted messages: a start applied twice, or a default delta
  counted twice, shows as a wrong counter.
- **gauges**: events on ``g:`` keys carry a ``max`` (``peak``), a ``min`` (``low``) and a ``latest``
  (``last``, by ``ts``; every gauge message has its own ``ts``, so no tie is ever broken), some with no
  deltas at all. The reference is computed here, from the messages, without tally's code.

- **bounded counters**: the run declares ``CounterBounds`` ``COUNTER_BOUNDS`` (``seats:`` keys' ``taken``
  between 0 and 40); messages step it up and down by 1 to 4, some packed with a second seat or a
  ``seatlog:`` event, so a refused message must leave every key it names untouched; a few step a seat by a
  36-digit amount (``BIG_SEAT_STEP``), whose condition needs more digits than a Number holds unless rounded, and
  must be refused by the bound, like any step above the ceiling. Which messages a bound
  refuses depends on the order the consumers happen to commit in, so the reference for them is what the
  store's markers say: a bounded message with a marker must be counted whole, one without must be in the
  dead-letter queue as ``below_floor``/``above_ceiling``, and no ``taken`` may end outside its bounds.
- **distinct counts**: events on ``page:`` keys name a viewer (of 80) and sometimes a country (of 12);
  each key's set must count exactly the different members its distinct counted messages named.

- **post-commit writes refused for good**: one ``g:`` key and one ``page:`` key (``refused_keys``) have
  every gauge and member write refused by DynamoDB, as a key item at the 400 KB limit would be: their
  messages must be counted and in the dead-letter queue as ``gauge_refused``/``members_refused``; their
  key holds no gauge and no distinct count, and every other key is judged as usual.

- **corrections and resets**: on ``r:`` keys, deltas and corrections of ``level`` and resets of it (about
  one message in eight), all through Kinesis with the key as partition key, so one shard orders them. A
  reset does not commute with sums, so the reference folds the messages in the order the shard holds their
  first copies (re-sends are duplicates wherever they fall); a key any of whose records Kinesis gave up and
  replayed later is out of that order, as on AWS, and its ``level`` is reported unjudged rather than
  judged against an order the source did not keep.

Pattern messages are never reused with other content nor respelled (they are judged on their own
reference), but they are re-sent like any other message. Computed in a 100-digit context, as the sums.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

COUNTER_DEFAULTS: Final = "stock:*#stock=start:100,delta:-1;views:*#views=delta:1"
"""What the chaos run declares as ``CounterDefaults`` (``tally.core.defaults`` syntax)."""
STARTS: Final = {"stock:": {"stock": Decimal(100)}}
"""Key prefix -> counter -> start value, as ``COUNTER_DEFAULTS`` says (the reference reads this, not tally)."""
DEFAULT_DELTAS: Final = {"stock:": {"stock": Decimal(-1)}, "views:": {"views": Decimal(1)}}
"""Key prefix -> counter -> what an event without deltas adds."""

COUNTER_BOUNDS: Final = "seats:*#taken>=0;seats:*#taken<=40"
"""What the chaos run declares as ``CounterBounds`` (``tally.core.bounds`` syntax)."""
BIG_SEAT_STEP: Final = Decimal("1.23456789012345678901234567890123456E+39")
"""A step of 36 significant digits at 10^39 (storable) on a ``seats:`` counter: the write's condition compares the
stored value with the ceiling minus it (``40 - 1.23...E+39``: 39 digits unless rounded to a storable number).
Far above the ceiling, such a message is always refused, ``above_ceiling``, never ``counter_out_of_range``."""
COUNTER_VIEWS: Final = "v:*=customer,route,customer+route"
"""What the chaos run declares as ``CounterViews`` (``tally.core.views`` syntax): the views of
``tally_local.chaos.workload.VIEWS``."""
SEAT_FLOOR: Final = Decimal(0)
SEAT_CEILING: Final = Decimal(40)
BOUND_CODES: Final = frozenset({"below_floor", "above_ceiling"})
"""The dead-letter codes of a message a bound refused (docs/reference/event-format.md, "Dead letters")."""

STEP_REFUSED_CODES: Final = {"gauges": "gauge_refused", "members": "members_refused"}
"""The dead-letter code of a counted message whose gauge or member write DynamoDB refuses for good."""

LEVEL: Final = "level"
"""The counter resets and corrections move on ``r:`` keys."""

GaugeValue = Decimal | str
GaugeTable = dict[str, dict[str, GaugeValue]]
"""Gauge kind (``max``, ``min``, ``latest``) -> gauge name -> value: the shape ``tally.reader`` returns."""


@dataclass(frozen=True, slots=True)
class GaugeReading:
    """One gauge reading of a message's event."""

    key: str
    name: str
    kind: str
    value: GaugeValue
    ts_ms: int


def default_deltas(key: str) -> dict[str, Decimal]:
    """What an event of ``key`` that names no delta adds (the reference's copy of the declaration)."""
    for prefix, deltas in DEFAULT_DELTAS.items():
        if key.startswith(prefix):
            return dict(deltas)
    return {}


def with_starts(expected: Mapping[str, Mapping[str, Decimal]]) -> dict[str, dict[str, Decimal]]:
    """The reference sums with each declared start added once to every counter the load touches."""
    started = {key: dict(counters) for key, counters in expected.items()}
    for key, counters in started.items():
        for prefix, starts in STARTS.items():
            if key.startswith(prefix):
                for name, start in starts.items():
                    if name in counters:
                        counters[name] += start
    return started


def expected_gauges(readings: Iterable[GaugeReading]) -> dict[str, GaugeTable]:
    """key -> the gauges its distinct counted messages leave: max of maxima, min of minima, latest by ts."""
    result: dict[str, GaugeTable] = {}
    latest_ts: dict[tuple[str, str], int] = {}
    for reading in readings:
        table = result.setdefault(reading.key, {}).setdefault(reading.kind, {})
        old = table.get(reading.name)
        if reading.kind == "latest":
            if old is None or reading.ts_ms > latest_ts[(reading.key, reading.name)]:
                table[reading.name] = reading.value
                latest_ts[(reading.key, reading.name)] = reading.ts_ms
        elif old is None:
            table[reading.name] = reading.value
        else:
            new = reading.value
            if not (isinstance(old, Decimal) and isinstance(new, Decimal)):
                raise TypeError(f"a {reading.kind} gauge holds numbers: {reading}")
            table[reading.name] = max(old, new) if reading.kind == "max" else min(old, new)
    return result


def expected_distinct(members: Iterable[tuple[str, str, str]]) -> dict[str, dict[str, int]]:
    """key -> set -> how many different members the (key, set, member) triples name."""
    seen: dict[str, dict[str, set[str]]] = {}
    for key, name, member in members:
        seen.setdefault(key, {}).setdefault(name, set()).add(member)
    return {key: {name: len(found) for name, found in sets.items()} for key, sets in seen.items()}


def fold_levels(steps: Iterable[tuple[str, str, Decimal]]) -> dict[str, Decimal]:
    """key -> ``level`` after the (key, ``reset``/``add``, amount) steps in order: a reset sets, the rest add."""
    levels: dict[str, Decimal] = {}
    for key, kind, amount in steps:
        levels[key] = amount if kind == "reset" else levels.get(key, Decimal(0)) + amount
    return levels


def refused_keys(seed: int, pattern_keys: int, count: int) -> frozenset[str]:
    """The ``g:`` and ``page:`` keys (``count`` of each, drawn by the seed) whose gauge and member writes
    DynamoDB refuses for good in this run (``tally_local.chaos.faults``)."""
    rng = random.Random(f"{seed}:refused-keys")
    drawn = min(count, pattern_keys)
    return frozenset(f"{prefix}:{n}" for prefix in ("g", "page") for n in rng.sample(range(pattern_keys), drawn))


def step_refusal(
    gauges: Iterable[GaugeReading], members: Iterable[tuple[str, str, str]], refused: frozenset[str]
) -> str | None:
    """The code a counted message with these gauge readings and members must be dead-lettered with, or None.

    The pipeline runs the gauge step before the member step, and a later step's refusal stands (one letter)."""
    if any(key in refused for key, _, _ in members):
        return STEP_REFUSED_CODES["members"]
    if any(reading.key in refused for reading in gauges):
        return STEP_REFUSED_CODES["gauges"]
    return None
