"""Steering with status.nominatedNodeName: with an adaptive percentageOfNodesToScore kube-scheduler
offers a call a sample of the nodes, which may leave a member's planned node out.

Cluster and gang as tests/test_core_lifecycle.py: racks r1 and r2 of 4 nodes, a gang of 3 pods
of 8 GPUs required on one rack.
"""

from __future__ import annotations

from extender.core.scheduler import GangScheduler
from tests.builders import pod, podgroup
from tests.test_core_lifecycle import NODES, planned, setup


def steering() -> tuple[GangScheduler, list[str]]:
    scheduler, keys = setup()
    scheduler.steering.enabled = True
    return scheduler, keys


def test_a_planned_node_left_out_of_the_sample_is_nominated_and_the_plan_kept() -> None:
    scheduler, keys = steering()
    first = scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    plan = planned(scheduler)
    assert [scheduler.nomination_target(k) for k in first.wake] == [plan[k] for k in first.wake]  # sent
    node = plan[keys[1]]
    sample = [n for n in NODES if n != node]
    result = scheduler.filter(scheduler.state.pods[keys[1]], sample, 1.0)
    assert first.nodes == [plan[keys[0]]]
    assert result.nodes == []
    assert result.steer == node
    assert result.reason == f"topogang: steering to its planned node {node}"
    assert result.event is None  # no new plan
    assert planned(scheduler) == plan
    # Nominated, its next attempt offers that node alone.
    assert scheduler.filter(scheduler.state.pods[keys[1]], [node], 2.0, nominated=node).nodes == [node]


def test_the_member_whose_call_plans_the_gang_trades_nodes_with_a_mate_whose_node_was_offered() -> None:
    # The plan puts the gang on rack r1 (n1, n2, n3 for g-0, g-1, g-2); the call that made it
    # offered only r1-n3 and r2's nodes. g-0 takes n3 and g-2 takes n1: the same nodes, one
    # call answered at once instead of a nomination and a retry.
    scheduler, keys = steering()
    sample = ["z1-b1-r1-n3", *(n for n in NODES if "-r2-" in n)]
    result = scheduler.filter(scheduler.state.pods[keys[0]], sample, 0.0)
    assert result.nodes == ["z1-b1-r1-n3"]
    assert result.steer is None
    assert result.event is not None
    assert result.event.outcome == "planned"
    assert sorted(result.event.nodes) == ["z1-b1-r1-n1", "z1-b1-r1-n2", "z1-b1-r1-n3"]
    assert planned(scheduler) == {keys[0]: "z1-b1-r1-n3", keys[1]: "z1-b1-r1-n2", keys[2]: "z1-b1-r1-n1"}
    assert {p: n for p, (n, _) in scheduler.state.reservations.items()} == planned(scheduler)
    assert set(result.wake) == set(keys[1:])


def test_with_no_mate_offered_the_member_whose_call_plans_the_gang_is_nominated() -> None:
    scheduler, keys = steering()
    result = scheduler.filter(scheduler.state.pods[keys[0]], ["z1-b1-r2-n4"], 0.0)
    assert result.steer == planned(scheduler)[keys[0]]
    assert set(result.wake) == set(keys[1:])


def test_a_nominated_node_that_kube_scheduler_still_left_out_failed_its_filters_and_is_planned_again() -> None:
    scheduler, keys = steering()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    node = planned(scheduler)[keys[1]]
    others = [n for n in NODES if n != node]
    result = scheduler.filter(scheduler.state.pods[keys[1]], others, 1.0, nominated=node)
    assert result.event is not None
    assert result.event.outcome == "replanned"
    # topogang's view still finds room there (kube-scheduler refused it for a reason topogang does
    # not model), so the plan is the same: refused, not steered to it again.
    assert result.steer is None
    assert result.reason == f"topogang: planned node {node} is no longer feasible"


def test_without_nomination_a_node_not_offered_is_planned_again_as_before() -> None:
    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    node = planned(scheduler)[keys[1]]
    result = scheduler.filter(scheduler.state.pods[keys[1]], [n for n in NODES if n != node], 1.0)
    assert result.steer is None
    assert result.event is not None
    assert result.event.outcome == "replanned"


