"""Worked examples 1-4 of KAI's hierarchical PodGroup design and story 2 of KAI's segment design,
with exact plans.

The cluster (grid(zones=2, blocks=2, racks=2, nodes=4), 8 GPUs per node):

    zone z1                               zone z2
    ├── block b1                          ├── block b1
    │   ├── rack r1: z1-b1-r1-n1..n4      │   ├── rack r1: z2-b1-r1-n1..n4
    │   └── rack r2: z1-b1-r2-n1..n4      │   └── rack r2: ...
    └── block b2                          └── block b2
        ├── rack r1: z1-b2-r1-n1..n4          ├── rack r1
        └── rack r2: z1-b2-r2-n1..n4          └── rack r2
"""

from __future__ import annotations

from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec
from extender.placement import Plan
from tests.builders import decode_prefill_pods, decode_prefill_spec, grid, placed, pod, podgroup, racks_of, run

CLUSTER = grid(zones=2, blocks=2, racks=2, nodes=4)


def test_example_1_two_subgroups_each_in_one_rack() -> None:
    pg = podgroup(
        {
            "minMember": 2,
            "subGroups": [{"name": "decode", "minMember": 4}, {"name": "prefill", "minMember": 1}],
            "topologyConstraints": {
                "subGroups": {"decode": {"requiredTopologyLevel": "rack"}, "prefill": {"requiredTopologyLevel": "rack"}}
            },
        }
    )
    pods = [pod(f"decode-{i}", subgroup="decode") for i in range(4)] + [pod("prefill-0", subgroup="prefill")]
    assert placed(run(CLUSTER, pg, pods)) == {
        "default/decode-0": "z1-b1-r1-n1",
        "default/decode-1": "z1-b1-r1-n2",
        "default/decode-2": "z1-b1-r1-n3",
        "default/decode-3": "z1-b1-r1-n4",
        "default/prefill-0": "z1-b1-r2-n1",
    }


def example_2() -> tuple[PodGroupSpec, list[PodInfo]]:
    return podgroup(decode_prefill_spec()), decode_prefill_pods()


def test_example_2_leaders_and_workers_share_a_block_per_part() -> None:
    pg, pods = example_2()
    got = racks_of(placed(run(CLUSTER, pg, pods)))
    assert got == {
        **{f"default/decode-worker-{i}": "z1-b1-r1" for i in range(4)},
        "default/decode-leader-0": "z1-b1-r2",
        **{f"default/prefill-worker-{i}": "z1-b2-r1" for i in range(4)},
        "default/prefill-leader-0": "z1-b2-r2",
    }


def test_example_2_set_constraint_holds_when_blocks_are_fragmented() -> None:
    # Each block of zone z1 has room for 4 pods only (2 nodes per rack used): a part needs 5 in
    # one block, so z1 cannot hold either part; the set constraint moves each part to z2's blocks.
    used = {n.name: {"nvidia.com/gpu": 8000} for n in CLUSTER if n.name.startswith("z1") and n.name[-1] in "12"}
    pg, pods = example_2()
    got = racks_of(placed(run(CLUSTER, pg, pods, used=used)))
    blocks = {part: {got[k].rsplit("-", 1)[0] for k in got if part in k} for part in ("decode", "prefill")}
    assert blocks == {"decode": {"z2-b1"}, "prefill": {"z2-b2"}}


def replicas(n: int, size: int, minimum: int) -> tuple[object, list[object]]:
    pg = podgroup(
        {"minMember": minimum, "subGroups": [{"name": f"replica-{r}", "minMember": size} for r in range(1, n + 1)]}
    )
    pods = [pod(f"r{r}-{i}", subgroup=f"replica-{r}") for r in range(1, n + 1) for i in range(size)]
    return pg, pods


def test_example_3_all_replicas_when_they_fit() -> None:
    pg, pods = replicas(3, 3, 2)
    result = run(CLUSTER, pg, pods)  # type: ignore[arg-type]
    assert len(placed(result)) == 9


def test_example_3_third_replica_whole_or_not_at_all() -> None:
    # 8 free nodes: two replicas of 3 take 6; the third needs 3 and only 2 are left, so none of it runs.
    small = grid(zones=1, blocks=1, racks=2, nodes=4)
    pg, pods = replicas(3, 3, 2)
    result = run(small, pg, pods)  # type: ignore[arg-type]
    assert isinstance(result, Plan)
    assert sorted(result.assignments) == sorted(f"default/r{r}-{i}" for r in (1, 2) for i in range(3))
    assert result.unplaced == ("default/r3-0", "default/r3-1", "default/r3-2")


def test_example_3_pending_when_the_minimum_does_not_fit() -> None:
    small = grid(zones=1, blocks=1, racks=1, nodes=4)
    pg, pods = replicas(3, 3, 2)
    result = run(small, pg, pods)  # type: ignore[arg-type]
    assert not isinstance(result, Plan)
    assert result.message == ("SubGroup replica-2: 3 pods x {cpu: 1, nvidia.com/gpu: 8} in the cluster; only 1 fit")


def test_example_4_one_replica_of_leaders_and_workers_is_enough() -> None:
    subgroups = []
    pods = []
    for r in (1, 2):
        subgroups += [
            {"name": f"replica-{r}", "minMember": 2},
            {"name": f"leaders-{r}", "parent": f"replica-{r}", "minMember": 1},
            {"name": f"workers-{r}", "parent": f"replica-{r}", "minMember": 3},
        ]
        pods += [pod(f"leader-{r}", subgroup=f"leaders-{r}")] + [
            pod(f"worker-{r}-{i}", subgroup=f"workers-{r}") for i in range(3)
        ]
    pg = podgroup({"minMember": 1, "subGroups": subgroups})
    five = grid(zones=1, blocks=1, racks=1, nodes=5)
    result = run(five, pg, pods)
    assert isinstance(result, Plan)
    assert sorted(result.assignments) == ["default/leader-1", *(f"default/worker-1-{i}" for i in range(3))]
    assert len(placed(run(CLUSTER, pg, pods))) == 8


def test_story_2_tfjob_segments_on_racks_inside_one_zone() -> None:
    segments = [{"name": f"worker-{s}", "parent": "worker", "minMember": 4} for s in range(4)]
    pg = podgroup(
        {
            "subGroups": [
                {"name": "chief", "minMember": 1},
                {"name": "ps", "minMember": 2},
                {"name": "worker", "minMember": 4},
                *segments,
            ],
            "topologyConstraints": {
                "global": {"requiredTopologyLevel": "zone"},
                "subGroups": {f"worker-{s}": {"requiredTopologyLevel": "rack"} for s in range(4)},
            },
        }
    )
    pods = [pod("chief-0", gpus=0, subgroup="chief"), *(pod(f"ps-{i}", gpus=0, subgroup="ps") for i in range(2))]
    pods += [pod(f"worker-{i}", subgroup=f"worker-{i // 4}") for i in range(16)]
    result = run(CLUSTER, pg, pods)
    got = racks_of(placed(result))
    for s in range(4):
        assert len({got[f"default/worker-{i}"] for i in range(4 * s, 4 * s + 4)}) == 1, f"segment {s} split"
    assert {r.split("-")[0] for r in got.values()} == {"z1"}
    assert isinstance(result, Plan)
    assert str(result.domains["default/pg"]) == "zone z1"
    assert str(result.domains["worker-0"]) == "rack z1/b1/r1"
