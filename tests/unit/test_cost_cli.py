"""``tally plan``: the command's JSON document (its schema) and its table; no AWS call is made."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tally.cli.main import cli
from tally.cli.plan import plan
from tally.cost.model import Traffic, price

# Each test runs the planner over every allowed setting through the CLI: seconds of CPU each (make test-fast skips it).
pytestmark = pytest.mark.slow


SCHEMA = {
    "traffic": dict,
    "parameters": dict,
    "hot_keys": dict,
    "per_event": dict,
    "per_batch": dict,
    "per_month": dict,
    "usd_per_million_events": float,
    "latency_seconds": float,
    "assumptions": list,
    "floor": dict,
    "producer": dict,
    "levers": list,
    "duration": dict,
}
NUMBERS = {
    "per_event": {"write_units", "read_units"},
    "per_batch": {"records", "events", "transactions", "single_writes", "requests", "handler_seconds"},
    "per_month": {
        "events",
        "dynamodb_usd",
        "lambda_invocations",
        "lambda_gb_seconds",
        "lambda_usd",
        "archive_puts",
        "archive_gb",
        "archive_usd",
        "total_usd",
    },
    "floor": {"write_units", "ratio", "batch_size", "batching_window_seconds", "latency_seconds"},
    "producer": {"keys_per_message", "max_keys_per_message"},
    "duration": {"handler_seconds", "proxy_low_seconds", "proxy_high_seconds"},
}


def plan_json(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["plan", "--json", *args])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert isinstance(document, dict)
    return document


@pytest.mark.parametrize(
    "args",
    [
        ("--events-per-second", "200", "--keys", "1000"),
        ("--events-per-second", "200", "--keys", "1000", "--events-per-message", "50", "--windows", ""),
        ("--events-per-second", "3000", "--keys", "50", "--source", "Kinesis", "--latency-budget", "5"),
        ("--events-per-second", "10", "--keys", "5", "--batch-size", "10", "--resend-rate", "0.05"),
    ],
)
def test_the_json_document_has_its_schema(args: tuple[str, ...]) -> None:
    document = plan_json(*args)
    assert {name: type(document[name]) for name in SCHEMA} == SCHEMA
    assert set(document) == set(SCHEMA)
    for section, names in NUMBERS.items():
        values = document[section]
        assert isinstance(values, dict)
        assert set(values) == names
        assert all(isinstance(values[name], int | float) and values[name] >= 0 for name in names)
    parameters = document["parameters"]
    assert isinstance(parameters, dict)
    assert all(isinstance(value, str) for value in parameters.values())  # as --parameter-overrides takes them
    assert parameters["Source"] in ("SQS", "Kinesis")
    batch = parameters["BatchSize" if parameters["Source"] == "SQS" else "StreamBatchSize"]
    assert 1 <= int(batch) <= 10_000


def test_a_given_batch_size_is_priced_as_given() -> None:
    document = plan_json("--events-per-second", "100", "--keys", "10", "--batch-size", "50", "--windows", "hour")
    assert document["parameters"] == {
        "Source": "SQS",
        "BatchSize": "50",
        "BatchingWindowSeconds": "1",
        "MaximumConcurrency": "2",
        "Windows": "hour",
        "MemorySize": "512",
    }


def test_the_table_names_the_parameters_and_the_bill() -> None:
    result = CliRunner().invoke(cli, ["plan", "--events-per-second", "100", "--keys", "100", "--batch-size", "100"])
    assert result.exit_code == 0, result.output
    for text in ("BatchSize", "write units / event", "DynamoDB $ / month", "Lambda GB-s / month", "assumed:"):
        assert text in result.output


@pytest.mark.slow  # tally plan searches the batch settings
def test_the_floor_and_the_producers_key_cap_are_reported() -> None:
    document = plan_json("--events-per-second", "10000", "--keys", "1000", "--events-per-message", "1000")
    lowest, producer, per_event = document["floor"], document["producer"], document["per_event"]
    assert isinstance(lowest, dict)
    assert isinstance(producer, dict)
    assert isinstance(per_event, dict)
    assert lowest["ratio"] == pytest.approx(per_event["write_units"] / lowest["write_units"])
    assert lowest["ratio"] >= 1 - 1e-9
    # 1,000 events span about 280 of 1,000 Zipf keys; the cap leaves room for a message above the mean
    assert producer["max_keys_per_message"] >= 1.2 * producer["keys_per_message"]
    result = CliRunner().invoke(
        cli, ["plan", "--events-per-second", "10000", "--keys", "1000", "--events-per-message", "1000"]
    )
    assert "max_keys_per_message=" in result.output
    assert "write units / floor" in result.output


def test_an_unknown_window_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["plan", "--events-per-second", "1", "--keys", "1", "--windows", "week"])
    assert result.exit_code != 0
    assert "week" in result.output


@pytest.mark.slow  # tally plan searches the batch settings
def test_the_defaults_are_what_the_producer_library_sends() -> None:
    """The library numbers its ids: a plan with no id option prices numbered ids, and says so."""
    document = plan_json("--events-per-second", "100", "--keys", "100")
    assert document["traffic"]["numbered_ids"] is True
    result = CliRunner().invoke(cli, ["plan", "--events-per-second", "100", "--keys", "100"])
    assert "ids: numbered (the producer library's)" in result.output


@pytest.mark.slow  # tally plan searches the batch settings
def test_the_levers_say_what_each_saves_on_the_same_traffic() -> None:
    # GIVEN single events with ids the user makes (random), 1,000 a second over 10,000 keys
    args = ("--events-per-second", "1000", "--keys", "10000", "--random-ids")
    document = plan_json(*args)
    levers = {lever["lever"]: lever for lever in document["levers"]}
    assert set(levers) == {"numbered ids", "100 events per message", "batch size and window"}
    total = document["per_month"]["total_usd"]
    # THEN each lever's bill is the plan of that traffic with one thing changed, and it is cheaper
    numbered = plan_json("--events-per-second", "1000", "--keys", "10000", "--numbered-ids")
    assert levers["numbered ids"]["usd_month"] == pytest.approx(numbered["per_month"]["total_usd"])
    for name in ("numbered ids", "100 events per message"):
        assert levers[name]["saves_usd_month"] == pytest.approx(total - levers[name]["usd_month"])
        assert levers[name]["saves_share"] > 0.5, name
    # AND the table names those that save something (here the batch is already the floor's)
    result = CliRunner().invoke(cli, ["plan", *args])
    for name, lever in levers.items():
        assert (name in result.output) == (lever["saves_usd_month"] > 0), name
    assert "took 0.7x to 1.2x the model's time per event" in " ".join(result.output.split())


def test_a_lever_already_pulled_is_not_offered() -> None:
    document = plan_json("--events-per-second", "100", "--keys", "100", "--events-per-message", "100")
    assert [lever["lever"] for lever in document["levers"]] == ["batch size and window"]


def test_every_option_has_help_text() -> None:
    missing = [option.name for option in plan.params if isinstance(option, click.Option) and not option.help]
    assert missing == []


def test_the_archive_is_priced_by_its_puts_and_the_bytes_it_stores() -> None:
    # GIVEN 100 single events a second in batches of 100, with the archive on and off
    on = price(Traffic(events_per_second=100, keys=1000), 100)
    off = price(Traffic(events_per_second=100, keys=1000, archive=False), 100)
    # THEN the archive costs one PutObject per invocation and what the month archives, stored a month
    assert on.archive_puts_month == pytest.approx(on.invocations_per_month)
    assert on.archive_gb_month == pytest.approx(on.events_per_month * (58 + 7.5) / 1e9)
    assert on.archive_usd_month == pytest.approx(on.archive_puts_month * 5e-6 + on.archive_gb_month * 0.023)
    assert on.usd_month == pytest.approx(off.usd_month + on.archive_usd_month)
    assert (off.archive_usd_month, off.parameters.as_template()["ArchiveEnabled"]) == (0.0, "false")
    assert "ArchiveEnabled" not in on.parameters.as_template()
    # AND per million single events in batches of 100 that is 10,000 PUTs ($0.05) and 66 MB ($0.0015 a month)
    per_million = on.archive_usd_month / on.events_per_month * 1e6
    assert per_million == pytest.approx(0.05 + 65.5e-3 * 0.023, rel=0.05)


SAM_PYTHON = Path(os.environ.get("TALLY_SAM_BIN", Path(__file__).resolve().parents[2] / ".venv-sam/bin/sam")).parent
"""The SAM CLI's venv (``make sam``): its own parser reads the line ``tally plan`` prints."""


