"""``bench.cost_chart`` and ``bench.plan_check --high-volume`` at a tiny size: curves, points, the chart.

Ratios and shapes only, never a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.cost_chart import SECTION, Series, curves, markdown_section, measured_configs, render, splice_section
from bench.plan_check import TOLERANCE, Config, run_checks

if TYPE_CHECKING:
    from pathlib import Path

    from tally_local.dynamodb_local import DynamoDBLocal


def test_each_curve_falls_with_the_batch_and_is_flat_beyond_the_6_mb_cut() -> None:
    line = Series(pack=1000, windows=False)
    points = curves([line], sizes=(10, 100, 1000), batches=1)
    by_size = {point.batch_size: point for point in points}
    assert by_size[10].write_units > by_size[line.cut].write_units
    assert by_size[100].records == by_size[1000].records == line.cut  # 78 records of 1,000 events fill 6 MB
    assert by_size[100].write_units == by_size[1000].write_units


def test_measured_points_stay_within_the_payload() -> None:
    for config in measured_configs():
        assert config.batch_size <= Series(config.events_per_message, config.windows).cut


def test_the_chart_is_written(tmp_path: Path) -> None:
    line = Series(pack=1, windows=True)
    document = {
        "curves": [{"series": line.name, "batch_size": 10, "records": 10, "write_units": 7.0}],
        "measured": [{"series": line.name, "batch_size": 10, "measured_write_units": 7.1}],
    }
    render(document, tmp_path / "chart.svg")
    assert (tmp_path / "chart.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.integration
def test_a_large_packed_message_configuration_is_measured_and_predicted(dynamodb_local: DynamoDBLocal) -> None:
    """The --high-volume mode's shape (many events per message, few records) at a tiny size."""
    (check,) = run_checks(dynamodb_local, keys=40, min_events=300, only=[Config(True, False, 3, pack=60)])
    assert check.config == "packed 60, windows off, 3"
    assert check.exact
    assert abs(check.ratio - 1) <= TOLERANCE


def test_the_benchmarks_section_is_replaced_in_place_or_appended() -> None:
    line = Series(pack=1, windows=False)
    document = {
        "curves": [{"series": line.name, "batch_size": 10, "records": 10, "write_units": 3.75}],
        "measured": [
            {
                "config": "single, windows off, 10",
                "events": 100,
                "measured_write_units": 3.7,
                "predicted_write_units": 3.75,
                "ratio": 1.01,
                "exact": True,
            }
        ],
    }
    section = markdown_section(document)
    appended = splice_section("# B\n\n## Results\n\nx\n", section)
    assert appended.endswith("\n".join(section) + "\n")
    again = splice_section(appended.replace("3.7000", "9.9999") + "\n## Later\n\ny\n", section)
    assert again.count(SECTION) == 1
    assert "9.9999" not in again
    assert again.endswith("## Later\n\ny\n")
