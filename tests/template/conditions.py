"""Evaluate a template's Conditions for given parameter values, and keep only what they create.

The SAM transform keeps ``Condition`` on every resource it generates (roles, event source mappings),
so pruning the transformed template for one set of parameter values shows exactly what a stack with
those values would contain. The Conditions are evaluated by the local stack's template reader, so the
tests and the local stack cannot disagree on what a stack contains.
"""

from __future__ import annotations

import copy
from typing import Any

from tally_local.template import condition_values, with_parameters


def parameter_values(template: dict[str, Any], **overrides: str) -> dict[str, str]:
    """Every parameter's Default (as CloudFormation passes it, a string), with ``overrides`` applied."""
    values = {name: str(spec.get("Default", "")) for name, spec in template.get("Parameters", {}).items()}
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"not template parameters: {sorted(unknown)}")
    return {**values, **overrides}


def evaluate_conditions(template: dict[str, Any], values: dict[str, str]) -> dict[str, bool]:
    """The template's Conditions for ``values``: the local stack's own evaluation (``tally_local.template``)."""
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


def deployed(template: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """What CloudFormation would create for ``values``: :func:`prune`, then every ``Fn::If`` in the
    resources and outputs replaced by the branch taken (a branch of ``AWS::NoValue`` removes its property)."""
    conditions = evaluate_conditions(template, values)
    pruned = prune(template, values)
    for section in ("Resources", "Outputs"):
        pruned[section] = resolve_ifs(pruned[section], conditions)
    return pruned


_NO_VALUE = {"Ref": "AWS::NoValue"}


def resolve_ifs(node: Any, conditions: dict[str, bool]) -> Any:
    """``node`` with each ``Fn::If`` resolved by ``conditions``; a branch of ``AWS::NoValue`` removes the
    property or list item that holds it, as CloudFormation does."""
    if isinstance(node, list):
        items = [resolve_ifs(item, conditions) for item in node]
        return [item for item in items if item != _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Fn::If"}:
        condition, when_true, when_false = node["Fn::If"]
        return resolve_ifs(when_true if conditions[condition] else when_false, conditions)
    resolved = {key: resolve_ifs(value, conditions) for key, value in node.items()}
    return {key: value for key, value in resolved.items() if value != _NO_VALUE}
