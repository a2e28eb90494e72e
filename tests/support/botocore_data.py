"""Each of botocore's data files parsed once per test process, however many botocore sessions read it.

botocore caches what it loads per session (its loader's ``instance_cache``), and the tests make sessions by the
hundred: moto's ``mock_aws`` resets boto3's default session at every start, and the CLI, run in-process by the
tests, makes a session per client, as a command line that lives for one command should. Each new session parses
``endpoints.json`` again (1.2 MB: about 19 ms) and each service model its clients use (DynamoDB's: 5 ms).
Installed for the test session by ``tests/conftest.py``; the product and the processes the tests start are
untouched.

The parsed documents are shared between sessions as botocore already shares them between the clients of one
session: read, never changed (a service model's extras are merged into it by the same keys each time).
"""

from __future__ import annotations

import functools
from typing import Any

from botocore.loaders import JSONFileLoader


def parse_each_data_file_once() -> None:
    """Make every ``JSONFileLoader`` answer a file it has loaded before from the process-wide cache."""
    if hasattr(JSONFileLoader.load_file, "cache_info"):
        return
    parse = JSONFileLoader.load_file

    @functools.cache
    def load_once(file_path: str) -> Any:
        return parse(_LOADER, file_path)

    def load_file(self: JSONFileLoader, file_path: str) -> Any:
        del self  # the loader keeps no state of its own: any instance parses alike
        return load_once(file_path)

    load_file.cache_info = load_once.cache_info  # type: ignore[attr-defined]
    JSONFileLoader.load_file = load_file  # type: ignore[method-assign]


_LOADER = JSONFileLoader()
