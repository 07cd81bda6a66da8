"""Room as kube-scheduler counts it, where its view and topogang's can differ:

- pods topogang bound with Bindings of its own (bind-ahead) are in no cache of kube-scheduler's
  until its informer sees them, so plain pods are checked against them meanwhile;
- nodes topogang refuses to plain pods for a gang's room are unresolvable, so kube-scheduler's
  preemption evicts nobody there for a pod topogang would refuse again;
- a pod another scheduler nominated to a node (status.nominatedNodeName) keeps its room from
  gangs of equal or lower priority, as kube-scheduler's nominator keeps it from pods.

Cluster: racks r1 and r2 of 4 nodes, 8 GPUs each.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.core.cluster import ClusterState
from extender.core.explain import explain
from extender.core.nominated import nominated_room
from extender.core.plans import HELD, RESERVED, UNSEEN
from extender.core.scheduler import GangScheduler
from extender.model.pod import PLAN_GENERATION_ANNOTATION, PodInfo
from tests.builders import TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(racks=2, nodes=4)]
R1, R2 = NODES[:4], NODES[4:]


def setup(bind_ahead: bool = False) -> GangScheduler:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": 4}, name="g"))
    return GangScheduler(state, bind_ahead=bind_ahead)


def member(scheduler: GangScheduler, i: int, **kw: Any) -> PodInfo:
    p = pod(f"g-{i}", group="g", **kw)
    scheduler.observe_pod(p)
    return p


def plan_gang(scheduler: GangScheduler, **kw: Any) -> Any:
    """The gang's four members come; the last call plans it."""
    members = [member(scheduler, i, **kw) for i in range(4)]
    return scheduler.filter(scheduler.state.pods[members[-1].key], NODES, 0.0)


# -- Bindings topogang posted itself ----------------------------------------------------------------


def bound_ahead(scheduler: GangScheduler) -> dict[str, str]:
    """Plan the gang bound ahead and land its Bindings as the server does (`BindCalls._post_binding`)."""
    result = plan_gang(scheduler)
    assert result.bind, "the gang is bound ahead"
    for key, node in result.bind:
        scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=node), posted=True)
    return dict(result.bind)


def test_a_node_topogang_bound_pods_on_is_checked_for_plain_pods_until_the_watch_shows_them() -> None:
    scheduler = setup(bind_ahead=True)
    planned = bound_ahead(scheduler)
    full = sorted(planned.values())
    assert not scheduler.state.reservations  # the reservations went as the Bindings landed
    # kube-scheduler's cache does not have the gang's pods yet: it offers their nodes as free.
    refused = scheduler.filter(pod("web"), NODES, 1.0)
    assert refused.unresolvable == dict.fromkeys(full, UNSEEN)
    assert sorted(refused.nodes) == sorted(set(NODES) - set(full))
    assert refused.failed == {}
    small = scheduler.filter(pod("small", gpus=0), NODES, 1.0)  # fits beside the gang's pods
    assert small.nodes == NODES
    # The watch shows them bound: kube-scheduler's informer can too, and its own filters count them.
    for key, node in planned.items():
        scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=node))
    assert not scheduler.state.posted.nodes
    assert scheduler.filter(pod("web-2"), NODES, 2.0).nodes == NODES


def test_a_watch_event_older_than_the_binding_leaves_the_pod_on_its_node() -> None:
    scheduler = setup(bind_ahead=True)
    planned = bound_ahead(scheduler)
    key, node = next(iter(planned.items()))
    stale = replace(scheduler.state.pods[key], node_name=None)  # e.g. its nomination's echo
    scheduler.observe_pod(stale)
    assert scheduler.state.pods[key].node_name == node
    assert node in scheduler.filter(pod("web"), NODES, 1.0).unresolvable
    scheduler.delete_pod(key)  # gone: nothing of it is checked any more
    assert node not in scheduler.state.posted.nodes
    assert node in scheduler.filter(pod("web-2"), NODES, 1.0).nodes


def test_a_binding_the_watch_showed_first_marks_nothing() -> None:
    scheduler = setup(bind_ahead=True)
    result = plan_gang(scheduler)
    key, node = result.bind[0]
    scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=node))  # the watch
    scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=node), posted=True)  # then the answer
    assert key not in scheduler.state.posted.pods


