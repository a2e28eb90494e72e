"""The package ``sam build`` makes, checked as deployed (arm64) and run the way Lambda runs it.

One module on purpose: its module-scoped fixtures put its tests in one ``xdist_group`` (tests/support/tiers.py),
which ``pytest -n 2 --dist loadgroup`` gives to one worker, so the two builds and the emulated functions are
made once per run. Never skipped: a missing python3.13 or SAM CLI fails here.

- the arm64 build (the template as deployed): native libraries are aarch64 ELF needing glibc <= 2.34
  (Lambda's python3.13 runs on Amazon Linux 2023), wheel tags say no more, the package is under Lambda's
  250 MB unzipped limit (its size is printed), it holds exactly the lock's pins, boto3 with the botocore
  it needs, and no module the handlers do not import (no ``tally/cli``, no ``tally_local``);
- a build for this machine's architecture (x86_64 here: a copy of the template with only
  ``Architectures`` changed) run under AWS's Runtime Interface Emulator with ``awslambdaric`` on
  python3.13, a stand-in runtime boto3 after the package on the path, a clean environment from the
  template, DynamoDB Local and moto's SQS: every file in ``events/`` twice (the redelivery changes
  nothing) and events the SAM CLI generates count exactly as ``events/expected.json`` says, and the read
  endpoint's function answers each request of ``events/read/`` as ``events/read/expected.json`` says.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tally.audit.objects import read_archive
from tally.audit.recount import recount
from tally.core.defaults import parse_counter_defaults
from tally.reader import CounterReader
from tally.reader.store_view import read_counters
from tally.store.dynamodb import DynamoDBCounterStore
from tally_local.template import function_definition, load_template, table_definitions
from tests.artifact.build import (
    DEPLOYED_ARCHITECTURE,
    FUNCTIONS,
    LOCK,
    REPO_ROOT,
    TEMPLATE,
    Build,
    ToolMissing,
    generate_event,
    host_architecture,
    lambda_runtime_dir,
    python313,
    runtime_interface_emulator,
    sam_build,
)
from tests.artifact.emulator import (
    EMULATED_TIMEOUT_S,
    EmulatedFunction,
    FunctionConfig,
    FunctionRuntime,
    lambda_environment,
)
from tests.artifact.lock import read_lock
from tests.artifact.package import (
    distributions,
    import_closure,
    lambda_marker_environment,
    manylinux_glibc,
    native_libraries,
    python_modules,
    unmet,
)
from tests.conftest import SUMMARY_PROPERTY
from tests.support.archive import PREFIX as ARCHIVE_PREFIX
from tests.support.events import EVENTS_DIR, load_event, sample_views
from tests.support.moto_server import client, drain_queue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tally_local.dynamodb_local import DynamoDBLocal

LAMBDA_GLIBC = (2, 34)
"""Amazon Linux 2023, the OS of Lambda's python3.13 runtime."""
LAMBDA_UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024
"""Lambda's limit on a function's deployment package (and layers), unzipped."""
ELF_MACHINES = {"arm64": "EM_AARCH64", "x86_64": "EM_X86_64"}
WHEEL_MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}
NEVER_SHIPPED = ("tally/cli", "tally_local")
EXPECTED: dict[str, Any] = json.loads((EVENTS_DIR / "expected.json").read_text(encoding="utf-8"))
SAMPLE_COUNTER_DEFAULTS = ";".join(
    dict.fromkeys(spec["counter_defaults"] for spec in EXPECTED.values() if "counter_defaults" in spec)
)
SAMPLE_COUNTER_BOUNDS = ";".join(
    dict.fromkeys(spec["counter_bounds"] for spec in EXPECTED.values() if "counter_bounds" in spec)
)
SAMPLE_COUNTER_VIEWS = ";".join(
    dict.fromkeys(spec["counter_views"] for spec in EXPECTED.values() if "counter_views" in spec)
)
HANDLER_SOURCES = {"sqs": "CounterFunction", "kinesis": "StreamCounterFunction"}


# --- builds --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def python() -> Path:
    try:
        return python313()
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def deployed_build(python: Path, tmp_path_factory: pytest.TempPathFactory) -> Build:
    """``sam build`` of template.yaml as it is deployed (arm64)."""
    return sam_build(tmp_path_factory.mktemp(DEPLOYED_ARCHITECTURE), DEPLOYED_ARCHITECTURE, python)


