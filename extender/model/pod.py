"""PodInfo: what the planner and the grouper need to know about one pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from extender.model.dra.claims import PodClaim, parse_pod_claims
from extender.model.errors import ErrorList, FieldError, InvalidObject
from extender.model.kube_checks import kube_checks
from extender.model.raw import JSON, identify, mapping, opt_int, opt_str, seq, str_map
from extender.model.requests import effective_requests
from extender.model.runtime_bound import runtime_bound
from extender.model.selectors import (
    NodeSelectorTerm,
    Toleration,
    parse_required_affinity,
    parse_tolerations,
)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod may go, as kube-scheduler judges it: the key of the eligibility cache."""

    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] = ()


def unpinned(placement: Placement, node: str, annotations: Mapping[str, str]) -> Placement:
    """PLACEMENT without a pin to NODE (a `metadata.name In [NODE]` field of each term) when gates
    mode put it there (ANNOTATIONS, the pod's, say so): what it adds to a member it releases
    (kube/ungate.py), and what the pod its controller makes in its place does not carry. Terms left
    empty go; none left: no node affinity. A pin the user wrote stays."""
    if annotations.get(PINNED_NODE_ANNOTATION) != node:
        return placement
    pin = ("metadata.name", "In", (node,))
    if not any((r.key, r.operator, r.values) == pin for t in placement.affinity for r in t.fields):
        return placement
    terms = []
    for t in placement.affinity:
        kept = NodeSelectorTerm(t.expressions, tuple(r for r in t.fields if (r.key, r.operator, r.values) != pin))
        if kept.expressions or kept.fields:
            terms.append(kept)
    return replace(placement, affinity=tuple(terms))


TOPOGANG_GATE = "scheduling.topogang.io/gang"  # the scheduling gate gates mode puts on gang pods
# Written by topogang on planned members (with their nomination) to requeue them in kube-scheduler.
PLAN_GENERATION_ANNOTATION = "scheduling.topogang.io/plan-generation"
# Written by gates mode with the pin to a released member's node: the pin is topogang's, not the
# user's (a user's own pin to that node stays a rule of the pod when it could be moved).
PINNED_NODE_ANNOTATION = "scheduling.topogang.io/pinned-node"


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    requests: Mapping[str, int]  # effective requests in milli-units, one "pods" slot included
    placement: Placement = field(default_factory=Placement)
    node_name: str | None = None
    # status.nominatedNodeName: where a scheduler (kube-scheduler after preempting for it, or
    # topogang steering a planned member) means to put it while it is unbound.
    nominated_node: str | None = None
    phase: str = "Pending"
    priority: int | None = None  # spec.priority as written; None: not written (see ClusterState.pod_priority)
    priority_class_name: str = ""
    preemption_policy: str = ""  # spec.preemptionPolicy: "Never" keeps the pod from preempting
    created: float | None = None  # seconds since the epoch, when known
    started: float | None = None  # status.startTime: when the kubelet took the pod
    # When it was bound: the PodScheduled condition's lastTransitionTime once True (the API
    # server's Binding sets it), else None. A new leader reads it to tell a gang cut off
    # between two of its binds from one that ran whole (core/recovery.py).
    scheduled_at: float | None = None
    # The most seconds it runs (activeDeadlineSeconds or the runtime-bound annotation, the
    # smaller): what lets it backfill room held for a waiting gang (core/reservations.py).
    runtime_bound: float | None = None
    runtime_bound_error: str = ""  # why a written bound was not taken (then runtime_bound is None)
    owner_refs: tuple[OwnerRef, ...] = ()
    scheduler_name: str = "default-scheduler"
    scheduling_gates: tuple[str, ...] = ()
    deleting: bool = False
    # spec.schedulingGroup.podGroupName: the scheduling.k8s.io PodGroup the pod belongs to
    scheduling_group: str | None = None
    claims: tuple[PodClaim, ...] = ()  # spec.resourceClaims (Dynamic Resource Allocation)
    # Set by ClusterState from the pod's claims (core/dra): `requests` then holds the devices
    # they still need; these say what could not be counted and why.
    device_errors: tuple[FieldError, ...] = ()
    device_warnings: tuple[str, ...] = ()
    # What only kube-scheduler checks or does for it (model/kube_checks.py): empty, the plan
    # judges its node alone, so topogang may bind it without waiting for kube-scheduler's call.
    kube_checks: tuple[str, ...] = ()

    @property
    def held(self) -> tuple[str, ...]:
        """The scheduling gates that keep the pod from being scheduled, topogang's own aside:
        topogang lifts that one itself once the gang is planned (gates mode)."""
        return tuple(g for g in self.scheduling_gates if g != TOPOGANG_GATE)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def uses_capacity(self) -> bool:
        """Bound and not finished: its requests count against its node."""
        return self.node_name is not None and not self.terminal

    @property
    def controller(self) -> OwnerRef | None:
        return next((o for o in self.owner_refs if o.controller), None)


