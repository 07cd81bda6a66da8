"""What Kubernetes' own PodGroup says beyond its shape (k8s.io/api v0.37.2, scheduling v1beta1):
the group's priority is the gang's, `disruptionMode: all` disrupts the gang only whole, and a
`minCount` changed while the gang runs grows it inside the domain it holds."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.preemption import running_workloads
from extender.core.repairing import ON_UNREPAIRABLE
from extender.core.scheduler import GangScheduler
from extender.grouping import ObjectIndex, group_pods
from extender.model.pod import parse_pod
from tests.builders import TOPO, grid
from tests.grouping_builders import errors
from tests.test_upstream_gangs import RACK, group, pod

JSON = dict[str, Any]
GANG = "ml/podgroup-train"


def scheduler_with(racks: int = 2, nodes: int = 4) -> GangScheduler:
    state = ClusterState()
    for n in grid(racks=racks, nodes=nodes):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    return GangScheduler(state, repair_timeout=60)


def bound(name: str, node: str, **kw: Any) -> JSON:
    body = pod(name, group="train", **kw)
    body["metadata"]["uid"] = f"uid-{name}"
    body["spec"]["nodeName"] = node
    body["status"] = {"phase": "Running"}
    return body


# -- reading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "whole", "problem"),
    [
        (None, False, None),
        ({"single": {}}, False, None),
        ({"all": {}}, True, None),
        ({"all": {}, "single": {}}, False, "spec.disruptionMode: expected at most one of all and single, got all"),
        ({"every": {}}, False, "spec.disruptionMode.every: unknown field"),
        ({"all": {"now": True}}, False, "spec.disruptionMode.all.now: unknown field"),
    ],
)
def test_disruption_mode_is_read_and_a_bad_one_named(mode: JSON | None, whole: bool, problem: str | None) -> None:
    body = group("train", 2, [RACK])
    if mode is not None:
        body["spec"]["disruptionMode"] = mode
    result = group_pods([parse_pod(pod(f"w-{i}", group="train")) for i in range(2)], ObjectIndex([body]), {})
    g = result.groups[GANG]
    if problem is None:
        assert g.podgroup is not None
        assert g.podgroup.disruption_all is whole
    else:
        assert any(problem in e for e in errors(g)), errors(g)


def test_the_groups_priority_is_the_gangs_whatever_its_pods_say() -> None:
    scheduler = scheduler_with()
    body = group("train", 2, [RACK])
    body["spec"]["priority"] = 1000
    apply_object(scheduler, body)
    for i in range(2):
        member = pod(f"w-{i}", group="train")
        member["spec"]["priority"] = 10
        apply_object(scheduler, member)
    view = scheduler.membership.view(GANG)
    assert view.priority == 1000
    # kube-scheduler refuses such a group: said, naming the pods
    assert any("the PodGroup's priority is 1000 but ml/w-0 has 10, ml/w-1 has 10" in w for w in view.warnings)
    # and lower than its pods' too: kube-scheduler takes the group's
    lower = copy.deepcopy(body)
    lower["spec"]["priority"] = -5
    apply_object(scheduler, lower)
    assert scheduler.membership.view(GANG).priority == -5


def test_without_a_priority_of_its_own_the_gang_takes_its_pods() -> None:
    scheduler = scheduler_with()
    apply_object(scheduler, group("train", 1, [RACK]))
    member = pod("w-0", group="train")
    member["spec"]["priority"] = 70
    apply_object(scheduler, member)
    assert scheduler.membership.view(GANG).priority == 70


def test_a_bad_priority_is_named() -> None:
    body = group("train", 1, [])
    body["spec"]["priority"] = "high"
    result = group_pods([parse_pod(pod("w-0", group="train"))], ObjectIndex([body]), {})
    assert errors(result.groups[GANG]) == ["PodGroup ml/train: spec.priority: expected a 32-bit integer, got 'high'"]


# -- disruption ------------------------------------------------------------------------------------


def running_gang(mode: JSON | None, pods: int = 4, min_count: int = 2, **annotations: str) -> GangScheduler:
    """PODS pods of a gang of minimum MIN_COUNT required in one rack, running on rack r1."""
    scheduler = scheduler_with()
    body = group("train", min_count, [RACK])
    if mode is not None:
        body["spec"]["disruptionMode"] = mode
    if annotations:
        body["metadata"]["annotations"] = annotations
    apply_object(scheduler, body)
    for i in range(pods):
        apply_object(scheduler, bound(f"w-{i}", f"z1-b1-r1-n{i + 1}"))
    return scheduler


def test_pods_beyond_the_minimum_are_victims_one_by_one_unless_the_gang_is_disrupted_only_whole() -> None:
    single = running_gang({"single": {}})
    [workload] = running_workloads(single.state, single.membership)
    assert len(workload.elastic) == 2  # 4 running, minimum 2: two may go alone
    whole = running_gang({"all": {}})
    [workload] = running_workloads(whole.state, whole.membership)
    assert workload.elastic == frozenset()


def lose_a_pod(scheduler: GangScheduler) -> None:
    """Node n1 of rack r1 goes with its pod; the replacement finds no room in r1 (the other three
    nodes run the gang), and rack r2 is free: a repair would move the gang there."""
    scheduler.state.delete_node("z1-b1-r1-n1")
    scheduler.delete_pod("ml/w-0")
    apply_object(scheduler, pod("w-0", group="train"))


def test_a_gang_disrupted_in_parts_is_repaired_by_moving_it() -> None:
    scheduler = running_gang({"single": {}}, min_count=4)
    lose_a_pod(scheduler)
    result = scheduler.filter(scheduler.state.pods["ml/w-0"], sorted(scheduler.state.nodes), 0.0)
    assert result.event is not None
    assert result.event.outcome == "repairing"


def test_a_gang_disrupted_only_whole_is_not_moved_in_part_and_is_evicted_whole_when_it_stays_broken() -> None:
    scheduler = running_gang({"all": {}}, min_count=4)
    lose_a_pod(scheduler)
    result = scheduler.filter(scheduler.state.pods["ml/w-0"], sorted(scheduler.state.nodes), 0.0)
    assert result.event is None or result.event.outcome != "repairing"
    assert scheduler.repairs.underway == {}
    assert scheduler.expire_repairs(30.0) == []  # within the repair timeout: kept, the replacement may still fit
    [(gang, evicted)] = scheduler.expire_repairs(61.0)
    assert gang == GANG
    assert sorted(p.key for p in evicted) == ["ml/w-1", "ml/w-2", "ml/w-3"]


def test_keep_on_a_gang_disrupted_only_whole_keeps_it_running() -> None:
    scheduler = running_gang({"all": {}}, min_count=4, **{ON_UNREPAIRABLE: "Keep"})
    lose_a_pod(scheduler)
    scheduler.filter(scheduler.state.pods["ml/w-0"], sorted(scheduler.state.nodes), 0.0)
    assert scheduler.expire_repairs(61.0) == [(GANG, [])]


# -- a minimum changed while the gang runs ---------------------------------------------------------


def test_a_min_count_raised_while_the_gang_runs_places_the_new_members_in_its_rack() -> None:
    scheduler = running_gang(None, pods=2, min_count=2)
    scheduler.state.upsert_node(replace(grid(racks=2, nodes=4)[4], name="z1-b1-r2-n9"))  # more room elsewhere
    grown = group("train", 4, [RACK])
    apply_object(scheduler, grown)
    view = scheduler.membership.view(GANG)
    assert view.built is not None
    for i in (2, 3):
        apply_object(scheduler, pod(f"w-{i}", group="train"))
    nodes = sorted(scheduler.state.nodes)
    placed = {}
    for i in (2, 3):
        result = scheduler.filter(scheduler.state.pods[f"ml/w-{i}"], nodes, float(i))
        assert len(result.nodes) == 1, result.reason
        placed[i] = result.nodes[0]
    assert {n.rsplit("-", 1)[0] for n in placed.values()} == {"z1-b1-r1"}  # with the two running


def test_a_min_count_lowered_while_the_gang_runs_evicts_nothing() -> None:
    scheduler = running_gang(None, pods=4, min_count=4)
    apply_object(scheduler, group("train", 2, [RACK]))
    [workload] = running_workloads(scheduler.state, scheduler.membership)
    assert len(workload.elastic) == 2  # two pods are now beyond the minimum: preemption may take them alone
    assert all(p.node_name for p in scheduler.state.pods.values())


def test_a_group_that_never_preempts_preempts_no_one_and_a_bad_policy_is_named() -> None:
    from extender.core.preemption import may_preempt

    scheduler = scheduler_with()
    body = group("train", 1, [RACK])
    body["spec"]["preemptionPolicy"] = "Never"
    apply_object(scheduler, body)
    apply_object(scheduler, pod("w-0", group="train"))
    assert not may_preempt(scheduler.state, scheduler.membership.view(GANG))
    bad = copy.deepcopy(body)  # a new object, as a watch delivers it
    bad["spec"]["preemptionPolicy"] = "Sometimes"
    result = group_pods([parse_pod(pod("w-0", group="train"))], ObjectIndex([bad]), {})
    assert errors(result.groups[GANG]) == [
        "PodGroup ml/train: spec.preemptionPolicy: expected one of Never, PreemptLowerPriority, got 'Sometimes'"
    ]
