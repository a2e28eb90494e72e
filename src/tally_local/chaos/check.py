"""The verdict of a chaos run: counters against the reference sums, and the dead-letter queue's contents.

- Every counter of every key equals the exact sum over distinct valid messages (doomed ones excepted).
  Lost and doubled *events* are read off ``count`` (each event adds exactly 1 to it): per key, what is
  missing is lost, what is extra is doubled. Keys only poison messages name must read empty.
- Every poison message is in the dead-letter queue, with the reason code docs/reference/event-format.md documents for it
  (more than one letter for one poison message is allowed: the queue is at-least-once).
- No valid message is in the dead-letter queue, unless it was injected as unrecoverable (doomed), and
  every doomed message is there with ``counter_out_of_range``. No Kinesis range is left given up, and no valid
  record was ever given up, even one a replay counted later: with the template's defaults a crash must never
  exhaust a stream's retries (docs/explanation/sources.md, "A crash never gives a record up").
- Every message on a bounded counter is counted whole (its marker exists and every key it
  names holds its deltas) or is in the dead-letter queue as ``below_floor``/``above_ceiling``, never
  neither; no bounded counter ends outside its bounds.
- Every distinct count holds the number of different members its key's distinct counted messages named.
- Every message whose gauge or member write DynamoDB refuses for good (the run's ``refused_keys``) counts
  and is in the dead-letter queue as ``gauge_refused``/``members_refused``; those keys hold no gauge and no
  distinct count (such a write once failed its batch on every delivery).
- Every hour and day window of the ``win:`` keys (their windows are moved off the key items during
  the run, under kills and stale conditions) holds exactly the sum of its events, after a final close.
- Every view item of the ``v:`` keys (per customer, per route, per customer and route), all-time and in each
  window, holds exactly the sum of its events (``Workload.expected_views``, computed by hand), as the reader's
  group-by reads it; and the stored values partition: a key's customers sum to the key, each customer's routes
  (the customer and route view) to the customer.
- Every gauge holds what the distinct gauge messages leave: the largest ``max``, the smallest
  ``min``, the ``latest`` of the latest ``ts`` (``tally_local.chaos.patterns``); counters with a declared start
  hold the start plus their sum (in ``Workload.expected``).
- Of the two contents of every reused id, exactly one is in the dead-letter queue, as ``id_conflict``, and
  the counters hold the other's deltas (whichever arrived first: a race the check accepts both ways).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from tally_local.chaos.patterns import BOUND_CODES, LEVEL, SEAT_CEILING, SEAT_FLOOR, STEP_REFUSED_CODES, step_refusal
from tally_local.chaos.workload import DOOMED_CODE, ID_CONFLICT_CODE, TRACER

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from tally_local.chaos.dlq import Letter
    from tally_local.chaos.workload import Workload


@dataclass(frozen=True, slots=True)
class Verdict:
    counters_checked: int
    counters_wrong: int
    lost_events: int
    doubled_events: int
    stray_keys: tuple[str, ...]
    poison_messages: int
    poison_accounted: int
    poison_misfiled: int
    poison_missing: int
    poison_letters: int
    doomed: int
    doomed_in_dlq: int
    valid_in_dlq: int
    unknown_letters: int
    given_up_left: int
    ids_reused: int
    """Ids a producer reused with other content (pairs of contents)."""
    ids_reused_resolved: int
    """Pairs with exactly one content in the DLQ as ``id_conflict`` (and the other counted)."""
    ids_reused_second_won: int
    """Resolved pairs where the content generated second is the one that counts (the race went that way)."""
    examples: tuple[str, ...]
    """A few of the wrong counters, for diagnosis."""
    wrong_keys: tuple[str, ...] = ()
    """The keys of the first wrong all-time counters (``tally_local.chaos.explain`` tells their messages' story)."""
    gauges_checked: int = 0
    gauges_wrong: int = 0
    bounded_messages: int = 0
    bounded_counted: int = 0
    bounded_refused: int = 0
    """Bounded messages in the DLQ with a bound's code and no marker (a refusal the order of commits made)."""
    bounded_unaccounted: int = 0
    """Bounded messages neither counted nor in the DLQ with a bound's code: lost."""
    bound_violations: int = 0
    """Bounded counters whose final value lies outside their bounds."""
    distinct_checked: int = 0
    distinct_wrong: int = 0
    levels_checked: int = 0
    """``r:`` keys whose ``level`` (resets and deltas in the shard's order) was judged with the counters."""
    levels_unjudged: int = 0
    """``r:`` keys left unjudged: a record of theirs was given up and replayed out of the shard's order."""
    windows_checked: int = 0
    """(``win:`` key, hour or day window) pairs read back after the final close."""
    windows_wrong: int = 0
    step_refused: int = 0
    """Messages whose gauge or member write DynamoDB refuses for good (a refused key's): counted, and due in
    the DLQ with that step's code."""
    step_refused_in_dlq: int = 0
    """Of those, the ones in the DLQ with the right code."""
    valid_refused: int = 0
    """Valid messages ever dead-lettered with a reason they do not deserve, even if a redrive counted them
    later (a big message refused ``too_many_keys`` because a bounded sale shared its block)."""
    bounded_journaled: int = 0
    """Bounded messages counted through the journal, whose ADDs carry no bound condition: a bound
    crossed on the way is seen here even when later steps brought the counter back within its bounds."""
    valid_given_up: int = 0
    """Valid messages whose Kinesis record was ever given up to the on-failure destination, even if a replay
    counted them later: an operator's chore that a crash must never cause."""
    views_checked: int = 0
    """(key, view, window) groups of the ``v:`` keys read back after the final close."""
    views_wrong: int = 0
    """Of those, the groups where some value's counters differ from the sum of its events."""
    view_partitions_wrong: int = 0
    """Keys whose stored views do not partition: customers not summing to the key, routes not to their customer."""

    @property
    def ok(self) -> bool:
        return (
            self.valid_refused == 0
            and self.valid_given_up == 0
            and self.bounded_journaled == 0
            and self.counters_wrong == 0
            and self.gauges_wrong == 0
            and self.bounded_unaccounted == 0
            and self.bound_violations == 0
            and self.distinct_wrong == 0
            and self.windows_wrong == 0
            and self.views_wrong == 0
            and self.view_partitions_wrong == 0
            and self.lost_events == 0
            and self.doubled_events == 0
            and not self.stray_keys
            and self.poison_accounted == self.poison_messages
            and self.doomed_in_dlq == self.doomed
            and self.valid_in_dlq == 0
            and self.unknown_letters == 0
            and self.given_up_left == 0
            and self.ids_reused_resolved == self.ids_reused
            and self.step_refused_in_dlq == self.step_refused
        )


def poison_keys(workload: Workload) -> set[str]:
    """Keys that only poison bodies name (where they name a countable key at all)."""
    keys = {"k"}
    for body in workload.poison:
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):  # malformed or nested too deeply: names no key
            continue
        key = parsed.get("key") if isinstance(parsed, dict) else None
        if isinstance(key, str) and key.isascii() and key.isprintable() and len(key) <= 2000:
            keys.add(key)
    return keys - set(workload.expected)


