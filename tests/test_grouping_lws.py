"""LeaderWorkerSet (the LWS subgroup KEP): one PodGroup per group, exclusive topology, and subgroups with
subGroupSize, including the shift of worker indexes when the leader requests no accelerator.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.grouping_builders import group, lws, members, only, pods_of, render, template

EXCLUSIVE = {"leaderworkerset.sigs.k8s.io/exclusive-topology": "block"}
SUBGROUP = {"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}
GPU_LEADER, CPU_LEADER = template(gpus=1), template(gpus=0)

CASES: list[tuple[str, dict[str, Any], list[str], dict[str, list[str]]]] = [
    (
        "exclusive-topology-is-the-global-constraint",
        lws(1, 3, annotations=EXCLUSIVE),
        ["ml/leaderworkerset-llm-0 sub=2 required=block exclusive", "  leader min=1", "  workers min=2"],
        {"leader": ["llm-0"], "workers": ["llm-0-1", "llm-0-2"]},
    ),
    (
        "exclusive-with-a-finer-kai-preference",
        lws(1, 2, annotations={**EXCLUSIVE, "kai.scheduler/topology-preferred-placement": "rack"}),
        ["ml/leaderworkerset-llm-0 sub=2 required=block preferred=rack exclusive", "  leader min=1", "  workers min=1"],
        {"leader": ["llm-0"], "workers": ["llm-0-1"]},
    ),
    (
        # size 8, subGroupSize 4, the leader has a GPU: subgroup = worker-index / 4
        "subgroups-size-divisible-leader-with-accelerator",
        lws(1, 8, annotations={**EXCLUSIVE, **SUBGROUP}, sub_group_size=4, leader=GPU_LEADER),
        [
            "ml/leaderworkerset-llm-0 sub=2 required=block exclusive",
            "  subgroup-0 min=4 required=rack exclusive",
            "  subgroup-1 min=4 required=rack exclusive",
        ],
        {
            "subgroup-0": ["llm-0", "llm-0-1", "llm-0-2", "llm-0-3"],
            "subgroup-1": ["llm-0-4", "llm-0-5", "llm-0-6", "llm-0-7"],
        },
    ),
    (
        # the LWS subgroup KEP: the leader requests no accelerator, so subgroup = (worker-index - 1) / 4 and
        # the leader shares subgroup 0 with four workers
        "subgroups-leader-without-accelerator-shifts-worker-indexes",
        lws(1, 9, annotations=SUBGROUP, sub_group_size=4, leader=CPU_LEADER),
        [
            "ml/leaderworkerset-llm-0 sub=2",
            "  subgroup-0 min=5 required=rack exclusive",
            "  subgroup-1 min=4 required=rack exclusive",
        ],
        {
            "subgroup-0": ["llm-0", "llm-0-1", "llm-0-2", "llm-0-3", "llm-0-4"],
            "subgroup-1": ["llm-0-5", "llm-0-6", "llm-0-7", "llm-0-8"],
        },
    ),
    (
        "subgroups-shift-even-when-the-size-divides",
        lws(1, 8, annotations=SUBGROUP, sub_group_size=4, leader=CPU_LEADER),
        [
            "ml/leaderworkerset-llm-0 sub=2",
            "  subgroup-0 min=5 required=rack exclusive",
            "  subgroup-1 min=3 required=rack exclusive",
        ],
        {
            "subgroup-0": ["llm-0", "llm-0-1", "llm-0-2", "llm-0-3", "llm-0-4"],
            "subgroup-1": ["llm-0-5", "llm-0-6", "llm-0-7"],
        },
    ),
    (
        # LWS's own rule: size - 1 divisible (and size not) makes the leader the extra pod
        "subgroups-leader-is-the-extra-pod",
        lws(1, 9, annotations=SUBGROUP, sub_group_size=4, leader=GPU_LEADER),
        [
            "ml/leaderworkerset-llm-0 sub=2",
            "  subgroup-0 min=5 required=rack exclusive",
            "  subgroup-1 min=4 required=rack exclusive",
        ],
        {
            "subgroup-0": ["llm-0", "llm-0-1", "llm-0-2", "llm-0-3", "llm-0-4"],
            "subgroup-1": ["llm-0-5", "llm-0-6", "llm-0-7", "llm-0-8"],
        },
    ),
    (
        "subgroups-leader-excluded",
        lws(1, 9, annotations=SUBGROUP, sub_group_size=4, policy_type="LeaderExcluded"),
        [
            "ml/leaderworkerset-llm-0 sub=3",
            "  leader min=1",
            "  subgroup-0 min=4 required=rack exclusive",
            "  subgroup-1 min=4 required=rack exclusive",
        ],
        {
            "leader": ["llm-0"],
            "subgroup-0": ["llm-0-1", "llm-0-2", "llm-0-3", "llm-0-4"],
            "subgroup-1": ["llm-0-5", "llm-0-6", "llm-0-7", "llm-0-8"],
        },
    ),
]


@pytest.mark.parametrize(("workload", "tree", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_leaderworkerset_tree_and_members(
    workload: dict[str, Any], tree: list[str], want: dict[str, list[str]]
) -> None:
    g = only(group(workload))
    assert render(g) == tree
    assert members(g) == want
    assert g.warnings == ()


def test_subgroup_index_matches_the_label_lws_sets() -> None:
    # the synthesized pods carry leaderworkerset.sigs.k8s.io/subgroup-index as LWS computes it
    workload = lws(1, 9, annotations=SUBGROUP, sub_group_size=4, leader=CPU_LEADER)
    g = only(group(workload))
    pods, _ = pods_of(workload)
    for p in pods:
        assert g.subgroup_of[p.key] == f"subgroup-{p.labels['leaderworkerset.sigs.k8s.io/subgroup-index']}"


def test_subgroup_topology_without_subgroup_size_is_ignored_with_a_warning() -> None:
    g = only(group(lws(1, 4, annotations=SUBGROUP)))
    assert render(g) == ["ml/leaderworkerset-llm-0 sub=2", "  leader min=1", "  workers min=3"]
    assert g.warnings == (
        "LeaderWorkerSet ml/llm: leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology=rack ignored:"
        " no spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize",
    )


def test_template_annotations_are_ignored_when_subgroups_cut_the_group() -> None:
    g = only(group(lws(1, 8, annotations=SUBGROUP, sub_group_size=4, worker_ann={"kai.scheduler/segment-size": "2"})))
    assert g.warnings == (
        "LeaderWorkerSet ml/llm spec.leaderWorkerTemplate.workerTemplate: kai.scheduler/segment-size ignored:"
        " leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology cuts the group into subgroups",
    )


def test_exclusive_topology_conflicting_with_kai_required_placement() -> None:
    g = only(group(lws(1, 2, annotations={**EXCLUSIVE, "kai.scheduler/topology-required-placement": "zone"})))
    assert [str(e) for e in g.errors] == [
        "LeaderWorkerSet ml/llm: metadata.annotations[kai.scheduler/topology-required-placement]:"
        " required 'zone' conflicts with 'block'"
        " from metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topology]"
    ]


@pytest.mark.parametrize("policy", [None, "LeaderExcluded"])
def test_pods_carry_the_subgroup_key_the_lws_webhook_sets_and_group_cleanly(policy: str | None) -> None:
    # the webhook's value: sha1("<leader pod name>/<subgroup index>"), the same on every pod of a subgroup
    workload = lws(2, 9, annotations=SUBGROUP, sub_group_size=4, policy_type=policy)
    pods, _ = pods_of(workload)
    result = group(workload)
    for p in pods:
        index = p.labels.get("leaderworkerset.sigs.k8s.io/subgroup-index")
        leader = p.name if p.labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0" else p.name.rsplit("-", 1)[0]
        if index is None:  # the leader outside every subgroup (LeaderExcluded)
            assert policy == "LeaderExcluded"
            assert "leaderworkerset.sigs.k8s.io/subgroup-key" not in p.labels
            continue
        want = hashlib.sha1(f"{leader}/{index}".encode()).hexdigest()
        assert p.labels["leaderworkerset.sigs.k8s.io/subgroup-key"] == want
        g = result.groups[result.pod_group[p.key]]
        assert g.subgroup_of[p.key] == f"subgroup-{index}"
    assert all(not g.errors and not g.warnings for g in result.groups.values())
