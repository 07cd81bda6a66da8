"""A plan's life in the core: reservations follow pods, plans expire, taken nodes are re-planned.

Cluster: rack r1 of 4 nodes (z1-b1-r1-n1..n4), rack r2 of 4 nodes (z1-b1-r2-n1..n4), 8 GPUs each.
The gang: 3 pods of 8 GPUs required on one rack.
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.cluster import ClusterState
from extender.core.decisions import BIND, REJECT, WAIT
from extender.core.scheduler import GangScheduler
from tests.builders import TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(racks=2, nodes=4)]


def setup(plan_ttl: float = 60) -> tuple[GangScheduler, list[str]]:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    spec = podgroup({"minMember": 3, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name="g")
    state.set_podgroup("default/g", spec)
    scheduler = GangScheduler(state, plan_ttl=plan_ttl)
    keys = []
    for i in range(3):
        p = pod(f"g-{i}", group="g")
        scheduler.observe_pod(p)
        keys.append(p.key)
    return scheduler, keys


def planned(scheduler: GangScheduler) -> dict[str, str]:
    return dict(scheduler.plans["default/g"].reserved)


def test_first_member_plans_and_reserves_the_whole_gang() -> None:
    scheduler, keys = setup()
    result = scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    assert result.event is not None
    assert result.event.outcome == "planned"
    assert set(planned(scheduler)) == set(keys)
    assert set(scheduler.state.reservations) == set(keys)
    assert len({n.rsplit("-", 1)[0] for n in planned(scheduler).values()}) == 1


def test_a_deleted_member_of_the_minimum_releases_the_plan() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    scheduler.delete_pod(keys[1])
    assert "default/g" not in scheduler.plans
    assert not scheduler.state.reservations
    assert scheduler.status("default/g").message == "PodGroup default/g: gang 2/3 pods present"


def test_a_filter_call_that_comes_after_the_deletion_does_not_bring_the_pod_back() -> None:
    # kube-scheduler sent the call before it saw the deletion; our watch saw it first. Had the
    # pod come back, its gang would be planned and hold room for a pod that no longer exists.
    scheduler, keys = setup()
    late = replace(scheduler.state.pods[keys[0]], uid="uid-g-0")
    scheduler.observe_pod(late)
    scheduler.delete_pod(keys[0])
    result = scheduler.filter(late, NODES, 0.0)
    assert result.nodes == []
    assert result.reason == "topogang: pod default/g-0 was deleted"
    assert keys[0] not in scheduler.state.pods
    assert not scheduler.state.reservations
    # The same name created again (a new uid) is a new pod, welcome.
    scheduler.observe_pod(replace(late, uid="uid-g-0-again"))
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes


def test_a_member_bound_elsewhere_drops_its_reservation_and_counts_as_bound() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    plan = planned(scheduler)
    elsewhere = next(n for n in NODES if n not in plan.values())
    scheduler.observe_pod(replace(scheduler.state.pods[keys[0]], node_name=elsewhere))
    assert keys[0] not in scheduler.state.reservations
    assert keys[0] not in planned(scheduler)
    assert scheduler.state.bound.at(elsewhere, "nvidia.com/gpu") == 8000


def test_a_plan_that_makes_no_progress_expires() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    assert scheduler.bind(keys[0], planned(scheduler)[keys[0]], 10.0).action == WAIT
    assert scheduler.expire(30.0) == {}
    released = scheduler.expire(100.0)
    assert released == {"default/g": [keys[0]]}
    assert not scheduler.state.reservations
    dropped = [(pod, why.render()) for pod, why in scheduler.gates.take_dropped()]
    assert dropped == [(keys[0], "plan expired after 60s without all pods binding")]


def test_a_planned_node_taken_by_another_scheduler_is_planned_again() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    taken = planned(scheduler)[keys[1]]
    # Another scheduler binds a pod that fills the node topogang planned for g-1.
    scheduler.observe_pod(pod("intruder", node_name=taken))
    result = scheduler.filter(scheduler.state.pods[keys[1]], NODES, 1.0)
    assert result.event is not None
    assert result.event.outcome == "replanned"
    assert result.nodes
    assert result.nodes != [taken]
    assert taken not in planned(scheduler).values()
    assert len({n.rsplit("-", 1)[0] for n in planned(scheduler).values()}) == 1  # still one rack


def test_the_gate_binds_the_minimum_together_and_refuses_other_nodes() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    plan = planned(scheduler)
    wrong = next(n for n in NODES if n != plan[keys[0]])
    assert scheduler.bind(keys[0], wrong, 0.0).action == REJECT
    assert scheduler.bind(keys[0], plan[keys[0]], 0.0).action == WAIT
    assert scheduler.bind(keys[1], plan[keys[1]], 0.0).action == WAIT
    last = scheduler.bind(keys[2], plan[keys[2]], 0.0)
    assert last.action == BIND
    assert sorted(last.bind) == sorted(plan.items())


def test_a_gang_whose_podgroup_goes_before_its_pods_gives_its_room_back_as_they_go() -> None:
    # A workload is deleted: its PodGroup first, then its pods. Once the PodGroup is gone the
    # pods no longer resolve to their gang, but the plan still holds their room.
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    scheduler.state.set_podgroup("default/g", None)
    scheduler.delete_pod(keys[0])
    assert "default/g" not in scheduler.plans  # a member of the minimum went: the plan goes
    assert scheduler.state.reservations == {}


def test_the_sweep_releases_the_plan_of_a_gang_that_is_gone() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    for key in keys:  # gone without an event for each (their deletions folded into a relist)
        scheduler.state.delete_pod(key)
    assert scheduler.state.reservations
    scheduler.expire(1.0)
    assert "default/g" not in scheduler.plans
    assert scheduler.state.reservations == {}


def bind_where_planned(scheduler: GangScheduler, key: str) -> None:
    scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=planned(scheduler)[key]))


def test_a_plan_let_through_in_gates_mode_whose_pods_never_bind_expires_and_gives_its_room_back() -> None:
    # Gates mode: the ungater pins each pod to its node and lifts the gate; kube-scheduler binds
    # them. A pod it cannot place (its node went) would hold its room for good.
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    scheduler.gates.opened_elsewhere("default/g", 0.0)
    assert scheduler.expire(30.0) == {}
    assert scheduler.expire(100.0) == {"default/g": []}  # (no bind call waits in gates mode)
    assert "default/g" not in scheduler.plans
    assert not scheduler.state.reservations
    status = scheduler.status("default/g")
    assert status.reason == "PlanExpired"
    assert (
        status.message
        == "plan expired: no pod of it bound for 60s; the room held for its 3 unbound pod(s) was released"
    )


def test_an_opened_plan_whose_pods_beyond_the_minimum_never_come_to_bind_expires() -> None:
    scheduler, keys = setup()
    scheduler.state.set_podgroup(
        "default/g",
        podgroup({"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name="g"),
    )
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    minimum = sorted(scheduler.plans["default/g"].gate.minimum)
    (beyond,) = set(keys) - set(minimum)
    for key in minimum:
        decision = scheduler.bind(key, planned(scheduler)[key], 1.0)
    assert decision.action == BIND
    for key in minimum:
        bind_where_planned(scheduler, key)
    assert list(planned(scheduler)) == [beyond]  # its bind call never comes
    assert scheduler.expire(10.0) == {}
    assert scheduler.expire(100.0) == {"default/g": []}
    assert not scheduler.state.reservations
    status = scheduler.status("default/g")
    assert (status.phase, status.bound) == ("Scheduled", 2)
    assert status.message.endswith(
        "plan expired: no pod of it bound for 60s; the room held for its 1 unbound pod(s) was released"
    )


def test_a_gang_binding_slowly_keeps_its_plan_while_its_pods_keep_binding() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    scheduler.gates.opened_elsewhere("default/g", 0.0)
    for second, key in ((50.0, keys[0]), (100.0, keys[1])):  # one pod bound every 50 s, the ttl 60 s
        bind_where_planned(scheduler, key)
        assert scheduler.expire(second) == {}
        assert scheduler.expire(second + 45.0) == {}
    assert scheduler.expire(161.0) == {"default/g": []}  # the last pod: nothing since 100 s
    assert not scheduler.state.reservations
    assert scheduler.reasons.text("default/g").startswith("plan expired: no pod of it bound for 60s")
