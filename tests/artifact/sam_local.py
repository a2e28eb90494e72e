"""``make sam-local``: every file of ``events/`` through ``sam local invoke`` against the local stack.

Opt-in (needs Docker and the python3.13 base image, which ``sam-local-setup.sh up`` builds without a
registry; not part of ``make test``). What it does, as a user following docs/how-to/sam-local-invoke.md
would: ``sam build`` of a copy of template.yaml set to this machine's architecture (the only base image
here), the local stack's resources (``tally_local.stack``, no pollers: the invokes are the only
deliveries) with relays on Docker's bridge address, the ``--env-vars`` file the stack writes, then for
each file of ``events/expected.json`` ``sam local invoke --skip-pull-image`` of its function, the answer
read (``sam local invoke`` exits 0 even when the handler fails) and the counters, distinct counts and
dead letters compared with ``events/expected.json``. Exits 1 on any difference; prints the time taken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from tally.reader import CounterReader
from tally.reader.store_view import read_counters
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.relay import TcpRelay, interface_address
from tally_local.resources import LOCAL_CREDENTIALS, LOCAL_REGION
from tally_local.stack import DOCKER_BRIDGE, LocalStack, sam_env_vars
from tests.artifact.build import (
    REPO_ROOT,
    generate_event,
    host_architecture,
    python313,
    sam_build,
    sam_cli,
    sam_process_environment,
)
from tests.support.events import sample_views

EVENTS_DIR = REPO_ROOT / "events"
GENERATED = [
    # docs/how-to/sam-local-invoke.md's recipe, word for word: the SQS body escaped, the Kinesis data not.
    (
        "sqs",
        ["sqs", "receive-message", "--body", r"{\"id\": \"sam-sqs-1\", \"key\": \"sam:sqs\", \"delta\": 3}"],
        {"sam:sqs": {"count": "3"}},
    ),
    (
        "kinesis",
        ["kinesis", "get-records", "--data", '{"id": "sam-kinesis-1", "key": "sam:kinesis", "delta": 2.5}'],
        {"sam:kinesis": {"count": "2.5"}},
    ),
]
HANDLER_FUNCTIONS = {"sqs": "CounterFunction", "kinesis": "StreamCounterFunction"}
INVOKE_TIMEOUT_S = 300


def _sample_setting(expected: dict[str, Any], name: str) -> str:
    """The CounterDefaults, CounterBounds or CounterViews the sample events need (as the demo deploys them)."""
    return ";".join(dict.fromkeys(spec[name] for spec in expected.values() if name in spec))


def _answer(stdout: str) -> Any:
    """The function's answer: the last line of ``sam local invoke``'s output that is JSON."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def _dead_letter_codes(sqs: Any, queue_url: str) -> list[str]:
    codes: list[str] = []
    while messages := sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=0
    ).get("Messages", []):
        for message in messages:
            codes.append(message["MessageAttributes"]["tally.error_code"]["StringValue"])
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    return sorted(codes)


def _generated_cases(work: Path) -> dict[str, dict[str, Any]]:
    """The documented ``sam local generate-event`` recipe, run as written, and what each event must count."""
    cases: dict[str, dict[str, Any]] = {}
    for source, arguments, counters in GENERATED:
        event = generate_event(*arguments)
        path = work / f"generated-{source}.json"
        path.write_text(event, encoding="utf-8")
        cases[path.name] = {"source": source, "counters": counters, "dead_letters": [], "path": path}
    return cases


def _problems(  # noqa: PLR0917 - the pieces one comparison reads
    spec: dict[str, Any],
    answers: list[Any],
    deliveries: int,
    store: DynamoDBCounterStore,
    reader: CounterReader,
    sqs: Any,
    dead_letter_queue_url: str,
) -> list[str]:
    """How the stack's state after one file's invokes differs from expected.json (empty: exact)."""
    problems = []
    if answers != [{"batchItemFailures": []}] * deliveries:
        problems.append(f"answers {answers}")
    counters = {
        key: {counter: str(value) for counter, value in read_counters(store, key).items()} for key in spec["counters"]
    }
    if counters != spec["counters"]:
        problems.append(f"counters {counters} != {spec['counters']}")
    distinct = {
        key: {set_name: str(value) for set_name, value in reader.get(key).distinct.items()}
        for key in spec.get("distinct", {})
    }
    if distinct != spec.get("distinct", {}):
        problems.append(f"distinct {distinct} != {spec.get('distinct')}")
    views = sample_views(reader, spec)
    if views != spec.get("views", {}):
        problems.append(f"views {views} != {spec.get('views')}")
    codes = _dead_letter_codes(sqs, dead_letter_queue_url)
    if codes != sorted(spec["dead_letters"] * deliveries):
        problems.append(f"dead letters {codes} != {sorted(spec['dead_letters'] * deliveries)}")
    return problems