def _overrides_line(output: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith("sam deploy --parameter-overrides ")]
    return line


@pytest.mark.slow  # tally plan searches the batch settings; the SAM CLI's parser in a subprocess
@pytest.mark.parametrize(
    "args",
    [
        ("--events-per-second", "1000", "--keys", "1000", "--events-per-message", "100"),
        ("--events-per-second", "50", "--keys", "2000", "--windows", "", "--source", "Kinesis"),
    ],
    ids=["sqs", "kinesis-no-windows"],
)
def test_the_table_prints_a_parameter_overrides_line_the_sam_cli_reads_as_the_plan(args: tuple[str, ...]) -> None:
    document = plan_json(*args)
    result = CliRunner().invoke(cli, ["plan", *args])
    assert result.exit_code == 0, result.output
    words = shlex.split(_overrides_line(result.output))
    assert words[:3] == ["sam", "deploy", "--parameter-overrides"]
    parsed = subprocess.run(
        [
            str(SAM_PYTHON / "python"),
            "-c",
            "import json, sys; from samcli.cli.types import CfnParameterOverridesType as T;"
            " print(json.dumps(T().convert(sys.argv[1], None, None)))",
            words[3],
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(parsed.stdout) == document["parameters"]


def test_a_lever_that_saves_nothing_is_not_in_the_table() -> None:
    # GIVEN a traffic whose recommended batch is already the floor's
    args = ("--events-per-second", "10000", "--keys", "1000", "--events-per-message", "1000", "--windows", "")
    (lever,) = plan_json(*args)["levers"]
    assert lever["saves_usd_month"] == 0  # --json keeps every lever, for scripts
    # WHEN the table is printed THEN it offers no lever, and says why
    result = CliRunner().invoke(cli, ["plan", *args])
    assert "batch size and window" not in result.output
    assert "no lever saves anything on this traffic" in result.output


def test_views_are_priced_as_their_fan_out_and_a_group_by_read_of_each() -> None:
    base = ("--events-per-second", "100", "--keys", "10", "--batch-size", "100")
    few = plan_json(*base, "--view", "5")
    many = plan_json(*base, "--view", "5", "--view", "400")
    assert "views" not in plan_json(*base)
    for document in (few, many):
        views, per_event = document["views"], document["per_event"]
        assert isinstance(views, dict)
        assert isinstance(per_event, dict)
        # the fan-out is what the same traffic costs beyond itself at the same settings
        assert views["write_units_added"] == pytest.approx(
            per_event["write_units"] - views["write_units_without_views"]
        )
        assert views["write_units_added"] > 0
    assert few["views"]["write_units_without_views"] == pytest.approx(many["views"]["write_units_without_views"])
    # a view of 400 values per key writes about half an item anew per event in batches of 100 events (each at 1 unit
    # per KB: its batches take the journal, fenced)
    assert many["views"]["write_units_added"] > few["views"]["write_units_added"] + 0.4
    reads = [(each["values"], each["group_read_units"]) for each in many["views"]["each"]]
    assert reads == [(5, 1.0), (400, pytest.approx(11.0, abs=1))]
    result = CliRunner().invoke(cli, ["plan", *base, "--view", "5"])
    assert "views: write units / event" in result.output
    assert "group-by read, 5 values" in result.output
