"""Security lint of the template with checkov: zero findings, and every suppression says why.

checkov runs on the CloudFormation that SAM generates (so the roles, policies and event source mappings
SAM writes are checked too), for ``Source=Both`` with ``StreamFailureDestination=S3``, where every resource
exists. Suppressions live beside
the resource they concern, in its ``Metadata.checkov.skip`` (SAM carries resource Metadata through the
transform), each with a comment; this file holds the list of suppressions the project has agreed to, so
a new one is a visible change here, not a silent one in the template.

checkov pins its own dependencies, so it lives in a venv of its own (``make checkov`` creates
``.venv-checkov``); ``TALLY_CHECKOV_BIN`` points the tests at it.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tally_local.template import load_template
from tests.template.conditions import parameter_values, prune
from tests.template.test_template import REPO_ROOT, TEMPLATE_PATH, sam_transform

# Each agreed suppression: (check, resource) -> what the template's comment must mention, so the reason
# stays about the resource it excuses.
AGREED: dict[tuple[str, str], str] = {
    **{("CKV_AWS_119", table): "AWS managed key" for table in ("CountersTable", "MarkersTable", "NotificationsTable")},
    **{
        ("CKV_AWS_27", queue): "SqsManagedSseEnabled"
        for queue in ("EventsQueue", "EventsDeadLetterQueue", "NotificationsDeadLetterQueue")
    },
    **{
        ("CKV_AWS_158", group): "never event bodies"
        for group in ("CounterFunctionLogGroup", "StreamCounterFunctionLogGroup")
    },
    # The bucket of given-up Kinesis batches (StreamFailureDestination=S3)
    ("CKV_AWS_18", "StreamFailureBucket"): "CloudTrail records both",
    ("CKV_AWS_21", "StreamFailureBucket"): "written once, under a unique key",
    ("CKV_AWS_18", "ArchiveBucket"): "CloudTrail records both",
    ("CKV_AWS_21", "ArchiveBucket"): "written once under a unique key",
    **{
        (check, function): reason
        for function in ("CounterFunction", "StreamCounterFunction")
        for check, reason in (
            ("CKV_AWS_116", "event source mapping"),
            ("CKV_AWS_117", "public endpoints"),
            ("CKV_AWS_115", "MaximumConcurrency"),
            ("CKV_AWS_173", "no secrets"),
        )
    },
    # The read endpoint (ReadEndpoint=FunctionUrl)
    ("CKV_AWS_158", "ReadFunctionLogGroup"): "never counts or callers' data",
    ("CKV_AWS_116", "ReadFunction"): "function URL only",
    ("CKV_AWS_117", "ReadFunction"): "public endpoint",
    ("CKV_AWS_115", "ReadFunction"): "default concurrency limit",
    ("CKV_AWS_173", "ReadFunction"): "no secrets",
}


def _checkov_executable() -> str | None:
    configured = os.environ.get("TALLY_CHECKOV_BIN")
    if configured:
        return str(Path(configured).resolve())  # relative to where pytest was started
    return shutil.which("checkov")


pytestmark = [
    pytest.mark.skipif(
        _checkov_executable() is None,
        reason="checkov not found: set TALLY_CHECKOV_BIN or put `checkov` on PATH (`make checkov` installs it "
        "into .venv-checkov)",
    ),
    pytest.mark.slow,  # checkov in a subprocess, from its own venv: tens of seconds (make test-fast skips it)
]


def checkov(templates: dict[str, dict[str, Any]], workdir: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Run checkov once on CloudFormation documents (by name); each one's results by outcome (passed/failed/skipped).
    One run for all: checkov's start (loading every check) is most of its CPU, seconds a run."""
    executable = _checkov_executable()
    assert executable is not None
    paths = {name: workdir / f"{name}.json" for name in templates}
    for name, template in templates.items():
        paths[name].write_text(json.dumps(template, default=str), encoding="utf-8")
    files = [argument for path in paths.values() for argument in ("--file", str(path))]
    result = subprocess.run(
        [executable, *files, "--framework", "cloudformation", "--output", "json", "--skip-download"],
        cwd=REPO_ROOT,
        # No Prisma Cloud API key, no network: checkov's built-in checks only.
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # checkov exits 1 when a check fails; anything else is checkov itself failing.
    assert result.returncode in (0, 1), result.stdout + result.stderr
    report = json.loads(result.stdout)
    results: dict[str, list[dict[str, Any]]] = report["results"]
    by_template: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {outcome: [] for outcome in results} for name in templates
    }
    names = {path.name: name for name, path in paths.items()}
    for outcome, checks in results.items():
        for check in checks:
            by_template[names[Path(check["file_path"]).name]][outcome].append(check)
    return by_template


