"""The core's parts alone, each over its own state: Plans, Steering, BindGate, Reasons, and the
status message composed from data. (The coordinator's behaviour is tested through
GangScheduler in the other test_core_* modules.)

Cluster: rack r1 of 4 nodes (z1-b1-r1-n1..n4), rack r2 of 4 nodes, 8 GPUs each.
"""

from __future__ import annotations

from extender.core.binding import BindGate
from extender.core.cluster import ClusterState
from extender.core.decisions import BIND, PENDING, R_BIND_TIMEOUT, REJECT, WAIT, FilterResult, Released
from extender.core.membership import Membership
from extender.core.plans import RESERVED, Plans
from extender.core.reasons import Reasons
from extender.core.standing import Bound, GroupStatus, Headline, NotPlanned
from extender.core.steering import Steering
from extender.placement import DomainRef, Plan
from tests.builders import TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(racks=2, nodes=4)]
RACK = DomainRef("rack", "z1/b1/r1")


def cluster() -> tuple[ClusterState, Membership, list[str]]:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": 3}, name="g"))
    membership = Membership(state)
    keys = []
    for i in range(3):
        p = pod(f"g-{i}", group="g")
        state.upsert_pod(p)
        keys.append(p.key)
    return state, membership, keys


def a_plan(keys: list[str], nodes: list[str]) -> Plan:
    return Plan("default/g", dict(zip(keys, nodes, strict=True)), {"default/g": RACK}, minimum=frozenset(keys))


# -- Plans ----------------------------------------------------------------------------------------


def test_plans_hold_reserve_and_extend_and_release_gives_everything_back() -> None:
    state, _, keys = cluster()
    plans = Plans(state)
    new, _, outcome = plans.hold("default/g", a_plan(keys[:2], NODES[:2]), 0.0)
    assert (outcome, new) == ("planned", dict(zip(keys[:2], NODES[:2], strict=True)))
    assert set(state.reservations) == set(keys[:2])
    assert plans.generation("default/g") == 1
    new, _, outcome = plans.hold("default/g", a_plan(keys, NODES[:3]), 1.0)
    assert (outcome, new) == ("extended", {keys[2]: NODES[2]})  # only what it did not hold
    assert plans["default/g"].touched == 1.0
    assert plans.generation("default/g") == 1
    released = plans.release("default/g")
    assert released is not None
    assert "default/g" not in plans
    assert not state.reservations
    assert plans.domains("default/g") == {}


def test_plans_swap_moves_both_reservations() -> None:
    state, _, keys = cluster()
    plans = Plans(state)
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    gp = plans["default/g"]
    plans.swap(gp, keys[0], keys[1])
    assert (gp.reserved[keys[0]], gp.reserved[keys[1]]) == (NODES[1], NODES[0])
    assert state.reservations[keys[0]][0] == NODES[1]


def test_plans_let_go_of_a_pod_forgets_its_arrival_and_a_sweep_forgets_a_carried_out_plan() -> None:
    state, _, keys = cluster()
    plans = Plans(state)
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    gp = plans["default/g"]
    gp.gate.arrive(keys[0], NODES[0], 0.0)
    plans.let_go(gp, keys[0])
    assert keys[0] not in gp.gate.arrived
    gp.gate.arrive(keys[1], NODES[1], 0.0)
    plans.let_go(gp, keys[1])  # it left (deleted, finished): never bound when the gate opens
    assert keys[1] not in gp.gate.arrived
    assert plans.sweep({"default/g"}) == []  # not carried out yet
    gp.gate.opened = True
    plans.let_go(gp, keys[2])
    assert plans.sweep({"default/g"}) == ["default/g"]
    assert plans.domains("default/g") == {"default/g": RACK}  # the last domains outlive the plan
    plans.sweep(set())
    assert "default/g" not in plans.last_domains


def test_plain_pods_keep_off_reserved_room_only() -> None:
    state, _, keys = cluster()
    plans = Plans(state)
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    result = plans.admit_plain(pod("plain"), NODES)
    assert result.nodes == NODES[3:]
    assert result.unresolvable == dict.fromkeys(NODES[:3], RESERVED)  # preemption cannot free it
    small = plans.admit_plain(pod("small", gpus=0), NODES)  # takes no GPU: fits beside the reservations
    assert small.nodes == NODES


# -- Steering -------------------------------------------------------------------------------------


def test_steering_is_lost_only_when_no_nomination_can_bring_the_pod_to_its_node() -> None:
    state, membership, _ = cluster()
    steering = Steering(state, membership, Plans(state), enabled=False)
    assert steering.lost("n9", ["n1"], None)  # off: every call must offer the node
    assert not steering.lost("n1", ["n1"], None)
    steering.enabled = True
    assert not steering.lost("n9", ["n1"], None)  # a nomination will bring it there
    assert steering.lost("n9", ["n1"], "n9")  # it was nominated there, and refused


