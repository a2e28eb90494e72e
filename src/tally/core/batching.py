"""Requests cut to a service's limits: consecutive groups of at most so many entries and so many bytes.

SQS's ``SendMessageBatch`` (10 entries, 256 KiB), Kinesis's ``PutRecords`` (500 records, 5 MiB) and the like:
the producers, the dead-letter sender and the operators' redrive all cut their entries the same way, here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

Entry = TypeVar("Entry")


def group(
    entries: Iterable[Entry], max_entries: int, max_bytes: int, size: Callable[[Entry], int]
) -> Iterator[list[Entry]]:
    """Consecutive groups of at most ``max_entries`` and ``max_bytes`` (an oversized entry goes alone), in order."""
    batch: list[Entry] = []
    total = 0
    for entry in entries:
        entry_size = size(entry)
        if batch and (len(batch) == max_entries or total + entry_size > max_bytes):
            yield batch
            batch, total = [], 0
        batch.append(entry)
        total += entry_size
    if batch:
        yield batch