@pytest.fixture(scope="module")
def host_build(python: Path, deployed_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Build:
    """A build this machine can run (x86_64 here; the deployed build itself on an arm64 machine)."""
    try:
        architecture = host_architecture()
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    if architecture == deployed_build.architecture:
        return deployed_build
    return sam_build(tmp_path_factory.mktemp(architecture), architecture, python)


@pytest.fixture(scope="module")
def runtime(python: Path) -> FunctionRuntime:
    try:
        rie = runtime_interface_emulator(host_architecture())
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    lang_python, runtime_dir = lambda_runtime_dir(python)
    return FunctionRuntime(rie=rie, python=lang_python, runtime_dir=runtime_dir)


def _size_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file() and not path.is_symlink())


def _handler_module(function: str) -> str:
    handler = load_template(TEMPLATE)["Resources"][function]["Properties"]["Handler"]
    module: str = handler.rpartition(".")[0]
    return module


# --- the deployed (arm64) package ----------------------------------------------------------------------


@pytest.mark.parametrize("function", FUNCTIONS)
def test_native_libraries_are_for_lambdas_machine_and_glibc(deployed_build: Build, function: str) -> None:
    package = deployed_build.package(function)
    libraries = native_libraries(package)
    # msgspec and wrapt (aws-xray-sdk's) are compiled: a package without them was not installed from wheels.
    assert {library.path.split("/")[0] for library in libraries} >= {"msgspec", "wrapt"}
    wrong_machine = [lib for lib in libraries if lib.machine != ELF_MACHINES[deployed_build.architecture]]
    assert not wrong_machine, f"not {deployed_build.architecture}: {wrong_machine}"
    too_new = [lib for lib in libraries if lib.glibc is not None and lib.glibc > LAMBDA_GLIBC]
    assert not too_new, f"need a glibc newer than Lambda's {LAMBDA_GLIBC}: {too_new}"
    # The wheels' own promise agrees: no manylinux tag above 2.34, no other machine, no musllinux.
    for distribution in distributions(package).values():
        for tag in distribution.wheel_tags:
            platform = tag.rsplit("-", 1)[-1]
            if platform == "any":
                continue
            glibc = manylinux_glibc(tag)
            assert glibc is not None, f"{distribution.name}: {tag} is not a manylinux wheel"
            assert glibc <= LAMBDA_GLIBC, f"{distribution.name}: {tag} needs glibc {glibc}"
            assert platform.endswith(f"_{WHEEL_MACHINES[deployed_build.architecture]}"), f"{distribution.name}: {tag}"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_package_is_under_lambdas_size_limit(
    deployed_build: Build, function: str, record_property: Callable[[str, object], None]
) -> None:
    size = _size_bytes(deployed_build.package(function))
    # Printed at the end of the run (tests/conftest.py), under "measured".
    record_property(
        SUMMARY_PROPERTY,
        f"{function} package ({deployed_build.architecture}): {size:,} bytes unzipped ({size / 1024 / 1024:.1f} MiB)",
    )
    assert size < LAMBDA_UNZIPPED_LIMIT_BYTES


@pytest.mark.parametrize("function", FUNCTIONS)
def test_package_holds_exactly_the_lock(deployed_build: Build, function: str) -> None:
    shipped = {name: dist.version for name, dist in distributions(deployed_build.package(function)).items()}
    pinned = {name: pin.version for name, pin in read_lock(LOCK).items()}
    assert shipped == pinned


@pytest.mark.parametrize("function", FUNCTIONS)
def test_package_ships_boto3_with_the_botocore_it_needs(deployed_build: Build, function: str) -> None:
    """On Lambda the package comes first on the path: a botocore without its boto3 would run under the
    runtime's boto3, a pair nobody chose. Every distribution's requirements must be met inside the package
    (as ``pip check`` would say), so boto3's pin on botocore holds too."""
    shipped = distributions(deployed_build.package(function))
    assert ("boto3" in shipped) == ("botocore" in shipped), sorted(shipped)
    assert "boto3" in shipped, "aws-xray-sdk needs botocore: the package must ship boto3 with it"
    missing: list[str] = []
    for distribution in shipped.values():
        for requirement in distribution.requires:
            if requirement.marker is not None and not requirement.marker.evaluate(lambda_marker_environment()):
                continue
            if (has := unmet(requirement, shipped)) is not None:
                missing.append(f"{distribution.name} needs {requirement}, has {has}")
    assert not missing


