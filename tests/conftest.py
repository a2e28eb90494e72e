"""Shared pytest fixtures, the test tiers and the Hypothesis profiles.

``dynamodb_local`` starts ONE DynamoDB Local JVM per test session (about 2-3 s and ~190 MB here), and
``ddb_tables`` gives each test its own freshly created, uniquely named tables on it, built from
``template.yaml`` so the tests exercise the deployed key schemas. Under pytest-xdist every worker
starts its own JVM on a port the kernel picks, so workers never share a port or a table.

Tiers (tests/support/tiers.py): a test that uses ``dynamodb_local``, a moto server or a ``sam build`` is marked
``dynamodb_local``, ``moto`` or ``build`` from its fixtures, and fails if it starts one without the marker;
``make test-fast`` runs the rest. Hypothesis: the profile named by ``TALLY_HYPOTHESIS_PROFILE`` (``dev`` when
unset, ``ci`` in ``make test``, ``thorough`` by hand) sets how many examples every property test draws.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import pytest
from aws_lambda_powertools import Metrics
from hypothesis import settings

from tally_local.dynamodb_local import SHORT_LIVED_JVM_OPTIONS, DynamoDBLocal
from tests.support import budget, tiers
from tests.support.botocore_data import parse_each_data_file_once
from tests.support.environment import MOTO_CREDENTIALS, set_environment
from tests.support.tables import DynamoDBTables, fresh_tables

if TYPE_CHECKING:
    from collections.abc import Iterator


parse_each_data_file_once()

# --- Hypothesis profiles ------------------------------------------------------------------------------------
# How many examples a property draws is the run's choice, not each test's: a quick look while editing (dev), the
# suite's run (ci), or a long search by hand before a release (thorough). A property whose every example writes
# to an emulator draws a fifteenth of it (tests/support/properties.py on_emulator).

HYPOTHESIS_PROFILE_VARIABLE = "TALLY_HYPOTHESIS_PROFILE"
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None, print_blob=True)
settings.register_profile("thorough", max_examples=3000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get(HYPOTHESIS_PROFILE_VARIABLE, "dev"))


@pytest.fixture(scope="session")
def dynamodb_local() -> Iterator[DynamoDBLocal]:
    """One DynamoDB Local (in memory, ``-sharedDb``) for the whole session; stopped at the end. Its JVM has the
    client compiler alone: the suite keeps every core busy, where the server compiler's CPU does not pay back."""
    with DynamoDBLocal(jvm_options=SHORT_LIVED_JVM_OPTIONS) as ddb:
        yield ddb


@pytest.fixture
def ddb_tables(dynamodb_local: DynamoDBLocal) -> Iterator[DynamoDBTables]:
    """Fresh counters and markers tables (schemas from template.yaml), deleted after the test."""
    if not dynamodb_local.running:
        pytest.fail(
            f"DynamoDB Local is no longer running (the JVM exited during the session): {dynamodb_local.exit_report()}"
        )
    with fresh_tables(dynamodb_local) as tables:
        yield tables


@pytest.fixture
def mocked_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's in-process ``mock_aws`` (no server, no port): test credentials and region, and no endpoint or stack
    variable from the caller's environment, so every boto3 client the test builds talks to the mock."""
    from moto import mock_aws  # noqa: PLC0415 - only the tests that use it pay for importing moto

    # Nothing of the caller's environment aims a client or a command elsewhere: no endpoint, region, profile,
    # stack or other TALLY_* setting.
    inherited = [name for name in os.environ if name.startswith(("AWS_ENDPOINT_URL", "TALLY_"))]
    set_environment(monkeypatch, MOTO_CREDENTIALS, without=[*inherited, "AWS_REGION", "AWS_PROFILE"])
    with mock_aws():
        yield


@pytest.fixture
def moto_aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every boto3 client the test builds (and every command it runs) talks to the session's moto server."""
    set_environment(
        monkeypatch,
        {"AWS_ENDPOINT_URL": moto_endpoint, **MOTO_CREDENTIALS},
        without=("AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_KINESIS", "AWS_PROFILE"),
    )
    return moto_endpoint


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """One moto server (SQS, Kinesis, CloudFormation, ...) on 127.0.0.1 and a port the kernel picks.

    Started on first use and stopped at the end of the session (per xdist worker); tests share it, so
    each creates its own uniquely named queues and streams.
    """
    import logging  # noqa: PLC0415 - only sessions that use moto's server pay for importing it

    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def serial_moto_endpoint() -> Iterator[str]:
    """A moto server that handles one request at a time (``tally_local.moto_server``), for tests where
    producers and pollers call it concurrently: moto's models are not thread-safe (concurrent Kinesis
    puts can get the same sequence number, and one record then replaces the other)."""
    from tally_local.moto_server import SerialMotoServer  # noqa: PLC0415

    with SerialMotoServer() as server:
        yield server.endpoint_url


# --- the IAM contract over the whole run (src/tally_local/kit/calls.py, tests/support/iam.py) --------------------
#
# Every AWS call of the session is recorded with the tally code that made it. Each xdist worker hands its
# recording to the controller (workeroutput); at the end of the run the controller (or the only process)
# evaluates the calls of the functions, the operator, and an application's producer and reader libraries
# against the template's roles and managed policies, for every Source, prints what is denied and what is granted but never used, and fails the run on a denial.
# tests/template/test_iam_contract.py drives both paths itself, so the contract is checked on any run that
# includes it; this hook adds every call site the rest of the suite reaches.

