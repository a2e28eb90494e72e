"""Read a pinned, hash-checked requirements file (``uv pip compile --generate-hashes`` output)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if TYPE_CHECKING:
    from pathlib import Path

_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    """One ``name==version`` line of the lock, with its hashes, marker and what needs it."""

    name: str
    version: Version
    hashes: tuple[str, ...]
    marker: str | None
    via: tuple[str, ...]
    """uv's ``# via`` annotation: the pins that need this one, or the project file (``tally (pyproject.toml)``)."""


def read_lock(path: Path) -> dict[str, Pin]:
    """The lock's pins by canonical name, for a lock that pins each package once (``read_pins``: every line)."""
    pins = read_pins(path)
    by_name = {pin.name: pin for pin in pins}
    if len(by_name) != len(pins):
        raise ValueError(f"{path.name} pins a package twice (under markers): read it with read_pins")
    return by_name


def read_pins(path: Path) -> list[Pin]:
    """Every pin of the lock, in its order (a universal lock may pin one package at two versions under two
    markers). Raises ``ValueError`` on a line that pins nothing exactly."""
    entries: list[tuple[str, list[str]]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            comment = stripped.lstrip("#").strip()
            if entries and raw.startswith("    #"):  # uv's annotation under the last pin
                via = entries[-1][1]
                if comment.startswith("via "):
                    via.append(comment.removeprefix("via ").strip())
                elif comment and comment != "via":
                    via.append(comment)
            continue
        pending = f"{pending} {stripped.removesuffix(chr(92))}" if pending else stripped.removesuffix(chr(92))
        if stripped.endswith(chr(92)):
            continue
        if pending.strip():
            entries.append((pending.strip(), []))
        pending = ""
    pins: list[Pin] = []
    for line, via in entries:
        hashes = tuple(_HASH.findall(line))
        requirement = Requirement(_HASH.sub("", line).strip())
        specifiers = list(requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==":
            raise ValueError(f"{path.name}: {requirement} is not pinned with ==")
        name = canonicalize_name(requirement.name)
        pins.append(
            Pin(
                name=name,
                version=Version(specifiers[0].version),
                hashes=hashes,
                marker=str(requirement.marker) if requirement.marker else None,
                via=tuple(via),
            )
        )
    return pins
