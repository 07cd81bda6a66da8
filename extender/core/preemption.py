"""From the cluster state to what the victim search reads: running workloads and priorities.

Every bound pod that still runs belongs to one workload: its gang (a victim whole, the pods
beyond the gang's minimum alone first) or, for a pod of no gang, itself. A gang's priority is
its view's (the highest of its pods' and its PodGroup's `priorityClassName`); a gang with a
member whose `preemptionPolicy` is Never never preempts.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from extender.core.cluster import ClusterState
from extender.core.disruption import whole_only
from extender.core.exclusivity import snapshot_for
from extender.core.membership import GroupView, Membership
from extender.model.pod import PodInfo
from extender.placement import (
    BoolArray,
    Budget,
    Gang,
    NoPreemption,
    PreemptionResult,
    RunningPod,
    Workload,
    find_victims,
    meets_minimum,
)

NEVER = "Never"


def may_preempt(state: ClusterState, view: GroupView) -> bool:
    if view.spec is not None and view.spec.never_preempts:
        return False
    pods = [state.pods[k] for k in view.pods if k in state.pods]
    return not any(p.preemption_policy == NEVER for p in pods)


def running_workloads(
    state: ClusterState,
    membership: Membership,
    skip: str | None = None,
    exclude: AbstractSet[str] = frozenset(),
    spared: AbstractSet[str] = frozenset(),
) -> list[Workload]:
    """Every running workload but `skip` (the preemptor), those with a pod in `exclude` (being
    evicted for another gang) and the gangs in `spared`, gangs whole, plain pods alone."""
    by_group: dict[str, list[PodInfo]] = {}
    out: list[Workload] = []
    for pod in state.pods.values():
        if not pod.uses_capacity or pod.deleting or pod.node_name is None:
            continue
        group = membership.group_of(pod.key)
        if group is None:
            if pod.key not in exclude:
                out.append(Workload(pod.key, state.pod_priority(pod), (_running(state, pod),), gang=False))
        elif group != skip and group not in spared:
            by_group.setdefault(group, []).append(pod)
    for group, pods in sorted(by_group.items()):
        if exclude and any(p.key in exclude for p in pods):
            continue
        view = membership.view(group)
        gang = view.built.gang if view.built is not None else None
        running = tuple(_running(state, p) for p in sorted(pods, key=lambda p: p.key))
        spare, segments = (frozenset(), ()) if whole_only(view.spec) else _elastic(gang, running)
        out.append(Workload(group, view.priority, running, spare, segments=segments))
    return out


def _running(state: ClusterState, pod: PodInfo) -> RunningPod:
    assert pod.node_name is not None
    started = pod.started if pod.started is not None else (pod.created or 0.0)
    # with the devices its own claims hold (DRA): its requests no longer count them once allocated
    requests = state.claimed.held(pod, state.table.nodes) if pod.claims else pod.requests
    return RunningPod(pod.key, pod.node_name, requests, started)


def _elastic(gang: Gang | None, pods: tuple[RunningPod, ...]) -> tuple[frozenset[str], tuple[frozenset[str], ...]]:
    """Pods the gang can lose while the rest keeps its minimum, the youngest first, and of them
    the optional segments (a leaf with a required level, whose pods go together: a segment is
    whole or absent). Any subset of units can go: the minimum holds for every superset of what
    is left."""
    if gang is None:
        return frozenset(), ()
    running = {p.key: p for p in pods}
    units: list[list[str]] = []
    for scope in gang.scopes:
        keys = [m.key for m in scope.members if m.key in running]
        if not keys:
            continue
        if scope.rule is not None and scope.rule.required is not None and len(keys) > 1:
            units.append(keys)  # the segment whole first; its pods alone if it cannot go whole
        units += [[k] for k in keys]
    units.sort(key=lambda u: (-max(running[k].started for k in u), -len(u), u))  # the youngest, a segment whole first
    left = set(running)
    spare: set[str] = set()
    segments: list[frozenset[str]] = []
    for unit in units:
        if any(k in spare for k in unit):
            continue
        left.difference_update(unit)
        if meets_minimum(gang, left):
            spare.update(unit)
            if len(unit) > 1:
                segments.append(frozenset(unit))
        else:
            left.update(unit)
    return frozenset(spare), tuple(segments)


def find_preemption(
    state: ClusterState,
    membership: Membership,
    group: str,
    budgets: tuple[Budget, ...] = (),
    exclude: AbstractSet[str] = frozenset(),
    held: BoolArray | None = None,
    spared: AbstractSet[str] = frozenset(),
) -> PreemptionResult:
    """Victims whose eviction lets GROUP's minimum fit, or why there are none. Pods in `exclude`
    are being evicted for someone else already; HELD: nodes reservations keep from GROUP (it may
    not take their room by preempting either); SPARED: gangs it may not evict (they started
    overdue, and GROUP is not)."""
    view = membership.view(group)
    gang = view.built.gang if view.built is not None else None
    if gang is None:
        return NoPreemption(group, "the gang is not valid")
    if not may_preempt(state, view):
        return NoPreemption(group, "preemptionPolicy Never: the gang waits instead of preempting")
    snapshot = snapshot_for(state, membership, group, gang, held)
    workloads = running_workloads(state, membership, group, exclude, spared)
    return find_victims(snapshot, gang, view.priority, workloads, budgets or budgets_of(state, workloads))


def budgets_of(state: ClusterState, workloads: list[Workload]) -> tuple[Budget, ...]:
    """The cluster's PodDisruptionBudgets over the pods that could be victims."""
    if not state.budgets:
        return ()
    out = []
    by_namespace: dict[str, list[PodInfo]] = {}  # a budget selects pods of its own namespace only
    for w in workloads:
        for p in w.pods:
            if (pod := state.pods.get(p.key)) is not None:
                by_namespace.setdefault(pod.namespace, []).append(pod)
    for budget in state.budgets.values():
        candidates = by_namespace.get(budget.namespace, ())
        guarded = frozenset(p.key for p in candidates if budget.selects(p.namespace, p.labels))
        if guarded:
            out.append(Budget(budget.key, budget.allowed, guarded))
    return tuple(out)
