"""JobSet's exclusive placement through the core: leaders bound ahead under the whole JobSet's plan.

JobSet's pod webhook admits a Job's followers (completion index > 0) only once the Job's leader
(index 0) is scheduled, and gives each a nodeSelector to its leader's rack. The gang counts the
followers not created yet, plans the whole JobSet, holds their room, lets the leaders bind, and
binds each follower into its held room when it comes.

Cluster: rack r1 of 2 nodes, racks r2, r3, r4 of 4 nodes each (8 GPUs a node), one block.

    z1-b1-r1  n1 n2
    z1-b1-r2  n1 n2 n3 n4
    z1-b1-r3  n1 n2 n3 n4
    z1-b1-r4  n1 n2 n3 n4

The JobSet: 3 Jobs of 4 pods of 8 GPUs, exclusive on the rack (each Job alone in a rack of 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from extender.core.cluster import ClusterState, object_key
from extender.core.decisions import BIND, DONE, R_FOLLOWERS_MISSING, R_PLANNED, R_SCHEDULED, R_UNREPAIRABLE, WAIT
from extender.core.explain import explain, render
from extender.core.recovery import Recovery
from extender.core.scheduler import GangScheduler
from extender.grouping import synthesize
from extender.grouping.expected import MARK
from extender.model.pod import PodInfo, parse_pod
from extender.model.selectors import NodeSelectorTerm, Requirement
from tests.builders import RACK, TOPO, node, pod
from tests.grouping_builders import group, jobset

EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
GROUP = "ml/jobset-js"
NODES = [f"z1-b1-r1-n{i}" for i in (1, 2)] + [f"z1-b1-r{r}-n{i}" for r in (2, 3, 4) for i in range(1, 5)]
RACK_OF = {n: n.rsplit("-", 1)[0] for n in NODES}


def the_jobset(annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Three Jobs of 4 pods of 8 GPUs (a node each), exclusive on the rack."""
    workload = jobset([("workers", 3, 4)], annotations={EXCLUSIVE: RACK, **(annotations or {})})
    pod_spec = workload["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod_spec["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "8", "cpu": "1"}}
    return workload


def cluster(
    workload: Mapping[str, Any], plan_ttl: float = 300.0, nodes: Sequence[str] = NODES
) -> tuple[GangScheduler, dict[str, dict[str, Any]]]:
    """The scheduler seeing NODES, the JobSet and its Jobs; the pods JobSet's Jobs will make, by name."""
    state = ClusterState()
    for name in nodes:
        zone, block, rack, _ = name.split("-")
        state.upsert_node(node(name, zone, block, rack))
    state.set_topology("default", TOPO)
    made = synthesize(workload, "ml")
    for body in (workload, *made.owners):
        meta = body["metadata"]
        state.set_object(object_key(body["apiVersion"], body["kind"], meta["namespace"], meta["name"]), body)
    return GangScheduler(state, plan_ttl=plan_ttl), {p["metadata"]["name"]: p for p in made.pods}


