"""Defragmentation moves members of running gangs too: only those beyond their gang's minimum,
when the pod, its workload or its PodGroup says so, each within its own gang's constraints; the
replacement its controller makes takes the room held for it as a member of its gang.

Cluster: one zone, blocks b1 and b2, each of two racks of two 8-GPU nodes. The gang `el` (a Job
of 4-GPU pods, minimum 2, required in one block) runs el-0 and el-1 on z1-b1-r2-n1 and, beyond its
minimum, the youngest el-2 on z1-b1-r1-n1. Bare pods (no controller: never moved) take 4 GPUs of
z1-b1-r2-n2 and 1 GPU of the first node of each rack of b2. The gang `big` needs 2 pods of 8 GPUs
in one rack: only rack b1/r1 can be made whole, by moving el-2 to the one node of its gang's
block with room for it, z1-b1-r2-n2 (and that room is then all that node has left).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.decisions import BIND
from extender.core.defrag import find_moves
from extender.core.explain import explain, render
from extender.core.movable import movability
from extender.core.movable_members import movable_members
from extender.core.moves import PREFIX
from extender.core.preemption import running_workloads
from extender.core.scheduler import GangScheduler
from extender.model import annotation_keys as keys
from extender.model.pod import PINNED_NODE_ANNOTATION, PodInfo, parse_pod, unpinned
from extender.placement.victims import NoPreemption, Preemption
from tests.builders import BLOCK, GPU, TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(blocks=2, racks=2, nodes=2)]
EL = "default/el"
HOME = "z1-b1-r2-n2"  # where el-2 goes: the one node of its gang's block outside rack r1 with room


def member(
    name: str,
    node: str | None,
    started: int = 0,
    movable: str | None = None,
    upstream: bool = False,
    terms: list[dict[str, Any]] | None = None,
    subgroup: str | None = None,
    gang: bool = True,
) -> PodInfo:
    """A 4-GPU pod of Job `el` (uid job-uid-el), of the gang `el`: topogang's PodGroup, or
    (UPSTREAM) Kubernetes' PodGroup `el`, or (not GANG) of none; STARTED: the minute it started;
    TERMS: its required node affinity."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "annotations": {} if upstream or not gang else {"pod-group-name": "el"},
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "el", "uid": "job-uid-el", "controller": True}
        ],
    }
    if movable is not None:
        meta["annotations"][keys.MOVABLE] = movable
    if subgroup is not None:
        meta["labels"] = {"kai.scheduler/subgroup-name": subgroup}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", GPU: "4"}}}]}
    if upstream:
        spec["schedulingGroup"] = {"podGroupName": "el"}
    if terms is not None:
        required = {"nodeSelectorTerms": terms}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    status: dict[str, Any] = {"phase": "Pending"}
    if node is not None:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": f"2026-01-01T00:{started:02d}:00Z"}
    return parse_pod({"metadata": meta, "spec": spec, "status": status})


def gates_pinned(p: PodInfo) -> PodInfo:
    """P as gates mode releases it: the annotation that says the pin to its node is topogang's."""
    assert p.node_name is not None
    return replace(p, annotations={**p.annotations, PINNED_NODE_ANNOTATION: p.node_name})


