"""`explain`'s lines about devices of Dynamic Resource Allocation: for each device resource a
gang asks for (a claim's class and selectors, or an extended resource a DeviceClass backs), how
many its unbound pods ask for, and how many are free in the cluster and per domain of the level
its constraints place its pods in (the finest required level, else the Topology's coarsest)."""

from __future__ import annotations

from extender.core.cluster import ClusterState
from extender.core.dra import is_device_resource
from extender.placement import ClusterSnapshot, Domain, Gang, Scope, TopologyTree

SHOWN = 8  # domains listed per resource, the freest first


def _required_levels(scope: Scope) -> list[int]:
    own = [scope.rule.required] if scope.rule is not None and scope.rule.required is not None else []
    return own + [lv for child in scope.children for lv in _required_levels(child)]


def _label(state: ClusterState, resource: str) -> str:
    if not is_device_resource(resource):
        return f"{resource} (backed by DeviceClass {state.devices.extended[resource]} where no device plugin gives it)"
    selection = state.devices.selections.get(resource)
    if selection is None or not selection.selectors:
        return resource
    return f"{resource} (selectors: {' && '.join(selection.selectors)})"


def device_lines(state: ClusterState, gang: Gang, snapshot: ClusterSnapshot, tree: TopologyTree) -> tuple[str, ...]:
    extended = state.devices.extended
    resources = sorted(
        {r for s in gang.shapes for r, v in s.requests if v and (is_device_resource(r) or r in extended)}
    )
    if not resources:
        return ()
    levels = _required_levels(gang.root)
    level = max(levels) if levels else min(1, tree.node_level)
    out = []
    for resource in resources:
        asked = sum(dict(gang.shapes[m.shape].requests).get(resource, 0) for m in gang.members() if m.node is None)
        pods = sum(1 for m in gang.members() if m.node is None and dict(gang.shapes[m.shape].requests).get(resource))
        free = snapshot.free(resource)
        per_domain = []
        for i in range(tree.size(level)):
            domain = Domain(level, i)
            per_domain.append((int(free[tree.nodes_in(domain)].sum()) // 1000, tree.path(domain) or "cluster"))
        per_domain.sort(key=lambda d: (-d[0], d[1]))
        shown = ", ".join(f"{path} {n}" for n, path in per_domain[:SHOWN])
        more = f" and {len(per_domain) - SHOWN} more" if len(per_domain) > SHOWN else ""
        out.append(
            f"{_label(state, resource)}: {asked // 1000} asked by {pods} unbound pod(s); "
            f"{int(free.sum()) // 1000} free in the cluster; free per {tree.level_name(level)}: {shown}{more}"
        )
    return tuple(out)
