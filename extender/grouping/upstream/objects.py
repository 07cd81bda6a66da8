"""Reading Kubernetes' own gang objects: scheduling.k8s.io PodGroups (v1beta1, v1alpha3) and
CompositePodGroups (v1alpha3), and the scheduling block a Job embeds (batch/v1 `spec.scheduling`).

Every field is checked against the k8s.io/api v0.37.2 types; an unknown field is an error with
the closest known name, as for topogang's own PodGroups. What topogang reads:

    spec.parentCompositePodGroupName      the CompositePodGroup above (none: the root of a tree)
    spec.schedulingPolicy.gang.minCount   PodGroup: pods that must be placed together
    spec.schedulingPolicy.gang.minGroupCount   CompositePodGroup: child groups that must be
    spec.schedulingPolicy.basic           no gang: at least one pod (one child group) at a time
    spec.schedulingConstraints.topology[].key   a required level each, as a node label key
    spec.priority, spec.priorityClassName the gang's priority, read from the root of the tree as
                                          kube-scheduler reads it (its pods' own do not count)
    spec.disruptionMode                   all: the gang is disrupted only as a whole (see
                                          `extender.core.disruption`); single (the default): in parts

    spec.preemptionPolicy                 Never: the gang preempts no one (as a pod's own Never)

The other fields (workloadRef, resourceClaims) are checked for shape and left to Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.grouping.values import annotations_of, level
from extender.model.errors import ErrorList, FieldError
from extender.model.podgroup import TopologyConstraint
from extender.model.raw import identify, literal, mapping, opt_str, seq, unknown_fields
from extender.model.resource import Resource

GROUP = "scheduling.k8s.io"
PODGROUP = "PodGroup"
COMPOSITE = "CompositePodGroup"
# The versions read, preferred first (the informer watches the first one the API server serves).
VERSIONS = {PODGROUP: ("v1beta1", "v1alpha3"), COMPOSITE: ("v1alpha3",)}
RESOURCES = (
    Resource(GROUP, VERSIONS[PODGROUP], PODGROUP, "podgroups", True),
    Resource(GROUP, VERSIONS[COMPOSITE], COMPOSITE, "compositepodgroups", True),
)
MAX_DEPTH = 4  # WorkloadMaxTreeDepth: levels of groups from a root down to its PodGroups

_OBJECT = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_COMMON_SPEC = frozenset(
    {
        "parentCompositePodGroupName",
        "workloadRef",
        "schedulingPolicy",
        "schedulingConstraints",
        "disruptionMode",
        "priorityClassName",
        "priority",
        "preemptionPolicy",
    }
)
_SPEC = {PODGROUP: _COMMON_SPEC | {"resourceClaims"}, COMPOSITE: _COMMON_SPEC}
_STATUS = {PODGROUP: frozenset({"conditions", "resourceClaimStatuses"}), COMPOSITE: frozenset({"conditions"})}
_COUNT = {PODGROUP: "minCount", COMPOSITE: "minGroupCount"}
_WORKLOAD_REF = frozenset({"workloadName", "templateName"})
_POLICY = frozenset({"basic", "gang"})
_DISRUPTION = frozenset({"single", "all"})
_PREEMPTION = ("Never", "PreemptLowerPriority")
_CLAIM = frozenset({"name", "resourceClaimName", "resourceClaimTemplateName"})


def api_versions(kind: str) -> tuple[str, ...]:
    return tuple(f"{GROUP}/{v}" for v in VERSIONS[kind])


@dataclass(frozen=True)
class Group:
    """One PodGroup or CompositePodGroup as topogang reads it."""

    kind: str
    namespace: str
    name: str
    api_version: str
    uid: str = ""
    parent: str | None = None
    minimum: int = 1  # gang: minCount / minGroupCount; basic: 1
    constraint: TopologyConstraint | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    errors: tuple[FieldError, ...] = ()
    priority: int | None = None  # spec.priority, as the Priority admission plugin resolved it
    priority_class_name: str = ""
    disruption_all: bool = False  # spec.disruptionMode.all
    never_preempts: bool = False  # spec.preemptionPolicy: Never

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _empty(raw: object, where: str, errors: ErrorList) -> None:
    """basic: {}, single: {}, all: {}: objects with no fields (yet)."""
    unknown_fields(mapping(raw, where, errors), (), where, errors)


def _count(raw: object, where: str, errors: ErrorList) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= 2**31 - 1:
        return raw
    errors.add(where, f"expected an integer >= 1, got {literal(raw)}")
    return None


def scheduling_policy(
    raw: object, count_name: str, where: str, errors: ErrorList, *, count_optional: bool = False
) -> tuple[bool, int | None]:
    """`schedulingPolicy`: exactly one of basic and gang. Returns (gang, its count or None)."""
    body = mapping(raw, where, errors)
    unknown_fields(body, _POLICY, where, errors)
    set_ = [k for k in ("basic", "gang") if body.get(k) is not None]
    if len(set_) != 1:
        errors.add(where, f"expected exactly one of basic and gang, got {', '.join(set_) or 'neither'}")
    if body.get("basic") is not None:
        _empty(body["basic"], f"{where}.basic", errors)
    if body.get("gang") is None:
        return False, None
    gang = mapping(body["gang"], f"{where}.gang", errors)
    unknown_fields(gang, (count_name,), f"{where}.gang", errors)
    if gang.get(count_name) is None and count_optional:
        return True, None
    return True, _count(gang.get(count_name), f"{where}.gang.{count_name}", errors)


def topology_constraint(raw: object, where: str, shown: str, errors: ErrorList) -> TopologyConstraint | None:
    """`schedulingConstraints`: each `topology[i].key` a required level (a node label key).
    SHOWN prefixes the field paths placement reports (which object of the tree wrote them)."""
    body = mapping(raw, where, errors)
    unknown_fields(body, ("topology",), where, errors)
    keys: list[str] = []
    fields: list[str] = []
    for i, item in enumerate(seq(body.get("topology"), f"{where}.topology", errors)):
        at = f"{where}.topology[{i}]"
        entry = mapping(item, at, errors)
        unknown_fields(entry, ("key",), at, errors)
        found: list[FieldError] = []
        key = entry.get("key")
        if not isinstance(key, str) or not key:
            errors.add(f"{at}.key", f"expected a node label key, got {literal(key)}")
        elif level(key, errors.obj, f"{at}.key", found) is None:
            errors.errors.extend(found)
        else:
            keys.append(key)
            fields.append(f"{at}.key")
    if not keys:
        return None
    # SHOWN stays in `field` (explain shows which group wrote it); errors name the object itself.
    return TopologyConstraint(
        required=keys[0],
        more_required=tuple(keys[1:]),
        required_fields=tuple(fields),
        field=f"{shown}{where}",
        obj=errors.obj,
    )


def disruption_all(raw: object, where: str, errors: ErrorList) -> bool:
    """`disruptionMode`: at most one of single and all (a union), each an empty object; True for all."""
    mode = mapping(raw, where, errors)
    unknown_fields(mode, _DISRUPTION, where, errors)
    set_ = sorted(k for k in _DISRUPTION if mode.get(k) is not None)
    for k in set_:
        _empty(mode[k], f"{where}.{k}", errors)
    if len(set_) > 1:
        errors.add(where, f"expected at most one of all and single, got {' and '.join(set_)}")
        return False
    return set_ == ["all"]


def _priority(raw: object, where: str, errors: ErrorList) -> int | None:
    """spec.priority: an int32 up to HighestUserDefinablePriority's range (system classes go higher)."""
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool) and -(2**31) <= raw <= 2**31 - 1:
        return raw
    errors.add(where, f"expected a 32-bit integer, got {literal(raw)}")
    return None