def test_a_member_passed_on_its_node_has_no_nomination_to_send_and_a_new_plan_starts_afresh() -> None:
    state, membership, keys = cluster()
    plans = Plans(state)
    steering = Steering(state, membership, plans, enabled=True)
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    gp = plans["default/g"]
    answer = steering.steer("default/g", gp, keys[0], NODES, None, None)
    assert answer.nodes == [NODES[0]]
    assert steering.target("default/g", keys[0]) is None  # taken there already: its nomination is moot
    assert steering.target("default/g", keys[1]) == NODES[1]
    assert steering.target(None, keys[1]) is None
    plans.release("default/g")
    plans.hold("default/g", a_plan(keys, NODES[4:7]), 1.0)  # a new generation
    assert steering.target("default/g", keys[0]) == NODES[4]


def test_a_member_not_offered_its_node_is_refused_and_nominated_there() -> None:
    state, membership, keys = cluster()
    plans = Plans(state)
    steering = Steering(state, membership, plans, enabled=True)
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    answer = steering.steer("default/g", plans["default/g"], keys[2], NODES[3:], None, None)
    assert (answer.nodes, answer.steer) == ([], NODES[2])
    assert answer.reason == f"topogang: steering to its planned node {NODES[2]}"


# -- BindGate -------------------------------------------------------------------------------------


def test_the_bind_gate_waits_for_the_minimum_then_binds_it_all() -> None:
    state, membership, keys = cluster()
    plans = Plans(state)
    gates = BindGate(state, membership, plans)
    assert gates.arrive("default/plain", "n1", 0.0).action == BIND  # not a gang member
    assert gates.arrive(keys[0], NODES[0], 0.0).action == REJECT  # no plan yet
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    assert gates.arrive(keys[0], NODES[1], 0.0).action == REJECT  # not its planned node
    assert gates.arrive(keys[0], NODES[0], 0.0).action == WAIT
    assert gates.arrive(keys[1], NODES[1], 1.0).action == WAIT
    assert gates.progress("default/g") == (2, 3)
    assert gates.missing("default/g") == [keys[2]]
    opened = gates.arrive(keys[2], NODES[2], 2.0)
    assert opened.action == BIND
    assert sorted(opened.bind) == sorted(zip(keys, NODES[:3], strict=True))


def test_the_bind_gate_opens_nothing_when_a_planned_node_stopped_fitting() -> None:
    state, membership, keys = cluster()
    plans = Plans(state)
    gates = BindGate(state, membership, plans)
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    gates.arrive(keys[0], NODES[0], 0.0)
    gates.arrive(keys[1], NODES[1], 0.0)
    state.delete_node(NODES[1])
    stale = gates.arrive(keys[2], NODES[2], 0.0)
    assert (stale.action, stale.stale) == (REJECT, (NODES[1],))


def test_a_gate_closing_says_how_many_came_and_its_dropped_calls_are_taken_once() -> None:
    state, membership, keys = cluster()
    plans = Plans(state)
    gates = BindGate(state, membership, plans)
    assert gates.closing("default/g", 5.0) is None  # no plan
    plans.hold("default/g", a_plan(keys, NODES[:3]), 0.0)
    gates.arrive(keys[0], NODES[0], 0.0)
    assert gates.closing("default/g", 5.0) == Released(R_BIND_TIMEOUT, 1, 3, 5.0)
    gates.drop([keys[0]], Released(R_BIND_TIMEOUT, 1, 3, 5.0))
    assert [p for p, _ in gates.take_dropped()] == [keys[0]]
    assert gates.take_dropped() == []
    gates.opened_elsewhere("default/g", 3.0)
    assert plans["default/g"].gate.opened
    assert gates.closing("default/g", 5.0) is None


# -- Reasons and the status message ---------------------------------------------------------------


def test_reasons_keep_one_value_per_gang_and_forget_gangs_gone() -> None:
    reasons = Reasons()
    why = Released(R_BIND_TIMEOUT, 1, 3, 5.0)
    reasons.record("default/g", why)
    assert reasons["default/g"] is why
    assert reasons.text("default/g").startswith("bind gate timed out")
    assert reasons.text("default/h", "nothing") == "nothing"
    reasons.sweep({"default/h"})
    assert "default/g" not in reasons
    reasons.record("default/h", why)
    reasons.record("default/h", None)
    assert reasons.get("default/h") is None


def test_a_status_message_is_composed_from_its_data_when_it_is_read() -> None:
    status = GroupStatus(
        "default/g",
        PENDING,
        said=(Bound(3), Released(R_BIND_TIMEOUT, 1, 3, 5.0)),
        waiting=(("default/a", "its PodGroup is invalid"),),
        warnings=("one", "two"),
    )
    assert status.message == (
        "3 pod(s) bound; bind gate timed out: 1/3 pods of the minimum reached bind, and none more for 5s; "
        "default/a: its PodGroup is invalid; one; two"
    )
    assert GroupStatus("default/g", PENDING, "as written").message == "as written"
    waiting = GroupStatus("default/g", PENDING, said=(NotPlanned(),))
    assert waiting.message == "waiting to be planned"
    assert GroupStatus("default/g", PENDING, said=(Headline("it fits now"),)).message == "it fits now"


def test_a_refusal_names_every_node_with_one_reason() -> None:
    refused = FilterResult.refusal(["n1", "n2"], "why", "default/g")
    assert (refused.nodes, refused.unresolvable, refused.reason, refused.group) == (
        [],
        {"n1": "why", "n2": "why"},
        "why",
        "default/g",
    )
