"""Where the pods moved for a gang go: a new node each, outside the gang's domain, or why not.

Defragmentation evicts movable pods so that a waiting gang's domain is whole; each moved pod is
recreated by its controller and must have room elsewhere, or the move only trades one waiting
workload for another. The check plans the moved pods on the cluster as it will be: their old
room free, the gang's planned room taken, the gang's whole domain closed to them, each node
they may use (its `Placement`: selectors, affinity, tolerations; for a member of a running gang,
`within`: the nodes its own gang's constraints leave it). The largest pod is placed
first, each on the node it fits tightest (the least of its scarcest resource left), so small
pods do not take the only room a large one fits in.

Pure, like `plan()`: arrays in, a mapping out; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from extender.model.pod import Placement
from extender.placement.gang import Gang
from extender.placement.ref import DomainRef
from extender.placement.result import Plan
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.tree import BoolArray, IntArray


@dataclass(frozen=True)
class MovedPod:
    key: str  # namespace/name
    node: str  # where it runs now
    requests: Mapping[str, int]  # milli-units, as PodInfo.requests
    placement: Placement
    # A member of a running gang: the nodes its own gang's constraints leave it (None: any), and
    # what they are, for messages ("block z1/b1 (its own gang's required block)").
    within: BoolArray | None = None
    home: str = ""


@dataclass(frozen=True)
class Stranded:
    """A moved pod with no room outside the gang's domain: nothing is evicted."""

    pod: str
    why: str


def relocate(
    snapshot: ClusterSnapshot, gang: Gang, plan: Plan, closed: BoolArray | None, pods: Sequence[MovedPod]
) -> dict[str, str] | Stranded:
    """Pod -> new node for every moved pod, or the first that has none. CLOSED: the nodes of the
    gang's domain (None: none closed)."""
    table = snapshot.table
    index = table.index
    resources = sorted({r for p in pods for r, v in p.requests.items() if v > 0})
    free: dict[str, IntArray] = {r: snapshot.free(r).copy() for r in resources}
    for p in pods:  # their old room is free again (it is in the closed domain, but count it)
        i = index.get(p.node)
        if i is not None:
            for r in resources:
                free[r][i] += p.requests.get(r, 0)
    shape_of = {m.key: m.shape for m in gang.members()}
    for pod, node in plan.assignments.items():  # the gang's room is taken
        i = index[node]
        for r, v in gang.shapes[shape_of[pod]].requests:
            if r in free:
                free[r][i] -= v
    out: dict[str, str] = {}
    scale = {r: max(1, int(table.alloc(r).max(initial=1))) for r in resources}
    order = sorted(pods, key=lambda p: (-sum(v / scale[r] for r, v in p.requests.items() if r in scale), p.key))
    for p in order:
        fits: BoolArray = table.eligibility(p.placement).mask.copy()
        if p.within is not None:
            fits &= p.within
        if closed is not None:
            fits &= ~closed
        for r in resources:
            fits &= free[r] >= p.requests.get(r, 0)
        if not fits.any():
            return Stranded(p.key, _why(p, snapshot, closed))
        scarce = max(resources, key=lambda r: p.requests.get(r, 0) / scale[r])
        left = np.where(fits, free[scarce] - p.requests.get(scarce, 0), np.iinfo(np.int64).max)
        i = int(np.argmin(left))
        for r in resources:
            free[r][i] -= p.requests.get(r, 0)
        out[p.key] = table.nodes[i].name
    return out


def closed_domain(snapshot: ClusterSnapshot, gang: Gang, domain: DomainRef, plan: Plan) -> BoolArray | None:
    """The nodes of DOMAIN (where PLAN puts the gang); None for the cluster: nothing closed."""
    if not domain.path or not plan.assignments:
        return None
    tree = snapshot.table.tree(gang.topology)
    level = next((lv for lv in range(1, tree.depth) if tree.level_name(lv) == domain.level), None)
    if level is None:
        return None
    of_node = tree.levels[level].domain_of_node
    first = snapshot.table.index[next(iter(plan.assignments.values()))]
    closed: BoolArray = of_node == of_node[first]
    return closed


def _why(p: MovedPod, snapshot: ClusterSnapshot, closed: BoolArray | None) -> str:
    eligible = snapshot.table.eligibility(p.placement).mask
    if p.within is not None:
        eligible = eligible & p.within
    outside = eligible if closed is None else eligible & ~closed
    where = f" in {p.home}" if p.home else ""
    if not outside.any():
        return f"no node it may use{where} lies outside the gang's domain"
    return f"none of the {int(outside.sum())} node(s) it may use{where} outside the gang's domain has room for it"