def _other_fields(kind: str, spec: Mapping[str, Any], status: Mapping[str, Any], errors: ErrorList) -> None:
    """The fields topogang leaves to Kubernetes, checked for shape and spelling only."""
    ref = mapping(spec.get("workloadRef"), "spec.workloadRef", errors)
    unknown_fields(ref, _WORKLOAD_REF, "spec.workloadRef", errors)
    for i, claim in enumerate(seq(spec.get("resourceClaims"), "spec.resourceClaims", errors)):
        at = f"spec.resourceClaims[{i}]"
        unknown_fields(mapping(claim, at, errors), _CLAIM, at, errors)
    unknown_fields(status, _STATUS[kind], "status", errors)


_JOB_SCHEDULING = frozenset({"schedulingPolicy", "schedulingConstraints", "disruptionMode", "resourceClaims"})


def job_scheduling(raw: object, errors: ErrorList) -> tuple[bool | None, int | None, TopologyConstraint | None]:
    """A Job's `spec.scheduling` (the WorkloadWithJob gate): (gang, None for basic or unset;
    gang.minCount, None: the Job's parallelism; the topology constraint)."""
    where = "spec.scheduling"
    body = mapping(raw, where, errors)
    unknown_fields(body, _JOB_SCHEDULING, where, errors)
    gang: bool | None = None
    count: int | None = None
    if body.get("schedulingPolicy") is not None:
        gang, count = scheduling_policy(
            body["schedulingPolicy"], "minCount", f"{where}.schedulingPolicy", errors, count_optional=True
        )
    constraint = topology_constraint(body.get("schedulingConstraints"), f"{where}.schedulingConstraints", "", errors)
    disruption_all(body.get("disruptionMode"), f"{where}.disruptionMode", errors)
    for i, claim in enumerate(seq(body.get("resourceClaims"), f"{where}.resourceClaims", errors)):
        at = f"{where}.resourceClaims[{i}]"
        unknown_fields(mapping(claim, at, errors), _CLAIM, at, errors)
    return gang, count, constraint


