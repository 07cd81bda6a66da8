"""Exclusive topology across gangs, through the core: one LWS group per rack, no sharing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from tests.builders import TOPO, grid, pod, podgroup


def exclusive(name: str) -> Any:
    pg = podgroup({"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name=name)
    assert pg.global_constraint is not None
    return replace(pg, global_constraint=replace(pg.global_constraint, exclusive=True))


def test_exclusive_gangs_never_share_a_rack_and_plain_gangs_stay_out() -> None:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):  # two racks of 4 nodes
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    scheduler = GangScheduler(state)
    names = [n.name for n in grid(racks=2, nodes=4)]
    racks = {}
    for group in ("a", "b"):
        state.set_podgroup(f"default/{group}", exclusive(group))
        pods = [pod(f"{group}-{i}", gpus=1, group=group) for i in range(2)]
        for p in pods:
            scheduler.observe_pod(p)
        result = scheduler.filter(pods[0], names, 0.0)
        assert result.nodes, result.unresolvable
        racks[group] = result.nodes[0].rsplit("-", 1)[0]
    assert racks["a"] != racks["b"]  # 2 pods of 1 GPU would fit one rack many times over
    # A third exclusive gang finds no free rack; an ordinary gang may not enter a held rack either.
    state.set_podgroup("default/c", exclusive("c"))
    c = pod("c-0", gpus=1, group="c")
    scheduler.observe_pod(c)
    scheduler.observe_pod(pod("c-1", gpus=1, group="c"))
    refused = scheduler.filter(c, names, 0.0)
    assert refused.nodes == []
    assert "in one rack free of other gangs' pods" in next(iter(refused.unresolvable.values()))
    state.set_podgroup("default/d", podgroup({"minMember": 1}, name="d"))
    d = pod("d-0", gpus=1, group="d")
    scheduler.observe_pod(d)
    assert scheduler.filter(d, names, 0.0).nodes == []