@click.command()
@click.option("--deliveries", type=click.IntRange(1, 5), default=1, show_default=True, help="Invokes per file.")
@click.option("--only", multiple=True, help="Only these files of events/ (repeatable).")
@click.option(
    "--generated/--no-generated",
    default=True,
    show_default=True,
    help="Also invoke the events `sam local generate-event` makes from the documented recipe.",
)
def main(deliveries: int, only: tuple[str, ...], generated: bool) -> None:
    """Invoke every events/ file with sam local invoke against the local stack; compare with expected.json."""
    started = time.monotonic()
    bridge = interface_address(DOCKER_BRIDGE)
    if bridge is None:
        raise click.ClickException(f"no {DOCKER_BRIDGE} interface: Docker is not running (sam-local-setup.sh up)")
    expected_all: dict[str, Any] = json.loads((EVENTS_DIR / "expected.json").read_text(encoding="utf-8"))
    files = sorted(only or expected_all)
    cases: dict[str, dict[str, Any]] = {name: {**expected_all[name], "path": EVENTS_DIR / name} for name in files}
    work = Path(tempfile.mkdtemp(prefix="tally-sam-local-"))
    if generated:
        cases.update(_generated_cases(work))
    architecture = host_architecture()
    text = (REPO_ROOT / "template.yaml").read_text(encoding="utf-8")
    template = work / "template.yaml"
    template.write_text(text.replace("Architectures: [arm64]", f"Architectures: [{architecture}]"), encoding="utf-8")
    click.echo(f"sam build ({architecture}) into {work / 'build'}")
    build = sam_build(work, architecture, python313())
    click.echo(f"[{time.monotonic() - started:.0f} s] built")
    parameters = {
        "Source": "Both",
        "CounterDefaults": _sample_setting(expected_all, "counter_defaults"),
        "CounterBounds": _sample_setting(expected_all, "counter_bounds"),
        "CounterViews": _sample_setting(expected_all, "counter_views"),
    }
    failures: list[str] = []
    with (
        LocalStack(parameters, stack_name=f"tally-sam-local-{os.getpid()}") as resources,
        TcpRelay(resources.dynamodb_endpoint, host=bridge) as dynamodb_relay,
        TcpRelay(resources.aws_endpoint, host=bridge) as aws_relay,
    ):
        env_file = work / "sam-env.json"
        env_file.write_text(
            json.dumps(sam_env_vars(resources, dynamodb_relay.endpoint_url, aws_relay.endpoint_url)), encoding="utf-8"
        )
        store = DynamoDBCounterStore(
            resources.client("dynamodb"), resources.counters_table, resources.markers_table, 86_400
        )
        reader = CounterReader(resources.counters_table, client=resources.client("dynamodb"))
        sqs = resources.client("sqs")
        environment = sam_process_environment(os.environ) | {**LOCAL_CREDENTIALS, "AWS_REGION": LOCAL_REGION}
        click.echo(f"[{time.monotonic() - started:.0f} s] local stack {resources.stack_name} up")
        for name, spec in cases.items():
            function = HANDLER_FUNCTIONS[spec["source"]]
            command = [
                str(sam_cli()), "local", "invoke", function, "-t", str(build.build_dir / "template.yaml"),
                "-e", str(spec["path"]), "--env-vars", str(env_file), "--skip-pull-image",
            ]  # fmt: skip
            answers = []
            for _ in range(deliveries):
                result = subprocess.run(
                    command, env=environment, capture_output=True, text=True, timeout=INVOKE_TIMEOUT_S, check=False
                )
                answers.append(_answer(result.stdout))
            problems = _problems(spec, answers, deliveries, store, reader, sqs, resources.dead_letter_queue_url)
            if problems:
                problems.append(f"sam local invoke's log: {result.stderr[-1500:]}")
            verdict = "EXACT" if not problems else "DIFFERS"
            click.echo(f"[{time.monotonic() - started:.0f} s] {name} ({function}, {deliveries}x): {verdict}")
            failures += [f"{name}: {problem}" for problem in problems]
    elapsed = time.monotonic() - started
    for failure in failures:
        click.echo(failure, err=True)
    exact = len(cases) - len({failure.split(":")[0] for failure in failures})
    click.echo(f"{exact}/{len(cases)} events exact in {elapsed:.0f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
