"""A gang bound ahead of its members' bind calls, and a gang short of pods answered from a count.

Cluster: racks r1 and r2 of 4 nodes, 8 GPUs each. The gang: a flat PodGroup of 4 pods.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.core.cluster import ClusterState
from extender.core.decisions import BIND, DONE
from extender.core.scheduler import GangScheduler
from extender.model.kube_checks import kube_checks
from tests.builders import TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(racks=2, nodes=4)]


def setup(bind_ahead: bool = True, spec: dict[str, Any] | None = None) -> GangScheduler:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup(spec or {"minMember": 4}, name="g"))
    return GangScheduler(state, bind_ahead=bind_ahead)


def arrive(scheduler: GangScheduler, i: int, gpus: int = 1, **kw: Any) -> Any:
    """Member i is created and kube-scheduler asks about it."""
    p = pod(f"g-{i}", gpus=gpus, group="g", **kw)
    scheduler.observe_pod(p)
    return scheduler.filter(scheduler.state.pods[p.key], NODES, float(i))


def test_the_call_that_plans_the_gang_binds_all_of_it_and_wakes_nobody() -> None:
    scheduler = setup()
    for i in range(3):
        assert arrive(scheduler, i).bind == ()
    last = arrive(scheduler, 3)
    planned = dict(scheduler.reserved("default/g"))
    assert last.event is not None
    assert last.event.outcome == "planned"
    assert sorted(last.bind) == sorted(planned.items())  # every member, not only the caller
    assert (last.wake, last.steer) == ((), None)
    assert last.nodes == [planned["default/g-3"]]
    # A member's call before its Binding landed: the gate is open, it binds alone (the server
    # shares the Binding in flight); after it landed: done.
    assert scheduler.bind("default/g-0", planned["default/g-0"], 4.0).action == BIND
    scheduler.observe_pod(replace(scheduler.state.pods["default/g-1"], node_name=planned["default/g-1"]))
    assert scheduler.bind("default/g-1", planned["default/g-1"], 4.0).action == DONE


def test_without_bind_ahead_the_members_are_woken_to_come_to_the_gate() -> None:
    scheduler = setup(bind_ahead=False)
    for i in range(3):
        arrive(scheduler, i)
    last = arrive(scheduler, 3)
    assert last.bind == ()
    assert sorted(last.wake) == ["default/g-0", "default/g-1", "default/g-2"]


def test_a_member_kube_scheduler_must_check_makes_the_gang_come_to_the_gate() -> None:
    scheduler = setup()
    for i in range(3):
        arrive(scheduler, i)
    ports = {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    last = arrive(scheduler, 3, spec=ports)
    assert last.event is not None
    assert last.event.outcome == "planned"
    assert last.bind == ()
    assert len(last.wake) == 3


def test_what_only_kube_scheduler_checks_is_named() -> None:
    assert kube_checks({"volumes": [{"name": "a", "configMap": {"name": "x"}}, {"name": "b", "emptyDir": {}}]}) == ()
    assert kube_checks({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "x"}}]}) == ("volumes",)
    assert kube_checks(
        {
            "initContainers": [{"name": "i", "ports": [{"containerPort": 1, "hostPort": 1}]}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}},
            "topologySpreadConstraints": [{"maxSkew": 1}],
            "resourceClaims": [{"name": "gpu"}],
        }
    ) == ("host ports", "pod affinity", "topology spread", "resource claims")
    assert kube_checks({"affinity": {"nodeAffinity": {}}}) == ()  # the plan judges node affinity


def test_members_of_a_gang_short_of_pods_are_answered_from_the_count_with_the_same_refusal() -> None:
    whole = setup()
    quick = setup()
    for i in range(3):
        built = arrive(whole, i)
        whole.membership._short.clear()  # always the whole question
        counted = arrive(quick, i)
        assert counted.reason == built.reason == f"topogang: PodGroup default/g: gang {i + 1}/4 pods present"
        assert counted.unresolvable == built.unresolvable
        assert counted.quick == (i > 0)  # the first member's call built the gang and found it short
        assert quick.reasons.text("default/g") == whole.reasons.text("default/g")
    assert arrive(quick, 3).event.outcome == "planned"  # type: ignore[union-attr]


def test_a_changed_podgroup_or_a_gang_with_subgroups_is_judged_whole_again() -> None:
    scheduler = setup()
    arrive(scheduler, 0)
    assert arrive(scheduler, 1).quick
    scheduler.state.set_podgroup("default/g", podgroup({"minMember": 3}, name="g"))
    assert not arrive(scheduler, 2).quick  # the new minimum: 3/3, planned
    spec = {"minMember": 1, "subGroups": [{"name": "a", "minMember": 4}]}
    scheduler = setup(spec=spec)
    for i in range(2):
        assert not arrive(scheduler, i, labels={"kai.scheduler/subgroup-name": "a"}).quick


def test_a_member_asked_about_while_its_gang_is_bound_ahead_keeps_its_node() -> None:
    # kube-scheduler may still ask about members it had in hand when the plan was made: each is
    # answered with the node its Binding goes to, never traded with a mate (steering) or planned
    # again, which would move a pod whose Binding is already posted.
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": 4}, name="g"))
    scheduler = GangScheduler(state, bind_ahead=True, nominate=True)
    for i in range(4):
        arrive(scheduler, i, gpus=8)  # a node each
    planned = dict(scheduler.reserved("default/g"))
    other = next(n for n in NODES if n != planned["default/g-1"] and n in planned.values())
    answer = scheduler.filter(state.pods["default/g-1"], [other], 5.0)  # a sample without its node
    assert answer.nodes == []
    assert answer.reason == f"topogang: being bound to its planned node {planned['default/g-1']}"
    assert dict(scheduler.reserved("default/g")) == planned  # nobody traded
    assert scheduler.filter(state.pods["default/g-2"], NODES, 5.0).nodes == [planned["default/g-2"]]


def test_a_member_of_a_gang_bound_ahead_is_answered_without_building_the_gang() -> None:
    # Each Binding that lands changes the gang's tree; kube-scheduler's retries of members not
    # bound yet must not rebuild a 4,096-pod gang for each answer (a profile saw half of
    # topogang's CPU there while 4,096 Bindings were going out).
    scheduler = setup()
    for i in range(4):
        arrive(scheduler, i)
    planned = dict(scheduler.reserved("default/g"))
    scheduler.observe_pod(replace(scheduler.state.pods["default/g-0"], node_name=planned["default/g-0"]))

    def built(*_: Any, **__: Any) -> Any:
        raise AssertionError("the gang was built again")

    scheduler.membership.view = built  # type: ignore[method-assign]
    assert scheduler.filter(scheduler.state.pods["default/g-1"], NODES, 5.0).nodes == [planned["default/g-1"]]
