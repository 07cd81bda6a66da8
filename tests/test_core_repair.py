"""Repairing a running gang in the core: the broken part moves whole, the rest stays.

Cluster: one zone, block b1 with racks r1..r5 of 2 nodes (8 GPUs each); z2 (rack r1, 2 nodes)
is another zone. The gang: 4 segments of 2 pods of 8 GPUs, each required in one rack, the whole
gang required in one zone; it runs on r1..r4 (segment s on rack r{s+1}).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.decisions import R_REPAIRING, R_UNREPAIRABLE
from extender.core.explain import explain, render
from extender.core.explain_names import Named, resolve
from extender.core.repairing import ON_UNREPAIRABLE
from extender.core.scheduler import GangScheduler
from extender.kube.podgroup_status import status_body
from extender.model.pod import PodInfo
from extender.server import wire
from extender.server.extender import Extender
from tests.builders import TOPO, grid, pod, podgroup
from tests.test_server_preemption import Evictions

SEGMENTS = 4


def setup(spare_rack: bool = True, evict_whole: bool = False) -> tuple[GangScheduler, list[str]]:
    state = ClusterState()
    racks = 5 if spare_rack else 4
    zone_2 = grid(zones=2, racks=1, nodes=2)[2:]  # z2-b1-r1-n1, -n2: outside the gang's zone
    for n in grid(racks=racks, nodes=2) + zone_2:
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    spec = {
        "subGroups": [{"name": f"seg-{s}", "minMember": 2} for s in range(SEGMENTS)],
        "topologyConstraints": {
            "global": {"requiredTopologyLevel": "zone"},
            "subGroups": {f"seg-{s}": {"requiredTopologyLevel": "rack"} for s in range(SEGMENTS)},
        },
    }
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    scheduler = GangScheduler(state, repair_timeout=60)
    keys = []
    for i in range(2 * SEGMENTS):
        p = member(i, node=f"z1-b1-r{i // 2 + 1}-n{i % 2 + 1}")
        if evict_whole:
            p = replace(p, annotations={**p.annotations, ON_UNREPAIRABLE: "EvictGang"})
        scheduler.observe_pod(p)
        keys.append(p.key)
    return scheduler, keys


def member(i: int, node: str | None = None, uid: str = "") -> PodInfo:
    p = pod(f"w-{i}", group="g", subgroup=f"seg-{i // 2}", node_name=node)
    return replace(p, uid=uid or f"uid-w-{i}", phase="Running" if node else "Pending")


def fail_node(scheduler: GangScheduler, name: str, pod_index: int) -> PodInfo:
    """NAME goes away with the pod on it; the workload controller recreates that pod."""
    scheduler.state.delete_node(name)
    scheduler.delete_pod(f"default/w-{pod_index}")
    replacement = member(pod_index, uid=f"uid-w-{pod_index}-again")
    scheduler.observe_pod(replacement)
    return replacement


def names(scheduler: GangScheduler) -> list[str]:
    return sorted(scheduler.state.nodes)


def test_a_replacement_with_room_in_its_segments_rack_goes_there_and_nothing_moves() -> None:
    scheduler, _ = setup()
    scheduler.state.upsert_node(grid(racks=3, nodes=3)[8])  # z1-b1-r3-n3: a spare node under segment 2
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    result = scheduler.filter(replacement, names(scheduler), 0.0)
    assert result.nodes == ["z1-b1-r3-n3"]
    assert result.event is not None
    assert result.event.outcome == "planned"
    assert scheduler.repairs.last_of("default/g") is None


def test_a_segment_without_room_moves_whole_to_a_free_rack_of_the_zone() -> None:
    scheduler, keys = setup()
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    result = scheduler.filter(replacement, names(scheduler), 0.0)
    assert result.nodes == []
    event = result.event
    assert event is not None
    assert event.outcome == "repairing"
    assert event.repair is not None
    assert event.repair.moved == ("default/w-5",)  # the survivor of segment 2, and no one else
    assert event.reason == "moving SubGroup seg-2 from rack z1/b1/r3 to rack z1/b1/r5 whole (1 running pod(s) evicted)"
    status = scheduler.status("default/g")
    assert status.reason == R_REPAIRING
    assert "1 pod(s) still leaving" in status.message
    # The room on r5 is held while the survivor leaves: the replacement is refused meanwhile.
    assert {n for n, _ in scheduler.state.reservations.values()} == {"z1-b1-r5-n1", "z1-b1-r5-n2"}
    again = scheduler.filter(replacement, names(scheduler), 1.0)
    assert again.nodes == []
    assert again.reason.startswith("topogang: repairing: moving SubGroup seg-2")
    # The survivor is evicted and recreated; the gang is whole again and seg-2 goes to r5.
    scheduler.delete_pod("default/w-5")
    survivor = member(5, uid="uid-w-5-again")
    scheduler.observe_pod(survivor)
    placed = scheduler.filter(replacement, names(scheduler), 2.0)
    assert placed.event is not None
    assert placed.event.outcome == "planned"
    assert dict(scheduler.reserved("default/g")) == {
        "default/w-4": placed.nodes[0],
        "default/w-5": ({"z1-b1-r5-n1", "z1-b1-r5-n2"} - {placed.nodes[0]}).pop(),
    }
    # Segments 0, 1 and 3 never moved.
    for i in (0, 1, 2, 3, 6, 7):
        assert scheduler.state.pods[keys[i]].node_name == f"z1-b1-r{i // 2 + 1}-n{i % 2 + 1}"
    assert scheduler.status("default/g").reason != R_REPAIRING
    last = scheduler.repairs.last_of("default/g")
    assert last is not None
    assert last.message.startswith("moving SubGroup seg-2 from rack z1/b1/r3 to rack z1/b1/r5")


def test_no_free_rack_in_the_zone_leaves_the_gang_running_and_gives_up_after_the_timeout() -> None:
    # r5 does not exist and zone z2 is not the gang's zone: segment 2 has nowhere to go.
    scheduler, _ = setup(spare_rack=False)
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    result = scheduler.filter(replacement, names(scheduler), 0.0)
    assert result.nodes == []
    assert result.event is not None
    assert result.event.outcome == "pending"
    assert scheduler.expire_repairs(30.0) == []  # within the timeout: nothing given up yet
    given_up = scheduler.expire_repairs(61.0)
    assert given_up == [("default/g", [])]  # no annotation: the gang keeps running
    status = scheduler.status("default/g")
    assert status.reason == R_UNREPAIRABLE
    assert status.unschedulable
    assert status.message.startswith(
        "no part of the gang could be repaired within 60s: PodGroup default/g: 1 pod x {cpu: 1, nvidia.com/gpu: 8}"
        " in zone z1, where its running pods hold it; it has room for 0"
    )


def test_a_workload_that_asks_for_it_is_evicted_whole_when_it_cannot_be_repaired() -> None:
    scheduler, keys = setup(spare_rack=False, evict_whole=True)
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    scheduler.filter(replacement, names(scheduler), 0.0)
    [(group, evicted)] = scheduler.expire_repairs(61.0)
    assert group == "default/g"
    assert sorted(p.key for p in evicted) == sorted(k for k in keys if k != "default/w-4")
    assert "its 7 running pod(s) are evicted" in scheduler.status("default/g").message


def test_a_bad_policy_value_is_named_and_the_gang_kept_running() -> None:
    scheduler, _ = setup(spare_rack=False)
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    scheduler.observe_pod(replace(replacement, annotations={**replacement.annotations, ON_UNREPAIRABLE: "evict"}))
    scheduler.filter(scheduler.state.pods[replacement.key], names(scheduler), 0.0)
    assert scheduler.expire_repairs(61.0) == [("default/g", [])]
    assert (
        "annotation scheduling.topogang.io/on-unrepairable: 'evict' is not EvictGang or Keep"
        in scheduler.status("default/g").message
    )


def test_the_last_repair_is_in_the_podgroup_status_and_in_explain() -> None:
    scheduler, _ = setup()
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    scheduler.filter(replacement, names(scheduler), 0.0)
    moved = "moving SubGroup seg-2 from rack z1/b1/r3 to rack z1/b1/r5 whole (1 running pod(s) evicted)"
    status = scheduler.status("default/g")
    assert status.last_repair == moved
    body = status_body(status, None, "2026-11-23T18:00:00Z")
    assert body["lastRepair"] == {"message": moved, "time": "2026-11-23T18:00:00Z"}
    later = status_body(status, body, "2026-11-23T18:05:00Z")
    assert later["lastRepair"]["time"] == "2026-11-23T18:00:00Z"  # the same repair keeps its time
    when = "at 0s on the scheduler's clock, no wall clock known"  # no reservation pass gave it a wall clock
    assert f"  Last repair: {moved}, {when}\n" in render([explain(scheduler, "default/g")])
    # A new leader (or `topogang explain`) learns it from the PodGroup's status.
    fresh, _ = setup()
    pg = {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"}}
    apply_object(fresh, {**pg, "spec": {"minMember": 8}, "status": {"lastRepair": body["lastRepair"]}})
    assert fresh.repairs.last_text("default/g") == f"{moved} (at 2026-11-23T18:00:00Z)"


def test_a_gang_whose_plan_was_just_carried_out_is_repaired_too_and_binds_its_moved_part_together() -> None:
    # The failure comes before the sweep drops the carried-out plan (its gate opened, nothing left
    # reserved): the replacement is then planned as an extension, which must not keep it from a
    # repair, and the moved segment gets a gate of its own.
    scheduler, _ = setup()
    for i in range(2 * SEGMENTS):
        scheduler.observe_pod(replace(member(i), node_name=None))
    first = scheduler.filter(scheduler.state.pods["default/w-0"], names(scheduler), 0.0)
    assert first.event is not None
    assert first.event.outcome == "planned"
    planned = dict(scheduler.reserved("default/g"))
    for key, node in planned.items():
        scheduler.bind(key, node, 0.1)
        scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=node, phase="Running"))
    assert scheduler.plans["default/g"].gate.opened
    [index] = [int(k.rsplit("-", 1)[1]) for k in planned if planned[k].endswith("-n1") and k.endswith(("4", "5"))]
    replacement = fail_node(scheduler, planned[f"default/w-{index}"], index)
    result = scheduler.filter(replacement, names(scheduler), 1.0)
    assert result.event is not None
    assert result.event.outcome == "repairing"
    other = f"default/w-{9 - index}"  # the other pod of segment 2
    scheduler.delete_pod(other)
    scheduler.observe_pod(member(9 - index, uid="uid-again"))
    placed = scheduler.filter(replacement, names(scheduler), 2.0)
    assert placed.event is not None
    assert placed.event.outcome == "planned"
    assert scheduler.bind(replacement.key, placed.nodes[0], 2.1).action == "wait"  # the segment's own gate


async def test_the_server_evicts_the_moved_pods_whether_the_repair_came_from_a_filter_call_or_the_ungater() -> None:
    for path in ("filter", "ungater"):
        scheduler, _ = setup()
        actions = Evictions()
        extender = Extender(scheduler, actions, bind_timeout=5)
        replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
        if path == "filter":
            args = wire.NodeArgs({"metadata": {}}, "default", "w-4", names(scheduler), None)
            extender.filter(args)
        else:  # gates mode plans outside kube-scheduler's calls and reports through decided()
            result = scheduler.filter(replacement, names(scheduler), 0.0)
            assert result.event is not None
            extender.decided(result.event, 0.0)
        for _ in range(5):
            await asyncio.sleep(0)
        assert actions.evicted == ["default/w-5"], path
        assert ("g", "GangRepair: " + scheduler.repairs.last_text("default/g")) in actions.events, path
        await extender.close()


def test_a_moved_pod_is_explained_through_its_gang_with_the_repair_and_when() -> None:
    scheduler, _ = setup()
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    scheduler.filter(replacement, names(scheduler), 5.0)
    scheduler.delete_pod("default/w-5")  # the moved pod, evicted: its name is the one people have
    scheduler.refresh_reservations(10.0, 1_764_000_010.0)  # a pass gives the scheduler's clock a wall clock
    assert resolve(scheduler, "default/w-5") == Named(("default/g",), pod="default/w-5")
    said = render([explain(scheduler, "default/g", "default/w-5")])
    assert "\n  Asked about pod default/w-5: evicted (it no longer exists)\n" in said
    moved = "moving SubGroup seg-2 from rack z1/b1/r3 to rack z1/b1/r5 whole (1 running pod(s) evicted)"
    assert f"\n  Last repair: {moved}, at 2025-11-24T16:00:05Z\n" in said


def test_a_gang_evicted_whole_as_unrepairable_is_remembered() -> None:
    scheduler, keys = setup(spare_rack=False, evict_whole=True)
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    scheduler.filter(replacement, names(scheduler), 0.0)
    scheduler.expire_repairs(61.0)
    evicted = scheduler.evicted.of("default/g")
    assert evicted is not None
    assert (evicted.cause, evicted.count, evicted.at) == ("Unrepairable", 7, 61.0)
    assert evicted.pods == tuple(sorted(k for k in keys if k != "default/w-4"))
