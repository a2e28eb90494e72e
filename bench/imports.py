"""Import graph of ``src/tally``: every module with its line count, and every import cycle.

Why: each module should stand above what it uses. A cycle is counted even when one
edge is under ``TYPE_CHECKING`` or inside a function (a lazy import), because the rule is about
readers, not about what the interpreter tolerates. Stdlib ``ast`` only, so it runs anywhere.

Run: ``python -m bench.imports [--json]``.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "tally"


def module_name(path: Path) -> str:
    """Dotted module name of a file under ``src``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Package modules imported anywhere in ``path`` (top level, TYPE_CHECKING, functions)."""
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            # the longest known module prefix is the imported module
            t = target
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """Modules and their intra-package import edges."""
    mods = modules()
    known = set(mods)
    return mods, {n: imports_of(n, p, known) for n, p in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted.

    The recursion is as deep as the longest import chain (tens of modules), far below Python's default limit:
    the interpreter's limit is left alone (msgspec's JSON nesting limit follows it, so raising it here once
    made later tests in the same process decode bodies that production refuses).
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    """Print the table and the cycles; exit 1 if any cycle exists."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    mods, edges = graph()
    lines = {n: len(p.read_text().splitlines()) for n, p in mods.items()}
    found = cycles(edges)
    if args.json:
        print(
            json.dumps(
                {
                    "modules": {n: {"lines": lines[n], "imports": sorted(edges[n])} for n in mods},
                    "total_lines": sum(lines.values()),
                    "cycles": found,
                },
                indent=2,
            )
        )
    else:
        for n in mods:
            print(f"{lines[n]:6d}  {n}  -> {', '.join(sorted(edges[n])) or '-'}")
        print(f"{sum(lines.values()):6d}  total ({len(mods)} modules)")
        print(f"cycles: {len(found)}")
        for c in found:
            print("  " + " <-> ".join(c))
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
