"""What the local stack's pieces share: started, used inside a ``with`` block, always stopped.

DynamoDB Local, moto's server, the relays, the event source mappings and the function runtime each start
something in the background (a JVM, a server thread, pollers, worker processes) that must end with the
block that used it, whatever happened inside.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from types import TracebackType


class BackgroundService(ABC):
    """``with service:`` starts it and stops it on the way out (``stop`` is safe to call twice)."""

    @abstractmethod
    def start(self) -> Self:
        """Start in the background; return self once it answers."""

    @abstractmethod
    def stop(self) -> None:
        """Stop and wait for what was started. Safe to call twice."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
