"""A gang that cannot run even with nothing running holds no room, and says why.

Cluster: 2 blocks (b1, b2) of 2 racks of 2 nodes, 8 GPUs each, every node full with one plain
pod of 8 GPUs (b1's end within 60 s, b2's have no bound). The gang: 4 pods of 8 GPUs required
in one block. With the second node of every rack tainted (a taint the gang does not tolerate),
every block has 2 nodes it may use: it can never run, however long it waits.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from extender.cli import main
from extender.core.cluster import ClusterState
from extender.core.explain import explain
from extender.core.reservations import Settings
from extender.core.scheduler import GangScheduler
from extender.model.node import NodeInfo
from extender.model.selectors import Taint
from tests.builders import TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(blocks=2, racks=2, nodes=2)]
WALL = 1_000_000.0
TAINT = Taint("dedicated", "infer", "NoSchedule")
NEVER = (
    "PodGroup default/big: 4 pods x {cpu: 1, nvidia.com/gpu: 8} in one block; the best block fits 2 even with"
    " nothing running; nodes left out: 4 taint dedicated=infer:NoSchedule"
)


def tainted(n: NodeInfo, where: str = "") -> NodeInfo:
    """N with the taint if it is the second node of a rack (in block WHERE, when given)."""
    return replace(n, taints=(TAINT,)) if n.name.endswith("-n2") and where in n.name else n


def setup(taint: bool = True, where: str = "") -> tuple[GangScheduler, list[str]]:
    state = ClusterState()
    for n in grid(blocks=2, racks=2, nodes=2):
        state.upsert_node(tainted(n, where) if taint else n)
    state.set_topology("default", TOPO)
    big = podgroup({"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}}, name="big")
    state.set_podgroup("default/big", big)
    scheduler = GangScheduler(state, reservations=Settings())
    for n in NODES:
        bound = {"activeDeadlineSeconds": 60} if "-b1-" in n else {}
        running = pod(f"run-{n}", node_name=n, spec=bound)
        scheduler.observe_pod(replace(running, placement=replace(running.placement, tolerations=())))
    keys = []
    for i in range(4):
        p = pod(f"big-{i}", group="big")
        scheduler.observe_pod(p)
        keys.append(p.key)
    return scheduler, keys


def test_a_gang_that_fits_no_block_even_empty_holds_no_room_and_says_why() -> None:
    scheduler, keys = setup()
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes == []
    assert not scheduler.reserving.is_queued("default/big")
    assert scheduler.refresh_reservations(0.0, WALL) == ([], [])
    assert scheduler.reserving.of("default/big") is None
    assert scheduler.status("default/big").message == NEVER
    # Nothing is held: a pod without a bound may take a node of b1 as it frees.
    scheduler.delete_pod("default/run-z1-b1-r1-n1")
    assert "z1-b1-r1-n1" in scheduler.filter(pod("web"), NODES, 1.0).nodes
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 1.0).nodes == []  # (the gang built again)
    assert scheduler.status("default/big").message == NEVER


def test_the_sweep_tells_why_a_gang_kube_scheduler_never_asked_about_cannot_run() -> None:
    scheduler, _ = setup()
    assert scheduler.refresh_reservations(0.0, WALL) == ([], [])
    assert "default/big" in scheduler.reserving.told  # its status is written, with the reason
    assert scheduler.reasons.text("default/big") == NEVER


def test_room_held_goes_when_a_change_of_nodes_means_the_gang_can_never_run() -> None:
    """Untainted, the gang fits block b1 once its pods end and is held room there; then the
    second node of every rack is tainted: the room is let go at the next pass."""
    scheduler, keys = setup(taint=False)
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes == []
    assert scheduler.refresh_reservations(0.0, WALL) == (["default/big"], [])
    for n in list(scheduler.state.nodes.values()):
        scheduler.state.upsert_node(tainted(n))
    scheduler.refresh_reservations(1.0, WALL + 1)
    assert scheduler.reserving.of("default/big") is None
    assert not scheduler.reserving.is_queued("default/big")
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 1.0).nodes == []
    assert scheduler.status("default/big").message == NEVER


def test_room_is_held_only_where_the_gangs_pods_may_go() -> None:
    """Block b1 frees first (its pods end within 60 s) but the taint leaves the gang 2 of its
    nodes: room is held in b2, where the gang can start once its pods end."""
    scheduler, keys = setup(where="-b1-")
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes == []
    assert scheduler.refresh_reservations(0.0, WALL) == (["default/big"], [])
    room = scheduler.reserving.of("default/big")
    assert room is not None
    assert str(room.domain) == "block z1/b2"
    assert room.start == WALL + Settings().floor


def test_explain_says_the_gang_does_not_fit_even_with_nothing_running() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    scheduler.refresh_reservations(0.0, WALL)
    told = explain(scheduler, "default/big")
    assert told.outcome == f"does not fit: {NEVER}"
    assert told.reservation == ""


CLUSTER = """
apiVersion: scheduling.topogang.io/v1alpha1
kind: Topology
metadata: {name: dc}
spec:
  levels: [{nodeLabel: zone}, {nodeLabel: rack}]
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {zone: z1, rack: r1, kubernetes.io/hostname: n1}}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {zone: z1, rack: r1, kubernetes.io/hostname: n2}}
spec: {taints: [{key: dedicated, value: infer, effect: NoSchedule}]}
status: {allocatable: {nvidia.com/gpu: "8", cpu: "64", pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: ml, creationTimestamp: "2026-11-25T10:00:00Z"}
spec:
  nodeName: n1
  activeDeadlineSeconds: 3600
  containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
status: {phase: Running, startTime: "2026-11-25T10:00:00Z"}
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: big, namespace: ml, annotations: {kai.scheduler/topology: dc}}
spec: {minMember: 2, topologyConstraints: {global: {requiredTopologyLevel: rack}}}
"""
MEMBER = """---
apiVersion: v1
kind: Pod
metadata: {name: big-NAME, namespace: ml, annotations: {pod-group-name: big}, creationTimestamp: "2026-11-25T10:30:00Z"}
spec:
  containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
"""


def test_the_simulator_holds_no_room_for_a_gang_a_taint_keeps_from_every_rack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rack has 2 nodes; the gang of 2 may use only the untainted one."""
    (tmp_path / "in.yaml").write_text(CLUSTER + MEMBER.replace("NAME", "0") + MEMBER.replace("NAME", "1"))
    assert main(["simulate", "-f", str(tmp_path / "in.yaml"), "-o", "json"]) == 0
    (group,) = json.loads(capsys.readouterr().out)["podGroups"]
    assert group["phase"] == "Pending"
    assert group["message"] == (
        "PodGroup ml/big: 2 pods x {nvidia.com/gpu: 8} in one rack; the best rack fits 1 even with nothing"
        " running; nodes left out: 1 taint dedicated=infer:NoSchedule"
    )
    assert "room held" not in group["message"]
    assert "reservation" not in group