def cluster(
    said: str | None = "true",
    minimum: int = 2,
    level: str = "block",
    on_pod: str | None = None,
    disruption: str | None = None,
    subgroups: bool = False,
) -> GangScheduler:
    """SAID: the movable annotation on el's PodGroup; ON_POD: on el-2; DISRUPTION: el is
    Kubernetes' PodGroup with this disruptionMode (None: topogang's PodGroup)."""
    state = ClusterState()
    for n in grid(blocks=2, racks=2, nodes=2):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    sched = GangScheduler(state)
    annotations = {} if said is None else {keys.MOVABLE: said}
    upstream = disruption is not None
    if upstream:
        apply_object(
            sched,
            {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "el", "namespace": "default", "annotations": annotations},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": minimum}},
                    "schedulingConstraints": {"topology": [{"key": BLOCK}]},
                    "disruptionMode": {disruption: {}},
                },
            },
        )
    else:
        required = {"global": {"requiredTopologyLevel": level}}
        spec: dict[str, Any] = {"minMember": minimum, "topologyConstraints": required}
        if subgroups:  # el-0 and el-1 in SubGroup a, el-2 in b: each of minimum 1
            spec["subGroups"] = [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]
        state.set_podgroup(EL, podgroup(spec, name="el", annotations=annotations))
    sg = ("a", "a", "b") if subgroups else (None, None, None)
    sched.observe_pod(member("el-0", "z1-b1-r2-n1", 1, upstream=upstream, subgroup=sg[0]))
    sched.observe_pod(member("el-1", "z1-b1-r2-n1", 2, upstream=upstream, subgroup=sg[1]))
    sched.observe_pod(member("el-2", "z1-b1-r1-n1", 3, movable=on_pod, upstream=upstream, subgroup=sg[2]))
    sched.observe_pod(pod("bare-b1", gpus=4, node_name=HOME))
    for r in ("r1", "r2"):
        sched.observe_pod(pod(f"bare-{r}", gpus=1, node_name=f"z1-b2-{r}-n1"))
    in_a_rack = {"topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    state.set_podgroup("default/big", podgroup({"minMember": 2, **in_a_rack}, name="big"))
    for i in range(2):
        sched.observe_pod(pod(f"big-{i}", group="big"))
    return sched


def search(sched: GangScheduler) -> Preemption | NoPreemption:
    return find_moves(
        sched.state,
        sched.membership,
        "default/big",
        lambda key: sched.defragmenting.movable(key, 0.0),
        busy=sched.minimums.busy,
    )


def test_an_optional_member_moves_within_its_gangs_block_and_its_replacement_is_answered_that_node() -> None:
    sched = cluster()
    first = sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    event = first.event
    assert event is not None
    assert event.outcome == "defragmenting", first
    assert event.preemption is not None
    assert str(event.preemption.domain) == "rack z1/b1/r1"
    assert dict(event.preemption.moves) == {"default/el-2": HOME}
    held = sched.state.reservations
    assert held[PREFIX + "default/el-2"][0] == HOME
    # el-2 goes; its Job makes el-3, a member of the gang again, answered the room held for it
    sched.delete_pod("default/el-2")
    assert sched.preempting.take_ready() == ["default/big"]
    new = member("el-3", None)
    sched.observe_pod(new)
    answer = sched.filter(new, NODES, 1.0)
    assert answer.group == EL
    assert answer.nodes == [HOME]
    assert answer.event is not None
    assert answer.event.outcome == "extended"
    assert "replaces default/el-2" in answer.event.reason
    assert held["default/el-3"][0] == HOME
    assert PREFIX + "default/el-2" not in held
    assert sched.reserved(EL) == {"default/el-3": HOME}
    # the room stays held for it meanwhile: nothing is left there for anyone else
    assert sched.state.free_on(HOME, GPU) == 0
    # its bind goes through (its gang runs: the pod is beyond its minimum), and the room is its own
    assert sched.bind("default/el-3", HOME, 1.0).action == BIND
    sched.observe_pod(replace(new, node_name=HOME, phase="Running"))
    assert "default/el-3" not in sched.state.reservations
    assert sched.reserved(EL) == {}
    # the waiting gang is planned into the rack made whole
    done = sched.filter(sched.state.pods["default/big-0"], NODES, 2.0)
    assert done.event is not None
    assert done.event.outcome == "planned"
    assert set(sched.reserved("default/big").values()) == {"z1-b1-r1-n1", "z1-b1-r1-n2"}


def test_the_moved_members_gang_says_which_pod_moved_for_whom_and_where_its_replacement_goes() -> None:
    sched = cluster()
    sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    said = (
        "moved at 0s on the scheduler's clock, no wall clock known for default/big, to make rack z1/b1/r1 whole:"
        f" 1 pod(s) evicted, each replaced by its controller in room held for it (default/el-2 to node {HOME})"
    )
    told = explain(sched, EL)
    assert told.evicted == said
    assert f"Evicted: {said}" in render([told])
    assert explain(sched, EL, "default/el-2").asked is not None  # asked by the moved pod's name: its gang
    assert sched.status(EL).last_eviction == said.replace(" at 0s on the scheduler's clock, no wall clock known", "")
    sched.delete_pod("default/el-2")  # gone: the memory stays (its gang still runs el-0, el-1)
    assert explain(sched, EL).evicted == said


def test_a_pod_of_the_same_controller_outside_the_gang_does_not_take_a_moved_members_room() -> None:
    sched = cluster()
    sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    sched.delete_pod("default/el-2")
    # el's Job makes a pod outside el as well: the Job's own gang (the built-in Job grouper's)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "el", "uid": "job-uid-el"}}
    apply_object(sched, {**job, "metadata": {**job["metadata"], "namespace": "default"}, "spec": {"parallelism": 4}})
    helper = member("helper", None, gang=False)
    sched.observe_pod(helper)
    assert sched.membership.group_of(helper.key) not in (None, EL)
    assert HOME not in sched.filter(helper, NODES, 1.0).nodes  # the room stays held for el's member
    assert sched.defragmenting.moves.by_pod["default/el-2"].claimed is None
    new = member("el-3", None)
    sched.observe_pod(new)
    assert sched.filter(new, NODES, 2.0).nodes == [HOME]


def test_a_replacement_that_never_binds_gives_the_room_back_when_its_plan_expires() -> None:
    sched = cluster()
    sched.plan_ttl = 60.0
    sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    assert sched.defragmenting.moves.by_pod["default/el-2"].node == HOME
    sched.delete_pod("default/el-2")
    new = member("el-3", None)
    sched.observe_pod(new)
    assert sched.filter(new, NODES, 1.0).nodes == [HOME]
    assert sched.defragmenting.moves.by_pod == {}  # the room is its gang's plan's now, with its timeout
    assert sched.expire(30.0) == {}
    assert "default/el-3" in sched.state.reservations
    assert EL in sched.expire(62.0)
    assert "default/el-3" not in sched.state.reservations


def test_the_minimum_member_is_never_moved() -> None:
    found = search(cluster(minimum=3))  # el-2 is part of the minimum now
    assert isinstance(found, NoPreemption)
    assert found.reason == "no movable pod of priority <= 0 runs"
    # the minimum 2: only the youngest pod is beyond it; the two on rack r2 stay
    found = search(cluster())
    assert isinstance(found, Preemption)
    assert found.pods == ("default/el-2",)


def test_a_subgroup_at_its_minimum_keeps_its_pod_though_the_gang_has_one_to_spare() -> None:
    sched = cluster(subgroups=True)
    (el,) = [w for w in running_workloads(sched.state, sched.membership, "default/big") if w.key == EL]
    movable = movable_members(sched.state, sched.membership, el, 0, lambda key: True, lambda group: False)
    assert [m.pod.key for m in movable] == ["default/el-1"]  # not el-2, the youngest: SubGroup b needs it
    assert movable[0].home == "block z1/b1 (its own gang's required block)"
    found = search(sched)
    assert isinstance(found, NoPreemption)  # el-1 moved alone makes no rack whole: nothing moves
    assert sched.state.reservations == {}


def test_the_member_stays_within_its_gangs_required_domain() -> None:
    # el is required in one rack: el-2 may not leave rack b1/r1, the rack the waiting gang needs
    found = search(cluster(level="rack"))
    assert isinstance(found, NoPreemption)
    assert found.reason == (
        "moving pods would not help: a pod that would be moved has no place elsewhere (default/el-2: no node it may"
        " use in rack z1/b1/r1 (its own gang's required rack) lies outside the gang's domain)"
    )


def test_the_podgroup_says_whether_its_members_may_move() -> None:
    assert isinstance(search(cluster("true")), Preemption)
    assert isinstance(search(cluster("false")), NoPreemption)
    assert isinstance(search(cluster(None)), NoPreemption)
    # the pod's own value is nearer than its PodGroup's
    assert isinstance(search(cluster("true", on_pod="false")), NoPreemption)
    assert isinstance(search(cluster(None, on_pod="true")), Preemption)


def test_a_bad_value_on_the_podgroup_is_refused_naming_the_field() -> None:
    sched = cluster("yes")
    podgroup_spec = sched.membership.view(EL).spec
    got = movability(sched.state, sched.state.pods["default/el-2"], controllers=True, podgroup=podgroup_spec)
    assert not got.movable
    assert str(got.error) == (
        'PodGroup default/el: metadata.annotations[scheduling.topogang.io/movable]: expected "true" or "false",'
        " got 'yes'"
    )
    assert isinstance(search(sched), NoPreemption)


def test_kubernetes_podgroup_says_so_too_but_never_for_a_gang_disrupted_only_whole() -> None:
    found = search(cluster(disruption="single"))
    assert isinstance(found, Preemption), found
    assert dict(found.moves) == {"default/el-2": HOME}
    found = search(cluster(disruption="all"))
    assert isinstance(found, NoPreemption)
    assert found.reason == "no movable pod of priority <= 0 runs"


def test_no_member_of_a_gang_with_a_repair_or_preemption_of_its_own_moves() -> None:
    sched = cluster()
    assert sched.defragmenting.busy == sched.minimums.busy  # the scheduler's: a nomination or a repair of its own

    def moves(busy: set[str]) -> Preemption | NoPreemption:
        movable = lambda key: sched.defragmenting.movable(key, 0.0)  # noqa: E731
        return find_moves(sched.state, sched.membership, "default/big", movable, busy=busy.__contains__)

    assert isinstance(moves(set()), Preemption)
    assert isinstance(moves({EL}), NoPreemption)


def test_gates_modes_pin_to_its_node_is_no_rule_of_the_member_its_own_terms_are() -> None:
    # gates mode released el-2 pinned to its node (and said so), on top of its own term (a label every node has)
    own = {"key": "example.com/topology-zone", "operator": "In", "values": ["z1"]}
    pin = {"key": "metadata.name", "operator": "In", "values": ["z1-b1-r1-n1"]}
    ours = {PINNED_NODE_ANNOTATION: "z1-b1-r1-n1"}
    sched = cluster()
    pinned = gates_pinned(member("el-2", "z1-b1-r1-n1", 3, terms=[{"matchExpressions": [own], "matchFields": [pin]}]))
    sched.observe_pod(pinned)
    found = search(sched)
    assert isinstance(found, Preemption), found
    assert dict(found.moves) == {"default/el-2": HOME}
    bare = member("x", None, terms=[{"matchExpressions": [own]}]).placement
    assert unpinned(pinned.placement, "z1-b1-r1-n1", ours) == bare
    assert unpinned(member("x", None, terms=[{"matchFields": [pin]}]).placement, "z1-b1-r1-n1", ours).affinity == ()
    # its own terms still count: a zone no node is in leaves it nowhere to go
    elsewhere = {**own, "values": ["z9"]}
    sched.observe_pod(
        gates_pinned(member("el-2", "z1-b1-r1-n1", 3, terms=[{"matchExpressions": [elsewhere], "matchFields": [pin]}]))
    )
    found = search(sched)
    assert isinstance(found, NoPreemption)
    assert "no node it may use in block z1/b1 (its own gang's required block) lies outside" in found.reason


def test_a_pin_to_its_node_the_user_wrote_is_a_rule_of_the_member_it_is_not_moved() -> None:
    pin = {"key": "metadata.name", "operator": "In", "values": ["z1-b1-r1-n1"]}
    sched = cluster()
    sched.observe_pod(member("el-2", "z1-b1-r1-n1", 3, terms=[{"matchFields": [pin]}]))  # no mark: the user's
    found = search(sched)
    assert isinstance(found, NoPreemption), found
    assert "no node it may use in block z1/b1 (its own gang's required block) lies outside" in found.reason
    placement = sched.state.pods["default/el-2"].placement
    assert unpinned(placement, "z1-b1-r1-n1", {}) == placement
