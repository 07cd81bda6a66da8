"""The victim choice of preemption, one rule per test.

Unless a test draws its own, the cluster is grid(zones=1, blocks=1, racks=3, nodes=4), 8 GPUs
a node, and the preemptor is a gang of priority 1000 asking for 8-GPU pods:

    zone z1 / block b1
    ├── rack r1 (z1-b1-r1-n1..n4)
    ├── rack r2 (z1-b1-r2-n1..n4)
    └── rack r3 (z1-b1-r3-n1..n4)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from extender.model.node import NodeInfo
from extender.model.pod import PodInfo
from extender.placement import ClusterSnapshot, Gang, build_gang
from extender.placement.victim_search import MAX_PLANS, find_victims
from extender.placement.victims import Budget, NoPreemption, Overrun, Preemption, RunningPod, Workload
from tests.builders import GPU, TOPO, grid, pod, podgroup

CLUSTER = grid(zones=1, blocks=1, racks=3, nodes=4)
HIGH = 1000


def preemptor(n: int, constraint: dict[str, Any] | None = None, gpus: int = 8) -> Gang:
    spec: dict[str, Any] = {"minMember": n}
    if constraint:
        spec["topologyConstraints"] = {"global": constraint}
    built = build_gang(podgroup(spec, name="urgent"), [pod(f"u-{i}", gpus=gpus) for i in range(n)], {"default": TOPO})
    assert built.gang is not None, built.errors
    return built.gang


def running(
    key: str,
    nodes: Sequence[str],
    priority: int = 10,
    gpus: int = 8,
    elastic: int = 0,
    started: float = 0.0,
    gang: bool = True,
) -> Workload:
    """A workload with one pod of `gpus` GPUs on each of `nodes`; its last `elastic` pods may go alone."""
    pods = tuple(
        RunningPod(f"{key}-{i}", n, pod(f"{key}-{i}", gpus=gpus).requests, started) for i, n in enumerate(nodes)
    )
    spare = frozenset(p.key for p in pods[len(pods) - elastic :]) if elastic else frozenset()
    return Workload(key, priority, pods, spare, gang)


def plain(key: str, node: str, priority: int = 10, gpus: int = 8) -> Workload:
    return running(key, [node], priority, gpus, gang=False)


def rack(r: int, *ns: int) -> list[str]:
    return [f"z1-b1-r{r}-n{n}" for n in (ns or (1, 2, 3, 4))]


def snapshot(
    workloads: Iterable[Workload], extra: Iterable[PodInfo] = (), nodes: Sequence[NodeInfo] = CLUSTER
) -> ClusterSnapshot:
    used: dict[str, dict[str, int]] = {}
    pods = [(p.node, p.requests) for w in workloads for p in w.pods]
    pods += [(p.node_name, p.requests) for p in extra if p.node_name]
    for node, requests in pods:
        into = used.setdefault(node, {})
        for r, v in requests.items():
            into[r] = into.get(r, 0) + v
    return ClusterSnapshot.of(nodes, used)


def choose(
    gang: Gang, workloads: list[Workload], budgets: Sequence[Budget] = (), nodes: Sequence[NodeInfo] = CLUSTER
) -> Preemption:
    found = find_victims(snapshot(workloads, nodes=nodes), gang, HIGH, workloads, budgets)
    assert isinstance(found, Preemption), found
    return found


def assert_fits(found: Preemption, workloads: list[Workload]) -> None:
    """The plan's minimum fits on the nodes once the victims are gone."""
    gone = set(found.pods)
    left = [w for w in workloads if any(p.key not in gone for p in w.pods)]
    room: dict[str, int] = {}
    for w in left:
        for p in w.pods:
            if p.key not in gone:
                room[p.node] = room.get(p.node, 0) + p.requests[GPU]
    for node in found.plan.assignments.values():
        room[node] = room.get(node, 0) + 8000
    assert all(v <= 8000 for v in room.values()), room


# -- whole gangs ----------------------------------------------------------------------------------


