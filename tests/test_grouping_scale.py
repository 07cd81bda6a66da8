"""Grouping is linear in the number of SubGroups: a gang of 20,000 SubGroups (the limit: a Job's
own and 19,999 segments) is grouped in work proportional to 20,000, counted as reads of
`SubGroupSpec.parent` (how the tree is walked)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.grouping import ObjectIndex, group_pods
from extender.model.limits import MAX_SUBGROUPS
from extender.model.podgroup import SubGroupSpec
from tests.grouping_builders import job, owned_pod

SEGMENTS = MAX_SUBGROUPS - 1  # the most a valid gang can have: the Job's own SubGroup counts too
READS_PER_SUBGROUP = 10  # a walk of the tree reads each SubGroup's parent a few times, not n times


class _Budget(Exception):
    pass


def _count_parent_reads(monkeypatch: pytest.MonkeyPatch, budget: int) -> list[int]:
    """Count reads of SubGroupSpec.parent; stop with _Budget once `budget` is spent, so that a
    quadratic walk fails in a moment instead of running for minutes."""
    slot = SubGroupSpec.__dict__["parent"]
    reads = [0]

    def get(sg: SubGroupSpec) -> Any:
        reads[0] += 1
        if reads[0] > budget:
            raise _Budget(f"more than {budget} reads of SubGroupSpec.parent")
        return slot.__get__(sg, SubGroupSpec)

    def set_(sg: SubGroupSpec, value: str | None) -> None:
        slot.__set__(sg, value)

    monkeypatch.setattr(SubGroupSpec, "parent", property(get, set_))
    return reads


def _group_segments(segments: int) -> int:
    """Group a Job of `segments` pods cut into segments of one pod; return its SubGroup count."""
    seg = {"kai.scheduler/segment-size": "1", "kai.scheduler/segment-topology-required-placement": "rack"}
    workload = job(parallelism=segments, ann=seg, annotations={"kai.scheduler/topology": "default"})
    labels = {"batch.kubernetes.io/job-completion-index": "0"}
    pod = owned_pod("batch-0", ("batch/v1", "Job", "batch"), labels=labels)
    result = group_pods([pod], ObjectIndex([workload]), {})
    (g,) = result.groups.values()
    assert g.valid, g.errors
    assert g.podgroup is not None
    assert g.subgroup_of == {pod.key: "job-seg-0"}
    return len(g.podgroup.subgroups)


def test_grouping_20000_subgroups_reads_each_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = READS_PER_SUBGROUP * (SEGMENTS + 1)
    reads = _count_parent_reads(monkeypatch, budget)
    assert _group_segments(SEGMENTS) == SEGMENTS + 1  # the Job's SubGroup and its segments
    assert 0 < reads[0] <= budget


def test_the_work_per_subgroup_does_not_grow_with_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = _count_parent_reads(monkeypatch, READS_PER_SUBGROUP * (SEGMENTS + 1))
    _group_segments(SEGMENTS // 2)
    half = reads[0]
    reads[0] = 0
    _group_segments(SEGMENTS)
    assert reads[0] <= 2 * half + READS_PER_SUBGROUP  # doubling the SubGroups at most doubles the reads


def test_a_gang_of_many_pods_is_grouped_without_comparing_pods_pairwise(monkeypatch: pytest.MonkeyPatch) -> None:
    # 5,000 pods of one Job: sorting them out once is linear; comparing each with the others
    # (a `pod not in kept` test) took minutes. Counted as ClaimedPod comparisons, with a budget.
    from extender.grouping.grouper import ClaimedPod

    pods = 5_000
    compared = [0]
    eq = ClaimedPod.__eq__

    def counted(a: ClaimedPod, b: object) -> bool:
        compared[0] += 1
        if compared[0] > pods:
            raise _Budget(f"more than {pods} ClaimedPod comparisons")
        return eq(a, b)

    monkeypatch.setattr(ClaimedPod, "__eq__", counted)
    workload = job(parallelism=pods, indexed=False)
    members = [owned_pod(f"batch-{i}", ("batch/v1", "Job", "batch")) for i in range(pods)]
    result = group_pods(members, ObjectIndex([workload]), {})
    (g,) = result.groups.values()
    assert g.valid, g.errors
    assert len(g.subgroup_of) == pods
