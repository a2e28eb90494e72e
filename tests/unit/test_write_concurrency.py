"""``TALLY_WRITE_CONCURRENCY``: how many of a round's direct transactions the handlers send at once."""

from __future__ import annotations

import pytest

from tally.commit.applier import Applier
from tally.config import DEFAULT_WRITE_CONCURRENCY, WRITE_CONCURRENCY, Settings
from tally.errors import ConfigurationError
from tally.runtime import wire_pipeline
from tests.support.pipeline import RecordingDeadLetterQueue

BASE = {"TALLY_COUNTERS_TABLE": "c", "TALLY_MARKERS_TABLE": "m", "TALLY_DLQ_URL": "http://dlq"}


def test_unset_is_the_default_and_the_handlers_wiring_uses_it() -> None:
    settings = Settings.from_env(BASE)
    assert settings.write_concurrency == DEFAULT_WRITE_CONCURRENCY == 4
    pipeline = wire_pipeline(object(), RecordingDeadLetterQueue(), settings)  # type: ignore[arg-type]
    applier = pipeline._applier  # the wiring is what is checked
    assert isinstance(applier, Applier)
    assert applier.write_concurrency == 4


@pytest.mark.parametrize(("raw", "expected"), [("1", 1), ("10", 10), ("", DEFAULT_WRITE_CONCURRENCY)])
def test_accepted_values(raw: str, expected: int) -> None:
    assert Settings.from_env({**BASE, WRITE_CONCURRENCY: raw}).write_concurrency == expected


@pytest.mark.parametrize("raw", ["0", "11", "four", "-1", "2.5", "\u00b2"])
def test_refused_values(raw: str) -> None:
    with pytest.raises(ConfigurationError, match=WRITE_CONCURRENCY):
        Settings.from_env({**BASE, WRITE_CONCURRENCY: raw})


def test_an_applier_is_sequential_unless_told() -> None:
    assert Applier(object(), object()).write_concurrency == 1  # type: ignore[arg-type]
