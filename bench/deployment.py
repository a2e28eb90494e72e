"""tally's settings as the template deploys them by default, so the bench measures the shipped configuration.

The function's environment (``Globals.Function.Environment.Variables`` in ``template.yaml``) maps each
``TALLY_*`` variable to a Parameter; each Parameter's ``Default`` is what a stack deployed without
overrides runs with. ``default_settings`` reads them, lets the caller override some (the comparison
with the peers counts all-time totals only, as they do), and builds ``tally.config.Settings`` through
its own parser, exactly as the Lambda function does at cold start.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tally.config import COUNTERS_TABLE, MARKERS_TABLE, Settings
from tally_local.template import load_template

if TYPE_CHECKING:
    from collections.abc import Mapping

TEMPLATE: Final = Path(__file__).resolve().parents[1] / "template.yaml"


def template_environment(template: Mapping[str, Any]) -> dict[str, str]:
    """The function's environment variables whose values are literals or Parameter defaults."""
    variables = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    parameters = template.get("Parameters", {})
    environment: dict[str, str] = {}
    for name, value in variables.items():
        if isinstance(value, str | int):
            environment[name] = str(value)
        elif isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in parameters:
            default = parameters[value["Ref"]].get("Default")
            if default is not None:
                environment[name] = str(default)
    return environment


def default_settings(counters_table: str, markers_table: str, overrides: Mapping[str, str] | None = None) -> Settings:
    """``Settings`` of a default deployment on the given tables, with ``overrides`` applied."""
    environment = template_environment(load_template(TEMPLATE))
    environment.update(overrides or {})
    environment.update({COUNTERS_TABLE: counters_table, MARKERS_TABLE: markers_table})
    return Settings.from_env(environment, require_dlq=False)
