"""How commands read their arguments: a negative number where a positional argument is expected.

click takes every token that starts with ``-`` for an option, so ``tally publish stock:x -5`` failed with
``No such option: -5`` and only ``-- stock:x -5`` worked. A command of ``NumbersAsArguments`` reads a token that is
a negative number (``-5``, ``-2.5``, ``-1e3``) and names no option as an argument; any other token that looks like
an option and is not one is still refused, as click refuses it (``No such option: --countr Did you mean
--counter?``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

import click

if TYPE_CHECKING:
    from collections.abc import Mapping

NEGATIVE_NUMBER: Final = re.compile(r"-(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


class NumbersAsArguments(click.Command):
    """A command whose positional arguments may be negative numbers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["context_settings"] = {**(kwargs.get("context_settings") or {}), "ignore_unknown_options": True}
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        values = self._values_taken(ctx)
        skip = 0
        for token in args:
            if skip:
                skip -= 1
                continue
            if token == "--":
                break
            if not token.startswith("-") or token == "-" or NEGATIVE_NUMBER.fullmatch(token):
                continue
            name, attached, _ = token.partition("=")
            if name not in values:
                raise click.NoSuchOption(name, possibilities=sorted(values), ctx=ctx)
            skip = 0 if attached else values[name]
        return super().parse_args(ctx, args)

    def _values_taken(self, ctx: click.Context) -> Mapping[str, int]:
        """Each option name -> how many tokens after it are its value (0 for a flag)."""
        taken: dict[str, int] = {}
        for param in self.get_params(ctx):
            if isinstance(param, click.Option):
                count = 0 if param.is_flag or param.count else param.nargs
                taken.update((name, count) for name in (*param.opts, *param.secondary_opts))
        return taken