def _timestamp(raw: object, field: str, errors: ErrorList) -> float | None:
    text = opt_str(raw, field, errors)
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        errors.add(field, f"expected an RFC 3339 time such as 2026-01-02T03:04:05Z, got {text!r}")
        return None


def _scheduled_at(raw: object) -> float | None:
    """The PodScheduled condition's lastTransitionTime when it is True. Read leniently: the API
    server writes it, and a pod must never become unusable over it."""
    if not isinstance(raw, list):
        return None
    for cond in raw:
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            when = cond.get("lastTransitionTime")
            if isinstance(when, str):
                try:
                    return datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
                except ValueError:
                    return None
    return None


def parse_owner_refs(raw: object, field: str, errors: ErrorList) -> tuple[OwnerRef, ...]:
    out = []
    for i, item in enumerate(seq(raw, field, errors)):
        body = mapping(item, f"{field}[{i}]", errors)
        out.append(
            OwnerRef(
                api_version=opt_str(body.get("apiVersion"), f"{field}[{i}].apiVersion", errors) or "",
                kind=opt_str(body.get("kind"), f"{field}[{i}].kind", errors) or "",
                name=opt_str(body.get("name"), f"{field}[{i}].name", errors) or "",
                uid=opt_str(body.get("uid"), f"{field}[{i}].uid", errors) or "",
                controller=body.get("controller") is True,
            )
        )
    return tuple(out)


def parse_pod(body: JSON, default_namespace: str = "default") -> PodInfo:
    """Parse a v1 Pod; raise InvalidObject naming every unusable field."""
    meta, name, namespace, errors = identify(body, "Pod", default_namespace)
    spec = mapping(body.get("spec"), "spec", errors)
    status = mapping(body.get("status"), "status", errors)
    node_name = opt_str(spec.get("nodeName"), "spec.nodeName", errors) or None
    # A pod on a node counts what its kubelet allocated too (in-place resize); one being
    # scheduled, its spec alone (model/requests.py).
    requests = effective_requests(spec, errors, status if node_name is not None else None)
    placement = Placement(
        tolerations=parse_tolerations(spec.get("tolerations"), "spec.tolerations", errors),
        node_selector=tuple(sorted(str_map(spec.get("nodeSelector"), "spec.nodeSelector", errors).items())),
        affinity=parse_required_affinity(spec.get("affinity"), "spec.affinity", errors),
    )
    gates = tuple(
        str(mapping(g, f"spec.schedulingGates[{i}]", errors).get("name", ""))
        for i, g in enumerate(seq(spec.get("schedulingGates"), "spec.schedulingGates", errors))
    )
    annotations = str_map(meta.get("annotations"), "metadata.annotations", errors)
    # A malformed bound only costs the pod its backfill (it is said in its gang's status): the
    # pod itself must stay visible, or its room would be counted free.
    bound: float | None = None
    bound_error = ""
    try:
        bound = runtime_bound(f"Pod {namespace}/{name}", annotations, spec.get("activeDeadlineSeconds"))
    except InvalidObject as exc:
        bound_error = str(exc)
    pod = PodInfo(
        namespace=namespace,
        name=name,
        uid=opt_str(meta.get("uid"), "metadata.uid", errors) or "",
        labels=str_map(meta.get("labels"), "metadata.labels", errors),
        annotations=annotations,
        requests=requests,
        placement=placement,
        node_name=node_name,
        nominated_node=opt_str(status.get("nominatedNodeName"), "status.nominatedNodeName", errors) or None,
        phase=opt_str(status.get("phase"), "status.phase", errors) or "Pending",
        priority=opt_int(spec.get("priority"), "spec.priority", errors),
        priority_class_name=opt_str(spec.get("priorityClassName"), "spec.priorityClassName", errors) or "",
        preemption_policy=opt_str(spec.get("preemptionPolicy"), "spec.preemptionPolicy", errors) or "",
        created=_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp", errors),
        started=_timestamp(status.get("startTime"), "status.startTime", errors),
        scheduled_at=_scheduled_at(status.get("conditions")),
        owner_refs=parse_owner_refs(meta.get("ownerReferences"), "metadata.ownerReferences", errors),
        scheduler_name=opt_str(spec.get("schedulerName"), "spec.schedulerName", errors) or "default-scheduler",
        scheduling_gates=gates,
        deleting=meta.get("deletionTimestamp") is not None,
        scheduling_group=_scheduling_group(spec.get("schedulingGroup"), errors),
        runtime_bound=bound,
        runtime_bound_error=bound_error,
        claims=parse_pod_claims(spec, status, errors),
        kube_checks=kube_checks(spec),
    )
    errors.raise_if_any()
    return pod


def _scheduling_group(raw: object, errors: ErrorList) -> str | None:
    """spec.schedulingGroup (Kubernetes' GenericWorkload): the PodGroup named, if any."""
    if raw is None:
        return None
    body = mapping(raw, "spec.schedulingGroup", errors)  # a Pod's other fields are the API server's to check
    return opt_str(body.get("podGroupName"), "spec.schedulingGroup.podGroupName", errors) or None
