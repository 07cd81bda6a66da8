"""A plain pod's bind call against room topogang's own count has taken.

kube-scheduler picks a plain pod's node from its cache, which may lag topogang's: pods topogang
bound ahead are in it only once its informer shows them, and a gang may be planned onto the node
between the pod's filter and its bind. Cluster: one rack of 2 nodes, 8 GPUs each.
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.cluster import ClusterState
from extender.core.decisions import BIND, REJECT
from extender.core.scheduler import GangScheduler
from extender.model.pod import PodInfo
from tests.builders import TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(racks=1, nodes=2)]
N1, N2 = NODES


def setup(min_member: int = 2) -> GangScheduler:
    state = ClusterState()
    for n in grid(racks=1, nodes=2):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": min_member}, name="g"))
    return GangScheduler(state, bind_ahead=True)


def plain(scheduler: GangScheduler, name: str, gpus: int = 2) -> PodInfo:
    p = pod(name, gpus=gpus)
    scheduler.observe_pod(p)
    return p


def test_a_plain_pod_kube_scheduler_sends_into_a_gang_bound_ahead_is_refused_at_bind() -> None:
    scheduler = setup()
    for i in range(2):
        member = pod(f"g-{i}", group="g")
        scheduler.observe_pod(member)
        result = scheduler.filter(member, NODES, float(i))
    assert sorted(n for _, n in result.bind) == NODES  # planned and bound ahead, a node each
    for key, node in result.bind:
        bound = replace(scheduler.state.pods[key], node_name=node)
        scheduler.observe_pod(bound, posted=True)  # its Binding landed
        scheduler.observe_pod(bound)  # and topogang's watch shows it: the filter checks no more
    p = plain(scheduler, "plain-0")
    assert scheduler.filter(p, NODES, 3.0).nodes == NODES  # kube-scheduler's own filters decide
    # kube-scheduler's informer has not shown the gang bound yet: its cache sends the pod to N1.
    decision = scheduler.bind(p.key, N1, 3.0)
    assert decision.action == REJECT
    assert decision.error == (
        f"topogang: node {N1} has 0 nvidia.com/gpu free, the pod asks 2: pods topogang bound, or room"
        " reserved for a gang, that kube-scheduler's cache does not count yet; it will be retried"
    )
    assert p.key not in scheduler.state.reservations


def test_a_plain_pod_being_bound_keeps_its_room_from_a_gang_planned_meanwhile() -> None:
    scheduler = setup(min_member=1)
    a, b = plain(scheduler, "plain-a"), plain(scheduler, "plain-b")
    assert scheduler.bind(a.key, N1, 1.0).action == BIND  # both Bindings posted, neither landed
    assert scheduler.bind(b.key, N2, 1.0).action == BIND
    # kube-scheduler holds both assumed: its own filters count their room, ours need not (nor
    # may they call it a gang's).
    c = plain(scheduler, "plain-c", gpus=8)
    assert scheduler.filter(c, NODES, 1.5).nodes == NODES
    member = pod("g-0", group="g")  # 8 GPUs: no node has them while the two bind
    scheduler.observe_pod(member)
    refused = scheduler.filter(member, NODES, 2.0)
    assert refused.nodes == []
    assert scheduler.reserved("default/g") == {}
    # plain-a's Binding lands: it counts as bound, its reservation goes, nothing counted twice.
    scheduler.observe_pod(replace(scheduler.state.pods[a.key], node_name=N1))
    assert a.key not in scheduler.state.reservations
    assert scheduler.state.free_on(N1, "nvidia.com/gpu") == 6000
    # plain-b's Binding fails: its room is free again, and the gang takes it.
    scheduler.gates.plain_bound(b.key)
    assert scheduler.state.reservations == {}
    placed = scheduler.filter(member, NODES, 3.0)
    assert placed.nodes == [N2]


def test_a_plain_pod_that_fits_binds_and_one_deleted_while_binding_gives_its_room_back() -> None:
    scheduler = setup()
    p = plain(scheduler, "plain-0", gpus=8)
    assert scheduler.bind(p.key, N1, 1.0).action == BIND
    assert scheduler.state.free_on(N1, "nvidia.com/gpu") == 0
    scheduler.delete_pod(p.key)
    assert scheduler.state.reservations == {}
    assert scheduler.state.free_on(N1, "nvidia.com/gpu") == 8000
