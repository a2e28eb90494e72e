"""The corrections the audit's commands publish, and the deterministic ids that make each count once.

``tally void`` and ``tally audit --fix`` change counters only through the normal pipeline, as operator
corrections (docs/explanation/counter-patterns.md, "Corrections and resets"): each is a message of its own,
counted exactly once under its id, archived like any other. Their ids are derived from what they correct, never
drawn, so running a command again publishes the same ids, which the consumer drops as duplicates:

- ``tally-void:<h>:<n>``: the ``n``-th correction undoing the counting (message id, commit) whose digest is
  ``h``. A void is counted and recounted like any correction: it moves the table and the recount alike.
- ``tally-repair:<h>``: a repair of one counter of one key (a correction at one time, or a reset of its
  all-time value: ``tally.audit.repairs``), ``h`` the digest of (key, counter, time, kind, amount,
  generation), the generation being how many repairs of that same (key, counter, time) the archive already
  holds, so a later drift of the same size is repaired again. **The audit leaves repairs out of its
  recount**: a repair brings the table back to what the archive says; recounted too, it would move both and
  leave the drift where it was.

Both prefixes are the operator's: a producer should not give its messages ids that begin with them.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tally.core.archive import ArchiveRecord
    from tally.core.numbers import Number

VOID_PREFIX: Final = "tally-void:"
REPAIR_PREFIX: Final = "tally-repair:"
_DIGEST_CHARS: Final = 32


@dataclass(frozen=True, slots=True)
class PlannedCorrection:
    """An operator message to publish: ``Event.correct(key, deltas, id=message_id, ts=ts_ms)``, or with
    ``reset`` ``Event.reset_to(key, deltas, ...)`` (``deltas`` then the values the counters are set to)."""

    message_id: str
    key: str
    deltas: Mapping[str, Number]
    ts_ms: int | None
    """The time that places it in its windows (None: the time the source accepts it)."""
    reset: bool = False


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]


def void_prefix(message_id: str, commit: str) -> str:
    """The prefix of every correction voiding the counting (``message_id``, ``commit``)."""
    return f"{VOID_PREFIX}{_digest(message_id, commit)}:"


def void_id(message_id: str, commit: str, index: int) -> str:
    return f"{void_prefix(message_id, commit)}{index}"


def repair_id(
    key: str, counter: str, ts_ms: int | None, amount: Number, generation: int, *, reset: bool = False
) -> str:
    kind = "reset" if reset else "correct"
    return REPAIR_PREFIX + _digest(key, counter, str(ts_ms), kind, _canonical(amount), str(generation))


def _canonical(number: Number) -> str:
    """One text per value (1.50 and 1.5 are one delta)."""
    text = format(number, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def is_repair(record: ArchiveRecord) -> bool:
    """Whether an archived counting is a repair (``tally audit --fix``): left out of the audit's recount."""
    return record.id.startswith(REPAIR_PREFIX)


def repair_slots(record: ArchiveRecord) -> list[tuple[str, str, int | None]]:
    """The (key, counter, time) a repair's record corrects: what its generation counts."""
    return [(event.key, counter, event.ts) for event in record.events for counter in (event.reset or event.deltas)]
