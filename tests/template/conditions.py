"""Evaluate a template's Conditions for given parameter values, and keep only what they create.

The SAM transform keeps ``Condition`` on every resource it generates (roles, event source mappings),
so pruning the transformed template for one set of parameter values shows exactly what a stack with
those values would contain. The Conditions are evaluated by the local stack's template reader, so the
tests and the local stack cannot disagree on what a stack contains.
"""

from __future__ import annotations

import copy
from typing import Any

from tally.local.template import condition_values, with_parameters


def parameter_values(template: dict[str, Any], **overrides: str) -> dict[str, str]:
    """Every parameter's Default (as CloudFormation passes it, a string), with ``overrides`` applied."""
    values = {name: str(spec.get("Default", "")) for name, spec in template.get("Parameters", {}).items()}
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"not template parameters: {sorted(unknown)}")
    return {**values, **overrides}


def evaluate_conditions(template: dict[str, Any], values: dict[str, str]) -> dict[str, bool]:
    """The template's Conditions for ``values``: the local stack's own evaluation (``tally.local.template``)."""
    return condition_values(with_parameters(template, values))


def prune(template: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """A copy without the resources and outputs whose Condition is false for ``values``."""
    conditions = evaluate_conditions(template, values)
    pruned = copy.deepcopy(template)
    for section in ("Resources", "Outputs"):
        pruned[section] = {
            name: item
            for name, item in pruned.get(section, {}).items()
            if "Condition" not in item or conditions[item["Condition"]]
        }
    return pruned
