"""The release users run today, run as its Lambda handler runs: for the tests of a deploy that mixes it with this code.

``RELEASED_COMMIT`` is the commit whose code is deployed before the fenced apply (the lead's main when the fenced
path was switched on). Its ``src/tally`` is taken from git as it is (``git archive``), or, in a clone without that
history (a shallow clone), from ``released-src.tar.xz`` beside this file: the same archive, compressed, which
``tests/unit/test_released_snapshot.py`` compares with git's wherever the history is there, so it cannot drift. Its
SQS handler is imported and invoked in a process of its own, on the test's
DynamoDB Local, from an SQS event, with the environment the template gives it: exactly the code a container of
the previous release runs while a deploy is rolling out, or after a rollback of the code.

The child (this file run as a script) may be told to die, as a process dies, just after its n-th
``TransactWriteItems`` was answered (``os._exit``: nothing after it runs), to leave a batch of the old code half
finished. It prints one JSON line: the handler's response, or the exception that escaped it.
"""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, Final, cast

RELEASED_COMMIT: Final = "42b8b8848badc68254c80013a669c4a7a17eb7b2"
"""main before the fenced apply: what users run today."""
SNAPSHOT: Final = Path(__file__).with_name("released-src.tar.xz")
"""``git archive --format=tar RELEASED_COMMIT src/tally``, xz-compressed: the released code in a shallow clone."""
KILLED_EXIT: Final = 86
"""The child's exit status when it killed itself on cue."""
_REPOSITORY: Final = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class ReleasedInvocation:
    """What one invocation of the released handler did: its response, or the exception that escaped it (a
    function error: the source redelivers the whole batch), or killed on cue."""

    response: dict[str, Any] | None
    error: str | None
    killed: bool

    @property
    def failed_ids(self) -> list[str]:
        """The records the response hands back to the source (all of them on a function error)."""
        assert self.response is not None, self.error
        return [failure["itemIdentifier"] for failure in self.response["batchItemFailures"]]


def released_source(into: Path) -> Path:
    """``src`` of ``RELEASED_COMMIT``, extracted under ``into``: from git, or from the snapshot without the history."""
    archive = released_archive_from_git()
    if archive is None:
        archive = lzma.decompress(SNAPSHOT.read_bytes())
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def released_archive_from_git() -> bytes | None:
    """``git archive`` of ``RELEASED_COMMIT``'s ``src/tally`` (a tar), or None when this clone lacks the commit."""
    try:
        return subprocess.run(
            ["git", "-C", str(_REPOSITORY), "archive", "--format=tar", RELEASED_COMMIT, "src/tally"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def invoke_released_sqs(
    source: Path,
    event: dict[str, Any],
    *,
    endpoint_url: str,
    counters_table: str,
    markers_table: str,
    die_after_transactions: int | None = None,
) -> ReleasedInvocation:
    """One invocation of the released SQS handler on ``event``, in a new process (a new container)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_LAMBDA_FUNCTION_NAME": "tally-released",
        "TALLY_COUNTERS_TABLE": counters_table,
        "TALLY_MARKERS_TABLE": markers_table,
        "TALLY_DLQ_URL": "http://127.0.0.1:9/000000000000/tally-dlq",
        "POWERTOOLS_SERVICE_NAME": "tally",
        "POWERTOOLS_METRICS_NAMESPACE": "Tally",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    arguments = [sys.executable, str(Path(__file__).resolve()), str(source), str(die_after_transactions or 0)]
    done = subprocess.run(
        arguments, check=False, input=json.dumps(event), env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode == KILLED_EXIT:
        return ReleasedInvocation(None, None, killed=True)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    return ReleasedInvocation(outcome.get("response"), outcome.get("error"), killed=False)


class _Context:
    """The attributes of a Lambda context the handler and Powertools read."""

    function_name = "tally-released"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:tally-released"
    memory_limit_in_mb = 512
    aws_request_id = "released-invocation"
    log_group_name = "/aws/lambda/tally-released"
    log_stream_name = "released"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 60_000


def _child(source: str, die_after: int) -> None:
    # The released package first, and nothing of the tests' own directory on the path.
    sys.path[0] = source
    if die_after:
        import botocore.client  # noqa: PLC0415  (after the path is set: only the released tally is importable)

        # Every client's calls pass here (the released code builds its own session and clients).
        sent = getattr(botocore.client.BaseClient, "_make_api_call")  # noqa: B009  (private: not in botocore's stubs)
        transactions = 0

        def dying(client: Any, operation: str, params: Any) -> Any:
            nonlocal transactions
            answer = sent(client, operation, params)
            if operation == "TransactWriteItems":
                transactions += 1
                if transactions == die_after:
                    os._exit(KILLED_EXIT)
            return answer

        setattr(botocore.client.BaseClient, "_make_api_call", dying)  # noqa: B010  (as above)
    from tally.handlers import sqs  # noqa: PLC0415

    assert str(Path(sqs.__file__).resolve()).startswith(str(Path(source).resolve())), sqs.__file__
    event = json.loads(sys.stdin.read())
    try:
        response = sqs.handler(event, cast("Any", _Context()))
    except Exception as exc:  # what escapes the handler: the function error this reports
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return
    print(json.dumps({"response": response}))


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
