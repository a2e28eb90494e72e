"""The window-moves step: move ended windows off the key items the batch wrote (``tally.store.windows``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from tally.core.aggregate import key_items_with_windows
from tally.errors import RetryableStoreError, StoreError
from tally.post_commit.step import StepResult

if TYPE_CHECKING:
    from collections.abc import Iterable

    from tally.core.items import ItemKey
    from tally.core.model import Message, Rejection
    from tally.post_commit.step import SettledBatch
    from tally.store.requests import Attempt
    from tally.store.windows import WindowsMoved

logger = logging.getLogger(__name__)

WINDOW_ITEMS_CHECKED = "WindowItemsChecked"
"""Key items read to find ended windows: once per key item, container and hour."""
WINDOWS_MOVED = "WindowsMoved"
"""(key item, window) pairs moved off key items to their window items (or, past retention, removed)."""
WINDOW_MOVE_TRANSACTIONS = "WindowMoveTransactions"
WINDOW_ITEMS_WRITTEN = "WindowItemsWritten"
"""Window items the moves added to."""
WINDOW_MOVES_LEFT = "WindowMovesLeft"
"""Key items whose ended windows stay on them for now (a late event kept changing them, a conflict, an
error): still counted by every read, moved by a later batch."""

_NAMES = (WINDOW_ITEMS_CHECKED, WINDOWS_MOVED, WINDOW_MOVE_TRANSACTIONS, WINDOW_ITEMS_WRITTEN, WINDOW_MOVES_LEFT)


class WindowMover(Protocol):
    """The port that moves ended windows off the key items a batch wrote (``tally.store.windows``).

    Sends each request (the key items' read, each move transaction) through ``attempt``; a move ``attempt``
    gives up on is left on the key items (``WindowsMoved.left``). Raises ``StoreError`` when the key items could
    not be read.
    """

    def after_batch(self, items: Iterable[ItemKey], now_ms: int, attempt: Attempt) -> WindowsMoved: ...


class WindowStep:
    """Moves ended windows off the key items this batch's counted messages write.

    Optional work: a window left on a key's item is still read exactly, so this step settles every message
    whatever happens (what is not moved now is moved by a later batch, or by ``tally windows close``). A move
    that fails for now is sent again, as a member transaction is (``SettledBatch.attempt``), and nothing starts
    inside the time kept for reporting (a batch with less left moves nothing).
    """

    def __init__(self, mover: WindowMover | None) -> None:
        self._mover = mover
        """None: ended windows stay on key items (read exactly all the same) until something moves them."""

    def admit(self, message: Message) -> Rejection | None:
        return None

    def settle(self, batch: SettledBatch) -> StepResult:
        if self._mover is None:
            return StepResult(dict.fromkeys(_NAMES, 0))
        items = key_items_with_windows(net.totals for net in batch.totals)
        if not items:
            return StepResult(dict.fromkeys(_NAMES, 0))
        try:
            moved = self._mover.after_batch(items, batch.now_ms, batch.attempt)
        except RetryableStoreError as exc:  # no time left, or DynamoDB busy: a later batch moves them
            logger.info("ended windows left on their key items this batch: %s", exc)
            return StepResult(dict.fromkeys(_NAMES, 0))
        except StoreError as exc:
            logger.warning("ended windows not moved this batch (key items not read): %s", exc)
            return StepResult(dict.fromkeys(_NAMES, 0))
        counts = (moved.checked, moved.windows, moved.transactions, moved.window_items, moved.left)
        return StepResult(dict(zip(_NAMES, counts, strict=True)))
