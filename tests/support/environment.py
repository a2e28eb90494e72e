"""The process environment a test runs under: boto3 and the CLI read their settings from it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import pytest

MOTO_CREDENTIALS: Final = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Credentials and region for moto (any value is accepted; a real profile must never be used)."""


def set_environment(
    monkeypatch: pytest.MonkeyPatch, variables: Mapping[str, str], *, without: Iterable[str] = ()
) -> None:
    """``variables`` set and the variables named in ``without`` removed, until the test ends."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    for name in without:
        monkeypatch.delenv(name, raising=False)