@pytest.mark.parametrize("function", FUNCTIONS)
def test_package_meets_pyprojects_dependencies_with_their_extras(deployed_build: Build, function: str) -> None:
    """``aws-lambda-powertools[tracer]`` means aws-xray-sdk too: each extra's requirements are shipped."""
    shipped = distributions(deployed_build.package(function))
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    missing: list[str] = []
    for requirement in (Requirement(text) for text in project["dependencies"]):
        if (has := unmet(requirement, shipped)) is not None:
            missing.append(f"{requirement}: {has}")
            continue
        for extra in requirement.extras:
            for needed in shipped[canonicalize_name(requirement.name)].requires:
                if needed.marker is None or not needed.marker.evaluate(lambda_marker_environment(extra)):
                    continue
                if unmet(needed, shipped) is not None:
                    missing.append(f"{requirement.name}[{extra}] needs {needed}")
    assert not missing


@pytest.mark.parametrize("function", FUNCTIONS)
def test_package_ships_only_the_modules_the_handlers_import(deployed_build: Build, function: str) -> None:
    package = deployed_build.package(function)
    for path in NEVER_SHIPPED:
        assert not (package / path).exists(), f"{path} is in the package"
    handlers = [_handler_module(name) for name in FUNCTIONS]
    needed = import_closure(REPO_ROOT / "src", handlers, "tally")
    shipped = python_modules(package, "tally")
    assert sorted(shipped - needed) == [], "shipped, never imported by a handler: take it out of src/Makefile SHIPPED"
    assert sorted(needed - shipped) == [], "imported by a handler, not shipped: add it to src/Makefile SHIPPED"


# --- the package under Lambda's runtime (RIE + awslambdaric, python3.13) --------------------------------


