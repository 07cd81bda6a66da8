"""ResourceInterface (KAI's pod-grouping design): a declarative grouper per target kind, with jq expressions.

    apiVersion: scheduling.topogang.io/v1alpha1
    kind: ResourceInterface                      # cluster-scoped
    metadata: {name: raycluster}
    spec:
      targetGVK: {group: ray.io, version: v1, kind: RayCluster}
      gangScheduling:                            # absent or no podGroups: hand off to the built-in grouper
        podGroups:
          - name: cluster                        # one PodGroup per entry, per owner object
            minReplicas: "2"                     # optional: top-level SubGroups required (default all)
            requiredTopologyConstraintsPath: [".metadata.annotations[\"example.com/rack\"]"]
            subgroups:
              - componentName: head              # the SubGroup name
                podClassifier: {matchLabels: {ray.io/node-type: head}}
                minReplicas: "1"
              - foreach: ".spec.workerGroupSpecs[] as $wg"
                componentName: "$wg.groupName"
                podClassifier:
                  matchExpressions: [{key: ray.io/group, operator: Equals, valuePath: "$wg.groupName"}]
                minReplicasPath: ["$wg.minReplicas", "$wg.replicas"]
                subgroups: [...]                 # nested entries make this a SubGroup of SubGroups

Every expression is real jq, run on the owner object: paths starting with `.` are from its root;
`foreach` binds the variables its `as $name` names, one SubGroup entry per result, and they stay
in scope in nested entries. A plain value (componentName, minReplicas, a matchLabels value) is an
expression when it starts with `.`, `$` or `(`, else taken as written; fields named `...Path`
are always expressions, in lists ordered by priority: the first non-null result wins. The
literal `minReplicas` is the fallback after `minReplicasPath`. A leaf without `podClassifier`
takes every pod; a pod no leaf matches is not this ResourceInterface's (the built-in grouper or
the next owner is tried). A broken expression or a result of the wrong type makes the group
Invalid with a message naming the ResourceInterface, the field and the expression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.grouping.grouper import Claim, GangDraft, Link, Part, WorkloadDraft
from extender.grouping.jq_budget import RUNNER, Budget, JqFailed, JqRunner, OverBudget, encode
from extender.grouping.values import annotations_of
from extender.model.errors import ErrorList, FieldError
from extender.model.limits import MAX_SUBGROUPS, beyond
from extender.model.pod import PodInfo
from extender.model.podgroup import SubGroupSpec, TopologyConstraint
from extender.model.raw import json_type, literal, unknown_fields

_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_BUILTIN_VARIABLES = frozenset({"ENV", "__loc__", "__prog_args"})
_UINT = re.compile(r"^[0-9]+$")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Equals", "NotEquals")

# The fields of each part of a ResourceInterface: anything else is reported, so that a typo
# (`requiredTopologyConstraintPath`) makes the gangs Invalid instead of dropping a constraint.
OBJECT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
SPEC_FIELDS = frozenset({"targetGVK", "gangScheduling"})
GVK_FIELDS = frozenset({"group", "version", "kind"})
GANG_FIELDS = frozenset({"podGroups"})
_SCOPE_FIELDS = {
    "minReplicas",
    "minReplicasPath",
    "requiredTopologyConstraintsPath",
    "preferredTopologyConstraintsPath",
}
PODGROUP_FIELDS = frozenset({"name", "subgroups", *_SCOPE_FIELDS})
ENTRY_FIELDS = frozenset({"componentName", "foreach", "podClassifier", "subgroups", *_SCOPE_FIELDS})
CLASSIFIER_FIELDS = frozenset({"matchLabels", "matchExpressions"})
EXPRESSION_FIELDS = frozenset({"key", "operator", "values", "valuePath"})


@dataclass(frozen=True)
class ResourceInterface:
    name: str
    api_version: str  # of the target kind
    kind: str
    body: Mapping[str, Any]


def _name_of(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def index_resource_interfaces(
    raws: Sequence[Mapping[str, Any]],
) -> tuple[dict[tuple[str, str], ResourceInterface], list[str]]:
    """ResourceInterfaces by target (apiVersion, kind); warnings for those that target nothing."""
    out: dict[tuple[str, str], ResourceInterface] = {}
    warnings: list[str] = []
    for raw in sorted(raws, key=_name_of):
        meta = raw.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        spec = raw.get("spec")
        target = spec.get("targetGVK") if isinstance(spec, Mapping) else None
        label = f"ResourceInterface {name or '<unnamed>'}"
        if not isinstance(target, Mapping):
            warnings.append(f"{label}: ignored: spec.targetGVK is not an object {{group, version, kind}}")
            continue
        group, version, kind = (target.get(k) for k in ("group", "version", "kind"))
        if not all(isinstance(v, str) for v in (group, version, kind)) or not version or not kind:
            warnings.append(
                f"{label}: ignored: spec.targetGVK needs string group, version and kind, got {dict(target)}"
            )
            continue
        api_version = f"{group}/{version}" if group else str(version)
        gvk = (api_version, str(kind))
        if gvk in out:
            warnings.append(f"{label}: ignored: ResourceInterface {out[gvk].name} already targets {kind} {api_version}")
            continue
        out[gvk] = ResourceInterface(str(name), api_version, str(kind), raw)
    return out, warnings


def is_expression(value: str) -> bool:
    return value.startswith((".", "$", "("))


@dataclass
class _Leaf:
    gang: str
    name: str
    requirements: list[tuple[str, str, frozenset[str]]] = field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, op, values in self.requirements:
            value = labels.get(key)
            ok = {
                "In": value in values,
                "Equals": value in values,
                "NotIn": value not in values,
                "NotEquals": value not in values,
                "Exists": value is not None,
                "DoesNotExist": value is None,
            }[op]
            if not ok:
                return False
        return True


class _Evaluator:
    """Runs one ResourceInterface's expressions on one owner object, recording every failure."""

    def __init__(self, ri: ResourceInterface, root: Mapping[str, Any], runner: JqRunner = RUNNER) -> None:
        self.obj = f"ResourceInterface {ri.name}"
        self.root = encode(root)
        self.runner = runner
        self.budget = Budget()  # every expression on this object together
        self.errors: list[FieldError] = []
        self.subgroups = 0  # made so far, against MAX_SUBGROUPS

    def fail(self, where: str, message: str) -> None:
        self.errors.append(FieldError(self.obj, where, message))

    def known(self, body: Any, fields: frozenset[str], where: str) -> None:
        """Report the keys of `body` that are not among `fields`."""
        if isinstance(body, Mapping):
            found = ErrorList(self.obj)
            unknown_fields(body, fields, where, found)
            self.errors.extend(found.errors)

    def run(self, expr: str, scope: Mapping[str, Any], where: str, written: str | None = None) -> list[Any] | None:
        try:
            return self.runner.evaluate(expr, dict(scope), self.root, self.budget)
        except JqFailed as exc:
            self.fail(where, f"expression {written or repr(expr)} failed: {exc}")
        except OverBudget as exc:
            self.fail(where, f"expression {written or repr(expr)} {exc}")
        return None

    def another_subgroup(self, where: str) -> bool:
        """Count one more SubGroup; False (reported once) past MAX_SUBGROUPS."""
        self.subgroups += 1
        if self.subgroups == MAX_SUBGROUPS + 1:
            self.fail(where, f"makes more than {MAX_SUBGROUPS:,} SubGroups; {beyond(MAX_SUBGROUPS)}")
        return self.subgroups <= MAX_SUBGROUPS

    def one(self, expr: str, scope: Mapping[str, Any], where: str) -> tuple[bool, Any]:
        """(ok, value): the expression's single result, None when it yields nothing."""
        results = self.run(expr, scope, where)
        if results is None:
            return False, None
        if len(results) > 1:
            self.fail(where, f"expression {expr!r} yields {len(results)} values, expected one")
            return False, None
        return True, results[0] if results else None

    def value(self, raw: Any, scope: Mapping[str, Any], where: str) -> tuple[bool, Any]:
        """A field that is either written as is or, starting with `.`, `$` or `(`, an expression."""
        if isinstance(raw, str) and is_expression(raw):
            return self.one(raw, scope, where)
        return True, raw

    def paths(self, raw: Any, scope: Mapping[str, Any], where: str) -> tuple[bool, Any, str]:
        """The first non-null result of a list of expressions: (ok, value, where it came from).

        The last element names the expression and its field, for messages about the value.
        """
        exprs = [raw] if isinstance(raw, str) else raw
        if not isinstance(exprs, list) or not all(isinstance(e, str) for e in exprs):
            self.fail(where, f"expected a list of jq expressions, got {short(raw)}")
            return False, None, where
        for i, expr in enumerate(exprs):
            at = f"{where}[{i}]" if isinstance(raw, list) else where
            ok, value = self.one(expr, scope, at)
            if not ok:
                return False, None, at
            if value is not None:
                return True, value, f"{at}: expression {expr!r}"
        return True, None, where

    def foreach(self, expr: Any, scope: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        if not isinstance(expr, str) or not expr.strip():
            self.fail(where, f"expected a jq expression such as '.spec.items[] as $item', got {literal(expr)}")
            return []
        names = [v for v in dict.fromkeys(_VARIABLE.findall(expr)) if v not in scope and v not in _BUILTIN_VARIABLES]
        if not names:
            self.fail(where, f"expression {expr!r} binds no variable: write '<expression> as $name'")
            return []
        collect = ", ".join(f"{v}: ${v}" for v in names)
        results = self.run(f"{expr} | {{{collect}}}", scope, where, repr(expr))
        if results is None:
            return []
        return [{**scope, **r} for r in results if isinstance(r, dict)]


def _count(ev: _Evaluator, entry: Mapping[str, Any], scope: Mapping[str, Any], where: str) -> tuple[bool, int | None]:
    """minReplicasPath (first non-null), then the literal minReplicas: (ok, the count or None)."""
    if entry.get("minReplicasPath") is not None:
        ok, value, source = ev.paths(entry["minReplicasPath"], scope, f"{where}.minReplicasPath")
        if not ok:
            return False, None
        if value is not None:
            field, _, expr = source.partition(": ")
            number = _as_count(ev, value, field, f"{expr} resolves to")
            return number is not None, number
    if entry.get("minReplicas") is not None:
        ok, value = ev.value(entry["minReplicas"], scope, f"{where}.minReplicas")
        if not ok:
            return False, None
        if value is not None:
            number = _as_count(ev, value, f"{where}.minReplicas", "is")
            return number is not None, number
    return True, None


def _as_count(ev: _Evaluator, value: Any, where: str, what: str) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _UINT.match(value):
        return int(value)
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    ev.fail(where, f"{what} {short(value)}, expected an integer >= 0")
    return None


def _constraint(
    ev: _Evaluator, entry: Mapping[str, Any], scope: Mapping[str, Any], where: str
) -> TopologyConstraint | None:
    levels: dict[str, str] = {}
    fields: dict[str, str] = {}  # attribute -> the path that resolved it
    for attr, key in (
        ("required", "requiredTopologyConstraintsPath"),
        ("preferred", "preferredTopologyConstraintsPath"),
    ):
        if entry.get(key) is None:
            continue
        ok, value, source = ev.paths(entry[key], scope, f"{where}.{key}")
        if not ok or value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            field, _, expr = source.partition(": ")
            ev.fail(field, f"{expr} resolves to {short(value)}, expected a topology level name")
            continue
        levels[attr] = value
        fields[attr] = source.partition(": ")[0]
    if not levels:
        return None
    return TopologyConstraint(
        required=levels.get("required"),
        preferred=levels.get("preferred"),
        field=where,
        required_fields=(fields["required"],) if "required" in levels else (),
        obj=ev.obj,
        preferred_at=fields.get("preferred", ""),
    )


def _classifier(
    ev: _Evaluator, raw: Any, scope: Mapping[str, Any], where: str
) -> list[tuple[str, str, frozenset[str]]]:
    out: list[tuple[str, str, frozenset[str]]] = []
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        ev.fail(where, f"expected an object with matchLabels and/or matchExpressions, got {literal(raw)}")
        return out
    ev.known(raw, CLASSIFIER_FIELDS, where)
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        ev.fail(f"{where}.matchLabels", f"expected a map of label to value, got {literal(labels)}")
        labels = {}
    for key, raw_value in labels.items():
        ok, value = ev.value(raw_value, scope, f"{where}.matchLabels[{key}]")
        text = _label_value(ev, value, f"{where}.matchLabels[{key}]", repr(raw_value)) if ok else None
        if text is not None:
            out.append((str(key), "Equals", frozenset({text})))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        ev.fail(f"{where}.matchExpressions", f"expected a list, got {literal(exprs)}")
        exprs = []
    for i, item in enumerate(exprs):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            ev.fail(at, f"expected {{key, operator, values or valuePath}}, got {literal(item)}")
            continue
        ev.known(item, EXPRESSION_FIELDS, at)
        op = item.get("operator")
        if op not in OPERATORS:
            ev.fail(f"{at}.operator", f"expected one of {', '.join(OPERATORS)}, got {literal(op)}")
            continue
        values: set[str] = set()
        if op not in ("Exists", "DoesNotExist"):
            if item.get("valuePath") is not None:
                ok, value, source = ev.paths(item["valuePath"], scope, f"{at}.valuePath")
                field, _, expr = source.partition(": ")
                items = value if isinstance(value, list) else [value]
                for v in items if ok else []:
                    text = _label_value(ev, v, field, expr or "valuePath")
                    if text is not None:
                        values.add(text)
            else:
                raw_values = item.get("values")
                if not isinstance(raw_values, list) or not raw_values:
                    ev.fail(f"{at}.values", f"operator {op} needs values or valuePath, got {literal(raw_values)}")
                    continue
                values.update(str(v) for v in raw_values)
            if not values:
                continue
        out.append((str(item["key"]), str(op), frozenset(values)))
    return out


def _label_value(ev: _Evaluator, value: Any, where: str, written: str) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    ev.fail(where, f"{written} resolves to {short(value)}, expected a label value")
    return None


def short(value: Any, limit: int = 60) -> str:
    return literal(value, limit)


def _entries(
    ev: _Evaluator,
    raw: Any,
    where: str,
    parent: str | None,
    scope: Mapping[str, Any],
    draft: GangDraft,
    leaves: list[_Leaf],
) -> int:
    """Expand subgroup entries below `parent` into the draft; return how many SubGroups."""
    if not isinstance(raw, list):
        ev.fail(where, f"expected a list of subgroups, got {literal(raw)}")
        return 0
    made = 0
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping):
            ev.fail(at, f"expected an object, got {literal(entry)}")
            continue
        ev.known(entry, ENTRY_FIELDS, at)
        scopes = [dict(scope)] if entry.get("foreach") is None else ev.foreach(entry["foreach"], scope, f"{at}.foreach")
        for s in scopes:
            if not ev.another_subgroup(at):
                return made
            ok, name = ev.value(entry.get("componentName"), s, f"{at}.componentName")
            if not ok:
                continue
            if not isinstance(name, str) or not name:
                written = entry.get("componentName")
                what = f"{literal(written)} resolves to {short(name)}, expected a SubGroup name"
                ev.fail(f"{at}.componentName", what)
                continue
            made += 1
            counted, minimum = _count(ev, entry, s, at)
            c = _constraint(ev, entry, s, at)
            if c is not None:
                draft.constraints[name] = c
            children = entry.get("subgroups")
            if children is not None:
                if entry.get("podClassifier") is not None:
                    ev.fail(f"{at}.podClassifier", "pods join leaf subgroups; this one has subgroups")
                slot = len(draft.parents)
                draft.parents.append(SubGroupSpec(name, parent))
                inner = _entries(ev, children, f"{at}.subgroups", name, s, draft, leaves)
                draft.parents[slot] = SubGroupSpec(name, parent, min_subgroup=inner if minimum is None else minimum)
                continue
            if minimum is None:
                if counted:
                    ev.fail(at, "a leaf subgroup needs minReplicas or a minReplicasPath that resolves")
                minimum = 0
            draft.parts.append(Part(name, minimum, minimum, parent=parent))
            leaf = _Leaf(draft.key, name, _classifier(ev, entry.get("podClassifier"), s, f"{at}.podClassifier"))
            leaves.append(leaf)
    return made