def judge(
    workload: Workload,
    read: Callable[[str], dict[str, Decimal]],
    letters: Sequence[Letter],
    given_up_left: int,
    *,
    patterns: PatternReads | None = None,
    replayed: frozenset[str] = frozenset(),
    read_window: Callable[[str, str], Mapping[str, Decimal]] | None = None,
    read_view: Callable[[str, str, str], Mapping[tuple[str, ...], Mapping[str, Decimal]]] | None = None,
    ever_letters: Sequence[Letter] = (),
) -> Verdict:
    """Compare what the store holds (``read``: all-time counters of a key; ``patterns``: the rest the counter
    patterns need; ``replayed``: bodies of Kinesis records given up and replayed; ``read_view``: (key, view, window
    id or ``all``) -> each value's counters, as ``tally.reader``'s group-by reads them) with the reference."""
    examples: list[str] = []
    reference, resolved, second_won = _with_reused_ids(workload, letters, examples)
    counted_bounded = _add_counted_bounded(workload, patterns, reference)
    unjudged = _add_levels(workload, reference, replayed)
    wrong_keys: list[str] = []
    checked, wrong, lost, doubled = _compare_counters(reference, read, unjudged, examples, wrong_keys)
    stray = tuple(sorted(key for key in poison_keys(workload) if any(read(key).values())))
    pattern_figures = _judge_patterns(workload, read, letters, patterns, counted_bounded, examples=examples)

    codes_by_poison: dict[str, Counter[str | None]] = {body: Counter() for body in workload.poison}
    refusals = {
        message.message_id: code
        for message in workload.valid.values()
        if (code := step_refusal(message.gauges, message.members, workload.refused_keys)) is not None
    }
    refused_seen: set[str] = set()
    doomed_seen: set[str] = set()
    valid_in_dlq = unknown = 0
    for letter in letters:
        if letter.body in codes_by_poison:
            codes_by_poison[letter.body][letter.code] += 1
            continue
        message = workload.by_body.get(letter.body)
        if message is None:
            unknown += 1
        elif message.doomed and letter.code == DOOMED_CODE:
            doomed_seen.add(message.message_id)
        elif letter.code in STEP_REFUSED_CODES.values() and refusals.get(message.message_id) == letter.code:
            refused_seen.add(message.message_id)
        elif message.bounded and letter.code in BOUND_CODES:
            continue  # judged by _judge_patterns
        elif message.message_id in workload.alternates and letter.code == ID_CONFLICT_CODE:
            continue  # judged by _with_reused_ids
        else:
            valid_in_dlq += 1
            if len(examples) < 10:
                alternate = " (a reused id's other content)" if message.message_id in workload.alternates else ""
                examples.append(f"valid message {message.message_id}{alternate} in the DLQ as {letter.code}")
    accounted = misfiled = missing = 0
    for body, codes in codes_by_poison.items():
        expected_code = workload.poison[body].code
        if set(codes) == {expected_code}:
            accounted += 1
            continue
        if codes:
            misfiled += 1
        else:
            missing += 1
        if len(examples) < 10:
            examples.append(f"poison {expected_code} {body[:40]!r}: letters {dict(codes)}")
    valid_refused = _valid_refused(workload, ever_letters, refusals, examples)
    given_up = sorted(workload.by_body[body].message_id for body in replayed if body in workload.by_body)
    examples.extend(f"valid message {message_id}: its Kinesis record was given up" for message_id in given_up[:3])
    bounded_journaled = _bounded_journaled(counted_bounded, patterns, examples)
    views_checked, views_wrong, partitions_wrong = _judge_views(workload, read, read_view, examples)
    return Verdict(
        counters_checked=checked,
        counters_wrong=wrong,
        lost_events=lost,
        doubled_events=doubled,
        stray_keys=stray,
        poison_messages=len(workload.poison),
        poison_accounted=accounted,
        poison_misfiled=misfiled,
        poison_missing=missing,
        poison_letters=sum(sum(codes.values()) for codes in codes_by_poison.values()),
        doomed=sum(1 for message in workload.valid.values() if message.doomed),
        doomed_in_dlq=len(doomed_seen),
        valid_in_dlq=valid_in_dlq,
        unknown_letters=unknown,
        given_up_left=given_up_left,
        ids_reused=len(workload.alternates),
        ids_reused_resolved=resolved,
        ids_reused_second_won=second_won,
        examples=tuple(examples),
        wrong_keys=tuple(wrong_keys),
        **pattern_figures,
        levels_checked=len(workload.expected_levels) - len(unjudged),
        levels_unjudged=len(unjudged),
        windows_checked=len(workload.expected_windows) if read_window is not None else 0,
        windows_wrong=_judge_windows(workload, read_window, examples),
        step_refused=len(refusals),
        step_refused_in_dlq=len(refused_seen),
        valid_refused=valid_refused,
        bounded_journaled=bounded_journaled,
        valid_given_up=len(given_up),
        views_checked=views_checked,
        views_wrong=views_wrong,
        view_partitions_wrong=partitions_wrong,
    )


