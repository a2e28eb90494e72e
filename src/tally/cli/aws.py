"""The CLI's AWS clients, and what it says when AWS (or the local stack) cannot be reached.

A client gets tally's timeouts (``tally.client_config``) and the region from ``AWS_REGION`` before
``AWS_DEFAULT_REGION`` (as the AWS CLI v2 and the other SDKs read them; botocore alone reads only the
second), so the variables samconfig.toml and Lambda use work here too. ``AWS_ENDPOINT_URL`` (and
``AWS_ENDPOINT_URL_<SERVICE>``) point a client at a local endpoint, as boto3 does on its own.

The clients are botocore's, from one session for the whole command: boto3 would add nothing a client uses
here (its additions are resources and S3 transfers), and importing it (it loads s3transfer) and a session per
client (each reading botocore's service index again) cost a command more than its own work (``tally publish``
to the local stack: 0.65 s with them; tests/unit/test_cli_imports.py keeps boto3 out).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from botocore.session import Session

REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")


def region() -> str | None:
    """``$AWS_REGION``, else ``$AWS_DEFAULT_REGION``; ``None`` leaves it to the profile (``~/.aws/config``)."""
    return next((os.environ[name] for name in REGION_VARIABLES if os.environ.get(name)), None)


def _session() -> Session:
    """The command's botocore session: its credentials, config files and service data, read once (again when an
    ``AWS_*`` variable changed: a process running several commands, as the tests do, may change them between)."""
    return _session_for(tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith("AWS_"))))


@functools.lru_cache(maxsize=4)
def _session_for(aws_variables: tuple[tuple[str, str], ...]) -> Session:
    from botocore.session import Session

    return Session()


def client(service: str, *, connections: int | None = None) -> Any:
    """A client of ``service`` with tally's timeouts (and ``connections`` in its pool, for a command that
    sends that many requests at once); a usage error (not a traceback) without a region."""
    from botocore.config import Config
    from botocore.exceptions import NoRegionError

    from tally.client_config import CLIENT_CONFIG

    config = CLIENT_CONFIG if connections is None else CLIENT_CONFIG.merge(Config(max_pool_connections=connections))
    try:
        return _session().create_client(service, region_name=region(), config=config)
    except NoRegionError as exc:
        raise click.UsageError(
            "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), or a region in your AWS profile"
        ) from exc


def endpoint(service: str) -> str:
    """Where a client of ``service`` sends its requests: the local endpoint variable that points it, or AWS."""
    for variable in (f"AWS_ENDPOINT_URL_{service.upper()}", "AWS_ENDPOINT_URL"):
        if os.environ.get(variable):
            return f"{os.environ[variable]} (${variable})"
    return f"AWS {service} in {region() or 'the profile region'}"


def failure(what: str, service: str, exc: BaseException) -> click.ClickException:
    """``cannot <what>: <cause>``, naming the endpoint; a hint when nothing answered there.

    ``exc`` is tally's translated error or botocore's own: its botocore cause says what really failed (the
    store's translation words a lost connection as an unknown outcome, which fits a write, not a read)."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    cause: BaseException = exc
    while not isinstance(cause, BotoCoreError | ClientError) and cause.__cause__ is not None:
        cause = cause.__cause__
    message = f"cannot {what} at {endpoint(service)}: {cause}"
    if isinstance(cause, EndpointConnectionError):
        message += "\n" + nothing_answered(service)
    return click.ClickException(message)


def nothing_answered(service: str) -> str:
    """What to check when nothing answered at ``service``'s endpoint: the local stack, or the network."""
    if any(os.environ.get(v) for v in (f"AWS_ENDPOINT_URL_{service.upper()}", "AWS_ENDPOINT_URL")):
        return (
            "nothing answered there: is the local stack running (tally-local), and are its exports current in this"
            " shell?"
        )
    return "check the network and the region"
