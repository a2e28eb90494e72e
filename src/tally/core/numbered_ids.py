"""Numbered message ids, and which idempotency marker item each message id is kept in.

A message's marker costs a transactional write of its own item: 2 write units per message at least, which
is most of what a single-event message costs. A producer that numbers its messages (the producer library
does: ``tally.producer.packing.NumberedIds``) gives ids of the form::

    <session>.<seq>

``session`` is exactly 32 lowercase hex digits (a random 128-bit value per publisher instance) and ``seq``
a decimal number from 0 to 10**15 - 1 with no leading zeros (so each (session, seq) pair has exactly one
spelling). Such an id is still a valid SQS FIFO deduplication id (at most 49 characters of [0-9a-f.]).
Consecutive seqs of one session share one **block** marker item: ``seq // BLOCK_SEQS`` names the block,
``seq % BLOCK_SEQS`` the message's attribute in it. Every other id (a random UUID, anything a producer
chose, a numbered-looking id spelt otherwise, such as ``<session>.007``) keeps a marker item of its own.

This module is the one pure mapping from a message id to its marker item (``marker_item``): the planner
(``tally.core.plan``) counts one transaction action per distinct marker item, and the store adapter
(``tally.store.schema``) writes one action per marker item, so both agree by construction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable

BLOCK_SEQS: Final = 16
"""Seqs per block item. A write is billed on the whole item (the larger of its old and new size), so a full
block must stay within 1 KB to cost 2 write units per transactional write: 16 seqs all claimed by journal
batches (the largest a seq's entry gets: 22 bytes of applied time and digest, a 24-character fenced batch id, 6
bytes of placing time, and their names) with the longest block id make 997 bytes
(``tests/integration/test_block_markers.py`` measures it, and a chunked batch's at 965). Direct markers alone (22
bytes a seq) would fit 40, but a block written past 1 KB would cost 4 units on every later write to it, and at 16 a
batch of 100 consecutive messages already shares 7 items."""

SESSION_HEX_DIGITS: Final = 32
MAX_SEQ: Final = 10**15 - 1
"""Largest seq: 15 digits, far beyond what one publisher instance sends (a billion a day for 2,700 years)."""

_NUMBERED: Final = re.compile(r"([0-9a-f]{32})\.(0|[1-9][0-9]{0,14})")
_BLOCK_PREFIX: Final = "s#"
_MESSAGE_PREFIX: Final = "m#"


@dataclass(frozen=True, slots=True)
class NumberedId:
    """A numbered message id, parsed: its session and sequence number."""

    session: str
    seq: int

    @property
    def block(self) -> int:
        return self.seq // BLOCK_SEQS

    @property
    def offset(self) -> int:
        """The message's place in its block: the name of its attribute on the block item."""
        return self.seq % BLOCK_SEQS

    def __str__(self) -> str:
        return f"{self.session}.{self.seq}"


def parse_numbered(message_id: str) -> NumberedId | None:
    """The session and seq of a numbered id in its one canonical spelling; None for every other id."""
    match = _NUMBERED.fullmatch(message_id)
    if match is None:
        return None
    return NumberedId(match.group(1), int(match.group(2)))


def numbered_id(session: str, seq: int) -> str:
    """The id of message ``seq`` of ``session`` (validated: ``parse_numbered`` gives them back)."""
    text = f"{session}.{seq}"
    if not 0 <= seq <= MAX_SEQ or parse_numbered(text) is None:
        raise ValueError(f"not a numbered id: session {session!r}, seq {seq}")
    return text


def block_item(session: str, block: int) -> str:
    """The ledger id of a block item: ``s#<session>#<block>``."""
    return f"{_BLOCK_PREFIX}{session}#{block}"


@lru_cache(maxsize=65_536)
def marker_item(message_id: str) -> str:
    """The ledger id of the item holding ``message_id``'s marker: its block's, or ``m#<id>`` of its own.

    Cached: the planner asks it several times per message of a batch (up to 10,000)."""
    numbered = parse_numbered(message_id)
    if numbered is None:
        return _MESSAGE_PREFIX + message_id
    return block_item(numbered.session, numbered.block)


def distinct_marker_items(message_ids: Iterable[str]) -> int:
    """How many marker items ``message_ids`` write: one transaction action each."""
    return len({marker_item(message_id) for message_id in message_ids})
