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
