"""Which members of running gangs defragmentation may move, and the nodes each may go to.

A gang member may move only when it is beyond its gang's minimum: the pods preemption would take
first (`running_workloads`' elastic pods), any subset of which leaves the gang, and each of its
SubGroups, at or above its minMember while they are away. Never a pod of a gang disrupted only
whole (`disruptionMode: all`), of a gang with a preemption or a repair of its own under way, of
a gang of a higher priority than the waiting one; and only when it says so (`core/movable.py`).

Where: its gang's constraints must hold once it runs elsewhere. Rather than plan its gang again,
the new node is kept inside the domain the pod runs in now at the finest required level that
applies to it (its SubGroup's or segment's, an enclosing SubGroup's, the gang's): every domain
of a coarser required level contains that one, so each of those constraints holds as before. A
pod no required level applies to may go anywhere it fits; preferred levels are preferences.
Gates mode pins each member it releases to its node (kube/ungate.py); the pod made in its place
is not, so that pin is no rule of the pod's here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from extender.core.cluster import ClusterState
from extender.core.disruption import whole_only
from extender.core.membership import Membership
from extender.model.pod import Placement, unpinned
from extender.placement import BoolArray, Gang, RunningPod, Scope, Workload


@dataclass(frozen=True)
class MovableMember:
    pod: RunningPod
    gang: str  # its gang's PodGroup key
    within: BoolArray | None  # the nodes its gang's constraints leave it (None: any)
    home: str  # what they are, for messages: "block z1/b1 (its own gang's required block)"
    placement: Placement  # the pod's, as its replacement will have it (without gates mode's pin)


def movable_members(
    state: ClusterState,
    membership: Membership,
    workload: Workload,
    priority: int,
    movable: Callable[[str], bool],
    busy: Callable[[str], bool],
) -> list[MovableMember]:
    """The pods of the running gang WORKLOAD that may be moved for a gang of PRIORITY. MOVABLE(pod
    key): whether the pod says so (and is not cooling down); BUSY(group): a preemption or a repair
    of its own is under way."""
    if not workload.gang or not workload.elastic or workload.priority > priority or busy(workload.key):
        return []
    view = membership.view(workload.key)
    gang = view.built.gang if view.built is not None else None
    if gang is None or whole_only(view.spec):  # (a whole-only gang has no elastic pods: said twice)
        return []
    pods = [p for p in workload.pods if p.key in workload.elastic and movable(p.key)]
    if not pods:
        return []
    finest: dict[str, int | None] = {}
    _finest(gang.root, None, finest)
    out = []
    for p in pods:
        within, home = _home(state, gang, finest.get(p.key), p.node)
        info = state.pods[p.key]
        out.append(MovableMember(p, workload.key, within, home, unpinned(info.placement, p.node, info.annotations)))
    return out


def _finest(scope: Scope, above: int | None, out: dict[str, int | None]) -> None:
    """Pod -> the finest required level of the scopes it is in (levels count down from the coarsest)."""
    level = above
    if scope.rule is not None and scope.rule.required is not None:
        level = scope.rule.required if level is None else max(level, scope.rule.required)
    for m in scope.members:
        out[m.key] = level
    for child in scope.children:
        _finest(child, level, out)


def _home(state: ClusterState, gang: Gang, level: int | None, node: str) -> tuple[BoolArray | None, str]:
    if level is None:
        return None, ""
    table = state.table
    tree = table.tree(gang.topology)
    at = table.index.get(node)
    if at is None or level >= tree.depth:
        none: BoolArray = np.zeros(len(table), dtype=np.bool_)
        return none, f"its own gang's required domain (its node {node} is not known)"
    domain = tree.node_domain(at, level)
    within: BoolArray = tree.levels[level].domain_of_node == domain.index
    if not tree.labeled(domain):  # nodes without the level's label share no domain: it stays put
        within = np.zeros(len(table), dtype=np.bool_)
    name = tree.level_name(level)
    return within, f"{name} {tree.path(domain)} (its own gang's required {name})"
