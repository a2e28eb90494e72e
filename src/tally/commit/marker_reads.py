"""When to read a batch's markers before writing it: only while messages applied before keep arriving.

The read (``CounterStore.read_markers``, one ``BatchGetItem`` per 100 messages) lets a batch settle its
producer re-sends, redeliveries and redrives without cancelling a whole transaction for each of them. On
a stream without any, it is one request per batch for nothing: a third of the requests of a batch of
single-event messages. The conditional marker writes guard exactly-once either way, so skipping the read
is always safe; it only moves the cost of a duplicate from a read to a cancelled transaction.

This module owns only that decision (``tally.commit.applier.Applier`` asks it once per batch and tells it what the
batch met); it must not read markers or know the store: the read is the protocol's first step
(``tally.commit.protocol.CommitProtocol.without_existing``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MarkerReadGate:
    """Reads while recent batches met existing markers; skips them after ``quiet_batches`` that met none.

    One gate lives as long as its ``Applier`` (a warm Lambda container), so it learns the stream it
    serves. A batch that meets a marker anyway (its transaction is cancelled by it) opens the gate again
    at once. The price of each choice, on-demand: reading 100 markers is 50 read units, the price of 10
    write units; a transaction cancelled by a marker is billed about one write unit per item, 100 to 150
    for a batch of single-event messages. Skipping is cheaper while fewer than one batch in 10 to 15
    meets a duplicate, which is what 10 quiet batches in a row suggest; it also saves a request and a
    round trip per batch.
    """

    quiet_batches: int = 10
    _quiet_run: int = 0

    @property
    def is_open(self) -> bool:
        """Whether the next batch should read its markers first."""
        return self._quiet_run < self.quiet_batches

    def observe(self, *, met_existing_markers: bool) -> None:
        """Record what a batch met: markers of messages applied before (by the read or by a write), or not."""
        self._quiet_run = 0 if met_existing_markers else self._quiet_run + 1
