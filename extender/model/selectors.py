"""Node eligibility rules that kube-scheduler applies and topogang must agree with.

Taints and tolerations (NoSchedule / NoExecute), nodeSelector and required node affinity. The
planner evaluates these itself so that a plan never names a node the scheduler would reject.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.model.errors import ErrorList
from extender.model.raw import mapping, opt_str, seq

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def tolerates_all(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> Taint | None:
    """The first blocking taint not tolerated, or None when the pod may land on the node."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions / matchFields entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if not present or not self.values:
            return False
        try:  # Gt / Lt compare integers
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.operator == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Expressions and fields of one term are ANDed; the terms of a selector are ORed."""

    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        fields = {"metadata.name": node_name}
        return all(r.matches(labels) for r in self.expressions) and all(r.matches(fields) for r in self.fields)


def term_list_matches(terms: tuple[NodeSelectorTerm, ...], labels: Mapping[str, str], node_name: str) -> bool:
    # An empty term list would match nothing in Kubernetes; the parser maps "no affinity" to ().
    return not terms or any(t.matches(labels, node_name) for t in terms)


def parse_taints(raw: object, field: str, errors: ErrorList) -> tuple[Taint, ...]:
    out = []
    for i, item in enumerate(seq(raw, field, errors)):
        body = mapping(item, f"{field}[{i}]", errors)
        key = opt_str(body.get("key"), f"{field}[{i}].key", errors) or ""
        value = opt_str(body.get("value"), f"{field}[{i}].value", errors) or ""
        effect = opt_str(body.get("effect"), f"{field}[{i}].effect", errors) or ""
        out.append(Taint(key, value, effect))
    return tuple(out)


def parse_tolerations(raw: object, field: str, errors: ErrorList) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(seq(raw, field, errors)):
        body = mapping(item, f"{field}[{i}]", errors)
        key = opt_str(body.get("key"), f"{field}[{i}].key", errors) or ""
        operator = opt_str(body.get("operator"), f"{field}[{i}].operator", errors) or "Equal"
        if operator not in {"Equal", "Exists"}:
            errors.add(f"{field}[{i}].operator", f"expected Equal or Exists, got {operator!r}")
        value = opt_str(body.get("value"), f"{field}[{i}].value", errors) or ""
        effect = opt_str(body.get("effect"), f"{field}[{i}].effect", errors) or ""
        out.append(Toleration(key, operator, value, effect))
    return tuple(sorted(out, key=lambda t: (t.key, t.operator, t.value, t.effect)))


def _requirements(raw: object, field: str, errors: ErrorList) -> tuple[Requirement, ...]:
    out = []
    for i, item in enumerate(seq(raw, field, errors)):
        where = f"{field}[{i}]"
        body = mapping(item, where, errors)
        key = opt_str(body.get("key"), f"{where}.key", errors) or ""
        operator = opt_str(body.get("operator"), f"{where}.operator", errors) or ""
        if operator not in _OPERATORS:
            errors.add(f"{where}.operator", f"expected one of {sorted(_OPERATORS)}, got {operator!r}")
        values = tuple(str(v) for v in seq(body.get("values"), f"{where}.values", errors))
        out.append(Requirement(key, operator, values))
    return tuple(out)


def parse_required_affinity(raw: object, field: str, errors: ErrorList) -> tuple[NodeSelectorTerm, ...]:
    """spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms."""
    affinity = mapping(raw, field, errors)
    node_affinity = mapping(affinity.get("nodeAffinity"), f"{field}.nodeAffinity", errors)
    where = f"{field}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    return parse_node_selector(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), where, errors)


def parse_node_selector(raw: object, where: str, errors: ErrorList) -> tuple[NodeSelectorTerm, ...]:
    """A v1.NodeSelector (its nodeSelectorTerms, ORed): node affinity, a ResourceSlice's nodeSelector."""
    required = mapping(raw, where, errors)
    terms = []
    for i, item in enumerate(seq(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms", errors)):
        tf = f"{where}.nodeSelectorTerms[{i}]"
        body = mapping(item, tf, errors)
        terms.append(
            NodeSelectorTerm(
                _requirements(body.get("matchExpressions"), f"{tf}.matchExpressions", errors),
                _requirements(body.get("matchFields"), f"{tf}.matchFields", errors),
            )
        )
    return tuple(terms)