def test_a_rack_gang_evicts_the_one_rack_gang_whole_not_part_of_the_two_rack_gang() -> None:
    two = running("two-rack", rack(1) + rack(2))
    one = running("one-rack", rack(3))
    found = choose(preemptor(4, {"requiredTopologyLevel": "rack"}), [two, one])
    assert found.victims == ("one-rack",)
    assert found.pods == tuple(f"one-rack-{i}" for i in range(4))
    assert str(found.domain) == "rack z1/b1/r3"
    assert set(found.plan.assignments.values()) == set(rack(3))
    assert_fits(found, [two, one])


def test_a_gang_is_never_left_below_its_minimum() -> None:
    # Two pods beyond the minimum of four; the preemptor needs three nodes: the whole gang goes.
    g = running("g", rack(1) + rack(2, 1, 2), elastic=2)
    others = [running("r2", rack(2, 3, 4), priority=500), running("r3", rack(3), priority=500)]
    found = choose(preemptor(3, {"requiredTopologyLevel": "block"}), [g, *others])
    assert found.victims == ("g",)
    assert len(found.pods) == 6
    assert found.elastic == {}


def test_elastic_members_are_taken_alone_first() -> None:
    # Gang e: 8 pods of 4 GPUs on rack r1 (two a node); its last 4 are beyond its minimum.
    nodes = [n for n in rack(1) for _ in range(2)]
    e = running("e", nodes, gpus=4, elastic=4)
    whole = [running("r2", rack(2)), running("r3", rack(3))]
    found = choose(preemptor(2, {"requiredTopologyLevel": "rack"}), [e, *whole])
    assert found.victims == ()
    assert found.elastic == {"e": ("e-4", "e-5", "e-6", "e-7")}
    assert found.cost.workloads == 0
    assert_fits(found, [e, *whole])


def test_pods_beyond_a_minimum_go_before_any_minimum_whatever_their_priority() -> None:
    # Gang e (priority 900) runs 8 pods of 4 GPUs on rack r1, 4 beyond its minimum (on n3, n4);
    # rack r2 holds a whole gang of priority 5. Its optional pods free two nodes of r1: they go.
    e = running("e", [n for n in rack(1) for _ in range(2)], priority=900, gpus=4, elastic=4)
    ws = [e, running("low", rack(2), priority=5), running("x", rack(3), priority=2000)]
    found = choose(preemptor(2, {"requiredTopologyLevel": "rack"}), ws)
    assert found.victims == ()
    assert found.elastic == {"e": ("e-4", "e-5", "e-6", "e-7")}
    assert found.cost.top_priority == 900


def test_a_gang_of_equal_priority_gives_its_optional_pods_never_its_minimum() -> None:
    e = running("e", rack(1), priority=HIGH, elastic=2)
    ws = [e, running("x", rack(2) + rack(3), priority=2000)]
    found = choose(preemptor(2), ws)
    assert found.victims == ()
    assert found.elastic == {"e": ("e-2", "e-3")}
    # three nodes would need one of its minimum: nothing of an equal priority gang goes for that
    refused = find_victims(snapshot(ws), preemptor(3), HIGH, ws)
    assert isinstance(refused, NoPreemption)


def test_an_optional_segment_goes_whole_or_not_at_all() -> None:
    # Gang e runs 8 pods on racks r1 and r2; the 4 on r2 are an optional segment. One node is
    # needed: without the segment a single pod of it would do, with it the 4 go together.
    e = running("e", rack(1) + rack(2), elastic=4)
    seg = dataclasses.replace(e, segments=(frozenset(f"e-{i}" for i in range(4, 8)),))
    others = [running("x", rack(3), priority=2000)]
    assert len(choose(preemptor(1), [e, *others]).pods) == 1
    found = choose(preemptor(1), [seg, *others])
    assert found.elastic == {"e": ("e-4", "e-5", "e-6", "e-7")}


def test_plain_pods_are_victims_alone() -> None:
    ws = [plain(f"p{i}", n) for i, n in enumerate(rack(1))] + [running("r2", rack(2)), running("r3", rack(3))]
    found = choose(preemptor(1), ws)
    assert len(found.pods) == 1
    assert found.cost.workloads == 1


