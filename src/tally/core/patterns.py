"""Key patterns, as every declaration names the keys it applies to: an exact key, or a prefix ending in ``*``.

Hot keys, start values and default deltas, bounds and thresholds all match keys the same way; this is that way,
written once. Plain data for the core: parsed at the edge (``tally.config``).
"""

from __future__ import annotations

from dataclasses import dataclass

WILDCARD = "*"
"""Ends a pattern that matches every key starting with what comes before it."""


@dataclass(frozen=True, slots=True)
class KeyPattern:
    """``usage:*`` (every key starting ``usage:``) or ``page:/home`` (that key only)."""

    text: str

    def __str__(self) -> str:
        return self.text

    @property
    def prefix(self) -> str | None:
        """What a matching key starts with; None for an exact key."""
        return self.text[:-1] if self.text.endswith(WILDCARD) else None

    def matches(self, key: str) -> bool:
        prefix = self.prefix
        return key == self.text if prefix is None else key.startswith(prefix)

    def overlaps(self, other: KeyPattern) -> bool:
        """Whether some key could match both patterns."""
        mine, theirs = self.prefix, other.prefix
        if mine is None:
            return other.matches(self.text)
        if theirs is None:
            return self.matches(other.text)
        return mine.startswith(theirs) or theirs.startswith(mine)