def _resource_name(check: dict[str, Any]) -> str:
    """checkov names a resource ``AWS::Type.LogicalId``."""
    return str(check["resource"]).rsplit(".", 1)[-1]


@pytest.fixture(scope="module")
def full_stack() -> dict[str, Any]:
    template = load_template(TEMPLATE_PATH)
    stack = prune(
        sam_transform(template),
        parameter_values(
            template,
            Source="Both",
            StreamFailureDestination="S3",
            AlarmEmail="ops@example.com",
            ReadEndpoint="FunctionUrl",
        ),
    )
    # checkov would evaluate the Conditions itself, on the parameters' defaults (Source=SQS)
    for resource in stack["Resources"].values():
        resource.pop("Condition", None)
    stack.pop("Conditions", None)
    return stack


def weakened(full_stack: dict[str, Any]) -> dict[str, Any]:
    """The stack with point-in-time recovery off on the counters, the stream unencrypted and a wildcard grant in the
    stream function's role."""
    stack = copy.deepcopy(full_stack)
    resources = stack["Resources"]
    del resources["CountersTable"]["Properties"]["PointInTimeRecoverySpecification"]
    del resources["EventStream"]["Properties"]["StreamEncryption"]
    policy = resources["StreamCounterFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"]
    policy["Statement"].append({"Effect": "Allow", "Action": "*", "Resource": "*"})
    return stack


@pytest.fixture(scope="module")
def checked(
    full_stack: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """checkov's results for the stack and for its weakened copy, from one run."""
    return checkov({"stack": full_stack, "weakened": weakened(full_stack)}, tmp_path_factory.mktemp("checkov"))


@pytest.fixture(scope="module")
def results(checked: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    return checked["stack"]


def test_checkov_reports_no_finding(results: dict[str, list[dict[str, Any]]]) -> None:
    # GIVEN the stack with every resource WHEN checkov checks it THEN nothing fails
    failed = [f"{check['check_id']} {check['resource']}: {check['check_name']}" for check in results["failed_checks"]]
    assert failed == []
    # AND it did check something: the tables, queues, stream, functions and roles
    assert len(results["passed_checks"]) >= 20


def test_every_suppression_is_agreed_and_says_why(results: dict[str, list[dict[str, Any]]]) -> None:
    # GIVEN what checkov skipped on the template's say-so
    skipped = {
        (check["check_id"], _resource_name(check)): str(check["check_result"].get("suppress_comment") or "")
        for check in results["skipped_checks"]
    }
    # THEN exactly the agreed suppressions, each with its reason
    assert set(skipped) == set(AGREED)
    for (check_id, resource), comment in skipped.items():
        assert AGREED[check_id, resource] in " ".join(comment.split()), (check_id, resource, comment)


def test_checkov_catches_a_weakened_template(checked: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    # GIVEN the stack with point-in-time recovery off on the counters, the stream unencrypted and a
    # wildcard grant in the stream function's role (``weakened``), WHEN checkov checks it beside the stack
    results = checked["weakened"]
    # THEN each weakening is a finding
    failed = {(check["check_id"], _resource_name(check)) for check in results["failed_checks"]}
    assert ("CKV_AWS_28", "CountersTable") in failed, failed  # point-in-time recovery
    assert ("CKV_AWS_43", "EventStream") in failed, failed  # stream encryption
    assert any(resource == "StreamCounterFunctionRole" for _, resource in failed), failed  # wildcard grant