# -- priorities -------------------------------------------------------------------------------------


def test_the_lowest_priority_goes_first_even_if_bigger() -> None:
    ws = [running("small", rack(1, 1, 2), priority=50), running("big", rack(2) + rack(3), priority=5)]
    ws.append(running("filler", rack(1, 3, 4), priority=900))
    found = choose(preemptor(2, {"requiredTopologyLevel": "block"}), ws)
    assert found.victims == ("big",)
    assert found.cost.top_priority == 5


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    ws = [running("same", rack(1), priority=HIGH), running("higher", rack(2) + rack(3), priority=HIGH + 1)]
    found = find_victims(snapshot(ws), preemptor(4, {"requiredTopologyLevel": "rack"}), HIGH, ws)
    assert isinstance(found, NoPreemption)
    assert "no running workload has a priority below 1000" in found.reason


def test_only_lower_priority_room_counts() -> None:
    # The low gang frees two nodes of rack r1, but the rack needs four and r1's others are higher.
    ws = [running("low", rack(1, 1, 2), priority=1), running("top", rack(1, 3, 4) + rack(2) + rack(3), priority=2000)]
    found = find_victims(snapshot(ws), preemptor(4, {"requiredTopologyLevel": "rack"}), HIGH, ws)
    assert isinstance(found, NoPreemption)
    assert "would not free room for the minimum in any rack" in found.reason


# -- fewest and cheapest --------------------------------------------------------------------------------


def test_one_gang_beats_four_plain_pods_of_the_same_priority() -> None:
    ws = [plain(f"p{i}", n) for i, n in enumerate(rack(1))] + [running("g", rack(2)), running("x", rack(3), 500)]
    found = choose(preemptor(4, {"requiredTopologyLevel": "rack"}), ws)
    assert found.victims == ("g",)
    assert str(found.domain) == "rack z1/b1/r2"


def test_the_domain_that_costs_least_wins() -> None:
    # r1: one gang of four pods; r2: a gang of two pods and two free nodes; r3: higher priority.
    ws = [running("four", rack(1)), running("two", rack(2, 1, 2)), running("x", rack(3), 500)]
    found = choose(preemptor(4, {"requiredTopologyLevel": "rack"}), ws)
    assert found.victims == ("two",)
    assert found.cost.pods == 2


def test_fewer_gpus_taken_wins_between_equal_counts() -> None:
    # One node must be freed: r1-n4 holds an 8-GPU pod, r2-n4 a 4-GPU pod; the rest is higher.
    ws = [running("hi1", rack(1, 1, 2, 3), 500), running("big", rack(1, 4)), running("x", rack(3), 500)]
    ws += [running("hi2", rack(2, 1, 2, 3), 500), running("half", rack(2, 4), gpus=4)]
    found = choose(preemptor(1), ws)
    assert found.victims == ("half",)
    assert found.cost.taken[0] == 4000


def test_the_youngest_victims_go_first() -> None:
    ws = [running("old", rack(1), started=100.0), running("young", rack(2), started=200.0), running("x", rack(3), 500)]
    found = choose(preemptor(4, {"requiredTopologyLevel": "rack"}), ws)
    assert found.victims == ("young",)


def test_no_victim_when_nothing_helps() -> None:
    ws = [running("a", rack(1)), running("b", rack(2)), running("c", rack(3))]
    found = find_victims(snapshot(ws), preemptor(5, {"requiredTopologyLevel": "rack"}), HIGH, ws)
    assert isinstance(found, NoPreemption)
    assert "any rack" in found.reason


def test_no_victim_when_only_the_engine_sees_that_nothing_helps() -> None:
    # Summed over rack r1, evicting `low` frees 16 GPUs (two pods' worth), but 4 on each node.
    ws = [running("a", rack(1), gpus=4, priority=2000), running("low", rack(1, 1), gpus=2, priority=1)]
    ws += [running("b", rack(2), priority=2000), running("c", rack(3), priority=2000)]
    found = find_victims(snapshot(ws), preemptor(2, {"requiredTopologyLevel": "rack"}), HIGH, ws)
    assert isinstance(found, NoPreemption)
    assert "even with every one of them in rack z1/b1/r1 evicted" in found.reason
    assert found.plans == 1


