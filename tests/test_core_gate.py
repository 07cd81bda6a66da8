"""The bind gate in the core: bounded by silence, members stay arrived, nodes checked on opening.

Cluster: rack r1 of 4 nodes (z1-b1-r1-n1..n4) and rack r2 of 4 nodes, 8 GPUs each.
The gang: 3 pods of 8 GPUs required on one rack.
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.cluster import ClusterState
from extender.core.decisions import BIND, DONE, REJECT, WAIT
from extender.core.gate import Gate
from extender.core.scheduler import GangScheduler
from tests.builders import TOPO, grid, pod, podgroup
from tests.test_core_lifecycle import NODES
from tests.test_core_lifecycle import setup as lifecycle_setup


def setup() -> tuple[GangScheduler, list[str], dict[str, str]]:
    """test_core_lifecycle's gang, planned by its first member's filter call."""
    scheduler, keys = lifecycle_setup(plan_ttl=600)
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    return scheduler, keys, dict(scheduler.reserved("default/g"))


def test_silence_is_counted_from_the_last_new_member_not_the_first() -> None:
    gate = Gate(frozenset({"a", "b", "c"}))
    assert gate.silence_left(0.0, 2.0) is None  # nobody waiting: no clock runs
    assert gate.arrive("a", "n1", 0.0)
    assert gate.arrive("b", "n2", 1.5)
    assert gate.silence_left(3.0, 2.0) == 0.5  # 3 s after the first, 1.5 s after the last
    assert not gate.arrive("a", "n1", 3.4)  # a retry of an arrived pod is not progress
    assert gate.silence_left(3.5, 2.0) == 0.0


def test_a_gang_arriving_steadily_for_longer_than_the_timeout_binds_whole() -> None:
    scheduler, keys, plan = setup()
    # One member every 1.5 s; the bind timeout is 2 s; the whole gang takes 3 s to arrive.
    for i, key in enumerate(keys[:2]):
        assert scheduler.bind(key, plan[key], 1.5 * i).action == WAIT
        left = scheduler.gates.silence_left("default/g", 1.5 * i + 1.0, 2.0)
        assert left is not None
        assert left > 0
    last = scheduler.bind(keys[2], plan[keys[2]], 3.0)
    assert last.action == BIND
    assert sorted(last.bind) == sorted(plan.items())


def test_a_silent_gate_closes_and_says_how_many_came() -> None:
    scheduler, keys, plan = setup()
    scheduler.bind(keys[0], plan[keys[0]], 0.0)
    scheduler.bind(keys[1], plan[keys[1]], 1.0)
    assert scheduler.gates.progress("default/g") == (2, 3)
    left = scheduler.gates.silence_left("default/g", 3.0, 2.0)
    assert left is not None
    assert left <= 0
    assert scheduler.gate_timeout("default/g", 2.0) == sorted(keys[:2])
    assert scheduler.reasons.text("default/g") == (
        "bind gate timed out: 2/3 pods of the minimum reached bind, and none more for 2s"
    )
    assert not scheduler.state.reservations


def test_a_member_whose_call_returned_stays_arrived_and_binds_with_the_gang() -> None:
    scheduler, keys, plan = setup()
    assert scheduler.bind(keys[0], plan[keys[0]], 0.0).action == WAIT
    # Its call ran out of budget; kube-scheduler retries it: steered to the same node, still arrived.
    again = scheduler.filter(scheduler.state.pods[keys[0]], NODES, 5.0)
    assert again.nodes == [plan[keys[0]]]
    assert scheduler.bind(keys[0], plan[keys[0]], 5.0).action == WAIT
    assert scheduler.bind(keys[1], plan[keys[1]], 6.0).action == WAIT
    last = scheduler.bind(keys[2], plan[keys[2]], 7.0)
    assert last.action == BIND
    assert {p for p, _ in last.bind} == set(keys)


def test_a_bind_call_for_a_pod_the_gate_bound_already_succeeds_on_its_node_only() -> None:
    scheduler, keys, plan = setup()
    for key in keys:
        decision = scheduler.bind(key, plan[key], 1.0)
    for pod_key, node in decision.bind:
        scheduler.observe_pod(replace(scheduler.state.pods[pod_key], node_name=node))
    assert scheduler.bind(keys[0], plan[keys[0]], 2.0).action == DONE
    other = next(n for n in NODES if n != plan[keys[0]])
    refused = scheduler.bind(keys[0], other, 2.0)
    assert (refused.action, refused.error) == (
        REJECT,
        f"topogang: the pod is bound to {plan[keys[0]]} already, not {other}",
    )
    # kube-scheduler may still be filtering it: only its node passes, and nothing is planned.
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 2.0).nodes == [plan[keys[0]]]


def test_a_planned_node_cordoned_while_members_wait_binds_none_and_plans_again() -> None:
    scheduler, keys, plan = setup()
    scheduler.bind(keys[0], plan[keys[0]], 0.0)
    scheduler.bind(keys[1], plan[keys[1]], 0.0)
    cordoned = plan[keys[1]]
    scheduler.state.upsert_node(replace(scheduler.state.nodes[cordoned], unschedulable=True))
    last = scheduler.bind(keys[2], plan[keys[2]], 1.0)
    assert last.action == REJECT
    assert last.bind == ()
    assert last.stale == (cordoned,)
    assert last.event is not None
    assert last.event.outcome == "replanned"
    assert cordoned not in scheduler.reserved("default/g").values()
    assert set(scheduler.reserved("default/g")) == set(keys)
    assert {p for p, _ in scheduler.gates.take_dropped()} == set(keys)  # every waiting call fails
    assert last.error == (
        f"topogang: re-planning: planned node(s) {cordoned} no longer fit"
        " (deleted, cordoned, not ready or full); planned again"
    )


def test_a_planned_node_deleted_or_filled_while_members_wait_binds_none() -> None:
    for change in ("deleted", "filled"):
        scheduler, keys, plan = setup()
        for key in keys[:2]:
            scheduler.bind(key, plan[key], 0.0)
        target = plan[keys[0]]
        if change == "deleted":
            scheduler.state.delete_node(target)
        else:
            scheduler.observe_pod(pod("intruder", node_name=target))  # another scheduler's pod
        last = scheduler.bind(keys[2], plan[keys[2]], 1.0)
        assert (change, last.action, last.stale) == (change, REJECT, (target,))
        assert target not in scheduler.reserved("default/g").values()


def test_a_member_held_by_a_scheduling_gate_is_not_present_until_released() -> None:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": 3}, name="g"))
    scheduler = GangScheduler(state)
    gated = replace(pod("g-2", group="g"), scheduling_gates=("kueue.x-k8s.io/admission",))
    for p in (pod("g-0", group="g"), pod("g-1", group="g"), gated):
        scheduler.observe_pod(p)
    refused = scheduler.filter(state.pods["default/g-0"], NODES, 0.0)
    assert refused.nodes == []
    assert not state.reservations  # no room held for a gang that cannot bind
    status = scheduler.status("default/g")
    assert (status.reason, status.pods, status.planned) == ("GangIncomplete", 3, 0)
    assert status.message == (
        "PodGroup default/g: gang 2/3 pods present;"
        " 1 pod(s) held by scheduling gate(s) kueue.x-k8s.io/admission, not counted until released"
    )
    scheduler.observe_pod(replace(gated, scheduling_gates=()))
    assert scheduler.filter(state.pods["default/g-0"], NODES, 1.0).nodes
    assert set(scheduler.reserved("default/g")) == {"default/g-0", "default/g-1", "default/g-2"}


def test_a_member_held_only_by_topogangs_own_gate_is_present() -> None:
    """Gates mode: topogang lifts its own gate once the gang is planned, so a pod it holds counts;
    a pod held by another gate too does not."""
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": 3}, name="g"))
    scheduler = GangScheduler(state)
    ours = ("scheduling.topogang.io/gang",)
    both = ("scheduling.topogang.io/gang", "kueue.x-k8s.io/admission")
    pods = [replace(pod(f"g-{i}", group="g"), scheduling_gates=ours) for i in range(2)]
    pods.append(replace(pod("g-2", group="g"), scheduling_gates=both))
    for p in pods:
        scheduler.observe_pod(p)
    assert scheduler.filter(state.pods["default/g-0"], NODES, 0.0).nodes == []
    status = scheduler.status("default/g")
    assert status.message == (
        "PodGroup default/g: gang 2/3 pods present;"
        " 1 pod(s) held by scheduling gate(s) kueue.x-k8s.io/admission, not counted until released"
    )
    scheduler.observe_pod(replace(pods[2], scheduling_gates=ours))
    assert scheduler.filter(state.pods["default/g-0"], NODES, 1.0).nodes
    assert set(scheduler.reserved("default/g")) == {"default/g-0", "default/g-1", "default/g-2"}


def test_a_pod_beyond_the_minimum_deleted_while_waiting_at_the_gate_is_not_bound_with_the_gang() -> None:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/e", podgroup({"minMember": 2}, name="e"))
    scheduler = GangScheduler(state, plan_ttl=600)
    keys = []
    for i in range(3):
        p = pod(f"e-{i}", group="e")
        scheduler.observe_pod(p)
        keys.append(p.key)
    scheduler.filter(state.pods[keys[0]], NODES, 0.0)
    plan = dict(scheduler.reserved("default/e"))
    assert set(plan) == set(keys)  # the minimum of 2 and the third beyond it
    extra = next(k for k in keys if k not in scheduler.plans["default/e"].gate.minimum)
    assert scheduler.bind(extra, plan[extra], 1.0).action == WAIT  # it waits for the minimum
    scheduler.delete_pod(extra)  # ... and goes away meanwhile
    minimum = sorted(scheduler.plans["default/e"].gate.minimum)
    assert scheduler.bind(minimum[0], plan[minimum[0]], 2.0).action == WAIT
    last = scheduler.bind(minimum[1], plan[minimum[1]], 3.0)
    assert last.action == BIND
    assert sorted(last.bind) == sorted((k, plan[k]) for k in minimum)  # not the deleted pod
