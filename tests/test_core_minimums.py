"""Minimums first: a gang's optional pods never keep another gang's minimum waiting.

Cluster (unless a test draws its own): one zone, one block, two racks of 4 nodes of 8 GPUs.

    rack r1: z1-b1-r1-n1..n4      rack r2: z1-b1-r2-n1..n4

`first` and `second`: PodGroups of 6 pods of 8 GPUs (one a node) with minMember 4, so 2 pods of
each are optional. Both minimums fit (4 + 4 nodes); both gangs whole do not (6 + 6).
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.cluster import ClusterState
from extender.core.decisions import WAIT, BeyondMinimum, PlanEvent
from extender.core.scheduler import GangScheduler
from tests.builders import TOPO, grid, pod, podgroup

FIRST, SECOND = "default/first", "default/second"


def cluster(racks: int = 2, nodes: int = 4) -> tuple[GangScheduler, list[str]]:
    state = ClusterState()
    names = []
    for n in grid(racks=racks, nodes=nodes):
        state.upsert_node(n)
        names.append(n.name)
    state.set_topology("default", TOPO)
    state.set_priority_class("low", 10)
    state.set_priority_class("high", 1000)
    return GangScheduler(state), names


def add_gang(scheduler: GangScheduler, name: str, size: int = 6, minimum: int = 4, priority: str = "") -> list[str]:
    spec = {"minMember": minimum, **({"priorityClassName": priority} if priority else {})}
    scheduler.state.set_podgroup(f"default/{name}", podgroup(spec, name=name))
    keys = []
    for i in range(size):
        p = pod(f"{name}-{i}", group=name, spec={"priorityClassName": priority} if priority else None)
        scheduler.observe_pod(replace(p, created=float(len(scheduler.state.pods))))
        keys.append(p.key)
    return keys


def ask(scheduler: GangScheduler, key: str, nodes: list[str], now: float = 0.0) -> PlanEvent:
    """One filter call for KEY's pod, as kube-scheduler makes it; the decision it made."""
    event = scheduler.filter(scheduler.state.pods[key], nodes, now).event
    assert event is not None
    return event


def bind_all(scheduler: GangScheduler, group: str) -> None:
    """Every pod GROUP's plan holds is bound where planned (as the watch tells it)."""
    for key, node in list(scheduler.reserved(group).items()):
        scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=node))


def test_two_elastic_gangs_that_arrive_together_both_start_their_minimum() -> None:
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first")
    second = add_gang(scheduler, "second")
    event = ask(scheduler, first[0], nodes)
    assert event.outcome == "planned"
    assert len(scheduler.reserved(FIRST)) == 4
    assert (event.yielded, event.yielded_to) == (2, (SECOND,))
    assert event.fields()["optional_left"] == {"pods": 2, "for_minimums_of": [SECOND]}
    assert scheduler.reasons.get(FIRST) == BeyondMinimum(2, (SECOND,))
    assert scheduler.reasons.text(FIRST) == f"2 pod(s) beyond the minimum wait: the minimum of {SECOND} comes first"
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "planned"
    assert len(scheduler.reserved(SECOND)) == 4
    assert set(scheduler.reserved(FIRST).values()).isdisjoint(scheduler.reserved(SECOND).values())
    # first's optional pods ask again: no room is left for them, and none is taken from second
    assert ask(scheduler, first[5], nodes).pods == 0
    assert len(scheduler.reserved(FIRST)) == 4
    assert scheduler.reasons.text(FIRST) == "2 pod(s) beyond the minimum do not fit in the gang's domains"


def test_optional_pods_asking_again_wait_while_nothing_changed_and_take_the_room_once_it_is_theirs() -> None:
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first")
    second = add_gang(scheduler, "second")
    ask(scheduler, first[0], nodes)
    for key in first[4:]:  # second has not asked yet: its minimum still waits
        event = ask(scheduler, key, nodes)
        assert (event.outcome, event.pods, event.yielded, event.yielded_to) == ("extended", 0, 2, (SECOND,))
    assert len(scheduler.reserved(FIRST)) == 4
    for key in second:  # second goes away before it asks
        scheduler.delete_pod(key)
    assert ask(scheduler, first[4], nodes).pods == 2
    assert len(scheduler.reserved(FIRST)) == 6


def test_optional_pods_keep_the_room_no_waiting_minimum_needs() -> None:
    # Two racks of 5: first whole (6) and second's minimum (4) fit together, so first stays whole.
    scheduler, nodes = cluster(nodes=5)
    first = add_gang(scheduler, "first")
    second = add_gang(scheduler, "second")
    event = ask(scheduler, first[0], nodes)
    assert event.yielded == 0
    assert len(scheduler.reserved(FIRST)) == 6
    ask(scheduler, second[0], nodes)
    assert len(scheduler.reserved(SECOND)) == 4


def test_optional_pods_take_the_room_left_after_the_waiting_minimums() -> None:
    # Two racks of 5, two nodes more than both minimums: first keeps two optional pods of three.
    scheduler, nodes = cluster(nodes=5)
    first = add_gang(scheduler, "first", size=7)
    second = add_gang(scheduler, "second", size=5)
    event = ask(scheduler, first[0], nodes)
    assert (event.pods, event.yielded) == (6, 1)
    ask(scheduler, second[0], nodes)
    assert len(scheduler.reserved(SECOND)) == 4