# -- the nodes kept for gangs are unresolvable for plain pods ----------------------------------------


def test_reserved_room_refuses_plain_pods_as_unresolvable_so_kube_scheduler_preempts_nobody_there() -> None:
    scheduler = setup()
    result = plan_gang(scheduler)
    assert result.event is not None
    planned = sorted(scheduler.reserved("default/g").values())
    refused = scheduler.filter(pod("web"), NODES, 1.0)
    assert refused.failed == {}
    assert refused.unresolvable == dict.fromkeys(planned, RESERVED)
    assert refused.reason == RESERVED


def test_held_room_refuses_plain_pods_as_unresolvable() -> None:
    scheduler = setup()
    refused = scheduler.plans.admit_plain(pod("web"), NODES, frozenset(R2))
    assert (refused.nodes, refused.failed) == (R1, {})
    assert refused.unresolvable == dict.fromkeys(R2, HELD)


# -- other schedulers' nominations -------------------------------------------------------------------


def nominated(name: str, node: str, priority: int = 0, **kw: Any) -> PodInfo:
    """A plain pod kube-scheduler preempted for: its victims are leaving, its node is nominated."""
    return replace(pod(name, spec={"priority": priority}, **kw), nominated_node=node)


def crowded(scheduler: GangScheduler) -> None:
    """Rack r2 full: the gang of four 8-GPU pods fits only in the four nodes of r1."""
    for n in R2:
        scheduler.observe_pod(pod(f"run-{n}", node_name=n))


def test_a_gang_leaves_the_room_of_a_pod_nominated_at_its_priority_or_above() -> None:
    scheduler = setup()
    crowded(scheduler)
    scheduler.observe_pod(nominated("pre", R1[0]))  # as kube-scheduler, equal priority counts
    pending = plan_gang(scheduler)
    assert pending.event is not None
    assert pending.event.outcome == "pending"
    assert not scheduler.state.reservations
    assert "only 3 fit" in explain(scheduler, "default/g").outcome  # its dry run counts it too
    # Its nomination cleared (it went elsewhere): the room is the gang's again.
    scheduler.observe_pod(replace(scheduler.state.pods["default/pre"], nominated_node=None))
    planned = scheduler.filter(scheduler.state.pods["default/g-0"], NODES, 1.0)
    assert planned.event is not None
    assert planned.event.outcome == "planned"
    assert sorted(scheduler.reserved("default/g").values()) == R1


def test_a_pod_nominated_below_the_gangs_priority_does_not_hold_room_from_it() -> None:
    scheduler = setup()
    crowded(scheduler)
    scheduler.observe_pod(nominated("pre", R1[0], priority=-1))
    planned = plan_gang(scheduler)
    assert planned.event is not None
    assert planned.event.outcome == "planned"


def test_the_count_goes_when_the_nominated_pod_binds_or_is_deleted() -> None:
    scheduler = setup()
    scheduler.observe_pod(nominated("a", R1[0]))
    scheduler.observe_pod(nominated("b", R1[1]))
    assert scheduler.state.nominated == {"default/a": R1[0], "default/b": R1[1]}
    scheduler.observe_pod(replace(scheduler.state.pods["default/a"], node_name=R1[0]))  # bound: counted as bound
    scheduler.delete_pod("default/b")
    assert scheduler.state.nominated == {}


def test_topogangs_own_nominations_are_not_counted_twice() -> None:
    scheduler = setup()
    plan_gang(scheduler)
    planned = dict(scheduler.reserved("default/g"))
    for key, node in planned.items():  # the echo of its steering: nomination and annotation in one write
        p = scheduler.state.pods[key]
        annotations = {**p.annotations, PLAN_GENERATION_ANNOTATION: "1"}
        scheduler.observe_pod(replace(p, nominated_node=node, annotations=annotations))
    assert scheduler.state.nominated == {}
    # A nomination written by kube-scheduler for a pod topogang holds room for is that room.
    key, node = next(iter(planned.items()))
    scheduler.observe_pod(replace(scheduler.state.pods[key], annotations={"pod-group-name": "g"}))
    assert scheduler.state.nominated == {key: node}
    scheduler.observe_pod(pod("h", group="h"))
    assert nominated_room(scheduler.state, scheduler.membership, "default/h") == {}
