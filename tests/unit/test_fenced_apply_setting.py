"""``TALLY_FENCED_APPLY`` (the template's ``FencedApply``): journal batches applied by fenced single-item writes, on
unless set to ``false`` (the rollback lever, docs/journal.md "Rolling out")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tally.commit.applier import Applier
from tally.config import FENCED_APPLY, Settings
from tally.errors import ConfigurationError
from tally.runtime import wire_pipeline
from tally_local.template import load_template
from tests.support.pipeline import RecordingDeadLetterQueue

BASE = {"TALLY_COUNTERS_TABLE": "c", "TALLY_MARKERS_TABLE": "m", "TALLY_DLQ_URL": "http://dlq"}
TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"


def _fenced(settings: Settings, fenced: bool | None = None) -> bool:
    pipeline = wire_pipeline(object(), RecordingDeadLetterQueue(), settings, fenced=fenced)  # type: ignore[arg-type]
    applier = pipeline._applier  # the wiring is what is checked
    assert isinstance(applier, Applier)
    return applier.epochs is not None


@pytest.mark.parametrize(("raw", "expected"), [(None, True), ("", True), ("true", True), ("false", False)])
def test_on_unless_false_and_the_handlers_wiring_follows_it(raw: str | None, expected: bool) -> None:
    settings = Settings.from_env(BASE if raw is None else {**BASE, FENCED_APPLY: raw})
    assert settings.fenced_apply is expected
    assert _fenced(settings) is expected


def test_an_explicit_choice_beats_the_setting() -> None:
    assert _fenced(Settings.from_env(BASE), fenced=False) is False
    assert _fenced(Settings.from_env({**BASE, FENCED_APPLY: "false"}), fenced=True) is True


@pytest.mark.parametrize("raw", ["TRUE", "False", "yes", "1", "0", "on"])
def test_anything_else_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigurationError, match=FENCED_APPLY):
        Settings.from_env({**BASE, FENCED_APPLY: raw})


def test_the_template_passes_its_parameter_on_by_default() -> None:
    template = load_template(TEMPLATE)
    parameter = template["Parameters"]["FencedApply"]
    assert (parameter["Default"], parameter["AllowedValues"]) == ("true", ["true", "false"])
    assert template["Globals"]["Function"]["Environment"]["Variables"][FENCED_APPLY] == {"Ref": "FencedApply"}