def _bounded_journaled(counted: set[str], patterns: PatternReads | None, examples: list[str]) -> int:
    """Counted bounded messages whose marker names a journal batch: counted without their bound condition."""
    if patterns is None or patterns.journaled is None:
        return 0
    journaled = sorted(message_id for message_id in counted if patterns.journaled(message_id))
    examples.extend(
        f"bounded message {mid}: counted through the journal (no bound condition)"
        for mid in journaled[: max(0, 10 - len(examples))]
    )
    return len(journaled)


def _valid_refused(
    workload: Workload, letters: Sequence[Letter], step_refusals: Mapping[str, str], examples: list[str]
) -> int:
    """Valid messages that some letter refused for a reason they do not deserve (its redrive aside).

    Deserved: a doomed message's code, a bounded message's bound, a reused id's conflict, and the code of the
    post-commit step whose write the run refuses for good (``step_refusals``: message id -> that code)."""
    refused: set[str] = set()
    for letter in letters:
        message = workload.by_body.get(letter.body)
        if letter.code is None or message is None:
            continue  # moved by the redrive policy (no reason), or poison
        deserved = (
            (message.doomed and letter.code == DOOMED_CODE)
            or (message.bounded and letter.code in BOUND_CODES)
            or (message.message_id in workload.alternates and letter.code == ID_CONFLICT_CODE)
            or step_refusals.get(message.message_id) == letter.code
        )
        if not deserved and message.message_id not in refused:
            refused.add(message.message_id)
            if len(examples) < 10:
                examples.append(f"valid message {message.message_id} refused as {letter.code} (redriven or not)")
    return len(refused)