# -- PodDisruptionBudgets ---------------------------------------------------------------------------------


def test_a_pdb_breaks_a_tie() -> None:
    ws = [running("a", rack(1)), running("b", rack(2)), running("x", rack(3), 500)]
    gang = preemptor(4, {"requiredTopologyLevel": "rack"})
    guard_a = Budget("pdb-a", 0, frozenset(p.key for p in ws[0].pods))
    assert choose(gang, ws, [guard_a]).victims == ("b",)
    guard_b = Budget("pdb-b", 0, frozenset(p.key for p in ws[1].pods))
    found = choose(gang, ws, [guard_b])
    assert found.victims == ("a",)
    assert found.cost.budgets == 0


def guard(name: str, allowed: int, *keys: str) -> Budget:
    """A budget over the pods of the workloads (or the pods) named."""
    return Budget(name, allowed, frozenset(keys))


def pods_of(*ws: Workload) -> list[str]:
    return [p.key for w in ws for p in w.pods]


@dataclass(frozen=True)
class BudgetCase:
    workloads: list[Workload]
    budgets: list[Budget]
    gang: Gang
    victims: tuple[str, ...] = ()  # the workloads evicted (whole)
    overruns: tuple[Overrun, ...] = ()  # or: nothing is evicted, and these budgets are why


def _budget_cases() -> dict[str, BudgetCase]:
    rack_gang = preemptor(4, {"requiredTopologyLevel": "rack"})
    a, b, x = running("a", rack(1), priority=1), running("b", rack(2), priority=2), running("x", rack(3), 500)
    plains = [plain(f"p{i}", n, priority=1) for i, n in enumerate(rack(2))]
    same_a = running("a", rack(1), priority=1)
    # one 8-GPU pod a node; p1 and p2 (priority 1) under one budget, q1 and q2 (priority 2) not
    pair = [plain("p1", "z1-b1-r1-n1", 1), plain("p2", "z1-b1-r2-n1", 1)]
    pair += [plain("q1", "z1-b1-r1-n2", 2), plain("q2", "z1-b1-r2-n2", 2)]
    pair += [running("full", rack(1, 3, 4) + rack(2, 3, 4) + rack(3), 500)]
    lone = [plain(f"p{i}", n, priority=1) for i, n in enumerate(rack(1), 1)]
    lone += [running("top", rack(2) + rack(3), priority=2000)]
    top = running("x", rack(3), 2000)
    return {
        "the protected cheapest set loses to a higher priority": BudgetCase(
            [a, b, x], [guard("pdb-a", 0, *pods_of(a))], rack_gang, victims=("b",)
        ),
        "the protected cheapest set loses to four workloads": BudgetCase(
            [same_a, *plains, x], [guard("pdb-a", 0, *pods_of(same_a))], rack_gang, victims=("p0", "p1", "p2", "p3")
        ),
        "a budget allowing fewer than a gang's pods keeps it whole": BudgetCase(
            [a, b, x], [guard("pdb-a", 3, *pods_of(a))], rack_gang, victims=("b",)
        ),
        "a budget allowing all of them lets them go": BudgetCase(
            [a, b, x], [guard("pdb-a", 4, *pods_of(a))], rack_gang, victims=("a",)
        ),
        "two units break a budget together: the one it allows goes": BudgetCase(
            pair, [guard("pdb-p", 1, "p1-0", "p2-0")], preemptor(2), victims=("p1", "q1")
        ),
        "two units within what the budget allows both go": BudgetCase(
            pair, [guard("pdb-p", 2, "p1-0", "p2-0")], preemptor(2), victims=("p1", "p2")
        ),
        "every set overruns: the cheapest one's budget is named": BudgetCase(
            [a, b, top],
            [guard("ns/pdb-a", 0, *pods_of(a)), guard("ns/pdb-b", 1, *pods_of(b))],
            rack_gang,
            overruns=(Overrun("ns/pdb-a", 0, 4),),
        ),
        "units that only break a budget together, and no other way": BudgetCase(
            lone, [guard("ns/pdb-p", 1, "p1-0", "p2-0")], rack_gang, overruns=(Overrun("ns/pdb-p", 1, 1),)
        ),
    }