def _known_fields(ev: _Evaluator, body: Mapping[str, Any]) -> None:
    ev.known(body, OBJECT_FIELDS, "")
    spec = body.get("spec")
    ev.known(spec, SPEC_FIELDS, "spec")
    if isinstance(spec, Mapping):
        ev.known(spec.get("targetGVK"), GVK_FIELDS, "spec.targetGVK")
        ev.known(spec.get("gangScheduling"), GANG_FIELDS, "spec.gangScheduling")


def _pod_groups(ri: ResourceInterface) -> Any:
    spec = ri.body.get("spec")
    gang_scheduling = spec.get("gangScheduling") if isinstance(spec, Mapping) else None
    return gang_scheduling.get("podGroups") if isinstance(gang_scheduling, Mapping) else None


def hands_off(ri: ResourceInterface) -> bool:
    """No podGroups and no misspelt field: `ri` hands every object of its kind to the built-in
    grouper and the owners below (KAI's generic pod-grouping design), without reading it."""
    if _pod_groups(ri):
        return False
    ev = _Evaluator(ri, {})
    _known_fields(ev, ri.body)
    return not ev.errors


def group_with(ri: ResourceInterface, link: Link, runner: JqRunner = RUNNER) -> WorkloadDraft | None:
    """The gangs `ri` defines for the owner object; None hands it off (no podGroups)."""
    if hands_off(ri):
        return None
    root = link.obj or {}
    pod_groups = _pod_groups(ri)
    ev = _Evaluator(ri, root, runner)
    _known_fields(ev, ri.body)
    pod_groups = pod_groups or [{}]  # a misspelt field: one gang, Invalid, says which
    source = f"{link.label} via ResourceInterface {ri.name}"
    gangs: dict[str, GangDraft] = {}
    leaves: list[_Leaf] = []
    if not isinstance(pod_groups, list):
        ev.fail("spec.gangScheduling.podGroups", f"expected a list, got {json_type(pod_groups)}")
        pod_groups = [{}]
    for i, pg in enumerate(pod_groups):
        where = f"spec.gangScheduling.podGroups[{i}]"
        entry: Mapping[str, Any] = pg if isinstance(pg, Mapping) else {}
        ev.known(entry, PODGROUP_FIELDS, where)
        pg_name = entry.get("name")
        if len(pod_groups) > 1 and (not isinstance(pg_name, str) or not pg_name):
            ev.fail(f"{where}.name", f"several podGroups need a name each, got {literal(pg_name)}")
            pg_name = str(i)
        key = link.key() if len(pod_groups) == 1 else link.key(f"-{pg_name}")
        draft = GangDraft(key, source, link.label, link.ref, annotations_of(root), uid=link.ref.uid)
        draft.global_constraint = _constraint(ev, entry, {}, where)
        draft.root_min = _count(ev, entry, {}, where)[1]
        _entries(ev, entry.get("subgroups", []), f"{where}.subgroups", None, {}, draft, leaves)
        gangs[key] = draft
    first = next(iter(gangs))
    for draft in gangs.values():
        draft.errors.extend(ev.errors)

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim | None:
        if ev.errors:
            return Claim(first, None)  # the group is Invalid: keep its pods out of other groups
        for leaf in leaves:
            if leaf.matches(pod.labels):
                return Claim(leaf.gang, leaf.name)
        return None

    return WorkloadDraft(gangs, classify, source, link.label, link.ref, list(ev.errors))


__all__ = ["ResourceInterface", "group_with", "hands_off", "index_resource_interfaces", "is_expression"]
