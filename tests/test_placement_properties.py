"""Properties that hold for every plan on random clusters and random gangs (hypothesis).

- no node ends up over its allocatable capacity, for any resource;
- every required constraint holds: the placed pods of its scope share one domain of its level;
- a plan satisfies the whole minimum tree, and any SubGroup with a placed pod has its own minimum;
- only eligible nodes are used; the same input gives the same plan;
- a gang with no constraints that fits by total capacity (one pod shape) is always placed;
- on small instances, whenever brute force finds a valid placement, the engine finds one too.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.model.node import NodeInfo
from extender.model.pod import PodInfo
from extender.placement import ClusterSnapshot, Plan, build_gang, plan
from extender.placement.gang import Scope
from tests.builders import BLOCK, GPU, RACK, TOPO, ZONE, node, pod, podgroup

LEVELS = [None, "zone", "block", "rack", "node"]
LABEL_OF = {"zone": (ZONE,), "block": (ZONE, BLOCK), "rack": (ZONE, BLOCK, RACK)}


@st.composite
def clusters(draw: Any) -> tuple[list[NodeInfo], dict[str, dict[str, int]]]:
    nodes, used = [], {}
    for z in range(draw(st.integers(1, 2))):
        for b in range(draw(st.integers(1, 2))):
            for r in range(draw(st.integers(1, 3))):
                for n in range(draw(st.integers(1, 4))):
                    name = f"z{z}-b{b}-r{r}-n{n}"
                    gpus = draw(st.sampled_from([4, 8]))
                    unlabeled = draw(st.integers(0, 9)) == 0  # some nodes lack the rack label
                    cordoned = draw(st.integers(0, 9)) == 0
                    nodes.append(
                        node(name, f"z{z}", f"b{b}", None if unlabeled else f"r{r}", gpus=gpus, unschedulable=cordoned)
                    )
                    taken = draw(st.integers(0, gpus))
                    if taken:
                        used[name] = {GPU: taken * 1000}
    return nodes, used


@st.composite
def gangs(draw: Any) -> tuple[Any, list[PodInfo]]:
    subgroups: list[dict[str, Any]] = []
    constraints: dict[str, dict[str, str]] = {}
    pods: list[PodInfo] = []

    def constraint() -> dict[str, str]:
        c = {}
        req, pref = draw(st.sampled_from(LEVELS)), draw(st.sampled_from(LEVELS))
        if req:
            c["requiredTopologyLevel"] = req
        if pref:
            c["preferredTopologyLevel"] = pref
        return c

    def leaf(name: str, parent: str | None) -> None:
        count = draw(st.integers(0, 5))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        subgroups.append(
            {"name": name, "minMember": draw(st.integers(0, count)), **({"parent": parent} if parent else {})}
        )
        pods.extend(pod(f"{name}-{i}", gpus=gpus, subgroup=name) for i in range(count))
        if c := constraint():
            constraints[name] = c

    for i in range(draw(st.integers(1, 3))):
        name = f"sg{i}"
        kids = draw(st.integers(0, 2))
        if kids == 0:
            leaf(name, None)
            continue
        subgroups.append({"name": name, "minMember": draw(st.integers(0, kids))})
        if c := constraint():
            constraints[name] = c
        for k in range(kids):
            leaf(f"{name}-{k}", name)
    top = [sg for sg in subgroups if "parent" not in sg]
    spec: dict[str, Any] = {"minMember": draw(st.integers(0, len(top))), "subGroups": subgroups}
    tc: dict[str, Any] = {"subGroups": constraints}
    if g := constraint():
        tc["global"] = g
    spec["topologyConstraints"] = tc
    return podgroup(spec), pods


def domain_of(n: NodeInfo, level: str) -> tuple[str | None, ...]:
    if level == "node":
        return (n.name,)
    return tuple(n.labels.get(label) for label in LABEL_OF[level])


def check_plan(
    nodes: list[NodeInfo], used: dict[str, dict[str, int]], pg: Any, pods: list[PodInfo], result: Plan
) -> None:
    by_name = {n.name: n for n in nodes}
    requests = {p.key: p.requests for p in pods}
    load: Counter[tuple[str, str]] = Counter()
    for name, reqs in used.items():
        for r, v in reqs.items():
            load[(name, r)] += v
    for key, where in result.assignments.items():
        assert by_name[where].schedulable, f"{key} on unschedulable {where}"
        for r, v in requests[key].items():
            load[(where, r)] += v
    for (name, r), v in load.items():
        assert v <= by_name[name].allocatable.get(r, 0), f"{name} over {r}: {v}"

    built = build_gang(pg, pods, {"default": TOPO})
    assert built.gang is not None

    def placed_in(scope: Scope) -> list[str]:
        return [result.assignments[m.key] for m in scope.all_members() if m.key in result.assignments]

    def satisfied(scope: Scope) -> bool:
        if scope.leaf:
            return sum(1 for m in scope.members if m.key in result.assignments) >= scope.min_member
        return sum(c.weight for c in scope.children if satisfied(c)) >= scope.min_member

    assert satisfied(built.gang.root), "the minimum tree is not satisfied"
    for scope in built.gang.scopes:
        where = placed_in(scope)
        if scope.rule and scope.rule.required and where:
            level = LEVELS[scope.rule.required]
            assert level is not None
            domains = {domain_of(by_name[n], level) for n in where}
            assert len(domains) == 1, f"{scope.label} broke {level}: {domains}"
            assert None not in next(iter(domains)), f"{scope.label} on nodes without the {level} label"
        if where and scope.leaf:
            assert sum(1 for m in scope.members if m.key in result.assignments) >= scope.min_member, (
                f"{scope.label} placed in part"
            )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), gangs())
def test_plans_never_break_capacity_constraints_or_gangs(cluster: Any, g: Any) -> None:
    nodes, used = cluster
    pg, pods = g
    built = build_gang(pg, pods, {"default": TOPO})
    assert built.gang is not None, built.errors
    first = plan(ClusterSnapshot.of(nodes, used), built.gang)
    again = plan(ClusterSnapshot.of(list(reversed(nodes)), used), built.gang)
    assert first == again
    if isinstance(first, Plan):
        check_plan(nodes, used, pg, pods, first)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), gangs())
def test_explaining_a_plan_changes_nothing_and_its_rankings_are_where_the_plan_went(cluster: Any, g: Any) -> None:
    """plan(..., explain=True) records the engine's rankings beside the search: the same plan, and
    each ranking's chosen domain is the first candidate not tried and failed, and (for a required
    level) the domain the plan holds the scope in."""
    nodes, used = cluster
    pg, pods = g
    built = build_gang(pg, pods, {"default": TOPO})
    assert built.gang is not None, built.errors
    plain = plan(ClusterSnapshot.of(nodes, used), built.gang)
    told = plan(ClusterSnapshot.of(nodes, used), built.gang, explain=True)
    if not isinstance(told, Plan):
        assert told == plain
        return
    assert isinstance(plain, Plan)
    assert plain.rankings == ()
    assert replace(told, rankings=()) == plain
    for r in told.rankings:
        if r.chosen is None:
            assert r.kind != "required"  # a climb past a level (compactness, a preference)
            continue
        assert r.chosen in [c.domain for c in r.candidates]
        assert r.chosen_rank == len(r.tried) or len(r.tried) == 8  # (tried lists at most 8)
        if r.kind == "required":
            assert told.domains[r.scope] == r.chosen


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(1, 24), st.sampled_from([1, 2, 4, 8]))
def test_unconstrained_gang_that_fits_by_capacity_is_placed(cluster: Any, n: int, gpus: int) -> None:
    nodes, used = cluster
    room = sum(
        (nd.allocatable[GPU] - used.get(nd.name, {}).get(GPU, 0)) // (gpus * 1000) for nd in nodes if nd.schedulable
    )
    pg = podgroup({"minMember": n})
    pods = [pod(f"p{i}", gpus=gpus) for i in range(n)]
    built = build_gang(pg, pods, {"default": TOPO})
    assert built.gang is not None
    result = plan(ClusterSnapshot.of(nodes, used), built.gang)
    assert isinstance(result, Plan) == (room >= n)


@settings(max_examples=100, deadline=None)
@given(clusters(), gangs(), st.data())
def test_filter_only_ever_returns_offered_nodes(cluster: Any, g: Any, data: Any) -> None:
    """kube-scheduler fails the whole attempt if an extender returns a name it did not offer."""
    from extender.core.cluster import ClusterState
    from extender.core.scheduler import GangScheduler

    nodes, _ = cluster
    pg, pods = g
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/pg", pg)
    scheduler = GangScheduler(state)
    for p in pods:
        scheduler.observe_pod(replace(p, annotations={"pod-group-name": "pg"}))
    names = [n.name for n in nodes]
    offered = data.draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    for p in pods[:3]:
        result = scheduler.filter(state.pods[p.key], offered, 0.0)
        assert set(result.nodes) <= set(offered)


# -- completeness on small instances: brute force says a placement exists => the engine finds one --

PATH = (ZONE, BLOCK, RACK)  # tree levels 1..3; 0 is the cluster and 4 the node


def _exists(nodes: list[NodeInfo], used: dict[str, dict[str, int]], gang: Any, gpus: dict[str, int]) -> bool:
    """Try every assignment of members to nodes (or to nowhere)."""
    members = [m.key for m in gang.members()]
    free = {n.name: n.allocatable[GPU] - used.get(n.name, {}).get(GPU, 0) for n in nodes}
    labels = {n.name: n.labels for n in nodes}

    def domain(name: str, level: int) -> tuple[str | None, ...]:
        if level > len(PATH):
            return (name,)
        return tuple(labels[name].get(lb) for lb in PATH[:level])

    def valid(assign: dict[str, str | None]) -> bool:
        load = dict(free)
        for key, where in assign.items():
            if where is not None:
                load[where] -= gpus[key]
        if min(load.values()) < 0:
            return False

        def met(scope: Scope) -> bool | None:  # None: a leaf placed in part, never allowed
            if scope.leaf:
                k = sum(1 for m in scope.members if assign[m.key] is not None)
                return None if 0 < k < scope.min_member else k >= scope.min_member
            results = [met(c) for c in scope.children]
            if None in results:
                return None
            return sum(c.weight for c, r in zip(scope.children, results, strict=True) if r) >= scope.min_member

        def held(scope: Scope) -> bool:
            placed = [w for m in scope.all_members() if (w := assign[m.key]) is not None]
            if scope.rule is not None and scope.rule.required is not None and placed:
                domains = {domain(w, scope.rule.required) for w in placed}
                if len(domains) != 1 or None in next(iter(domains)):
                    return False
            return all(held(c) for c in scope.children)

        return met(gang.root) is True and held(gang.root)

    choices: list[str | None] = [n.name for n in nodes] + [None]
    return any(
        valid(dict(zip(members, combo, strict=True))) for combo in itertools.product(choices, repeat=len(members))
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_small_gangs_are_placed_whenever_a_placement_exists(data: Any) -> None:
    nodes, used = [], {}
    for i in range(data.draw(st.integers(2, 4))):
        z, b, r = (data.draw(st.integers(0, 1)) for _ in range(3))
        nodes.append(node(f"n{i}", f"z{z}", f"b{b}", f"r{r}"))
        taken = data.draw(st.sampled_from([0, 0, 4, 8]))
        if taken:
            used[f"n{i}"] = {GPU: taken * 1000}
    subgroups, constraints, pods = [], {}, []
    for s in range(data.draw(st.integers(1, 2))):
        count = data.draw(st.integers(1, 3))
        subgroups.append({"name": f"s{s}", "minMember": data.draw(st.integers(0, count))})
        if level := data.draw(st.sampled_from(LEVELS)):
            constraints[f"s{s}"] = {"requiredTopologyLevel": level}
        gpus = data.draw(st.sampled_from([4, 8]))
        pods += [pod(f"s{s}-{i}", gpus=gpus, subgroup=f"s{s}") for i in range(count)]
    spec: dict[str, Any] = {"minMember": data.draw(st.integers(0, len(subgroups))), "subGroups": subgroups}
    spec["topologyConstraints"] = {"subGroups": constraints}
    if level := data.draw(st.sampled_from(LEVELS)):
        spec["topologyConstraints"]["global"] = {"requiredTopologyLevel": level}
    built = build_gang(podgroup(spec), pods, {"default": TOPO})
    assert built.gang is not None
    result = plan(ClusterSnapshot.of(nodes, used), built.gang)
    if not isinstance(result, Plan):
        gpus_of = {p.key: p.requests[GPU] for p in pods}
        assert not _exists(nodes, used, built.gang, gpus_of), f"missed a placement: {result.message}"
