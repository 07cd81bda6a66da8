"""A new leader's look at gangs below their minimum: cut off mid-bind, or ran whole and degraded.

Cluster: rack r1 of N nodes (z1-b1-r1-n1..), 8 GPUs each.
The gang: 3 pods of 8 GPUs required on one rack (minMember 3).

Times are seconds since the epoch, as the API server writes them (one-second steps):

    created   every pod the gang started with, at 100
    bound     g-0 (and g-1) bound at 101: PodScheduled True from then
    replaced  a pod created again after the others were bound (the controller's replacement)
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.cluster import ClusterState
from extender.core.decisions import BIND
from extender.core.explain import explain, render
from extender.core.recovery import Recovery, cut_mid_bind
from extender.core.scheduler import GangScheduler
from extender.model.pod import PodInfo
from tests.builders import TOPO, grid, pod, podgroup

CREATED, BOUND = 100.0, 101.0


def member(name: str, node: str | None = None, created: float | None = CREATED, bound: float | None = BOUND) -> PodInfo:
    p = replace(pod(name, group="g", node_name=node), created=created)
    return replace(p, scheduled_at=bound) if node is not None else p


def cluster(nodes: int, *members: PodInfo) -> tuple[GangScheduler, list[str]]:
    state = ClusterState()
    for n in grid(racks=1, nodes=nodes):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    spec = podgroup({"minMember": 3, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name="g")
    state.set_podgroup("default/g", spec)
    scheduler = GangScheduler(state)
    for p in members:
        scheduler.observe_pod(p)
    return scheduler, [p.key for p in members]


def cut(nodes: int) -> tuple[GangScheduler, list[str]]:
    """g-0 bound, g-1 and g-2 created before it and never bound: the process died between binds."""
    return cluster(nodes, member("g-0", "z1-b1-r1-n1"), member("g-1"), member("g-2"))


def test_a_gang_cut_off_mid_bind_is_planned_and_finished_in_time() -> None:
    scheduler, keys = cut(nodes=3)
    recovery = Recovery(within=32.0)
    found = recovery.start(scheduler, 0.0)
    assert [e.outcome for e in found.events] == ["planned"]
    assert found.degraded == []
    plan = dict(scheduler.reserved("default/g"))
    assert set(plan) == set(keys[1:])  # the bound pod keeps its node; the rest is held
    for key in keys[1:]:
        decision = scheduler.bind(key, plan[key], 1.0)
    assert decision.action == BIND
    for pod_key, node in decision.bind:
        scheduler.observe_pod(replace(scheduler.state.pods[pod_key], node_name=node))
    assert recovery.overdue(scheduler, 40.0) == {}
    assert recovery.deadlines == {}


def test_a_gang_cut_off_mid_bind_that_cannot_finish_gives_its_bound_pods_back() -> None:
    scheduler, keys = cut(nodes=2)  # room for 2 of 3 in the rack
    recovery = Recovery(within=32.0)
    assert [e.outcome for e in recovery.start(scheduler, 0.0).events] == ["pending"]
    assert recovery.overdue(scheduler, 31.0) == {}
    assert recovery.overdue(scheduler, 32.0) == {"default/g": [keys[0]]}
    status = scheduler.status("default/g")
    assert (status.phase, status.reason) == ("Pending", "PartialGangEvicted")
    assert status.message == (
        "evicted 1 bound pod(s): the gang was found below its minimum after a restart"
        " and the rest could not be placed within 32s"
    )
    assert status.unschedulable


def test_a_gang_that_ran_whole_and_lost_a_pod_is_kept_by_a_new_leader() -> None:
    # g-2's node failed; the workload made g-2 again after g-0 and g-1 were bound (and ran).
    replacement = member("g-2", created=BOUND + 600)
    scheduler, _ = cluster(2, member("g-0", "z1-b1-r1-n1"), member("g-1", "z1-b1-r1-n2"), replacement)
    recovery = Recovery(within=32.0)
    found = recovery.start(scheduler, 0.0)
    assert (found.events, found.degraded) == ([], ["default/g"])
    assert recovery.deadlines == {}
    assert recovery.overdue(scheduler, 10_000.0) == {}  # never evicted by recovery
    assert scheduler.status("default/g").reason != "PartialGangEvicted"


def test_a_gang_that_lost_a_pod_not_made_again_is_kept_by_a_new_leader() -> None:
    scheduler, _ = cluster(3, member("g-0", "z1-b1-r1-n1"), member("g-1", "z1-b1-r1-n2"))
    found = Recovery(within=32.0).start(scheduler, 0.0)
    assert (found.events, found.degraded) == ([], ["default/g"])


def test_a_gang_whose_times_are_unknown_is_kept_rather_than_evicted_on_a_guess() -> None:
    scheduler, _ = cluster(3, member("g-0", "z1-b1-r1-n1", bound=None), member("g-1"), member("g-2"))
    found = Recovery(within=32.0).start(scheduler, 0.0)
    assert (found.events, found.degraded) == ([], ["default/g"])


def test_gangs_whole_or_with_finished_pods_are_not_recovered() -> None:
    scheduler, keys = cut(nodes=3)
    scheduler.observe_pod(replace(scheduler.state.pods[keys[0]], phase="Succeeded"))
    found = Recovery(within=32.0).start(scheduler, 0.0)
    assert (found.events, found.degraded) == ([], [])


def test_cut_mid_bind_reads_the_bind_times_and_the_creation_times() -> None:
    bound = member("g-0", "n1")
    cases = [
        # (name, members, complete, want)
        ("unbound created before the first bind", [bound, member("g-1")], True, True),
        ("created in the same second as the bind", [bound, member("g-1", created=BOUND)], True, True),
        ("a replacement created after the bind", [bound, member("g-1", created=BOUND + 1)], True, False),
        ("members of the minimum missing", [bound, member("g-1")], False, False),
        ("no bind time, the start time instead", [replace(bound, scheduled_at=None, started=BOUND)], True, True),
        ("no bind or start time", [replace(bound, scheduled_at=None), member("g-1")], True, False),
        ("no creation time", [bound, member("g-1", created=None)], True, False),
    ]
    for name, members, complete, want in cases:
        assert cut_mid_bind(members, complete) is want, name


def test_a_gang_recovery_gave_up_on_says_so_in_explain_with_when() -> None:
    scheduler, keys = cut(nodes=2)
    recovery = Recovery(within=32.0)
    recovery.start(scheduler, 0.0)
    assert recovery.overdue(scheduler, 32.0) == {"default/g": [keys[0]]}
    said = render([explain(scheduler, "default/g")]).splitlines()
    assert said[2] == (
        "  Evicted: evicted at 32s on the scheduler's clock, no wall clock known: evicted 1 bound pod(s): the gang"
        " was found below its minimum after a restart and the rest could not be placed within 32s (default/g-0)"
    )
