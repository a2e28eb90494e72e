"""Port pickers for tests of a race on a port: the one a server of another test takes first."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


def ports_starting_with(first: int, then: Callable[[], int]) -> Callable[[], int]:
    """A stand-in for a module's free-port picker: ``first`` on the first call, what ``then`` picks after."""
    ports = iter([first])
    return lambda: next(ports, 0) or then()
