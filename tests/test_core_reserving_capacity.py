"""Held room counts what the planner counts: the reservation pass reads free room, and the room
a running pod gives back when it ends, from where the planner reads them, for every kind of
resource (devices of allocated claims, an extended resource backed by a DeviceClass, pod
overhead, pod-level requests).

Cluster: rack r1 (z1-b1-r1-n1, n2) and rack r2 (z1-b1-r2-n1, n2), every node full with one
running pod without a runtime bound (expected to end `floor`, 1,800 s, from now). The gang: 2
pods required in one rack, each taking a whole node. Nothing frees before the running pods end,
so the gang's estimated start is 1,800 s away, and work that ends before then backfills.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from extender.core.cluster import ClusterState
from extender.core.reservations import Settings
from extender.core.scheduler import GangScheduler
from extender.model.node import NodeInfo
from extender.model.pod import PodInfo, parse_pod
from tests.builders import GPU, TOPO, grid, pod, podgroup
from tests.dra_builders import claim, claim_pod, device_class, exactly, publish, template

NODES = [n.name for n in grid(racks=2, nodes=2)]
WALL = 1_000_000.0
FLOOR = Settings().floor
IN_A_RACK = {"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}


def _no_plugin_gpus(n: NodeInfo) -> NodeInfo:
    return replace(n, allocatable={k: v for k, v in n.allocatable.items() if k != GPU})


def _with_cpu(cpu: int) -> Callable[[NodeInfo], NodeInfo]:
    def change(n: NodeInfo) -> NodeInfo:
        return replace(n, allocatable={**_no_plugin_gpus(n).allocatable, "cpu": cpu * 1000})

    return change


def _cpu_pod(name: str, node: str | None = None, group: str | None = None, **spec: Any) -> PodInfo:
    """A pod of 16 cpus as kube-scheduler counts them, shaped by SPEC (overhead, pod-level)."""
    containers = spec.pop("containers", [{"name": "c", "resources": {"requests": {"cpu": "16"}}}])
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "annotations": {"pod-group-name": group} if group else {}},
        "spec": {"containers": containers, **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return parse_pod(body)


def _claimed_runner(state: ClusterState, node: str, i: int) -> PodInfo:
    """A running pod whose 8 devices are its own allocated claim (its requests name none)."""
    made = f"run-{i}-gpus"
    held = [(node, f"gpu-{d}") for d in range(8)]
    state.set_dra("ResourceClaim", f"default/{made}", claim(made, exactly(8), allocated=held))
    return claim_pod(f"run-{i}", generated=made, node_name=node)


# Each kind: how nodes look, what fills a node (a running pod), and one pod of the waiting gang.
KINDS: dict[str, dict[str, Any]] = {
    "devices": {
        "node": _no_plugin_gpus,
        "setup": lambda state: publish(state, NODES),
        "runner": _claimed_runner,
        "member": lambda name: claim_pod(name, group="big"),
    },
    "extended resource from DRA": {
        "node": _no_plugin_gpus,
        "setup": lambda state: (
            publish(state, NODES),
            state.set_dra("DeviceClass", "gpu.example.com", device_class(extended=GPU)),
        ),
        "runner": _claimed_runner,
        "member": lambda name: pod(name, gpus=8, group="big"),
    },
    "overhead": {
        "node": _with_cpu(16),
        "setup": lambda state: None,
        "runner": lambda state, node, i: _cpu_pod(
            f"run-{i}",
            node,
            containers=[{"name": "c", "resources": {"requests": {"cpu": "12"}}}],
            overhead={"cpu": "4"},
        ),
        "member": lambda name: _cpu_pod(name, group="big"),
    },
    "pod-level requests": {
        "node": _with_cpu(16),
        "setup": lambda state: None,
        "runner": lambda state, node, i: _cpu_pod(f"run-{i}", node, resources={"requests": {"cpu": "16"}}),
        "member": lambda name: _cpu_pod(
            name,
            group="big",
            containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            resources={"requests": {"cpu": "16"}},
        ),
    },
}


def full_cluster(kind: str) -> tuple[GangScheduler, list[str]]:
    how = KINDS[kind]
    state = ClusterState()
    for n in grid(racks=2, nodes=2):
        state.upsert_node(how["node"](n))
    state.set_topology("default", TOPO)
    how["setup"](state)
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(8)))
    scheduler = GangScheduler(state, reservations=Settings())
    for i, n in enumerate(NODES):
        scheduler.observe_pod(how["runner"](state, n, i))
    state.set_podgroup("default/big", podgroup(IN_A_RACK, name="big"))
    keys = []
    for i in range(2):
        p = how["member"](f"big-{i}")
        scheduler.observe_pod(p)
        keys.append(p.key)
    return scheduler, keys


def held_for_the_gang(scheduler: GangScheduler, keys: list[str]) -> float:
    """The gang is refused (no room now) and held room; returns its estimated start."""
    refused = scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    assert refused.nodes == [], "the planner sees every node full"
    assert scheduler.refresh_reservations(0.0, WALL) == (["default/big"], [])
    room = scheduler.reserving.of("default/big")
    assert room is not None
    assert room.start is not None
    return room.start


@pytest.mark.parametrize("kind", list(KINDS))
def test_held_room_is_expected_to_free_when_the_running_pods_end(kind: str) -> None:
    """The planner refuses the gang for want of room: the reservation pass must not find room
    free now (estimated start = now), nor miss the room the running pods give back at their end
    (no reservation at all)."""
    scheduler, keys = full_cluster(kind)
    assert held_for_the_gang(scheduler, keys) == WALL + FLOOR


def test_bounded_work_backfills_room_whose_devices_running_claims_hold() -> None:
    """Room frees on one node (its pod and its claim gone) before the gang's estimated start: a
    120 s pod of 8 devices ends well before it and may use that node."""
    scheduler, keys = full_cluster("devices")
    held_for_the_gang(scheduler, keys)
    state = scheduler.state
    freed = NODES[0]
    scheduler.delete_pod("default/run-0")
    state.set_dra("ResourceClaim", "default/run-0-gpus", None)
    short = claim_pod("short")
    short = replace(short, runtime_bound=120.0)
    scheduler.observe_pod(short)
    assert freed in scheduler.filter(state.pods[short.key], NODES, 1.0).nodes
    unbounded = claim_pod("web")
    scheduler.observe_pod(unbounded)
    result = scheduler.filter(state.pods[unbounded.key], NODES, 1.0)
    assert freed not in result.nodes
    assert result.unresolvable[freed].startswith("topogang: room held for a waiting gang")


def _memory_pod(name: str, node: str | None = None, group: str | None = None) -> PodInfo:
    requests = {"cpu": "1", "memory": "300Gi"}
    return _cpu_pod(name, node, group, containers=[{"name": "c", "resources": {"requests": requests}}])


def test_each_pass_reads_the_capacity_of_the_resources_its_gangs_ask_for() -> None:
    """A pass for a gang of GPUs, then one for a gang of memory alone, with no level required:
    the second finds the level where it fits (a rack: one pod of 300Gi per node) from the nodes'
    memory, not from the first pass's columns kept under the same Topology."""
    state = ClusterState()
    for n in grid(racks=2, nodes=2):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    scheduler = GangScheduler(state, reservations=Settings())
    for i, n in enumerate(NODES):
        scheduler.observe_pod(
            replace(
                _memory_pod(f"run-{i}", n),
                requests={"cpu": 1000, "memory": 300 * 2**30 * 1000, GPU: 8000, "pods": 1000},
            )
        )
    state.set_podgroup("default/big", podgroup(IN_A_RACK, name="big"))
    gpus = [pod(f"big-{i}", group="big") for i in range(2)]
    for p in gpus:
        scheduler.observe_pod(p)
    assert held_for_the_gang(scheduler, [p.key for p in gpus]) == WALL + FLOOR
    for p in gpus:
        scheduler.delete_pod(p.key)
    state.set_podgroup("default/big", None)
    state.set_podgroup("default/mem", podgroup({"minMember": 2}, name="mem"))  # where 2 fit: a rack
    memory = [_memory_pod(f"mem-{i}", group="mem") for i in range(2)]
    for p in memory:
        scheduler.observe_pod(p)
    assert scheduler.filter(state.pods[memory[0].key], NODES, 0.0).nodes == []
    assert scheduler.refresh_reservations(1.0, WALL + 1) == (["default/mem"], ["default/big"])
    room = scheduler.reserving.of("default/mem")
    assert room is not None
    assert room.start == WALL + 1 + FLOOR
