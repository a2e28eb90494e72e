"""What the local stack hands ``sam local invoke``: an env-vars file it honours, and a line that runs it.

``sam local invoke --env-vars`` overrides only the variables the template declares for a function (an
undeclared one is silently ignored), so every variable the file sets must be declared in template.yaml.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from tally_local.resources import LocalResources
from tally_local.stack import ENDPOINT_VARIABLES, LOCAL_DEFAULTS, TEMPLATE, banner, sam_env_vars, sam_invoke_command
from tally_local.template import function_definition, load_template, with_parameters

PHYSICAL = {
    "CountersTable": "s-CountersTable",
    "MarkersTable": "s-MarkersTable",
    "NotificationsTable": "s-NotificationsTable",
    "EventsQueue": "http://127.0.0.1:2/123456789012/s-EventsQueue",
    "EventsDeadLetterQueue": "http://127.0.0.1:2/123456789012/s-EventsDeadLetterQueue",
    "EventStream": "s-EventStream",
    "ArchiveBucket": "s-archivebucket",
    "CounterFunction": "tally-local-CounterFunction",
    "StreamCounterFunction": "tally-local-StreamCounterFunction",
}


def _resources() -> LocalResources:
    template = with_parameters(load_template(TEMPLATE), LOCAL_DEFAULTS)
    return LocalResources("s", template, "http://127.0.0.1:1", "http://127.0.0.1:2", dict(PHYSICAL), {}, {})


def test_the_env_vars_file_sets_only_declared_variables_and_the_bridge_endpoints() -> None:
    resources = _resources()
    document = sam_env_vars(resources, "http://172.17.0.1:1", "http://172.17.0.1:2")
    assert set(document) == {"CounterFunction", "StreamCounterFunction"}
    for function, variables in document.items():
        declared = function_definition(resources.template, function, PHYSICAL).environment
        assert set(variables) <= set(declared), set(variables) - set(declared)
        assert variables["TALLY_COUNTERS_TABLE"] == "s-CountersTable"
        assert [variables[name] for name in ENDPOINT_VARIABLES] == [
            "http://172.17.0.1:1",
            "http://172.17.0.1:2",
            "http://172.17.0.1:2",
            "http://172.17.0.1:2",
        ]
        assert variables["TALLY_ARCHIVE_BUCKET"] == PHYSICAL["ArchiveBucket"]  # archived to the stack's moto S3


def test_the_invoke_line_uses_local_credentials_and_the_file() -> None:
    words = shlex.split(sam_invoke_command(Path("/x/sam-env.json"), "CounterFunction", "events/sqs-single.json"))
    assert words[:3] == ["AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_REGION=us-east-1"]
    assert words[3:] == [
        "sam", "local", "invoke", "CounterFunction", "-e", "events/sqs-single.json", "--env-vars", "/x/sam-env.json"
    ]  # fmt: skip


def test_the_banner_chooses_a_source_when_the_stack_has_both_and_gives_the_aws_cli_its_endpoint() -> None:
    lines = banner(_resources(), Path(".tally-local"), None)
    assert "  tally publish page:/home --stack s --to sqs" in lines
    (aws,) = [line for line in lines if line.strip().startswith("aws ")]
    assert "--endpoint-url http://127.0.0.1:2 " in aws
    assert LOCAL_DEFAULTS["BatchingWindowSeconds"] == LOCAL_DEFAULTS["StreamBatchingWindowSeconds"] == "1"