BUDGET_CASES = _budget_cases()


@pytest.mark.parametrize("name", list(BUDGET_CASES))
def test_no_victim_set_overruns_a_disruption_budget_while_another_would_do(name: str) -> None:
    case = BUDGET_CASES[name]
    found = find_victims(snapshot(case.workloads), case.gang, HIGH, case.workloads, case.budgets)
    assert found.plans <= MAX_PLANS
    if case.overruns:
        assert isinstance(found, NoPreemption), found
        assert found.overruns == case.overruns
        return
    assert isinstance(found, Preemption), found
    assert found.victims == case.victims
    assert found.cost.budgets == 0
    assert_fits(found, case.workloads)


def test_a_refusal_names_each_budget_and_its_overrun() -> None:
    a, b, x = running("a", rack(1), priority=1), running("b", rack(2), priority=2), running("x", rack(3), 2000)
    budgets = [guard("ns/keep-a", 0, *pods_of(a)), guard("ns/keep-b", 2, *pods_of(b))]
    found = find_victims(snapshot([a, b, x]), preemptor(4, {"requiredTopologyLevel": "rack"}), HIGH, [a, b, x], budgets)
    assert isinstance(found, NoPreemption)
    assert "beyond what PodDisruptionBudgets allow" in found.reason
    assert "the cheapest, in rack z1/b1/r1, would overrun PodDisruptionBudget ns/keep-a by 4 pod(s)" in found.reason
    assert "(it allows 0 now)" in found.reason


def test_budgets_are_not_named_when_evicting_would_not_help_anyway() -> None:
    ws = [running("low", rack(1, 1, 2), priority=1), running("top", rack(1, 3, 4) + rack(2) + rack(3), priority=2000)]
    budgets = [guard("ns/keep-low", 0, *pods_of(ws[0]))]
    found = find_victims(snapshot(ws), preemptor(4, {"requiredTopologyLevel": "rack"}), HIGH, ws, budgets)
    assert isinstance(found, NoPreemption)
    assert found.overruns == ()
    assert "would not free room for the minimum in any rack" in found.reason


def test_elastic_pods_under_a_budget_go_only_as_far_as_it_allows() -> None:
    # Gang e: 8 pods of 4 GPUs on rack r1 (two a node), its last 4 beyond its minimum and under
    # a budget that allows 2: the two it allows free one node, the preemptor needs two.
    e = running("e", [n for n in rack(1) for _ in range(2)], gpus=4, elastic=4)
    ws = [e, running("r2", rack(2)), running("r3", rack(3), priority=500)]
    budgets = [guard("ns/keep-e", 2, *sorted(e.elastic))]
    found = choose(preemptor(2, {"requiredTopologyLevel": "rack"}), ws, budgets)
    assert found.victims == ("r2",)
    assert found.elastic == {}
    assert found.guarded == ()
    with_room = [guard("ns/keep-e", 4, *sorted(e.elastic))]
    found = choose(preemptor(2, {"requiredTopologyLevel": "rack"}), ws, with_room)
    assert found.elastic == {"e": ("e-4", "e-5", "e-6", "e-7")}
    assert found.guarded == ("e-4", "e-5", "e-6", "e-7")  # evicted before the others


# -- segments and pinned domains ----------------------------------------------------------------------


