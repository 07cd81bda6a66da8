"""Defragmentation: the fewest movable pods moved out of a domain a waiting gang needs whole, each
to room held for it elsewhere, or nothing moved and the reason said.

Cluster: one zone, blocks b1 and b2, each of two racks of two 8-GPU nodes (32 GPUs a block).
A 1-GPU pod of a ReplicaSet runs on the first node of each block; the gang `big` needs 4 pods
of 8 GPUs in one block: the room exists (over 60 GPUs free), but no block is whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.defrag import find_moves
from extender.core.explain import explain, render
from extender.core.movable import movability
from extender.core.moves import PREFIX, MoveSettings
from extender.core.scheduler import GangScheduler
from extender.model import annotation_keys as keys
from extender.model.pod import PodInfo, parse_pod
from extender.placement.victims import NoPreemption, Preemption
from tests.builders import GPU, TOPO, grid, pod, podgroup

BLOCK = {"topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}}
NODES = [n.name for n in grid(blocks=2, racks=2, nodes=2)]


def replica(
    name: str,
    node: str | None,
    rs: str = "web",
    movable: str | None = "true",
    gpus: int = 1,
    priority: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> PodInfo:
    """A pod of ReplicaSet RS (uid rs-uid-RS), MOVABLE as written on it (None: not written)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "labels": dict(labels or {"app": rs}),
        "annotations": {} if movable is None else {keys.MOVABLE: movable},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": f"rs-uid-{rs}", "controller": True}
        ],
    }
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", GPU: str(gpus)}}}]}
    if node is not None:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    return parse_pod({"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}})


def cluster(moves: MoveSettings | None = None, **replica_kw: Any) -> GangScheduler:
    state = ClusterState()
    for n in grid(blocks=2, racks=2, nodes=2):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    sched = GangScheduler(state, moves=moves)
    sched.observe_pod(replica("web-a", "z1-b1-r1-n1", **replica_kw))
    sched.observe_pod(replica("web-b", "z1-b2-r1-n1", **replica_kw))
    state.set_podgroup("default/big", podgroup({"minMember": 4, **BLOCK}, name="big"))
    for i in range(4):
        sched.observe_pod(pod(f"big-{i}", group="big"))
    return sched


def search(sched: GangScheduler) -> Preemption | NoPreemption:
    return find_moves(sched.state, sched.membership, "default/big", lambda key: sched.defragmenting.movable(key, 0.0))


def test_one_movable_pod_moves_out_of_the_block_to_a_node_of_the_other() -> None:
    sched = cluster()
    found = search(sched)
    assert isinstance(found, Preemption), found
    assert len(found.pods) == 1  # the fewest: one block made whole, not both
    (moved,) = found.pods
    block = str(found.domain)
    assert block in ("block z1/b1", "block z1/b2")
    new_node = found.moves[moved]
    assert f"-{block[-2:]}-" not in new_node  # outside the gang's block
    # the tightest fit: next to the other replica, whose node still has 7 GPUs free
    assert new_node in ("z1-b1-r1-n1", "z1-b2-r1-n1")
    assert set(found.plan.assignments.values()).isdisjoint({new_node})


def test_pods_that_do_not_say_so_are_not_moved_unless_the_flag_makes_every_replica_movable() -> None:
    sched = cluster(movable=None)
    found = search(sched)
    assert isinstance(found, NoPreemption)
    assert "no movable pod" in found.reason
    assert isinstance(search(cluster(MoveSettings(controllers=True), movable=None)), Preemption)
    # "false" on the pod keeps it in place even then
    assert isinstance(search(cluster(MoveSettings(controllers=True), movable="false")), NoPreemption)


def test_the_workload_can_say_so_for_its_pods() -> None:
    sched = cluster(movable=None)
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default", "uid": "rs-uid-web", "annotations": {keys.MOVABLE: "true"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {}},
    }
    apply_object(sched, rs)
    assert isinstance(search(sched), Preemption)


def test_a_bad_value_is_refused_naming_the_field() -> None:
    sched = cluster(movable="yes")
    got = movability(sched.state, sched.state.pods["default/web-a"], controllers=True)
    assert not got.movable
    assert got.error is not None
    assert str(got.error) == (
        'Pod default/web-a: metadata.annotations[scheduling.topogang.io/movable]: expected "true" or "false", '
        "got 'yes'"
    )
    assert isinstance(search(sched), NoPreemption)


def test_a_misspelt_key_is_told_what_it_meant() -> None:
    found, _ = keys.check(["scheduling.topogang.io/moveable"])
    assert [u.meant for u in found] == [keys.MOVABLE]


def test_a_pod_of_a_higher_priority_than_the_gang_is_not_moved() -> None:
    assert isinstance(search(cluster(priority=100)), NoPreemption)
    assert isinstance(search(cluster(priority=0)), Preemption)  # the same priority may move


def test_a_pod_with_no_place_outside_the_domain_is_not_moved_and_nothing_is() -> None:
    sched = cluster()
    sched.delete_pod("default/web-b")
    for name in NODES:  # block b2 is full of work that stays: web-a has nowhere to go
        if "-b2-" in name:
            sched.observe_pod(pod(f"fill-{name}", node_name=name))
    found = search(sched)
    assert isinstance(found, NoPreemption)
    assert found.reason == (
        "moving pods would not help: a pod that would be moved has no place elsewhere (default/web-a: none of the "
        "4 node(s) it may use outside the gang's domain has room for it)"
    )
    assert sched.state.reservations == {}


def test_the_gang_defragments_and_the_replacement_reaches_the_room_held_for_it() -> None:
    sched = cluster()
    first = sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    event = first.event
    assert event is not None
    assert event.outcome == "defragmenting", first
    p = event.preemption
    assert p is not None
    assert len(p.moves) == 1
    ((moved, new_node),) = p.moves.items()
    fields = event.fields()
    assert fields["moves"] == {moved: new_node}
    # both rooms held: the gang's four nodes and the moved pod's new one
    held = sched.state.reservations
    assert held[PREFIX + moved][0] == new_node
    assert {held[f"default/big-{i}"][0] for i in range(4)} == set(p.plan.assignments.values())
    status = sched.status("default/big")
    assert status.reason == "Defragmenting"
    assert f"moving 1 pod(s) ({moved} to {new_node})" in status.message
    text = render([explain(sched, "default/big")])
    assert f"Defragmentation: under way: defragmenting {p.domain}: moving 1 pod(s)" in text
    assert f"moved, each to room held for its replacement: {moved} to node {new_node}" in text
    assert "Preempted for it" not in text
    # the moved pod goes; its controller makes a replacement, which is answered its new node alone
    sched.delete_pod(moved)
    assert sched.preempting.take_ready() == ["default/big"]
    new = replica("web-c", None)
    sched.observe_pod(new)
    answer = sched.filter(new, NODES, 1.0)
    assert answer.nodes == [new_node]
    assert held.get("default/web-c", ("",))[0] == new_node
    assert PREFIX + moved not in held
    # a plain pod of another owner is kept off that room
    other = replica("other-0", None, rs="other", gpus=8)
    sched.observe_pod(other)
    assert new_node not in sched.filter(other, NODES, 1.0).nodes
    # bound there: its room is its own now
    sched.observe_pod(replace(new, node_name=new_node, phase="Running"))
    assert "default/web-c" not in sched.state.reservations
    assert sched.defragmenting.moves.by_pod == {}
    # the gang is planned into its block
    done = sched.filter(sched.state.pods["default/big-0"], NODES, 2.0)
    assert done.event is not None
    assert done.event.outcome == "planned"
    # the replacement stays in place for the cooldown
    assert not sched.defragmenting.movable("default/web-c", 2.0)
    assert sched.defragmenting.movable("default/web-c", 2.0 + MoveSettings().cooldown + 1)


def test_a_disruption_budget_that_forbids_the_move_keeps_the_gang_waiting_and_says_why() -> None:
    sched = cluster()
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    apply_object(sched, budget)
    first = sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    assert first.event is not None
    assert first.event.outcome == "pending"
    assert sched.state.reservations == {}
    status = sched.status("default/big")
    said = "moving pods would overrun PodDisruptionBudget default/web by 1 pod(s) (it allows 0 now)"
    assert status.reason == "DisruptionBudget"
    assert said in status.message
    assert said in first.reason
    assert f"Defragmentation: would move nothing: {said}" in render([explain(sched, "default/big")])


def test_moves_per_hour_bound_the_disruption() -> None:
    sched = cluster(MoveSettings(per_hour=0))
    first = sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    assert first.event is not None
    assert first.event.outcome == "pending"
    found = sched.defragmenting.search("default/big", 0.0)
    assert isinstance(found, NoPreemption)
    assert "--moves-per-hour" in found.reason
    off = cluster(MoveSettings(enabled=False))
    assert off.filter(off.state.pods["default/big-0"], NODES, 0.0).event.outcome == "pending"  # type: ignore[union-attr]


def test_the_window_slides() -> None:
    sched = cluster(MoveSettings(per_hour=1))
    assert sched.defragmenting.attempt("default/big", 0.0) is not None
    assert sched.defragmenting.moves.room_left(10.0) == 0
    assert sched.defragmenting.moves.room_left(3601.0) == 1


def test_room_no_replacement_claims_is_given_back() -> None:
    sched = cluster(MoveSettings(timeout=60))
    sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    assert any(k.startswith(PREFIX) for k in sched.state.reservations)
    assert sched.defragmenting.moves.expire(30.0) == []
    late = sched.defragmenting.moves.expire(61.0)
    assert len(late) == 1
    assert not any(k.startswith(PREFIX) for k in sched.state.reservations)
