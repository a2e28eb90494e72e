"""``tally-local``: the local stack as a command of its own (``make install`` puts it in ``.venv/bin``).

The same program as ``python -m tally_local.stack``, which it runs. It is installed with the ``tally`` package,
whose ``local`` extra brings what the stack runs on (moto, mirakuru): without them it says what to install
instead of failing with a traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from tally_local.stack import main as stack  # noqa: PLC0415 - the message below needs the import to fail here
    except ModuleNotFoundError as exc:
        sys.exit(f"tally-local needs the local stack's packages ({exc}): pip install 'tally[local]', or make install")
    stack(prog_name="tally-local")
