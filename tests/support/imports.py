"""What an import pulls in, seen from a fresh interpreter (a test process has imported everything already)."""

from __future__ import annotations

import ast
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


def loaded_by(statement: str, packages: Iterable[str]) -> list[str]:
    """The modules of the top-level ``packages`` loaded after ``statement`` runs in a new interpreter."""
    code = f"import sys\n{statement}\nprint(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(packages)!r}))"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded: list[str] = ast.literal_eval(output.strip())
    return loaded
