"""The CLI reference page (docs/reference/cli.md), written from the click commands themselves.

Every command ``tally --help`` lists (its lazily imported ones included), each subcommand of a group, then
``tally-local`` and the demo: for each, its help, its usage, its arguments and every option with what click's
``--help`` says of it (default, range, required). The page is plain Markdown, so it reads the same on GitHub and
on the site; ``make cli-reference`` writes it, and tests/unit/test_cli_reference.py fails when it no longer
matches the commands (a command or option added, a help changed).

Why not mkdocs-click: it documents only the subcommands a group has already imported (``tally``'s are imported
when they run, so it showed ``tally get`` alone), prints click 8.2+'s ``Sentinel.UNSET`` for every option without
a default, and leaves GitHub readers a page of directives.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import click

if TYPE_CHECKING:
    from collections.abc import Iterator

PATH: Final = "docs/reference/cli.md"

_INTRO: Final = """\
# CLI reference

<!-- Written by `make cli-reference` (tally_local.cli_reference) from the commands themselves: do not edit by
hand. tests/unit/test_cli_reference.py fails when this page no longer matches them. -->

`tally` is installed with the `cli` extra (`pip install -e '.[cli]'`; `make install` puts it in `.venv`). Every
command reads the same variables as the Lambda function, finds a stack's resources with `--stack NAME` (or
`$TALLY_STACK`), and honours boto3's `AWS_ENDPOINT_URL` for local endpoints
([Pointing tally at the right stack](../runbook.md#pointing-tally-at-the-right-stack)). Each section below is
what the command's `--help` says, with every default."""

_LOCAL: Final = """\
## The local stack and the demo

`tally-local` (also `python -m tally_local.stack`) runs the template's resources and event source mappings on
this machine until Ctrl-C ([The local stack](../explanation/local-stack.md),
[its options and output](local-stack.md)); `python -m tally_local.demo` is `make demo`."""

_ESCAPED: Final = re.compile(r"([\\*\[\]]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|^#)", re.MULTILINE)
"""What Markdown could read as markup: emphasis (``*``, an ``_`` at a word's edge), links, a heading."""
_TAG: Final = re.compile(r"<(?=[A-Za-z/!?])")
"""A ``<`` Markdown would take for the start of an HTML tag (``<session>``)."""


@dataclass(frozen=True, slots=True)
class Documented:
    """A command, the context it runs in (its full name), and where it sits on the page."""

    command: click.Command
    context: click.Context


def _text(text: str) -> str:
    """Help text as Markdown shows it literally: code spans kept, everything else escaped."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(
        part
        if part.startswith("`") and part.endswith("`") and len(part) > 1
        else _TAG.sub("&lt;", _ESCAPED.sub(lambda match: "\\" + match[0], part))
        for part in parts
    )


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def walk(command: click.Command, name: str, parent: click.Context | None = None) -> Iterator[Documented]:
    """``command`` and every subcommand under it, depth first, subcommands in the order ``--help`` lists them
    (a lazy group's imported as ``tally NAME`` would import them)."""
    context = click.Context(command, info_name=name, parent=parent, show_default=True)
    yield Documented(command, context)
    if isinstance(command, click.Group):
        for sub in command.list_commands(context):
            found = command.get_command(context, sub)
            if found is not None and not found.hidden:
                yield from walk(found, sub, context)


def section(documented: Documented) -> list[str]:
    """One command's section: heading (its full name), help, usage, arguments, options (and subcommands)."""
    command, context = documented.command, documented.context
    lines = [f"## {_code(context.command_path)}", ""]
    help_text = inspect.cleandoc(command.help or command.short_help or "")
    for paragraph in help_text.split("\n\n"):
        if paragraph.strip() and paragraph.strip() != "\b":
            lines += [_text(paragraph.replace("\b\n", "")), ""]
    usage = " ".join(command.collect_usage_pieces(context))
    lines += ["```text", f"{context.command_path} {usage}".rstrip(), "```", ""]
    arguments = [param for param in command.get_params(context) if isinstance(param, click.Argument)]
    if arguments:
        named = ", ".join(
            _code(param.make_metavar(context)) + ("" if param.required else " (optional)") for param in arguments
        )
        lines += [f"Arguments: {named}.", ""]
    records = [
        record
        for param in command.get_params(context)
        if isinstance(param, click.Option) and not param.hidden and (record := param.get_help_record(context))
    ]
    if records:
        lines += ["Options:", ""]
        lines += [f"- {_code(names)}: {_text(help_text)}".rstrip(": ") for names, help_text in records]
        lines.append("")
    if isinstance(command, click.Group):
        subcommands = []
        for name in command.list_commands(context):
            found = command.get_command(context, name)
            if found is not None and not found.hidden:
                path = f"{context.command_path} {name}"
                anchor = re.sub(r"[^a-z0-9-]", "", path.lower().replace(" ", "-"))
                summary = found.get_short_help_str(limit=200)
                subcommands.append(f"- [{_code(path)}](#{anchor}): {_text(summary)}")
        lines += ["Commands:", "", *subcommands, ""]
    return lines


def render() -> str:
    """The whole page."""
    from tally.cli.main import cli  # noqa: PLC0415 - the page's commands, imported when it is written
    from tally_local.demo import main as demo  # noqa: PLC0415
    from tally_local.stack import main as stack  # noqa: PLC0415

    lines = [_INTRO, ""]
    for documented in walk(cli, "tally"):
        lines += section(documented)
    lines += [_LOCAL, ""]
    for command, name in ((stack, "tally-local"), (demo, "python -m tally_local.demo")):
        lines += section(Documented(command, click.Context(command, info_name=name, show_default=True)))
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
