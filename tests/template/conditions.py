"""Evaluate a template's Conditions for given parameter values, and keep only what they create.

The SAM transform keeps ``Condition`` on every resource it generates (roles, event source mappings),
so pruning the transformed template for one set of parameter values shows exactly what a stack with
those values would contain. Only the condition functions CloudFormation allows are understood.
"""

from __future__ import annotations

import copy
from typing import Any


def parameter_values(template: dict[str, Any], **overrides: str) -> dict[str, str]:
    """Every parameter's Default (as CloudFormation passes it, a string), with ``overrides`` applied."""
    values = {name: str(spec.get("Default", "")) for name, spec in template.get("Parameters", {}).items()}
    unknown = set(overrides) - set(values)
    if unknown:
        raise KeyError(f"not template parameters: {sorted(unknown)}")
    return {**values, **overrides}


def evaluate_conditions(template: dict[str, Any], values: dict[str, str]) -> dict[str, bool]:
    conditions: dict[str, Any] = template.get("Conditions", {})
    resolved: dict[str, bool] = {}

    def condition(name: str) -> bool:
        if name not in resolved:
            resolved[name] = bool(evaluate(conditions[name]))
        return resolved[name]

    def evaluate(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        ((function, args),) = node.items()
        if function == "Ref":
            return values[args]
        if function == "Condition":
            return condition(args)
        if function == "Fn::Equals":
            left, right = (evaluate(arg) for arg in args)
            return str(left) == str(right)
        if function == "Fn::Not":
            return not evaluate(args[0])
        if function == "Fn::And":
            return all(evaluate(arg) for arg in args)
        if function == "Fn::Or":
            return any(evaluate(arg) for arg in args)
        raise AssertionError(f"condition function {function} not understood")

    return {name: condition(name) for name in conditions}


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
