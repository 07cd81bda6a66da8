"""DisruptionBudget: a policy/v1 PodDisruptionBudget as preemption reads it.

Which pods it guards (its label selector, in its namespace) and how many of them may go now
(`status.disruptionsAllowed`, kept by the disruption controller; 0 until it has counted). As
in policy/v1, an empty selector selects every pod of the namespace and a missing one selects
none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.model.raw import JSON, identify, mapping, opt_int, opt_str, seq, str_map

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # one of OPERATORS
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[LabelRequirement, ...] = ()
    allowed: int = 0
    selects_all: bool = False  # an empty selector
    selects_none: bool = False  # no selector

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if namespace != self.namespace or self.selects_none:
            return False
        if self.selects_all:
            return True
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.expressions
        )


def parse_budget(body: JSON) -> DisruptionBudget:
    """Parse a policy/v1 PodDisruptionBudget; raise InvalidObject naming every unusable field."""
    _, name, namespace, errors = identify(body, "PodDisruptionBudget", "default")
    spec = mapping(body.get("spec"), "spec", errors)
    status = mapping(body.get("status"), "status", errors)
    raw = spec.get("selector")
    selector = mapping(raw, "spec.selector", errors)
    labels = tuple(sorted(str_map(selector.get("matchLabels"), "spec.selector.matchLabels", errors).items()))
    expressions = []
    for i, item in enumerate(seq(selector.get("matchExpressions"), "spec.selector.matchExpressions", errors)):
        field = f"spec.selector.matchExpressions[{i}]"
        entry = mapping(item, field, errors)
        key = opt_str(entry.get("key"), f"{field}.key", errors) or ""
        operator = opt_str(entry.get("operator"), f"{field}.operator", errors) or ""
        if operator not in OPERATORS:
            errors.add(f"{field}.operator", f"expected one of {', '.join(OPERATORS)}, got {operator!r}")
        values = tuple(str(v) for v in seq(entry.get("values"), f"{field}.values", errors))
        expressions.append(LabelRequirement(key, operator, values))
    allowed = opt_int(status.get("disruptionsAllowed"), "status.disruptionsAllowed", errors) or 0
    errors.raise_if_any()
    return DisruptionBudget(
        namespace,
        name,
        labels,
        tuple(expressions),
        allowed,
        selects_all=raw is not None and not labels and not expressions,
        selects_none=raw is None,
    )
