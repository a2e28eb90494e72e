"""``bench.plan_check`` at a tiny size: the model's write units per event agree with a measured run.

Ratios only, never a time. The model draws its own batches (its own seed) from the same traffic
description; the run is the real pipeline on DynamoDB Local, billed by ``tally_local.kit.meter``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from bench.plan_check import COLUMNS, TOLERANCE, configs, run_checks
from bench.results import Grid

if TYPE_CHECKING:
    from tally_local.dynamodb_local import DynamoDBLocal

pytestmark = pytest.mark.integration


def test_every_prediction_is_within_ten_percent_of_its_run(dynamodb_local: DynamoDBLocal) -> None:
    sizes = (5, 25)
    checks = run_checks(dynamodb_local, keys=40, min_events=300, batch_sizes=sizes, pack=10)
    assert [check.config for check in checks] == [config.name for config in configs(sizes, pack=10)]
    shown = Grid.of(COLUMNS, [check.row() for check in checks]).markdown()
    for check in checks:
        assert check.exact, check
        assert abs(check.ratio - 1) <= TOLERANCE, "\n".join(shown)
        assert check.passed