_AWS_CALLS_KEY = "tally_aws_calls"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        budget.OPTION,
        action="store_true",
        help="fail a fast-tier or slow test over its CPU budget, and the run when the fast tier is over its own "
        "(tests/support/budget.py; make test and make test-fast set it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    from tally_local.kit.calls import RECORDER, Recording  # noqa: PLC0415

    for marker, meaning in tiers.MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {meaning}")
    tiers.GUARD.install()
    config.stash[_budget_key] = budget.CpuBudget(enforce=config.getoption(budget.OPTION))
    config.pluginmanager.register(config.stash[_budget_key], "tally-cpu-budget")
    RECORDER.install()
    config.stash[_recording_key] = Recording.empty()
    config.stash[_report_key] = []


_recording_key = pytest.StashKey["Any"]()
_report_key = pytest.StashKey["list[str]"]()
_budget_key = pytest.StashKey[budget.CpuBudget]()


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown when xdist is not loaded
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist (controller): a worker finished; keep its recording."""
    output = getattr(node, "workeroutput", {})
    data = output.get(_AWS_CALLS_KEY)
    if data:
        node.config.stash[_recording_key].merge(json.loads(data))
    if budget.WORKER_KEY in output:
        budget.merge_worker(node.config.stash[_budget_key], output[budget.WORKER_KEY])


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tally_local.kit.calls import RECORDER, ROLES  # noqa: PLC0415

    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: hand the recording to the controller
        config.workeroutput[_AWS_CALLS_KEY] = json.dumps(RECORDER.to_json())  # type: ignore[attr-defined]
        config.workeroutput[budget.WORKER_KEY] = budget.to_json(config.stash[_budget_key])  # type: ignore[attr-defined]
        return
    if config.stash[_budget_key].failure() is not None:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    recording = config.stash[_recording_key]
    recording.merge(RECORDER.to_json())
    checked = [call for call in recording.calls if call.role in ROLES]
    if not checked:
        return
    from tests.support.iam import SOURCES, evaluate, transformed_template  # noqa: PLC0415

    report = config.stash[_report_key]
    transformed = transformed_template()
    failed = False
    for source in SOURCES:
        verdicts = evaluate(transformed, recording, source)
        report.append(f"Source={source}:")
        for verdict in verdicts:
            report.extend(f"  {line}" for line in verdict.lines())
            failed = failed or bool(verdict.denied or verdict.problems)
    # "tally/store/journal.py:133 write_pages" -> "tally/store/journal.py write_pages" (lines move)
    sites = sorted(
        {(call.role, call.site.split(":", 1)[0] + call.site[call.site.find(" ") :], call.operation) for call in checked}
    )
    report.append(f"{len(checked)} kinds of call from {len(sites)} call sites evaluated:")
    report.extend(f"  {role:8} {site} {operation}" for role, site, operation in sites)
    if failed:
        report.append("IAM contract FAILED: a call above is denied or cannot be mapped")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    report = config.stash.get(_report_key, [])
    if report:
        terminalreporter.section("IAM contract: every recorded AWS call against template.yaml")
        for line in report:
            terminalreporter.write_line(line)
    if _summaries:
        terminalreporter.section("measured")
        for line in sorted(_summaries):
            terminalreporter.write_line(line)
    if not hasattr(config, "workerinput"):
        terminalreporter.section("CPU and wall time per tier")
        for line in config.stash[_budget_key].lines():
            terminalreporter.write_line(line)


# --- figures a test measured, printed after the run ------------------------------------------------------
# A test records one with ``record_property(SUMMARY_PROPERTY, "text")``. Printing from the test itself is
# lost under pytest-xdist (a worker's output is captured); its report's user_properties reach the controller.

SUMMARY_PROPERTY = "summary"
_summaries: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _summaries.extend(str(value) for name, value in report.user_properties if name == SUMMARY_PROPERTY)


# --- tiers (tests/support/tiers.py) -------------------------------------------------------------------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.mark_by_fixtures(items)
    tiers.group_modules_sharing_fixtures(items)
    if getattr(config.option, "loadgroup", False):  # an xdist worker of --dist loadgroup
        tiers.name_groups_in_node_ids(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The guard judges what a test starts (in its setup, its call or its teardown) by that test's markers."""
    tiers.GUARD.item = item
    try:
        return (yield)
    finally:
        tiers.GUARD.item = None


@pytest.fixture(autouse=True)
def _metrics_start_empty() -> None:
    """Every Powertools ``Metrics`` of a process shares one metric set, which only a flush empties: a test that
    ran the counting path without the handler's ``log_metrics`` (in-process local functions, the report) left its
    figures for the next handler test of that worker to flush as its own (one CI run's ``IdConflicts`` read
    eight zeros before its 1). Powertools' testing guide clears it before each test."""
    Metrics().clear_metrics()


_RECURSION_LIMIT = sys.getrecursionlimit()


@pytest.fixture(autouse=True)
def _recursion_limit_left_alone() -> Iterator[None]:
    """msgspec's JSON nesting limit follows the interpreter's recursion limit: a test that raised it once made the
    later tests of its process decode, as numbers, 3,000-deep bodies that production refuses as malformed."""
    yield
    if sys.getrecursionlimit() != _RECURSION_LIMIT:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(_RECURSION_LIMIT)
        pytest.fail(f"the test changed the recursion limit from {_RECURSION_LIMIT} to {limit}")
