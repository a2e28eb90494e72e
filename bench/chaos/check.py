"""The verdict of a chaos run: counters against the reference sums, and the dead-letter queue's contents.

- Every counter of every key equals the exact sum over distinct valid messages (doomed ones excepted).
  Lost and doubled *events* are read off ``count`` (each event adds exactly 1 to it): per key, what is
  missing is lost, what is extra is doubled. Keys only poison messages name must read empty.
- Every poison message is in the dead-letter queue, with the reason code README.md documents for it
  (more than one letter for one poison message is allowed: the queue is at-least-once).
- No valid message is in the dead-letter queue, unless it was injected as unrecoverable (doomed), and
  every doomed message is there with ``counter_out_of_range``. No Kinesis range is left given up.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from bench.chaos.workload import DOOMED_CODE, TRACER

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from bench.chaos.dlq import Letter
    from bench.chaos.workload import Workload


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
    examples: tuple[str, ...]
    """A few of the wrong counters, for diagnosis."""

    @property
    def ok(self) -> bool:
        return (
            self.counters_wrong == 0
            and self.lost_events == 0
            and self.doubled_events == 0
            and not self.stray_keys
            and self.poison_accounted == self.poison_messages
            and self.doomed_in_dlq == self.doomed
            and self.valid_in_dlq == 0
            and self.unknown_letters == 0
            and self.given_up_left == 0
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
) -> Verdict:
    """Compare what the store holds (``read``: all-time counters of a key) with the reference."""
    checked = wrong = lost = doubled = 0
    examples: list[str] = []
    for key, expected in sorted(workload.expected.items()):
        actual = {name: value for name, value in read(key).items() if value}
        wanted = {name: value for name, value in expected.items() if value}
        for name in sorted(set(actual) | set(wanted)):
            checked += 1
            have, want = actual.get(name, Decimal(0)), wanted.get(name, Decimal(0))
            if have != want:
                wrong += 1
                if len(examples) < 5:
                    examples.append(f"{key}/{name}: {have} != {want}")
            if name == TRACER:
                lost += int(max(Decimal(0), want - have))
                doubled += int(max(Decimal(0), have - want))
    stray = tuple(sorted(key for key in poison_keys(workload) if any(read(key).values())))

    codes_by_poison: dict[str, Counter[str | None]] = {body: Counter() for body in workload.poison}
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
        else:
            valid_in_dlq += 1
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
        examples=tuple(examples),
    )