def test_the_planning_call_nominates_the_other_members_in_the_order_they_arrived_not_by_name() -> None:
    # kube-scheduler takes never-tried pods in the order its watch saw them; nominations sent in
    # that order land before it reaches each member (sorted by name, g-10 would come before g-2).
    scheduler, _ = setup()
    spec = podgroup({"minMember": 4}, name="h")
    scheduler.state.set_podgroup("default/h", spec)
    scheduler.steering.enabled = True
    order = ["h-10", "h-2", "h-1", "h-0"]
    for name in order:
        scheduler.observe_pod(pod(name, group="h"))
    result = scheduler.filter(scheduler.state.pods["default/h-10"], NODES, 0.0)
    assert result.event is not None
    assert result.event.outcome == "planned"
    assert list(result.wake) == [f"default/{n}" for n in order[1:]]


def test_a_member_taken_before_its_nomination_went_out_trades_with_a_mate_whose_nomination_has_not() -> None:
    # kube-scheduler can take members faster than their nominations are written. g-1 comes with
    # no nomination and a sample without its node but with g-2's: they trade, g-1 is answered at
    # once, g-2's nomination (still queued) goes out for g-1's old node, and g-1's is not written.
    scheduler, keys = steering()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    plan = planned(scheduler)
    sample = [plan[keys[2]]]
    result = scheduler.filter(scheduler.state.pods[keys[1]], sample, 1.0)
    assert result.nodes == [plan[keys[2]]]
    assert result.steer is None
    assert planned(scheduler) == {keys[0]: plan[keys[0]], keys[1]: plan[keys[2]], keys[2]: plan[keys[1]]}
    assert {p: n for p, (n, _) in scheduler.state.reservations.items()} == planned(scheduler)
    assert scheduler.nomination_target(keys[2]) == plan[keys[1]]
    assert scheduler.nomination_target(keys[1]) is None


def test_a_mate_whose_nomination_went_out_is_not_traded_with() -> None:
    scheduler, keys = steering()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    plan = planned(scheduler)
    assert scheduler.nomination_target(keys[2]) == plan[keys[2]]  # written: kube-scheduler will try it there
    result = scheduler.filter(scheduler.state.pods[keys[1]], [plan[keys[2]]], 1.0)
    assert result.steer == plan[keys[1]]
    assert planned(scheduler) == plan


def test_a_member_whose_nomination_went_out_before_it_traded_is_nominated_again_on_the_node_it_took() -> None:
    # g-1's nomination was written (for its planned node) but kube-scheduler's copy did not show it
    # yet: g-1 trades with g-2, whose nomination is still queued. Left as it is, g-1's nomination
    # would count against its old node in kube-scheduler's view, where g-2 is now planned.
    scheduler, keys = steering()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    plan = planned(scheduler)
    assert scheduler.nomination_target(keys[1]) == plan[keys[1]]
    result = scheduler.filter(scheduler.state.pods[keys[1]], [plan[keys[2]]], 1.0)
    assert result.nodes == [plan[keys[2]]]
    assert result.steer == plan[keys[2]]  # nominated again, on the node it passed on
    assert scheduler.nomination_target(keys[2]) == plan[keys[1]]
    # Passing on the node its nomination named needs no second write.
    again = scheduler.filter(scheduler.state.pods[keys[0]], [plan[keys[0]]], 2.0)
    assert again.nodes == [plan[keys[0]]]
    assert again.steer is None


def test_a_member_whose_binding_is_in_flight_keeps_its_node_when_the_plan_is_extended() -> None:
    # A gang of minimum 2 (g-0, g-1) required on one rack; its gate opens and their Bindings are
    # posted. Before they land, g-2 (beyond the minimum) comes; its call offers only g-0's node.
    # Trading with g-0 would send g-2 to the node g-0's Binding targets: both would land there.
    scheduler, _ = steering()
    state = scheduler.state
    state.set_podgroup(
        "default/g",
        podgroup({"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name="g"),
    )
    scheduler.delete_pod("default/g-2")
    scheduler.filter(state.pods["default/g-0"], NODES, 0.0)
    plan = planned(scheduler)
    assert set(plan) == {"default/g-0", "default/g-1"}
    scheduler.bind("default/g-0", plan["default/g-0"], 1.0)
    opened = scheduler.bind("default/g-1", plan["default/g-1"], 1.0)
    assert sorted(opened.bind) == sorted(plan.items())  # the Bindings go out; not landed yet
    late = pod("g-2", group="g")
    scheduler.observe_pod(late)
    result = scheduler.filter(late, [plan["default/g-0"]], 2.0)
    assert result.event is not None
    assert result.event.outcome == "extended"
    assert result.nodes == []  # not g-0's node: nominated to its own
    assert result.steer == planned(scheduler)[late.key] != plan["default/g-0"]
    assert {k: planned(scheduler)[k] for k in plan} == plan  # the in-flight ones keep their nodes
