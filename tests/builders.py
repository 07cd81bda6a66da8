"""Small fluent builders for nodes, pods, PodGroups and topologies, shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from extender.model.node import HOSTNAME_LABEL, NodeInfo
from extender.model.pod import PodInfo, parse_pod
from extender.model.podgroup import PodGroupSpec, parse_podgroup
from extender.model.selectors import Taint
from extender.model.topology import TopologySpec, parse_topology
from extender.placement import ClusterSnapshot, Plan, PlanResult, Unplaceable, build_gang, plan

ZONE = "example.com/topology-zone"
BLOCK = "example.com/topology-block"
RACK = "example.com/topology-rack"
GPU = "nvidia.com/gpu"


def topology(name: str = "default", levels: Iterable[str] = (ZONE, BLOCK, RACK)) -> TopologySpec:
    return parse_topology({"metadata": {"name": name}, "spec": {"levels": [{"nodeLabel": lv} for lv in levels]}})


TOPO = topology()


def node(
    name: str,
    zone: str | None = "z1",
    block: str | None = "b1",
    rack: str | None = "r1",
    gpus: int = 8,
    cpu: int = 64,
    taints: Iterable[Taint] = (),
    ready: bool = True,
    unschedulable: bool = False,
    labels: Mapping[str, str] | None = None,
) -> NodeInfo:
    lab = {HOSTNAME_LABEL: name, **(labels or {})}
    for key, value in ((ZONE, zone), (BLOCK, block), (RACK, rack)):
        if value is not None:
            lab[key] = value
    alloc = {GPU: gpus * 1000, "cpu": cpu * 1000, "memory": 512 * 2**30 * 1000, "pods": 110_000}
    return NodeInfo(name, lab, alloc, tuple(taints), ready, unschedulable)


def grid(zones: int = 1, blocks: int = 1, racks: int = 1, nodes: int = 4, gpus: int = 8, **kw: Any) -> list[NodeInfo]:
    """Nodes named z1-b1-r1-n1 .. with rack/block/zone labels that repeat across parents."""
    out = []
    for z in range(1, zones + 1):
        for b in range(1, blocks + 1):
            for r in range(1, racks + 1):
                for n in range(1, nodes + 1):
                    out.append(node(f"z{z}-b{b}-r{r}-n{n}", f"z{z}", f"b{b}", f"r{r}", gpus=gpus, **kw))
    return out


def pod(
    name: str,
    gpus: int = 8,
    cpu: str = "1",
    namespace: str = "default",
    group: str | None = None,
    subgroup: str | None = None,
    node_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> PodInfo:
    lab = dict(labels or {})
    if subgroup is not None:
        lab["kai.scheduler/subgroup-name"] = subgroup
    ann = {"pod-group-name": group} if group else {}
    requests: dict[str, Any] = {"cpu": cpu}
    if gpus:
        requests[GPU] = str(gpus)
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "labels": lab, "annotations": ann},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}], **(spec or {})},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return parse_pod(body)


def podgroup(spec: Mapping[str, Any], name: str = "pg", namespace: str = "default", **meta: Any) -> PodGroupSpec:
    return parse_podgroup({"metadata": {"name": name, "namespace": namespace, **meta}, "spec": dict(spec)})


def decode_prefill_spec() -> dict[str, Any]:
    """Example 2 of KAI's hierarchical PodGroup design: decode and prefill parts, each workers (4,
    one rack) and a leader (one rack), the two of a part in one block (a SubGroupSet)."""
    subgroups: list[dict[str, Any]] = []
    constraints: dict[str, dict[str, str]] = {}
    sets = []
    for part in ("decode", "prefill"):
        subgroups += [
            {"name": part, "minMember": 2},
            {"name": f"{part}-workers", "parent": part, "minMember": 4},
            {"name": f"{part}-leaders", "parent": part, "minMember": 1},
        ]
        constraints[f"{part}-workers"] = {"requiredTopologyLevel": "rack"}
        constraints[f"{part}-leaders"] = {"requiredTopologyLevel": "rack"}
        sets.append(
            {"subGroups": [f"{part}-workers", f"{part}-leaders"], "constraint": {"requiredTopologyLevel": "block"}}
        )
    return {
        "minMember": 2,
        "subGroups": subgroups,
        "topologyConstraints": {"subGroups": constraints, "subGroupSets": sets},
    }


def decode_prefill_pods() -> list[PodInfo]:
    """The pods of decode_prefill_spec(): 4 workers and 1 leader per part."""
    pods = []
    for part in ("decode", "prefill"):
        pods += [pod(f"{part}-worker-{i}", subgroup=f"{part}-workers") for i in range(4)]
        pods.append(pod(f"{part}-leader-0", subgroup=f"{part}-leaders"))
    return pods


def run(
    nodes: Iterable[NodeInfo],
    pg: PodGroupSpec,
    pods: Iterable[PodInfo],
    topologies: Iterable[TopologySpec] = (TOPO,),
    used: Mapping[str, Mapping[str, int]] | None = None,
) -> PlanResult:
    built = build_gang(pg, list(pods), {t.name: t for t in topologies})
    assert built.gang is not None, built.errors
    return plan(ClusterSnapshot.of(nodes, used), built.gang)


def placed(result: PlanResult) -> dict[str, str]:
    assert isinstance(result, Plan), result.message if isinstance(result, Unplaceable) else result
    return dict(result.assignments)


def racks_of(assignments: Mapping[str, str]) -> dict[str, str]:
    """pod -> 'z1-b1-r1' (the node name without its node part)."""
    return {p: n.rsplit("-", 1)[0] for p, n in assignments.items()}