# Bodies read lately, by identity: a tree is read again at every regroup of its family (each pod
# that arrives), and the objects change far less often than that. The body is kept with its
# reading, so an id is never taken for another object's; cleared when it grows past the bound.
_READ: dict[int, tuple[Mapping[str, Any], str, Group]] = {}
_READ_LIMIT = 50_000


def read_group(kind: str, body: Mapping[str, Any], namespace: str) -> Group:
    """A PodGroup or CompositePodGroup, its problems kept in `errors` (never raised: one bad
    object makes its tree's gang Invalid, naming it)."""
    hit = _READ.get(id(body))
    if hit is not None and hit[0] is body and hit[1] == namespace and hit[2].kind == kind:
        return hit[2]
    if len(_READ) >= _READ_LIMIT:
        _READ.clear()
    group = _read_group(kind, body, namespace)
    _READ[id(body)] = (body, namespace, group)
    return group


def _read_group(kind: str, body: Mapping[str, Any], namespace: str) -> Group:
    meta, name, ns, errors = identify(body, kind, namespace)
    unknown_fields(body, _OBJECT, "", errors)
    spec = mapping(body.get("spec"), "spec", errors)
    unknown_fields(spec, _SPEC[kind], "spec", errors)
    status = mapping(body.get("status"), "status", errors)
    parent = opt_str(spec.get("parentCompositePodGroupName"), "spec.parentCompositePodGroupName", errors) or None
    gang, count = scheduling_policy(spec.get("schedulingPolicy"), _COUNT[kind], "spec.schedulingPolicy", errors)
    shown = f"[{kind} {name}] "
    constraint = topology_constraint(spec.get("schedulingConstraints"), "spec.schedulingConstraints", shown, errors)
    _other_fields(kind, spec, status, errors)
    priority = _priority(spec.get("priority"), "spec.priority", errors)
    class_name = opt_str(spec.get("priorityClassName"), "spec.priorityClassName", errors) or ""
    everything = disruption_all(spec.get("disruptionMode"), "spec.disruptionMode", errors)
    policy = opt_str(spec.get("preemptionPolicy"), "spec.preemptionPolicy", errors)
    if policy and policy not in _PREEMPTION:
        errors.add("spec.preemptionPolicy", f"expected one of {', '.join(_PREEMPTION)}, got {literal(policy)}")
    return Group(
        kind=kind,
        namespace=ns,
        name=name,
        api_version=str(body.get("apiVersion") or api_versions(kind)[0]),
        uid=str(meta.get("uid") or ""),
        parent=parent,
        minimum=count if gang and count is not None else 1,
        constraint=constraint,
        annotations=annotations_of(body),
        errors=tuple(errors.errors),
        priority=priority,
        priority_class_name=class_name,
        disruption_all=everything,
        never_preempts=policy == "Never",
    )


__all__ = [
    "COMPOSITE",
    "GROUP",
    "MAX_DEPTH",
    "PODGROUP",
    "RESOURCES",
    "Group",
    "api_versions",
    "disruption_all",
    "job_scheduling",
    "read_group",
    "scheduling_policy",
    "topology_constraint",
]
