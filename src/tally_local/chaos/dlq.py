"""The dead-letter queue of a chaos run: poison from the pipeline (with reasons) and exhausted SQS messages.

One queue, as in the template: the pipeline's dead-letter port (``tally.dead_letter_sender.SqsDeadLetterQueue`` in
production) writes poison with its ``tally.error_code``; SQS's redrive policy moves a message there,
without any reason, once it has been received ``maxReceiveCount`` times. ``ConsumerPort`` is the port one
consumer's pipeline gets: it may refuse a letter (a fault), and the pipeline must then report the record
failed so the source delivers it again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random
    from collections.abc import Sequence

    from tally.core.model import DeadLetter
    from tally_local.chaos.faults import FaultLog


@dataclass(frozen=True, slots=True)
class Letter:
    body: str
    code: str | None
    """The pipeline's reason code; None for a message moved by the redrive policy."""
    source: str


class DeadLetterStore:
    """The queue's contents; ``drain`` is a redrive (it takes everything out)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._letters: list[Letter] = []
        self._ever: list[Letter] = []

    def add(self, letter: Letter, *, again: bool = False) -> None:
        """``again``: a letter taken out by ``drain`` and put back unchanged (not a new refusal)."""
        with self._lock:
            self._letters.append(letter)
            if not again:
                self._ever.append(letter)

    def ever(self) -> list[Letter]:
        """Every letter the queue ever accepted, redriven ones included: a refusal a redrive later counted
        was still a wrong refusal (a count missing until someone redrove)."""
        with self._lock:
            return list(self._ever)

    def letters(self) -> list[Letter]:
        with self._lock:
            return list(self._letters)

    def drain(self) -> list[Letter]:
        with self._lock:
            letters, self._letters = self._letters, []
            return letters


def _text(body: str | bytes) -> str:
    return body if isinstance(body, str) else body.decode("utf-8", "surrogateescape")


class ConsumerPort:
    """One pipeline's dead-letter port onto the shared store, refusing letters at the configured rate."""

    def __init__(self, store: DeadLetterStore, refusal_rate: float, rng: random.Random, log: FaultLog) -> None:
        self._store = store
        self._refusal_rate = refusal_rate
        self._rng = rng
        self._log = log

    def send(self, letters: Sequence[DeadLetter]) -> frozenset[str]:
        refused = set()
        for letter in letters:
            if self._rng.random() < self._refusal_rate:
                refused.add(letter.record.record_id)
                self._log.add("delivery.dlq_refusal")
                continue
            source = letter.record.origin.get("source", "")
            self._store.add(Letter(_text(letter.record.body), str(letter.rejection.code), source))
        return frozenset(refused)
