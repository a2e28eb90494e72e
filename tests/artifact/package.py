"""Read a built Lambda package as Lambda would load it: its native libraries, its distributions, its modules.

Pure inspection of a directory (no build, no process): the tests in this folder build the package with
``sam build`` and hand the directory here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import TYPE_CHECKING

from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

ELF_MAGIC = b"\x7fELF"
_GLIBC_VERSION = re.compile(r"^GLIBC_(\d+)\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True)
class NativeLibrary:
    """One ELF file in the package: the machine it runs on and the newest glibc symbol version it needs."""

    path: str
    machine: str
    """pyelftools' name for ``e_machine``: ``EM_AARCH64``, ``EM_X86_64``, ..."""
    glibc: tuple[int, ...] | None
    """The highest ``GLIBC_x.y`` it requires from libc (versioned symbol needs), ``None`` if it needs none."""


def native_libraries(root: Path) -> list[NativeLibrary]:
    """Every ELF file under ``root`` (by its magic bytes, whatever its name: ``.so``, ``.so.1``, executables)."""
    found: list[NativeLibrary] = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        with path.open("rb") as handle:
            if handle.read(4) != ELF_MAGIC:
                continue
            handle.seek(0)
            elf = ELFFile(handle)
            found.append(
                NativeLibrary(
                    path=str(path.relative_to(root)),
                    machine=str(elf["e_machine"]),
                    glibc=_newest_glibc_needed(elf),
                )
            )
    return found


def _newest_glibc_needed(elf: ELFFile) -> tuple[int, ...] | None:
    """The glibc a library needs is the newest ``GLIBC_*`` version among its ``.gnu.version_r`` needs:
    the dynamic loader refuses to load it on an older glibc (that is what manylinux tags promise)."""
    versions: list[tuple[int, ...]] = []
    for section in elf.iter_sections():
        if not isinstance(section, GNUVerNeedSection):
            continue
        for _needed, auxiliaries in section.iter_versions():
            for auxiliary in auxiliaries:
                match = _GLIBC_VERSION.match(str(auxiliary.name))
                if match:
                    versions.append(tuple(int(part) for part in match.groups() if part is not None))
    return max(versions) if versions else None


@dataclass(frozen=True)
class Distribution:
    """One installed distribution (``*.dist-info``) in the package."""

    name: str
    """Canonical name (``aws-lambda-powertools``)."""
    version: Version
    requires: tuple[Requirement, ...]
    wheel_tags: tuple[str, ...]


def distributions(root: Path) -> dict[str, Distribution]:
    """The package's distributions by canonical name, from their ``METADATA`` and ``WHEEL`` files."""
    found: dict[str, Distribution] = {}
    parser = HeaderParser()
    for info in sorted(root.glob("*.dist-info")):
        metadata = parser.parsestr((info / "METADATA").read_text(encoding="utf-8"))
        wheel = parser.parsestr((info / "WHEEL").read_text(encoding="utf-8"))
        name = canonicalize_name(metadata["Name"])
        found[name] = Distribution(
            name=name,
            version=Version(metadata["Version"]),
            requires=tuple(Requirement(value) for value in metadata.get_all("Requires-Dist") or []),
            wheel_tags=tuple(wheel.get_all("Tag") or []),
        )
    return found


def lambda_marker_environment(extra: str = "") -> dict[str, str]:
    """The environment markers evaluate to on Lambda's python3.13, with ``extra`` asked for."""
    return {**default_environment(), "python_version": "3.13", "python_full_version": "3.13.0", "extra": extra}


def unmet(requirement: Requirement, shipped: Mapping[str, Distribution]) -> str | None:
    """None if ``shipped`` holds a version of the distribution ``requirement`` names that it allows, else the
    version it holds (``nothing`` when it holds none)."""
    found = shipped.get(canonicalize_name(requirement.name))
    if found is not None and requirement.specifier.contains(found.version, prereleases=True):
        return None
    return str(found.version) if found is not None else "nothing"


def manylinux_glibc(tag: str) -> tuple[int, int] | None:
    """The glibc a wheel's platform tag promises to need at most (``manylinux2014`` is 2.17), ``None``
    for a tag that is not manylinux (``any``)."""
    platform = tag.rsplit("-", 1)[-1]
    if platform.startswith("manylinux2014_"):
        return (2, 17)
    if platform.startswith(("manylinux2010_", "manylinux1_")):
        return (2, 12) if platform.startswith("manylinux2010_") else (2, 5)
    match = re.match(r"^manylinux_(\d+)_(\d+)_", platform)
    return (int(match.group(1)), int(match.group(2))) if match else None


def python_modules(root: Path, package: str) -> set[str]:
    """Dotted names of every module of ``package`` under ``root`` (``tally.core.model``, packages too)."""
    modules: set[str] = set()
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def import_closure(root: Path, entry_modules: Iterable[str], package: str) -> set[str]:
    """Every module of ``package`` the entry modules import, directly or not, at import time or later.

    Read from the source (``ast``), not from ``sys.modules`` after an import: modules imported inside a
    function count too.
    Imports under ``if TYPE_CHECKING:`` do not: they never run. Each module's parent packages count,
    because importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py``.
    """
    seen: set[str] = set()
    pending = list(entry_modules)
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        path = _module_path(root, module)
        if path is None:
            continue
        seen.add(module)
        pending.extend(_parents(module))
        for imported in _runtime_imports(path, module, is_package=path.name == "__init__.py"):
            for candidate in (imported, imported.rpartition(".")[0]):
                if candidate.split(".")[0] == package and _module_path(root, candidate) is not None:
                    pending.append(candidate)
    return seen


def _module_path(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def _runtime_imports(path: Path, module: str, *, is_package: bool) -> list[str]:
    """Modules named by the import statements that can run (``from a import b`` names ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in _walk_outside_type_checking(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _absolute(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    anchor = ".".join(parts[: len(parts) - (level - 1)])
    return f"{anchor}.{module}" if module else anchor


def _walk_outside_type_checking(tree: ast.AST) -> Iterable[ast.AST]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                stack.extend(child.orelse)  # the else branch does run
                continue
            stack.append(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