def test_every_module_imports_with_only_the_package_and_the_runtime(
    host_build: Build, runtime: FunctionRuntime, tmp_path: Path
) -> None:
    """Each module of the package's ``tally``, imported by python3.13 in the function's environment, and
    boto3 and botocore both found in the package, not in the stand-in runtime behind it."""
    package = host_build.package("CounterFunction")
    # This machine's glibc may be newer than Lambda's: the run below cannot tell, the symbol versions can.
    libraries = native_libraries(package)
    assert {library.machine for library in libraries} == {ELF_MACHINES[host_build.architecture]}
    assert [lib for lib in libraries if lib.glibc is not None and lib.glibc > LAMBDA_GLIBC] == []
    modules = sorted(python_modules(package, "tally"))
    script = (
        "import importlib, json, sys\n"
        "for name in json.loads(sys.argv[1]): importlib.import_module(name)\n"
        "import boto3, botocore\n"
        "print(json.dumps({'boto3': boto3.__file__, 'botocore': botocore.__file__,"
        " 'versions': [boto3.__version__, botocore.__version__]}))\n"
    )
    config = FunctionConfig(
        name="CounterFunction",
        handler="tally.handlers.sqs.handler",
        package_dir=package,
        memory_mb=128,
        timeout_s=3,
        template_environment={},
    )
    result = subprocess.run(
        [str(runtime.python), "-c", script, json.dumps(modules)],
        env=lambda_environment(config, runtime),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert Path(found["boto3"]).is_relative_to(package), found
    assert Path(found["botocore"]).is_relative_to(package), found
    pinned = read_lock(LOCK)
    assert [Version(v) for v in found["versions"]] == [pinned["boto3"].version, pinned["botocore"].version]


class LocalResources:
    """The template's tables on DynamoDB Local, its dead-letter queue and archive bucket on moto's server, uniquely
    named."""

    def __init__(self, dynamodb_local: DynamoDBLocal, moto_endpoint: str) -> None:
        suffix = uuid.uuid4().hex[:10]
        self.dynamodb = dynamodb_local.client()
        self.dynamodb_endpoint = dynamodb_local.endpoint_url
        self.sqs = client("sqs", moto_endpoint)
        self.moto_endpoint = moto_endpoint
        self.s3 = client("s3", moto_endpoint)
        definitions = table_definitions(load_template(TEMPLATE))
        self.physical_ids = {
            "CountersTable": f"tally-artifact-counters-{suffix}",
            "MarkersTable": f"tally-artifact-markers-{suffix}",
            "NotificationsTable": f"tally-artifact-notifications-{suffix}",
            "EventsDeadLetterQueue": self.sqs.create_queue(QueueName=f"tally-artifact-dlq-{suffix}")["QueueUrl"],
            "ArchiveBucket": f"tally-artifact-archive-{suffix}",
        }
        self.s3.create_bucket(Bucket=self.physical_ids["ArchiveBucket"])
        for logical_id in ("CountersTable", "MarkersTable", "NotificationsTable"):
            definitions[logical_id].create(self.dynamodb, self.physical_ids[logical_id])
        self.store = DynamoDBCounterStore(
            self.dynamodb, self.physical_ids["CountersTable"], self.physical_ids["MarkersTable"], 86_400
        )

    def archived_counters(self, keys: list[str]) -> dict[str, dict[str, str]]:
        """Each key's all-time counters as the archive's recount gives them (what the built package archived)."""
        records = [
            record
            for record in read_archive(self.s3, self.physical_ids["ArchiveBucket"], ARCHIVE_PREFIX)
            if any(event.key in keys for event in record.events)
        ]
        counted = recount(records, defaults=parse_counter_defaults(SAMPLE_COUNTER_DEFAULTS)).counters
        return {key: {name: str(value) for name, value in counted.get(key, {}).items()} for key in keys}

    def counters(self, keys: list[str]) -> dict[str, dict[str, str]]:
        return {key: {name: str(value) for name, value in read_counters(self.store, key).items()} for key in keys}

    def views(self, spec: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """The views ``spec`` names, read as applications read them."""
        return sample_views(CounterReader(self.store.counters_table, client=self.dynamodb), spec)

    def distinct(self, keys: list[str]) -> dict[str, dict[str, str]]:
        """Each key's distinct counts, read as applications read them."""
        reader = CounterReader(self.store.counters_table, client=self.dynamodb)
        return {key: {name: str(value) for name, value in reader.get(key).distinct.items()} for key in keys}

    def dead_letter_codes(self) -> list[str]:
        """The codes of every message in the dead-letter queue, which is emptied."""
        letters = drain_queue(self.sqs, self.physical_ids["EventsDeadLetterQueue"])
        for letter in letters:
            self.sqs.delete_message(
                QueueUrl=self.physical_ids["EventsDeadLetterQueue"], ReceiptHandle=letter["ReceiptHandle"]
            )
        return sorted(letter["MessageAttributes"]["tally.error_code"]["StringValue"] for letter in letters)


@pytest.fixture(scope="module")
def resources(dynamodb_local: DynamoDBLocal, moto_endpoint: str) -> LocalResources:
    return LocalResources(dynamodb_local, moto_endpoint)


def _parameter_default(template: dict[str, Any], value: object) -> int:
    if isinstance(value, dict) and set(value) == {"Ref"}:
        value = template["Parameters"][value["Ref"]]["Default"]
    return int(str(value))


@pytest.fixture(scope="module")
def functions(
    host_build: Build, runtime: FunctionRuntime, resources: LocalResources, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, EmulatedFunction]]:
    """Both functions of the template under the RIE, each in one warm execution environment."""
    template = load_template(TEMPLATE)
    logs = tmp_path_factory.mktemp("rie-logs")
    started: dict[str, EmulatedFunction] = {}
    try:
        for function in FUNCTIONS:
            definition = function_definition(template, function, resources.physical_ids)
            config = FunctionConfig(
                name=function,
                handler=definition.handler,
                package_dir=host_build.package(function),
                memory_mb=_parameter_default(template, template["Globals"]["Function"]["MemorySize"]),
                # Not the template's timeout: these tests check answers, not speed (a cold start on a loaded
                # machine outlasted the read function's 10 s once); a timeout still says it was one.
                timeout_s=max(definition.timeout_seconds, EMULATED_TIMEOUT_S),
                # The sample events' CounterDefaults, CounterBounds and CounterViews (events/expected.json), as the
                # demo deploys them.
                template_environment={
                    **definition.environment,
                    "TALLY_COUNTER_DEFAULTS": SAMPLE_COUNTER_DEFAULTS,
                    "TALLY_COUNTER_BOUNDS": SAMPLE_COUNTER_BOUNDS,
                    "TALLY_COUNTER_VIEWS": SAMPLE_COUNTER_VIEWS,
                },
                endpoints={
                    "DYNAMODB": resources.dynamodb_endpoint,
                    "SQS": resources.moto_endpoint,
                    "S3": resources.moto_endpoint,
                },
            )
            started[function] = EmulatedFunction(config, runtime, logs / f"{function}.log").start()
        yield started
    finally:
        for emulated in started.values():
            emulated.stop()


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_each_sample_event_counts_under_the_emulator(
    functions: dict[str, EmulatedFunction], resources: LocalResources, event_file: str
) -> None:
    # GIVEN a sample event and the function of its source WHEN Lambda's runtime delivers it twice
    expected = EXPECTED[event_file]
    function = functions[HANDLER_SOURCES[expected["source"]]]
    event = load_event(event_file)
    answers = [function.invoke(event), function.invoke(event)]
    # THEN nothing is reported failed, and counters and dead letters are exactly as documented
    assert answers == [{"batchItemFailures": []}] * 2, function.log_tail()
    assert resources.counters(list(expected["counters"])) == expected["counters"]
    # AND the archive the package wrote recounts to the same counters (each counted message once, by its commit)
    assert resources.archived_counters(list(expected["counters"])) == expected["counters"]
    assert resources.distinct(list(expected.get("distinct", {}))) == expected.get("distinct", {})
    assert resources.views(expected) == expected.get("views", {})
    # Poison is dead-lettered on every delivery (it never gets a marker): twice.
    assert resources.dead_letter_codes() == sorted(expected["dead_letters"] * 2)


READ_EXPECTED: dict[str, Any] = json.loads((EVENTS_DIR / "read" / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("event_file", sorted(READ_EXPECTED))
def test_each_read_request_gets_its_answer_under_the_emulator(
    functions: dict[str, EmulatedFunction], resources: LocalResources, event_file: str
) -> None:
    # GIVEN the sample events the request reads, counted by the SQS function (a redelivery if already counted)
    expected = READ_EXPECTED[event_file]
    for counted in expected["after"]:
        assert functions["CounterFunction"].invoke(load_event(counted)) == {"batchItemFailures": []}
    # WHEN the read endpoint's function answers the function URL request under Lambda's runtime
    response = functions["ReadFunction"].invoke(load_event(f"read/{event_file}"))
    # THEN status and body are as documented (events/read/expected.json)
    assert (response["statusCode"], json.loads(response["body"])) == (expected["status"], expected["body"]), functions[
        "ReadFunction"
    ].log_tail()
    resources.dead_letter_codes()  # nothing is dead-lettered by these; keep the queue empty for the next test


def test_every_sample_event_file_was_run() -> None:
    on_disk = {path.name for path in EVENTS_DIR.glob("*.json")} - {"expected.json"}
    assert on_disk == set(EXPECTED)


@dataclass(frozen=True)
class GeneratedEvent:
    """A ``sam local generate-event`` command line and the one counter its event must add to."""

    source: str
    command: tuple[str, ...]
    key: str
    delta: str


SAM_EVENTS = [
    # The SQS body goes through the SAM CLI's own template renderer: it must be given as escaped JSON.
    GeneratedEvent(
        "sqs",
        ("sqs", "receive-message", "--body", r"{\"id\": \"sam-sqs-1\", \"key\": \"sam:sqs\", \"delta\": 3}"),
        "sam:sqs",
        "3",
    ),
    GeneratedEvent(
        "kinesis",
        ("kinesis", "get-records", "--data", '{"id": "sam-kinesis-1", "key": "sam:kinesis", "delta": 2.5}'),
        "sam:kinesis",
        "2.5",
    ),
]


@pytest.mark.parametrize("case", SAM_EVENTS, ids=lambda case: case.source)
def test_events_the_sam_cli_generates_count(
    functions: dict[str, EmulatedFunction], resources: LocalResources, case: GeneratedEvent
) -> None:
    # GIVEN an event `sam local generate-event` makes (its source timestamps are from 2015 and 2018)
    event = json.loads(generate_event(*case.command))
    function = functions[HANDLER_SOURCES[case.source]]
    # WHEN it is delivered twice THEN it counts once, and nothing is dead-lettered
    answers = [function.invoke(event), function.invoke(event)]
    assert answers == [{"batchItemFailures": []}] * 2, function.log_tail()
    assert resources.counters([case.key]) == {case.key: {"count": str(Decimal(case.delta))}}
    assert resources.dead_letter_codes() == []
