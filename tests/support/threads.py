"""Invocations side by side: the concurrency tests run one pipeline per thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

T = TypeVar("T")


def at_once(target: Callable[[T], object], args: Sequence[T]) -> None:
    """``target(arg)`` for each of ``args``, each on a thread of its own, and wait until all have returned.

    An exception raised on a thread is raised here (a bare ``threading.Thread`` would only print it).
    """
    with ThreadPoolExecutor(max_workers=len(args)) as pool:
        for _ in pool.map(target, args):
            pass