def leader(body: dict[str, Any]) -> PodInfo:
    """A leader as JobSet's webhook admits it: pod affinity to its Job, anti-affinity to other Jobs."""
    term = {"labelSelector": {}, "topologyKey": RACK}
    spec = {**body["spec"], "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    return parse_pod({**body, "spec": spec})


def follower(body: dict[str, Any], rack: str) -> PodInfo:
    """A follower as JobSet's webhook admits it (its leader scheduled): a nodeSelector to its leader's rack."""
    return parse_pod({**body, "spec": {**body["spec"], "nodeSelector": {RACK: rack}}})


def bound(p: PodInfo, node_name: str) -> PodInfo:
    return replace(p, node_name=node_name, phase="Running")


def bind_leaders(scheduler: GangScheduler, made: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The three leaders arrive and are planned, reach the gate and bind together: leader -> node."""
    leaders = [leader(made[f"js-workers-{j}-0"]) for j in range(3)]
    for p in leaders:
        scheduler.observe_pod(p)
    nodes = {p.key: scheduler.filter(p, NODES, 0.0).nodes for p in leaders}
    assert all(len(n) == 1 for n in nodes.values()), nodes
    decisions = [scheduler.bind(p.key, nodes[p.key][0], 1.0) for p in leaders]
    assert [d.action for d in decisions] == [WAIT, WAIT, BIND]
    assert sorted(decisions[-1].bind) == sorted((p.key, nodes[p.key][0]) for p in leaders)
    for p in leaders:
        scheduler.observe_pod(bound(p, nodes[p.key][0]))
    return {p.key: nodes[p.key][0] for p in leaders}


def test_the_leaders_are_planned_with_room_held_for_every_follower_one_job_per_rack() -> None:
    scheduler, made = cluster(the_jobset())
    leaders = [leader(made[f"js-workers-{j}-0"]) for j in range(3)]
    for p in leaders[:2]:
        scheduler.observe_pod(p)
    short = scheduler.filter(leaders[0], NODES, 0.0)
    assert short.nodes == []
    assert "SubGroup workers-2: 0/4 pods present" in short.reason, short.reason
    scheduler.observe_pod(leaders[2])
    result = scheduler.filter(leaders[0], NODES, 0.0)
    assert result.event is not None
    assert result.event.outcome == "planned"
    assert result.event.expected == 9  # the followers' room, held before they exist
    gp = scheduler.plans[GROUP]
    assert sorted(gp.reserved) == sorted(p.key for p in leaders)
    assert gp.gate.minimum == frozenset(p.key for p in leaders)  # nothing not created can reach bind
    assert sorted(gp.expected) == sorted(f"ml/js-workers-{j}-{i}{MARK}" for j in range(3) for i in range(1, 4))
    assert set(scheduler.state.reservations) == {*gp.reserved, *gp.expected}
    racks: dict[str, set[str]] = {}
    for key, where in {**gp.reserved, **gp.expected}.items():
        racks.setdefault(key.split("-")[2], set()).add(RACK_OF[where])  # by job index
    assert sorted(racks) == ["0", "1", "2"]
    assert all(len(r) == 1 for r in racks.values()), racks
    assert {r for rs in racks.values() for r in rs} == {"z1-b1-r2", "z1-b1-r3", "z1-b1-r4"}
    assert len({*gp.reserved.values(), *gp.expected.values()}) == 12  # a whole node each


def test_the_followers_bind_into_their_held_room_and_the_jobset_runs() -> None:
    scheduler, made = cluster(the_jobset())
    leaders = bind_leaders(scheduler, made)
    gp = scheduler.plans[GROUP]
    assert not gp.reserved
    assert len(gp.expected) == 9
    status = scheduler.status(GROUP)
    assert status.reason == R_PLANNED
    assert "its leaders are bound and room is held for 9 pod(s)" in status.message, status.message
    assert (status.bound, status.planned) == (3, 12)
    told = render([explain(scheduler, GROUP)])
    assert "PodGroup ml/jobset-js: min 1 of 1 SubGroups; 3 / 12 / 3" in told  # present / planned / bound
    assert "fits: 9 pod(s) would be placed" in told  # its held room given back for the dry run
    scheduler.expire(2.0)  # the sweep keeps a plan that still holds room for pods to come
    assert GROUP in scheduler.plans
    placed = dict(leaders)
    for j in range(3):
        rack = RACK_OF[leaders[f"ml/js-workers-{j}-0"]].rsplit("-", 1)[1]
        for i in range(1, 4):
            held = gp.expected[f"ml/js-workers-{j}-{i}{MARK}"]
            p = follower(made[f"js-workers-{j}-{i}"], rack)
            scheduler.observe_pod(p)
            result = scheduler.filter(p, NODES, 3.0)
            assert result.nodes == [held], (p.key, result.reason)
            decision = scheduler.bind(p.key, held, 3.0)
            assert (decision.action, decision.bind) == (BIND, ((p.key, held),))
            scheduler.observe_pod(bound(p, held))
            assert scheduler.bind(p.key, held, 3.0).action == DONE
            placed[p.key] = held
    assert not scheduler.state.reservations
    scheduler.expire(4.0)
    assert GROUP not in scheduler.plans  # carried out
    status = scheduler.status(GROUP)
    assert (status.reason, status.bound) == (R_SCHEDULED, 12)
    by_job: dict[str, set[str]] = {}
    for key, where in placed.items():
        by_job.setdefault(key.split("-")[2], set()).add(RACK_OF[where])
    assert all(len(r) == 1 for r in by_job.values())
    assert len({next(iter(r)) for r in by_job.values()}) == 3


def test_a_follower_whose_held_node_was_taken_is_planned_again_inside_its_leaders_rack() -> None:
    scheduler, made = cluster(the_jobset())
    leaders = bind_leaders(scheduler, made)
    gp = scheduler.plans[GROUP]
    slot = f"ml/js-workers-0-1{MARK}"
    taken = gp.expected[slot]
    # Another scheduler binds a pod of 8 GPUs on the node held for follower 1 of Job 0.
    scheduler.observe_pod(pod("intruder", gpus=8, namespace="other", node_name=taken))
    rack = RACK_OF[leaders["ml/js-workers-0-0"]]
    free = sorted(n for n in NODES if RACK_OF[n] == rack and n not in {taken, *leaders.values(), *gp.expected.values()})
    assert free == []  # the rack is full: 4 nodes, 4 pods, one taken
    p = follower(made["js-workers-0-1"], rack.rsplit("-", 1)[1])
    scheduler.observe_pod(p)
    refused = scheduler.filter(p, NODES, 3.0)
    assert refused.nodes == []
    assert not scheduler.plans[GROUP].expected
    assert f"inside rack {rack.replace('-', '/')}; only 0 fit" in refused.reason, refused.reason
    # The intruder leaves: the follower and the stand-ins are planned around the leaders again,
    # the follower in its leader's rack (its nodeSelector).
    scheduler.delete_pod("other/intruder")
    again = scheduler.filter(p, NODES, 4.0)
    assert again.nodes, again.reason
    assert RACK_OF[again.nodes[0]] == rack
    held = scheduler.plans[GROUP].expected
    assert len(held) == 8
    assert {RACK_OF[n] for k, n in held.items() if "workers-0-" in k} == {rack}


def test_a_leader_bound_elsewhere_than_planned_takes_its_followers_to_its_rack() -> None:
    # Four racks of 4: the plan leaves one free, and a second decider binds leader 0 there.
    # JobSet's webhook points its followers at that rack, where their held room is not: the held
    # room goes back and the followers and stand-ins are planned again around the leaders as they run.
    four = [f"z1-b1-r{r}-n{i}" for r in range(1, 5) for i in range(1, 5)]
    scheduler, made = cluster(the_jobset(), nodes=four)
    leaders = [leader(made[f"js-workers-{j}-0"]) for j in range(3)]
    for p in leaders:
        scheduler.observe_pod(p)
    nodes = {p.key: scheduler.filter(p, four, 0.0).nodes[0] for p in leaders}
    gp = scheduler.plans[GROUP]
    used = {n.rsplit("-", 1)[0] for n in (*gp.reserved.values(), *gp.expected.values())}
    [free] = {n.rsplit("-", 1)[0] for n in four} - used
    scheduler.observe_pod(bound(leaders[0], f"{free}-n1"))
    assert [scheduler.bind(p.key, nodes[p.key], 1.0).action for p in leaders[1:]] == [WAIT, BIND]
    for p in leaders[1:]:
        scheduler.observe_pod(bound(p, nodes[p.key]))
    p = follower(made["js-workers-0-1"], free.rsplit("-", 1)[1])
    scheduler.observe_pod(p)
    result = scheduler.filter(p, four, 3.0)
    assert result.event is not None, result.reason
    assert result.event.outcome == "extended"
    rack = {n: n.rsplit("-", 1)[0] for n in four}
    assert rack[result.nodes[0]] == free
    held = scheduler.plans[GROUP].expected
    assert sorted(rack[n] for k, n in held.items() if "workers-0-" in k) == [free, free]
    for j in (1, 2):  # the other Jobs keep their racks
        assert {rack[n] for k, n in held.items() if f"workers-{j}-" in k} == {rack[nodes[leaders[j].key]]}


def test_followers_that_never_come_give_their_room_back_and_the_gang_is_kept_by_default() -> None:
    scheduler, made = cluster(the_jobset(), plan_ttl=60.0)
    bind_leaders(scheduler, made)
    assert len(scheduler.state.reservations) == 9
    scheduler.expire(30.0)  # the leaders bound: progress, seen now
    scheduler.expire(89.0)
    assert GROUP in scheduler.plans  # still waiting for them
    scheduler.expire(91.0)
    assert GROUP not in scheduler.plans
    assert not scheduler.state.reservations
    [(group, evict)] = scheduler.expire_repairs(91.0)
    assert (group, evict) == (GROUP, [])
    status = scheduler.status(GROUP)
    assert status.reason == R_UNREPAIRABLE
    assert status.message.startswith("the gang cannot be made whole: its leaders are bound"), status.message
    assert "the room held for its 9 pod(s) still to come" in status.message


def test_followers_that_never_come_get_the_leaders_evicted_when_the_jobset_asks_for_it() -> None:
    workload = the_jobset({"scheduling.topogang.io/on-unrepairable": "EvictGang"})
    scheduler, made = cluster(workload, plan_ttl=60.0)
    leaders = bind_leaders(scheduler, made)
    scheduler.expire(1.0)
    assert scheduler.expire(62.0) == {GROUP: []}
    why = scheduler.reasons.get(GROUP)
    assert why is not None
    assert why.kind == R_FOLLOWERS_MISSING
    [(group, evict)] = scheduler.expire_repairs(62.0)
    assert group == GROUP
    assert sorted(p.key for p in evict) == sorted(leaders)


def test_a_new_leader_of_topogang_holds_the_followers_room_again_and_evicts_nobody() -> None:
    # The leaders were bound by the last leader of topogang (their PodScheduled times after their
    # creation); no follower exists yet. Not a gang cut off between two binds: no deadline, no
    # eviction; the followers' room is held again and they bind into it as they come.
    scheduler, made = cluster(the_jobset())
    leaders = bind_leaders(scheduler, made)
    placed = {k: scheduler.state.pods[k] for k in leaders}
    fresh, _ = cluster(the_jobset())
    for p in placed.values():
        fresh.observe_pod(replace(p, created=100.0, scheduled_at=101.0))
    recovery = Recovery(within=55.0)
    found = recovery.start(fresh, 0.0)
    assert recovery.deadlines == {}
    assert found.degraded == []
    assert [(e.group, e.outcome, e.expected) for e in found.events] == [(GROUP, "planned", 9)]
    gp = fresh.plans[GROUP]
    assert gp.gate.opened
    assert {RACK_OF[n] for n in gp.expected.values()} == {RACK_OF[n] for n in leaders.values()}
    assert recovery.overdue(fresh, 1000.0) == {}
    slot = f"ml/js-workers-0-1{MARK}"
    p = follower(made["js-workers-0-1"], RACK_OF[leaders["ml/js-workers-0-0"]].rsplit("-", 1)[1])
    held = gp.expected[slot]
    fresh.observe_pod(p)
    assert fresh.filter(p, NODES, 2.0).nodes == [held]
    assert fresh.bind(p.key, held, 2.0).action == BIND


def test_a_leader_pinned_by_gates_mode_leaves_its_followers_free_inside_the_rack() -> None:
    # Gates mode pins each pod it ungates with node affinity metadata.name In [node] (appended to
    # each of its own terms); the stand-ins made from that leader must not inherit the pin.
    scheduler, made = cluster(the_jobset())
    leaders = [leader(made[f"js-workers-{j}-0"]) for j in range(3)]
    for p in leaders:
        scheduler.observe_pod(p)
    planned = scheduler.filter(leaders[0], NODES, 0.0).nodes[0]
    zone = {"key": "example.com/topology-zone", "operator": "In", "values": ["z1"]}
    pin = {"key": "metadata.name", "operator": "In", "values": [planned]}
    terms = [{"matchExpressions": [zone], "matchFields": [pin]}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    body = made["js-workers-0-0"]
    pinned = parse_pod({**body, "spec": {**body["spec"], "affinity": affinity}})
    assert pinned.placement.affinity[0].fields == (Requirement("metadata.name", "In", (planned,)),)
    scheduler.observe_pod(pinned)
    stand_ins = [s for k, s in scheduler.membership.view(GROUP).expected.items() if "workers-0-" in k]
    assert len(stand_ins) == 3
    kept = (NodeSelectorTerm((Requirement("example.com/topology-zone", "In", ("z1",)),), ()),)
    assert all(s.placement.affinity == kept for s in stand_ins)


def test_only_exclusive_indexed_jobs_without_the_node_selector_strategy_are_leader_first() -> None:
    def rule(workload: Mapping[str, Any]) -> list[str]:
        return sorted(next(iter(group(workload).groups.values())).leader_first)

    assert rule(the_jobset()) == ["workers-0", "workers-1", "workers-2"]
    assert rule(jobset([("workers", 2, 4)])) == []
    assert rule(the_jobset({"alpha.jobset.sigs.k8s.io/node-selector": "true"})) == []
    not_indexed = the_jobset()
    del not_indexed["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"]
    assert rule(not_indexed) == []
    on_one = jobset([("leader", 1, 1), ("workers", 2, 4)], job_ann={"workers": {EXCLUSIVE: RACK}})
    assert rule(on_one) == ["workers-0", "workers-1"]