def test_a_lower_priority_minimum_does_not_hold_back_optional_pods() -> None:
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first", priority="high")
    second = add_gang(scheduler, "second", priority="low")
    event = ask(scheduler, first[0], nodes)
    assert event.yielded == 0
    assert len(scheduler.reserved(FIRST)) == 6
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "pending"


def test_a_minimum_that_cannot_start_anyway_holds_back_no_optional_pod() -> None:
    # second's minimum needs 9 nodes of 8: it waits whatever first does, so first takes all 6.
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first")
    add_gang(scheduler, "second", size=9, minimum=9)
    event = ask(scheduler, first[0], nodes)
    assert event.yielded == 0
    assert len(scheduler.reserved(FIRST)) == 6


def test_reserved_optional_pods_are_given_back_to_a_minimum_that_came_later() -> None:
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first")
    ask(scheduler, first[0], nodes)
    assert len(scheduler.reserved(FIRST)) == 6  # nobody was waiting: first is planned whole
    second = add_gang(scheduler, "second")
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "planned"
    assert event.given_back == {FIRST: 2}
    assert len(scheduler.reserved(SECOND)) == 4
    assert set(scheduler.reserved(FIRST)) == set(first[:4])  # its minimum keeps its room
    assert scheduler.reasons.get(FIRST) == BeyondMinimum(2, (SECOND,))


def test_a_minimum_takes_back_only_the_optional_pods_it_needs() -> None:
    # Two racks of 5: first planned alone takes 8 nodes (4 optional); second needs 4 and 2 are free.
    scheduler, nodes = cluster(nodes=5)
    first = add_gang(scheduler, "first", size=8)
    ask(scheduler, first[0], nodes)
    assert len(scheduler.reserved(FIRST)) == 8
    second = add_gang(scheduler, "second", size=4)
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "planned"
    assert event.given_back == {FIRST: 2}
    assert len(scheduler.reserved(FIRST)) == 6


def test_optional_pods_at_the_bind_gate_keep_their_room() -> None:
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first")
    ask(scheduler, first[0], nodes)
    for key in first[4:]:  # the optional pods reached bind: their nodes are fixed
        assert scheduler.bind(key, scheduler.reserved(FIRST)[key], 1.0).action == WAIT
    second = add_gang(scheduler, "second")
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "pending"
    assert len(scheduler.reserved(FIRST)) == 6


def test_optional_pods_released_in_gates_mode_keep_their_room() -> None:
    # Gates mode lifts the gate of every planned pod and pins it: kube-scheduler binds it there.
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first")
    ask(scheduler, first[0], nodes)
    scheduler.gates.opened_elsewhere(FIRST, 1.0, scheduler.reserved(FIRST))
    second = add_gang(scheduler, "second")
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "pending"
    assert len(scheduler.reserved(FIRST)) == 6


def test_bound_optional_pods_are_the_first_victims_of_an_equal_priority_minimum() -> None:
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first")
    ask(scheduler, first[0], nodes)
    bind_all(scheduler, FIRST)
    second = add_gang(scheduler, "second")
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "preempting"
    assert event.preemption is not None
    assert event.preemption.victims == ()
    assert dict(event.preemption.elastic) == {FIRST: tuple(sorted(first[4:]))}


def test_a_minimum_of_lower_priority_evicts_no_optional_pod() -> None:
    scheduler, nodes = cluster()
    first = add_gang(scheduler, "first", priority="high")
    ask(scheduler, first[0], nodes)
    bind_all(scheduler, FIRST)
    second = add_gang(scheduler, "second", priority="low")
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "pending"
    assert all(scheduler.state.pods[k].node_name for k in first)


def test_an_optional_segment_is_evicted_whole_for_an_equal_priority_minimum() -> None:
    # first: two segments of 4 pods, each required in a rack, one of them its minimum; planned
    # alone it runs both. second needs 2 nodes: a segment goes whole, never 2 pods of one.
    scheduler, nodes = cluster()
    subgroups = [{"name": "worker", "minSubGroup": 1}]
    subgroups += [{"name": f"seg-{k}", "parent": "worker", "minMember": 4} for k in (0, 1)]
    rack = {"requiredTopologyLevel": "rack"}
    spec = {"subGroups": subgroups, "topologyConstraints": {"subGroups": {"seg-0": rack, "seg-1": rack}}}
    scheduler.state.set_podgroup(FIRST, podgroup(spec, name="first"))
    first = []
    for i in range(8):
        p = pod(f"first-{i}", group="first", subgroup=f"seg-{i // 4}")
        scheduler.observe_pod(p)
        first.append(p.key)
    ask(scheduler, first[0], nodes)
    bind_all(scheduler, FIRST)
    second = add_gang(scheduler, "second", size=2, minimum=2)
    event = ask(scheduler, second[0], nodes)
    assert event.outcome == "preempting"
    assert event.preemption is not None
    assert set(event.preemption.elastic) == {FIRST}
    assert set(event.preemption.elastic[FIRST]) in ({*first[:4]}, {*first[4:]})