def segmented(segments: int, size: int, level: str = "block") -> Gang:
    """`segments` SubGroups of `size` 8-GPU pods, each in one rack, all in one `level`."""
    spec: dict[str, Any] = {
        "subGroups": [
            {"name": "worker", "minSubGroup": segments},
            *({"name": f"worker-{s}", "parent": "worker", "minMember": size} for s in range(segments)),
        ],
        "topologyConstraints": {
            "global": {"requiredTopologyLevel": level},
            "subGroups": {f"worker-{s}": {"requiredTopologyLevel": "rack"} for s in range(segments)},
        },
    }
    pods = [pod(f"w-{i}", subgroup=f"worker-{i // size}") for i in range(segments * size)]
    built = build_gang(podgroup(spec, name="seg"), pods, {"default": TOPO})
    assert built.gang is not None, built.errors
    return built.gang


def test_segments_free_whole_racks_of_the_cheapest_block() -> None:
    # Two blocks of two racks of two nodes. Block b1: one 2-pod gang per rack. Block b2: plain
    # pods of the same priority, one a node (four victims instead of two).
    ws = [running("a", ["z1-b1-r1-n1", "z1-b1-r1-n2"]), running("b", ["z1-b1-r2-n1", "z1-b1-r2-n2"])]
    ws += [plain(f"p{i}", n) for i, n in enumerate(f"z1-b2-r{r}-n{k}" for r in (1, 2) for k in (1, 2))]
    found = choose(segmented(2, 2), ws, nodes=grid(zones=1, blocks=2, racks=2, nodes=2))
    assert found.victims == ("a", "b")
    assert str(found.domain) == "block z1/b1"
    racks = {p: n.rsplit("-", 1)[0] for p, n in found.plan.assignments.items()}
    assert racks["default/w-0"] == racks["default/w-1"] != racks["default/w-2"] == racks["default/w-3"]


def test_a_segment_evicts_only_what_its_rack_needs() -> None:
    # One segment of 2 pods in a rack: r1 has two free nodes already (nothing to evict there is
    # cheaper than anything), r2 and r3 hold gangs.
    ws = [running("r1", rack(1, 1, 2)), running("r2", rack(2)), running("r3", rack(3))]
    found = find_victims(snapshot(ws), segmented(1, 3, "zone"), HIGH, ws)
    assert isinstance(found, Preemption), found
    assert found.victims == ("r1",)  # 3 pods: the two free nodes of r1 and one of its gang's


def test_running_members_pin_the_domain() -> None:
    # The preemptor already runs one pod in rack r2: the rack is r2 although r1 is cheaper.
    members = [pod("u-0", node_name="z1-b1-r2-n1")] + [pod(f"u-{i}") for i in range(1, 4)]
    built = build_gang(
        podgroup({"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name="urgent"),
        members,
        {"default": TOPO},
    )
    assert built.gang is not None
    ws = [running("cheap", rack(1), priority=1), running("r2", rack(2, 2, 3, 4), priority=5)]
    ws.append(running("r3", rack(3), priority=5))
    found = find_victims(snapshot(ws, members[:1]), built.gang, HIGH, ws)
    assert isinstance(found, Preemption), found
    assert found.victims == ("r2",)
    assert str(found.domain) == "rack z1/b1/r2"


def test_the_same_input_gives_the_same_victims() -> None:
    ws = [running(f"g{i}", [n], priority=i % 3) for i, n in enumerate(rack(1) + rack(2) + rack(3))]
    gang = preemptor(4, {"requiredTopologyLevel": "rack"})
    first = choose(gang, ws)
    assert all(choose(gang, ws) == first for _ in range(3))
    assert first.cost.top_priority == 2  # every rack holds a pod of priority 2


def test_one_rack_may_take_several_segments() -> None:
    # Two blocks of one rack of four nodes; two segments of two pods fit in one rack.
    nodes = grid(zones=1, blocks=2, racks=1, nodes=4)
    ws = [
        running("low", [f"z1-b1-r1-n{i}" for i in range(1, 5)]),
        running("x", [f"z1-b2-r1-n{i}" for i in range(1, 5)], 500),
    ]
    found = choose(segmented(2, 2), ws, nodes=nodes)
    assert found.victims == ("low",)
    assert str(found.domain) == "block z1/b1"