def _judge_windows(
    workload: Workload, read_window: Callable[[str, str], Mapping[str, Decimal]] | None, examples: list[str]
) -> int:
    """Every hour and day window of the ``win:`` keys, read back (wherever it sits after the moves), against
    the sum of the window messages' events in it. Returns how many are wrong."""
    if read_window is None:
        return 0
    wrong = 0
    for (key, window), expected in sorted(workload.expected_windows.items()):
        found = {name: value for name, value in read_window(key, window).items() if value}
        if found != {name: value for name, value in expected.items() if value}:
            wrong += 1
            if len(examples) < 10:
                examples.append(f"window {key} {window}: read {found}, expected {expected}")
    return wrong


def _judge_views(
    workload: Workload,
    read: Callable[[str], dict[str, Decimal]],
    read_view: Callable[[str, str, str], Mapping[tuple[str, ...], Mapping[str, Decimal]]] | None,
    examples: list[str],
) -> tuple[int, int, int]:
    """(groups checked, groups wrong, keys whose stored views do not partition): see the module."""
    if read_view is None or not workload.expected_views:
        return 0, 0, 0
    groups: dict[tuple[str, str, str], dict[tuple[str, ...], dict[str, Decimal]]] = {}
    for (key, view, values, window), counters in workload.expected_views.items():
        groups.setdefault((key, view, window), {})[values] = {name: value for name, value in counters.items() if value}
    wrong = 0
    stored: dict[tuple[str, str], dict[tuple[str, ...], dict[str, Decimal]]] = {}
    for (key, view, window), expected in sorted(groups.items()):
        found = {
            values: nonzero
            for values, counters in read_view(key, view, window).items()
            if (nonzero := {name: value for name, value in counters.items() if value})
        }
        if window == "all":
            stored[key, view] = found
        if found != {values: counters for values, counters in expected.items() if counters}:
            wrong += 1
            if len(examples) < 10:
                examples.append(f"view {key}[{view}] {window}: read {found}, expected {expected}")
    partitions_wrong = 0
    for key in sorted({key for key, _ in stored}):
        customers = stored.get((key, "customer"), {})
        pairs = stored.get((key, "customer+route"), {})
        by_customer = {
            (customer,): _summed(counters for (owner, _), counters in pairs.items() if owner == customer)
            for (customer,) in customers
        }
        total = {name: value for name, value in read(key).items() if value}
        if _summed(customers.values()) != total or by_customer != customers:
            partitions_wrong += 1
            if len(examples) < 10:
                examples.append(f"views of {key} do not partition it: key {total}, customers {customers}")
    return len(groups), wrong, partitions_wrong


