"""Placement rules, one table per rule: required and preferred levels, compactness, domain paths,
capacity and eligibility, elasticity, determinism, pending messages.

Unless a test draws its own, the cluster is grid(zones=1, blocks=2, racks=2, nodes=4):

    zone z1
    ├── block b1: rack r1 (z1-b1-r1-n1..n4), rack r2 (z1-b1-r2-n1..n4)
    └── block b2: rack r1 (z1-b2-r1-n1..n4), rack r2 (z1-b2-r2-n1..n4)
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from extender.model.selectors import Taint
from extender.placement import ClusterSnapshot, Domain, Plan, Unplaceable, build_gang, plan
from extender.placement.state import AttemptState
from tests.builders import BLOCK, GPU, RACK, TOPO, ZONE, grid, node, placed, pod, podgroup, racks_of, run, topology

CLUSTER = grid(zones=1, blocks=2, racks=2, nodes=4)


def gang(
    n: int, constraint: dict[str, Any] | None = None, minimum: int | None = None, gpus: int = 8
) -> tuple[Any, list[Any]]:
    spec: dict[str, Any] = {"minMember": n if minimum is None else minimum}
    if constraint:
        spec["topologyConstraints"] = {"global": constraint}
    return podgroup(spec), [pod(f"p-{i}", gpus=gpus) for i in range(n)]


def full(*names: str) -> dict[str, dict[str, int]]:
    """Usage that takes every GPU of the named nodes."""
    return {n: {GPU: 8000} for n in names}


# -- required level -----------------------------------------------------------------------------


def test_required_rack_holds_all_pods_in_one_rack() -> None:
    pg, pods = gang(4, {"requiredTopologyLevel": "rack"})
    assert set(racks_of(placed(run(CLUSTER, pg, pods))).values()) == {"z1-b1-r1"}


def test_required_rack_picks_the_tightest_rack() -> None:
    # r1 of b1 has 4 free, r2 of b1 has 3 free, b2's racks 4 each: 3 pods go where 0 are left over.
    pg, pods = gang(3, {"requiredTopologyLevel": "rack"})
    got = racks_of(placed(run(CLUSTER, pg, pods, used=full("z1-b1-r2-n1"))))
    assert set(got.values()) == {"z1-b1-r2"}


def test_tightest_fit_ties_go_by_path() -> None:
    pg, pods = gang(2, {"requiredTopologyLevel": "block"})
    assert set(racks_of(placed(run(CLUSTER, pg, pods))).values()) == {"z1-b1-r1"}


def test_required_level_that_no_domain_holds_is_pending_with_the_best_found() -> None:
    pg, pods = gang(5, {"requiredTopologyLevel": "rack"})
    result = run(CLUSTER, pg, pods)
    assert isinstance(result, Unplaceable)
    assert (
        result.message == "PodGroup default/pg: 5 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; the best rack fits 4"
    )


def test_pending_message_counts_the_nodes_left_out_by_reason() -> None:
    nodes = [
        node("n1", rack="r1", ready=False),
        node("n2", rack="r1", unschedulable=True),
        node("n3", rack="r1", taints=[Taint("dedicated", "infer", "NoSchedule")]),
        node("n4", rack="r1"),
        node("n5", rack="r2"),
        node("n6", rack="r2"),
    ]
    pg, pods = gang(3, {"requiredTopologyLevel": "rack"})
    result = run(nodes, pg, pods, used=full("n6"))
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "PodGroup default/pg: 3 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; the best rack fits 1; nodes left out: "
        "2 not ready or cordoned, 1 nvidia.com/gpu, 1 taint dedicated=infer:NoSchedule"
    )


def test_nested_requirements_hold_together_and_name_the_inner_failure() -> None:
    # One zone, racks r1-r3 with 4 free nodes, r4 and r5 with 3: four segments of 4 need four
    # racks of 4 inside the zone; the zone holds 18 pods, but the fourth segment finds only 3.
    nodes = grid(zones=1, blocks=1, racks=5, nodes=4)
    used = full("z1-b1-r4-n4", "z1-b1-r5-n4")
    segs = [{"name": f"seg-{s}", "minMember": 4} for s in range(4)]
    pg = podgroup(
        {
            "subGroups": segs,
            "topologyConstraints": {
                "global": {"requiredTopologyLevel": "zone"},
                "subGroups": {f"seg-{s}": {"requiredTopologyLevel": "rack"} for s in range(4)},
            },
        }
    )
    pods = [pod(f"w-{i}", subgroup=f"seg-{i // 4}") for i in range(16)]
    result = run(nodes, pg, pods, used=used)
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "SubGroup seg-3: 4 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack inside zone z1; the best rack there fits 3; "
        "nodes left out: 2 nvidia.com/gpu"
    )


# -- domains are full paths, nodes without labels -----------------------------------------------


def test_same_rack_label_in_two_blocks_is_two_racks() -> None:
    nodes = [node(f"a{i}", block="b1", rack="r1") for i in range(2)] + [
        node(f"b{i}", block="b2", rack="r1") for i in range(2)
    ]
    pg, pods = gang(4, {"requiredTopologyLevel": "rack"})
    result = run(nodes, pg, pods)
    assert isinstance(result, Unplaceable)
    assert "the best rack fits 2" in result.message


def test_node_without_a_level_label_is_not_eligible_for_that_level() -> None:
    nodes = [node("n1"), node("n2"), node("n3", rack=None), node("n4", rack=None)]
    pg, pods = gang(4, {"requiredTopologyLevel": "rack"})
    assert isinstance(run(nodes, pg, pods), Unplaceable)
    pg, pods = gang(4, {"requiredTopologyLevel": "zone"})
    assert sorted(placed(run(nodes, pg, pods)).values()) == ["n1", "n2", "n3", "n4"]


# -- preferred level ------------------------------------------------------------------------------


def test_preferred_rack_when_one_rack_fits() -> None:
    pg, pods = gang(4, {"preferredTopologyLevel": "rack"})
    assert set(racks_of(placed(run(CLUSTER, pg, pods))).values()) == {"z1-b1-r1"}


def test_preferred_rack_climbs_to_the_block_with_fewest_racks() -> None:
    pg, pods = gang(6, {"preferredTopologyLevel": "rack"})
    got = racks_of(placed(run(CLUSTER, pg, pods)))
    assert [got[f"default/p-{i}"] for i in range(6)] == ["z1-b1-r1"] * 4 + ["z1-b1-r2"] * 2


def test_preference_never_makes_a_gang_pending() -> None:
    pg, pods = gang(12, {"preferredTopologyLevel": "rack"})
    got = racks_of(placed(run(CLUSTER, pg, pods)))
    assert sorted(set(got.values())) == ["z1-b1-r1", "z1-b1-r2", "z1-b2-r1"]


def test_required_block_preferred_rack_picks_the_block_where_one_rack_holds_it() -> None:
    # b1 holds 4 (2 + 2 free), the tighter block; b2/r2 alone holds 4, so b2 wins.
    used = full("z1-b1-r1-n1", "z1-b1-r1-n2", "z1-b1-r2-n1", "z1-b1-r2-n2", "z1-b2-r1-n1")
    pg, pods = gang(4, {"requiredTopologyLevel": "block", "preferredTopologyLevel": "rack"})
    assert set(racks_of(placed(run(CLUSTER, pg, pods, used=used))).values()) == {"z1-b2-r2"}


def test_preferred_coarser_than_required_is_ignored() -> None:
    pg, pods = gang(4, {"requiredTopologyLevel": "rack", "preferredTopologyLevel": "zone"})
    assert set(racks_of(placed(run(CLUSTER, pg, pods))).values()) == {"z1-b1-r1"}


# -- compactness ------------------------------------------------------------------------------------


def test_a_job_that_asked_for_a_block_is_not_scattered_over_its_racks() -> None:
    pg, pods = gang(4, {"requiredTopologyLevel": "block"})
    assert set(racks_of(placed(run(CLUSTER, pg, pods))).values()) == {"z1-b1-r1"}


def test_compact_inside_the_block_uses_the_tightest_rack() -> None:
    pg, pods = gang(2, {"requiredTopologyLevel": "block"})
    got = racks_of(placed(run(CLUSTER, pg, pods, used=full("z1-b1-r2-n1", "z1-b1-r2-n2"))))
    assert set(got.values()) == {"z1-b1-r2"}


def test_compactness_off_places_each_segment_on_its_own_tightest_rack() -> None:
    # Two segments of 2 pods, each required in a rack; b1's r1 has exactly 2 free nodes. Compact,
    # the gang climbs to the first level where one domain holds it (a rack of 4 free: b1-r2);
    # with compactness off each segment takes the tightest rack for itself. (The segments ask for
    # different GPUs: equal ones would be allotted racks together, the fewest, compact or not.)
    pg = podgroup(
        {
            "subGroups": [
                {"name": "w", "minSubGroup": 2},
                *({"name": f"w-{k}", "parent": "w", "minMember": 2} for k in range(2)),
            ],
            "topologyConstraints": {"subGroups": {f"w-{k}": {"requiredTopologyLevel": "rack"} for k in range(2)}},
        }
    )
    pods = [pod(f"p-{i}", subgroup=f"w-{i // 2}", gpus=8 if i < 2 else 4) for i in range(4)]
    built = build_gang(pg, pods, {TOPO.name: TOPO})
    assert built.gang is not None
    snapshot = ClusterSnapshot.of(CLUSTER, full("z1-b1-r1-n1", "z1-b1-r1-n2"))
    compact = racks_of(placed(plan(snapshot, built.gang)))
    loose = racks_of(placed(plan(snapshot, built.gang, compact=False)))
    assert set(compact.values()) == {"z1-b1-r2"}
    assert sorted(set(loose.values())) == ["z1-b1-r1", "z1-b1-r2"]


def test_plain_pods_take_the_tightest_rack_of_the_cluster_not_of_the_tightest_block() -> None:
    # b1 has 4 free nodes (2 + 2), b2 has 5 (3 + 2). Descending, b1 is the tighter block but no
    # rack of it holds 3 pods; climbing from the racks, b2's r1 holds them in one rack.
    pg, pods = gang(3)
    used = full("z1-b1-r1-n1", "z1-b1-r1-n2", "z1-b1-r2-n1", "z1-b1-r2-n2", "z1-b2-r1-n1", "z1-b2-r2-n1", "z1-b2-r2-n2")
    assert set(racks_of(placed(run(CLUSTER, pg, pods, used=used))).values()) == {"z1-b2-r1"}


def test_segments_count_only_the_room_they_can_use() -> None:
    #   block b1: r1-r3 full, r4 empty          4 free nodes, room for 2 segments of 2
    #   block b2: r1 2 free, r2-r4 1 free each  5 free nodes, room for 1 segment of 2
    # By free nodes b1 is the tighter block and the segment would open its empty rack; by the
    # room segments can use, b2 is tighter and the segment fills b2's r1 exactly.
    cluster = grid(zones=1, blocks=2, racks=4, nodes=4)
    used = full(*(f"z1-b1-r{r}-n{n}" for r in (1, 2, 3) for n in range(1, 5)))
    used |= full("z1-b2-r1-n1", "z1-b2-r1-n2", *(f"z1-b2-r{r}-n{n}" for r in (2, 3, 4) for n in (1, 2, 3)))
    pg = podgroup(
        {
            "subGroups": [{"name": "seg", "minMember": 2}],
            "topologyConstraints": {
                "global": {"requiredTopologyLevel": "block"},
                "subGroups": {"seg": {"requiredTopologyLevel": "rack"}},
            },
        }
    )
    pods = [pod(f"p-{i}", subgroup="seg") for i in range(2)]
    got = placed(run(cluster, pg, pods, used=used))
    assert sorted(got.values()) == ["z1-b2-r1-n3", "z1-b2-r1-n4"]


def test_without_constraints_pods_still_take_the_fewest_racks() -> None:
    pg, pods = gang(6)
    got = racks_of(placed(run(CLUSTER, pg, pods)))
    assert sorted(set(got.values())) == ["z1-b1-r1", "z1-b1-r2"]


# -- capacity and eligibility -------------------------------------------------------------------------


def test_capacity_is_allocatable_minus_what_runs() -> None:
    # 4-GPU pods: two per node, one on a node where 4 GPUs are taken.
    nodes = [node("n1"), node("n2")]
    pg, pods = gang(3, gpus=4)
    assert sorted(placed(run(nodes, pg, pods, used={"n1": {GPU: 4000}})).values()) == ["n1", "n2", "n2"]


def test_more_pods_than_capacity_is_pending() -> None:
    pg, pods = gang(3, gpus=4)
    result = run([node("n1")], pg, pods)
    assert isinstance(result, Unplaceable)
    assert result.message == "PodGroup default/pg: 3 pods x {cpu: 1, nvidia.com/gpu: 4} in the cluster; only 2 fit"


@pytest.mark.parametrize(
    ("bad", "spec"),
    [
        pytest.param(node("n1", ready=False), {}, id="not-ready"),
        pytest.param(node("n1", unschedulable=True), {}, id="cordoned"),
        pytest.param(node("n1", taints=[Taint("gpu", "h100", "NoSchedule")]), {}, id="taint"),
        pytest.param(node("n1", taints=[Taint("gpu", "", "NoExecute")]), {}, id="noexecute-taint"),
        pytest.param(node("n1", labels={"pool": "b"}), {"nodeSelector": {"pool": "a"}}, id="node-selector"),
        pytest.param(
            node("n1", labels={"pool": "b"}),
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                            ]
                        }
                    }
                }
            },
            id="node-affinity",
        ),
    ],
)
def test_ineligible_nodes_are_skipped(bad: Any, spec: dict[str, Any]) -> None:
    good = node("n2", labels={"pool": "a"})
    pg = podgroup({"minMember": 1})
    assert placed(run([bad, good], pg, [pod("p", spec=spec)])) == {"default/p": "n2"}


def test_tolerated_taint_and_prefer_no_schedule_do_not_block() -> None:
    nodes = [
        node("n1", taints=[Taint("gpu", "h100", "NoSchedule")]),
        node("n2", taints=[Taint("x", "", "PreferNoSchedule")]),
    ]
    spec = {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}]}
    pg = podgroup({"minMember": 2})
    got = placed(run(nodes, pg, [pod(f"p{i}", spec=spec) for i in range(2)]))
    assert sorted(got.values()) == ["n1", "n2"]


# -- minimum, optional and elastic members --------------------------------------------------------------


def test_pods_beyond_the_minimum_are_placed_when_they_fit_and_never_block() -> None:
    pg, pods = gang(6, minimum=2)
    result = run(grid(nodes=4), pg, pods)
    assert isinstance(result, Plan)
    assert len(result.assignments) == 4
    assert result.unplaced == ("default/p-4", "default/p-5")


def test_elastic_subgroup_places_what_fits_inside_one_domain_of_its_level() -> None:
    pg = podgroup(
        {
            "subGroups": [{"name": "core", "minMember": 2}, {"name": "extra", "minMember": 0}],
            "topologyConstraints": {"subGroups": {"extra": {"requiredTopologyLevel": "rack"}}},
        }
    )
    pods = [pod(f"c{i}", subgroup="core") for i in range(2)] + [pod(f"e{i}", subgroup="extra") for i in range(6)]
    result = run(CLUSTER, pg, pods)
    assert isinstance(result, Plan)
    extra = {racks_of(result.assignments)[f"default/e{i}"] for i in range(6) if f"default/e{i}" in result.assignments}
    assert len(extra) == 1
    assert len(result.unplaced) == 2


def test_elastic_subgroup_with_no_room_does_not_block_the_gang() -> None:
    pg = podgroup({"subGroups": [{"name": "core", "minMember": 2}, {"name": "extra", "minMember": 0}]})
    pods = [pod(f"c{i}", subgroup="core") for i in range(2)] + [pod("e0", subgroup="extra")]
    result = run([node("n1"), node("n2")], pg, pods)
    assert isinstance(result, Plan)
    assert result.unplaced == ("default/e0",)


def test_gang_incomplete_says_how_many_pods_exist() -> None:
    pg = podgroup({"subGroups": [{"name": "w", "minMember": 16}]})
    result = run(CLUSTER, pg, [pod(f"w{i}", subgroup="w") for i in range(3)])
    assert isinstance(result, Unplaceable)
    assert result.message == "SubGroup w: 3/16 pods present"
    alone = run(CLUSTER, podgroup({"minMember": 4}), [pod("p0")])
    assert isinstance(alone, Unplaceable)
    assert alone.message == "PodGroup default/pg: gang 1/4 pods present"


def test_gang_incomplete_names_the_subgroup_short_of_pods_not_the_total() -> None:
    # 7 pods exist and the minimum is 5, but they are in the wrong place: b has 1 of its 3
    pg = podgroup({"subGroups": [{"name": "a", "minMember": 2}, {"name": "b", "minMember": 3}]})
    pods = [pod(f"a{i}", subgroup="a") for i in range(6)] + [pod("b0", subgroup="b")]
    result = run(CLUSTER, pg, pods)
    assert isinstance(result, Unplaceable)
    assert result.message == "SubGroup b: 1/3 pods present"


# -- pods already running, determinism --------------------------------------------------------------------


def test_running_pods_pin_the_required_domain() -> None:
    pg = podgroup({"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}})
    running = pod("p-0", node_name="z1-b2-r2-n4")
    pods = [running] + [pod(f"p-{i}") for i in range(1, 4)]
    got = placed(run(CLUSTER, pg, pods, used={"z1-b2-r2-n4": {GPU: 8000, "cpu": 1000, "pods": 1000}}))
    assert set(got) == {"default/p-1", "default/p-2", "default/p-3"}
    assert {n.rsplit("-", 2)[0] for n in got.values()} == {"z1-b2"}


def test_same_input_same_plan_whatever_the_node_order() -> None:
    pg, pods = gang(10, {"requiredTopologyLevel": "zone"})
    want = placed(run(CLUSTER, pg, pods))
    for seed in range(5):
        shuffled = list(CLUSTER)
        random.Random(seed).shuffle(shuffled)
        assert placed(run(shuffled, pg, pods)) == want


# -- exclusive topology (LeaderWorkerSet) ---------------------------------------------------------


def exclusive_gang(name: str, n: int) -> tuple[Any, list[Any]]:
    pg = podgroup({"minMember": n, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name=name)
    assert pg.global_constraint is not None
    pg = replace(pg, global_constraint=replace(pg.global_constraint, exclusive=True))
    return pg, [pod(f"{name}-{i}", gpus=1, group=name) for i in range(n)]


def test_exclusive_scope_takes_a_rack_without_other_gangs_pods() -> None:
    pg, pods = exclusive_gang("lws-0", 2)
    built = build_gang(pg, pods, {"default": TOPO})
    assert built.gang is not None
    base = ClusterSnapshot.of(CLUSTER)
    # Another gang's pod runs on z1-b1-r1-n1: the tightest rack by count is no longer allowed.
    busy = np.array([n.name == "z1-b1-r1-n1" for n in base.table.nodes])
    result = plan(ClusterSnapshot(base.table, base.usage, busy=busy), built.gang)
    assert set(racks_of(placed(result)).values()) == {"z1-b1-r2"}
    # Every rack busy: pending, and the message says why.
    busy_all = np.array([n.name.endswith("-n1") for n in base.table.nodes])
    result = plan(ClusterSnapshot(base.table, base.usage, busy=busy_all), built.gang)
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "PodGroup default/lws-0: 2 pods x {cpu: 1, nvidia.com/gpu: 1} in one rack free of other gangs' pods; "
        "the best such rack fits 0"
    )


def test_blocked_nodes_are_not_used() -> None:
    pg, pods = gang(4, {"requiredTopologyLevel": "rack"})
    built = build_gang(pg, pods, {"default": TOPO})
    assert built.gang is not None
    base = ClusterSnapshot.of(CLUSTER)
    blocked = np.array([n.name.startswith("z1-b1-r1") for n in base.table.nodes])
    result = plan(ClusterSnapshot(base.table, base.usage, blocked=blocked), built.gang)
    assert set(racks_of(placed(result)).values()) == {"z1-b1-r2"}


def test_elastic_segments_are_not_confined_to_the_compact_domain_of_the_minimum() -> None:
    # The elasticity shape of KAI's segment design: 3 mandatory segments of 4 and 1 elastic one,
    # racks of 4 nodes.
    # The minimum (12 pods) packs into block b1 + one rack of b2; the elastic segment must still get
    # a whole rack of its own (b2/r2), not the leftovers next to the minimum.
    segs = [{"name": f"seg-{s}", "parent": "w", "minMember": 4 if s < 3 else 0} for s in range(4)]
    pg = podgroup(
        {
            "subGroups": [{"name": "w", "minSubGroup": 4}, *segs],
            "topologyConstraints": {"subGroups": {f"seg-{s}": {"requiredTopologyLevel": "rack"} for s in range(4)}},
        }
    )
    pods = [pod(f"w-{i}", subgroup=f"seg-{i // 4}") for i in range(16)]
    result = run(CLUSTER, pg, pods)
    assert isinstance(result, Plan)
    assert result.unplaced == ()
    got = racks_of(result.assignments)
    assert len({got[f"default/w-{i}"] for i in range(12, 16)}) == 1
    assert not result.minimum & {f"default/w-{i}" for i in range(12, 16)}


# -- exact plans where only one answer is right ----------------------------------------------------


def test_the_tightest_rack_takes_the_pods_in_order_on_its_free_nodes() -> None:
    # Only rack z1-b1-r2 has exactly 3 free nodes; one 8-GPU pod per node, in member order.
    pg, pods = gang(3, {"requiredTopologyLevel": "rack"})
    assert placed(run(CLUSTER, pg, pods, used=full("z1-b1-r2-n1"))) == {
        "default/p-0": "z1-b1-r2-n2",
        "default/p-1": "z1-b1-r2-n3",
        "default/p-2": "z1-b1-r2-n4",
    }


def test_a_gang_of_one_rack_fills_the_first_rack_by_path() -> None:
    pg, pods = gang(4, {"requiredTopologyLevel": "rack"})
    assert placed(run(CLUSTER, pg, pods)) == {f"default/p-{i}": f"z1-b1-r1-n{i + 1}" for i in range(4)}


def test_half_node_pods_share_the_partly_used_node_first() -> None:
    nodes = [node("n1"), node("n2")]
    pg, pods = gang(3, gpus=4)
    got = placed(run(nodes, pg, pods, used={"n1": {GPU: 4000}}))
    assert got == {"default/p-0": "n2", "default/p-1": "n2", "default/p-2": "n1"}


# -- attempts on one shared tree stay isolated -------------------------------------------------------


def test_two_attempts_on_one_shared_tree_do_not_see_each_other() -> None:
    snapshot = ClusterSnapshot.of(CLUSTER)
    topologies = {TOPO.name: TOPO}
    first_pg, first_pods = gang(4, {"requiredTopologyLevel": "rack"})
    second_pg, second_pods = gang(4, {"requiredTopologyLevel": "rack"})
    first = build_gang(first_pg, first_pods, topologies).gang
    second = build_gang(second_pg, second_pods, topologies).gang
    assert first is not None
    assert second is not None
    alone = placed(plan(ClusterSnapshot.of(CLUSTER), second))
    tree = snapshot.table.tree(TOPO)
    starts = [li.starts.copy() for li in tree.levels]
    placed(plan(snapshot, first))
    assert snapshot.table.tree(TOPO) is tree  # the same tree served both attempts...
    assert placed(plan(snapshot, second)) == alone  # ...and the first left nothing in it
    assert all((li.starts == s).all() for li, s in zip(tree.levels, starts, strict=True))


def test_a_rolled_back_attempt_leaves_its_counts_and_pins_as_they_were() -> None:
    snapshot = ClusterSnapshot.of(CLUSTER)
    pg, pods = gang(2)
    built = build_gang(pg, pods, {TOPO.name: TOPO}).gang
    assert built is not None
    tree = snapshot.table.tree(TOPO)
    one, other = AttemptState(snapshot, tree, built.shapes), AttemptState(snapshot, tree, built.shapes)
    before = [c.copy() for c in one.counts[0]]
    cp = one.checkpoint()
    one.pin(0, tree.root, Domain(1, 0))
    one.place(0, 0, "default/p-0")
    assert one.counts[0][0][0] == before[0][0] - 1
    assert one.pins
    assert [c.tolist() for c in other.counts[0]] == [c.tolist() for c in before]  # not shared
    one.rollback(cp)
    assert [c.tolist() for c in one.counts[0]] == [c.tolist() for c in before]
    assert not one.pins
    assert not one.where


# -- siblings: a child that fails after its siblings were placed ----------------------------------


def test_a_sibling_that_fails_after_the_others_is_retried_first() -> None:
    # s0 first takes n0 (the tightest node holding both its pods), which leaves no node for s1's
    # 8-GPU pod; moving s1 first finds the placement (s1 on n0, one s0 pod on n1).
    nodes = [node("n0"), node("n1")]
    spec = {
        "minMember": 2,
        "subGroups": [{"name": "s0", "minMember": 1}, {"name": "s1", "minMember": 1}],
        "topologyConstraints": {"subGroups": {"s0": {"requiredTopologyLevel": "node"}}},
    }
    pods = [pod("s0-0", gpus=4, subgroup="s0"), pod("s0-1", gpus=4, subgroup="s0"), pod("s1-0", subgroup="s1")]
    got = placed(run(nodes, podgroup(spec), pods, used={"n1": {GPU: 4000}}))
    assert got["default/s1-0"] == "n0"
    assert set(got) == {"default/s1-0", "default/s0-0"}
    assert got["default/s0-0"] == "n1"


@pytest.mark.parametrize("outer", [None, {"requiredTopologyLevel": "block"}, {"requiredTopologyLevel": "zone"}])
def test_a_subgroup_preference_outranks_the_parents_compactness(outer: dict[str, str] | None) -> None:
    # No rack holds all 8 pods, so compactness alone takes the tightest block, b1 (4 + 4 free);
    # there `a`, which prefers one rack, would span two racks. b2 (6 + 3 free) holds `a` in one.
    nodes = [node(f"{b}-{r}", "z1", b, r) for b in ("b1", "b2") for r in ("r1", "r2")]
    used = {"b1-r1": {GPU: 4000}, "b1-r2": {GPU: 4000}, "b2-r1": {GPU: 2000}, "b2-r2": {GPU: 5000}}
    spec = {
        "minMember": 2,
        "subGroups": [{"name": "a", "minMember": 6}, {"name": "b", "minMember": 2}],
        "topologyConstraints": {"subGroups": {"a": {"preferredTopologyLevel": "rack"}}},
    }
    if outer:
        spec["topologyConstraints"]["global"] = outer
    pods = [pod(f"a-{i}", gpus=1, subgroup="a") for i in range(6)] + [
        pod(f"b-{i}", gpus=1, subgroup="b") for i in range(2)
    ]
    got = placed(run(nodes, podgroup(spec), pods, used=used))
    assert {got[f"default/a-{i}"] for i in range(6)} == {"b2-r1"}
    assert {got["default/b-0"], got["default/b-1"]} == {"b2-r2"}


# -- nested constraints -----------------------------------------------------------------------------


def test_a_subgroup_constraint_coarser_than_a_required_one_above_it_is_a_warning_naming_both() -> None:
    spec = {
        "minMember": 1,
        "subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "parent": "a", "minMember": 1}],
        "topologyConstraints": {
            "global": {"requiredTopologyLevel": "block"},
            "subGroups": {
                "a": {"requiredTopologyLevel": "rack"},
                "b": {"requiredTopologyLevel": "zone", "preferredTopologyLevel": "block"},
            },
        },
    }
    built = build_gang(podgroup(spec), [pod("b-0", subgroup="b")], {TOPO.name: TOPO})
    assert built.gang is not None
    field = "spec.topologyConstraints.subGroups"
    assert built.warnings == (
        f"{field}.b.requiredTopologyLevel='zone' cannot take effect: it is coarser than"
        f" {field}.a.requiredTopologyLevel='rack' above it, which already holds the SubGroup in one rack",
        f"{field}.b.preferredTopologyLevel='block' cannot take effect: it is coarser than"
        f" {field}.a.requiredTopologyLevel='rack' above it, which already holds the SubGroup in one rack",
    )
    pg = podgroup({**spec, "topologyConstraints": {"subGroups": {"a": {"requiredTopologyLevel": "rack"}}}})
    assert build_gang(pg, [pod("b-0", subgroup="b")], {TOPO.name: TOPO}).warnings == ()


# -- messages ---------------------------------------------------------------------------------------


def test_a_level_no_node_carries_says_which_label_is_missing() -> None:
    rows = topology("rows", ("example.com/topology-row", ZONE))
    pg = podgroup({"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "row"}}})
    result = run(CLUSTER, pg, [pod("p-0"), pod("p-1")], topologies=(rows,))
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "PodGroup default/pg: 2 pods x {cpu: 1, nvidia.com/gpu: 8} in one row;"
        " no node has label example.com/topology-row"
    )


def test_a_replacement_pod_whose_pinned_domain_is_full_says_so() -> None:
    pg = podgroup({"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}})
    running = [pod(f"p-{i}", node_name=f"z1-b1-r1-n{i + 1}") for i in range(3)]
    rack = [f"z1-b1-r1-n{i}" for i in range(1, 5)]
    result = run(CLUSTER, pg, [*running, pod("p-3")], used=full(*rack))
    assert isinstance(result, Unplaceable)
    assert result.message.startswith(
        "PodGroup default/pg: 1 pod x {cpu: 1, nvidia.com/gpu: 8} in rack z1/b1/r1, where its running pods hold it;"
        " it has room for 0"
    )


# -- a required and a preferred level on one constraint ---------------------------------------------

# zone z1: five blocks of one single-node rack each
# zone z2: block b1 of five single-node racks, block b2 of uneven racks (3 + 2 nodes)
# The tightest fit and the path both favour the single-node domains; the preference does not.
UNEVEN = [
    *(node(f"z1-b{b}-r1-n1", "z1", f"b{b}", "r1") for b in range(1, 6)),
    *(node(f"z2-b1-r{r}-n1", "z2", "b1", f"r{r}") for r in range(1, 6)),
    *(node(f"z2-b2-r1-n{n}", "z2", "b2", "r1") for n in range(1, 4)),
    *(node(f"z2-b2-r2-n{n}", "z2", "b2", "r2") for n in range(1, 3)),
]
PAIRS = [("zone", "block"), ("zone", "rack"), ("block", "rack")]


@pytest.mark.parametrize(("required", "preferred"), PAIRS)
def test_a_preference_beside_a_requirement_chooses_as_the_same_preference_on_a_child(
    required: str, preferred: str
) -> None:
    # Same meaning, same answer: the required domain is the one where the preferred level holds
    # the pods in the fewest domains, and inside it the pods take those fewest domains.
    level = {"zone": ZONE, "block": BLOCK, "rack": RACK}
    pods = [pod(f"p-{i}", subgroup="all") for i in range(5)]
    both = {"requiredTopologyLevel": level[required], "preferredTopologyLevel": level[preferred]}
    beside = podgroup({"minMember": 5, "topologyConstraints": {"global": both}})
    beside_on_child = podgroup(
        {"subGroups": [{"name": "all", "minMember": 5}], "topologyConstraints": {"subGroups": {"all": both}}}
    )
    on_child = podgroup(
        {
            "subGroups": [{"name": "all", "minMember": 5}],
            "topologyConstraints": {
                "global": {"requiredTopologyLevel": level[required]},
                "subGroups": {"all": {"preferredTopologyLevel": level[preferred]}},
            },
        }
    )
    want = placed(run(UNEVEN, on_child, pods))
    assert placed(run(UNEVEN, beside, [pod(f"p-{i}") for i in range(5)])) == want
    assert placed(run(UNEVEN, beside_on_child, pods)) == want
    # The fewest preferred domains: one block of z2 holds all 5; z2's b2 holds them in 2 racks.
    domain = {"block": lambda n: n.split("-r")[0], "rack": lambda n: n.rsplit("-", 1)[0]}[preferred]
    assert len({domain(n) for n in want.values()}) == {"block": 1, "rack": 2}[preferred], want