def _summed(parts: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for counters in parts:
        for name, value in counters.items():
            total[name] = total.get(name, Decimal(0)) + value
    return {name: value for name, value in total.items() if value}


@dataclass(frozen=True, slots=True)
class PatternReads:
    """What the verdict reads besides counters, for the counter patterns."""

    gauges: Callable[[str], Mapping[str, Mapping[str, Decimal | str]]]
    """A key's gauges: kind -> name -> value."""
    distinct: Callable[[str], Mapping[str, Decimal]]
    """A key's distinct counts (all-time): set -> members counted."""
    counted: Callable[[str], bool]
    """Whether a message id has a marker (it counts)."""
    journaled: Callable[[str], bool] | None = None
    """Whether a message id's marker names a journal batch (it was counted through the journal)."""


def _judge_patterns(
    workload: Workload,
    read: Callable[[str], dict[str, Decimal]],
    letters: Sequence[Letter],
    patterns: PatternReads | None,
    counted_bounded: set[str],
    *,
    examples: list[str],
) -> dict[str, int]:
    """The verdict's figures for the counter patterns (counters with starts are judged with the others)."""
    gauges_checked, gauges_wrong = _judge_gauges(workload, patterns, examples)
    distinct_checked, distinct_wrong = _judge_distinct(workload, patterns, examples)
    bound_letters = {
        message.message_id
        for letter in letters
        if letter.code in BOUND_CODES and (message := workload.by_body.get(letter.body)) is not None and message.bounded
    }
    return {
        "gauges_checked": gauges_checked,
        "gauges_wrong": gauges_wrong,
        "bounded_messages": len(workload.bounded),
        "bounded_counted": len(counted_bounded),
        "bounded_refused": len(bound_letters - counted_bounded),
        "bounded_unaccounted": _unaccounted(workload, counted_bounded, bound_letters, examples),
        "bound_violations": _bound_violations(workload, read, examples),
        "distinct_checked": distinct_checked,
        "distinct_wrong": distinct_wrong,
    }


def _compare_counters(
    reference: dict[str, dict[str, Decimal]],
    read: Callable[[str], dict[str, Decimal]],
    unjudged: set[str],
    examples: list[str],
    wrong_keys: list[str] | None = None,
) -> tuple[int, int, int, int]:
    """Counters checked and wrong, and events lost and doubled (read off ``count``); the first wrong counters' keys
    go to ``wrong_keys``."""
    checked = wrong = lost = doubled = 0
    for key, expected in sorted(reference.items()):
        actual = {name: value for name, value in read(key).items() if value}
        wanted = {name: value for name, value in expected.items() if value}
        for name in sorted(set(actual) | set(wanted)):
            if name == LEVEL and key in unjudged:
                continue
            checked += 1
            have, want = actual.get(name, Decimal(0)), wanted.get(name, Decimal(0))
            if have != want:
                wrong += 1
                if len(examples) < 5:
                    examples.append(f"{key}/{name}: {have} != {want}")
                if wrong_keys is not None and len(wrong_keys) < 5 and key not in wrong_keys:
                    wrong_keys.append(key)
            if name == TRACER:
                lost += int(max(Decimal(0), want - have))
                doubled += int(max(Decimal(0), have - want))
    return checked, wrong, lost, doubled


def _add_levels(workload: Workload, reference: dict[str, dict[str, Decimal]], replayed: frozenset[str]) -> set[str]:
    """Put each ``r:`` key's folded ``level`` into ``reference``; returns the keys left unjudged (a record of
    theirs was replayed out of order)."""
    unjudged = {
        message.level_step[0]
        for message in workload.valid.values()
        if message.level_step is not None and message.body in replayed
    }
    for key, level in workload.expected_levels.items():
        if key not in unjudged:
            reference.setdefault(key, {})[LEVEL] = level
    return unjudged


def _add_counted_bounded(
    workload: Workload, patterns: PatternReads | None, reference: dict[str, dict[str, Decimal]]
) -> set[str]:
    """Add the sums of every bounded message with a marker to ``reference``; returns their ids."""
    counted = set()
    for message in workload.bounded:
        if patterns is None or not patterns.counted(message.message_id):
            continue
        counted.add(message.message_id)
        for key, counters in message.sums.items():
            for name, value in counters.items():
                reference.setdefault(key, {})
                reference[key][name] = reference[key].get(name, Decimal(0)) + value
    return counted


def _unaccounted(workload: Workload, counted: set[str], lettered: set[str], examples: list[str]) -> int:
    lost = [m.message_id for m in workload.bounded if m.message_id not in counted | lettered]
    examples.extend(f"bounded message {mid}: neither counted nor refused" for mid in lost[: max(0, 10 - len(examples))])
    return len(lost)


def _bound_violations(workload: Workload, read: Callable[[str], dict[str, Decimal]], examples: list[str]) -> int:
    violations = 0
    for key in sorted({key for message in workload.bounded for key in message.sums if key.startswith("seats:")}):
        taken = read(key).get("taken", Decimal(0))
        if not SEAT_FLOOR <= taken <= SEAT_CEILING:
            violations += 1
            if len(examples) < 10:
                examples.append(f"{key}/taken = {taken}: outside [{SEAT_FLOOR}, {SEAT_CEILING}]")
    return violations


def _judge_distinct(workload: Workload, patterns: PatternReads | None, examples: list[str]) -> tuple[int, int]:
    """Distinct counts checked and wrong: each against the different members of its counted messages."""
    checked = wrong = 0
    if patterns is None:
        return checked, wrong
    for key, sets in sorted(workload.expected_distinct.items()):
        stored = patterns.distinct(key)
        if key in workload.refused_keys:  # every member write refused: nothing may be counted
            checked += len(sets)
            if any(stored.values()):
                wrong += 1
                examples.append(f"{key}: distinct counts {dict(stored)} though every member write was refused")
            continue
        for name, wanted in sorted(sets.items()):
            checked += 1
            if stored.get(name) != wanted:
                wrong += 1
                if len(examples) < 10:
                    examples.append(f"{key} distinct {name}: {stored.get(name)} != {wanted}")
    return checked, wrong


def _judge_gauges(workload: Workload, patterns: PatternReads | None, examples: list[str]) -> tuple[int, int]:
    """Gauges checked and wrong: each against what the distinct counted gauge messages leave."""
    checked = wrong = 0
    if patterns is None:
        return checked, wrong
    for key, wanted_gauges in sorted(workload.expected_gauges.items()):
        stored = patterns.gauges(key)
        if key in workload.refused_keys:  # every gauge write refused: nothing may be stored
            checked += 1
            if any(stored.values()):
                wrong += 1
                examples.append(f"{key}: gauges {dict(stored)} stored though every write was refused")
            continue
        for kind, names in sorted(wanted_gauges.items()):
            for name, wanted_value in sorted(names.items()):
                checked += 1
                stored_value = stored.get(kind, {}).get(name)
                if stored_value != wanted_value:
                    wrong += 1
                    if len(examples) < 10:
                        examples.append(f"{key} gauge {kind} {name}: {stored_value!r} != {wanted_value!r}")
    return checked, wrong


def _with_reused_ids(
    workload: Workload, letters: Sequence[Letter], examples: list[str]
) -> tuple[dict[str, dict[str, Decimal]], int, int]:
    """The reference sums with, for each reused id, the content that was not dead-lettered; and how many
    pairs were resolved (exactly one content in the DLQ as ``id_conflict``), and won by the second."""
    conflicted = set()  # (message id, second content?) of every content in the DLQ as id_conflict
    for letter in letters:
        message = workload.by_body.get(letter.body)  # a re-send spelled differently is its first content
        if letter.code == ID_CONFLICT_CODE and message is not None:
            conflicted.add((message.message_id, message.reused))
    reference = {key: dict(counters) for key, counters in workload.expected.items()}
    resolved = second_won = 0
    for message_id, second in sorted(workload.alternates.items()):
        first = workload.valid[message_id]
        first_dead, second_dead = (message_id, False) in conflicted, (message_id, True) in conflicted
        if first_dead == second_dead:
            if len(examples) < 10:
                found = "both contents" if first_dead else "neither content"
                examples.append(f"reused id {message_id}: {found} in DLQ")
            continue
        resolved += 1
        if first_dead:  # the second content counts instead of the first
            second_won += 1
            for sums, sign in ((first.sums, -1), (second.sums, 1)):
                for key, counters in sums.items():
                    for name, value in counters.items():
                        reference.setdefault(key, {})
                        reference[key][name] = reference[key].get(name, Decimal(0)) + sign * value
    return reference, resolved, second_won
