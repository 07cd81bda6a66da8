"""The grouper's output through build_gang and the engine: KAI's segment design's story 2 from synthesized
pods, every example workload placed on a 64-node cluster, and unknown levels reported by
build_gang naming the annotation.

Story 2's cluster, grid(zones=2, blocks=1, racks=4, nodes=4), 8 GPUs a node:

    zone z1: block b1: racks r1..r4 (z1-b1-r1-n1 .. z1-b1-r4-n4)   r1's first node is full
    zone z2: block b1: racks r1..r4 (z2-b1-r1-n1 .. z2-b1-r4-n4)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from extender.grouping import GroupingResult, ObjectIndex, group_pods, synthesize
from extender.model.pod import PodInfo, parse_pod
from extender.placement import ClusterSnapshot, Plan, build_gang, plan
from tests.builders import GPU, TOPO, grid, racks_of
from tests.grouping_builders import group, group_file, jobset, kubeflow, pods_of, template

_WORKLOADS = Path(__file__).parent.parent / "examples" / "workloads"
# A file per workload, or a folder for one that comes with the objects its operator creates (Grove)
EXAMPLES = sorted([*_WORKLOADS.glob("*.yaml"), *(p for p in _WORKLOADS.iterdir() if p.is_dir())])
STORY_2 = kubeflow(
    "TFJob",
    {
        "Chief": 1,
        "PS": 2,
        "Worker": (
            16,
            {"kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": "rack"},
        ),
    },
    annotations={"kai.scheduler/topology": "default", "kai.scheduler/topology-required-placement": "zone"},
)
for rtype in ("Chief", "PS"):
    STORY_2["spec"]["tfReplicaSpecs"][rtype]["template"] = template(gpus=0)
for_workers = STORY_2["spec"]["tfReplicaSpecs"]["Worker"]["template"]
for_workers["spec"]["containers"][0]["resources"]["requests"][GPU] = "8"


def place(result: GroupingResult, pods: list[PodInfo], nodes: int = 0, **used: dict[str, int]) -> dict[str, Plan]:
    cluster = grid(zones=2, blocks=1, racks=4, nodes=4) if not nodes else grid(zones=2, blocks=2, racks=2, nodes=8)
    snapshot = ClusterSnapshot.of(cluster, used)
    plans: dict[str, Plan] = {}
    for key, g in result.groups.items():
        assert g.podgroup is not None, g.errors
        members = [p for p in pods if result.pod_group.get(p.key) == key]
        built = build_gang(g.podgroup, members, {"default": TOPO}, order=g.order, subgroup_of=g.subgroup_of)
        assert built.gang is not None, built.errors
        assert not built.stray
        got = plan(snapshot, built.gang)
        assert isinstance(got, Plan), got
        plans[key] = got
    return plans


def test_story_2_each_segment_in_one_rack_all_in_one_zone() -> None:
    s = synthesize(STORY_2)
    pods = [parse_pod(p) for p in s.pods]
    result = group_pods(pods, ObjectIndex([STORY_2]), {})
    # z1's rack r1 has a full node, so z1 cannot hold four whole rack segments: the job goes to z2
    got = place(result, pods, **{"z1-b1-r1-n1": {GPU: 8000}})["ml/tfjob-train"].assignments
    assert len(got) == 19
    assert {node.split("-")[0] for node in got.values()} == {"z2"}
    racks = racks_of(got)
    g = result.groups["ml/tfjob-train"]
    by_segment: dict[str, set[str]] = {}
    for pod, leaf in g.subgroup_of.items():
        if leaf.startswith("worker-seg-"):
            by_segment.setdefault(leaf, set()).add(racks[pod])
    assert sorted(by_segment) == [f"worker-seg-{k}" for k in range(4)]
    assert all(len(r) == 1 for r in by_segment.values()), by_segment
    assert len(set().union(*by_segment.values())) == 4  # four different racks


def test_story_2_segment_members_follow_the_replica_index() -> None:
    g = group(STORY_2).groups["ml/tfjob-train"]
    assert Counter(g.subgroup_of.values()) == {
        "chief": 1,
        "ps": 2,
        "worker-seg-0": 4,
        "worker-seg-1": 4,
        "worker-seg-2": 4,
        "worker-seg-3": 4,
    }
    assert g.subgroup_of["ml/train-worker-13"] == "worker-seg-3"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_groups_cleanly_and_places(path: Path) -> None:
    result, pods = group_file(path)
    assert result.groups
    assert not result.waiting
    assert all(not g.warnings and not g.errors for g in result.groups.values())
    assert set(result.pod_group) == {p.key for p in pods}
    place(result, pods, nodes=64)


def test_unknown_level_is_reported_by_build_gang_naming_the_annotation() -> None:
    w = kubeflow(
        "TFJob",
        {
            "Worker": (
                4,
                {"kai.scheduler/segment-size": "2", "kai.scheduler/segment-topology-required-placement": "rak"},
            )
        },
        annotations={"kai.scheduler/topology": "default"},
    )
    g = group(w).groups["ml/tfjob-train"]
    assert g.podgroup is not None
    built = build_gang(g.podgroup, [], {"default": TOPO}, subgroup_of=g.subgroup_of)
    assert built.gang is None
    # said once for both segments, on the TFJob's template where it was written
    assert [str(e) for e in built.errors] == [
        "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.metadata.annotations"
        "[kai.scheduler/segment-topology-required-placement]:"
        " 'rak' is not a level of Topology default; did you mean rack?"
    ]


def test_a_jobsets_leader_and_workers_jobs_sharing_a_podset_group_land_in_one_rack() -> None:
    # Kueue's podset-group-name on a leader Job's and a workers Job's templates (one PodSet each,
    # as Kueue reads a JobSet): one group, one rack for all 7 pods, as an LWS leader and its workers.
    both = {"kueue.x-k8s.io/podset-group-name": "lw", "kueue.x-k8s.io/podset-required-topology": "rack"}
    workload = jobset([("leader", 1, 1), ("workers", 2, 3)], ann={"leader": both, "workers": both})
    made, _ = pods_of(workload)
    result = group(workload)
    g = result.groups["ml/jobset-js"]
    assert g.podgroup is not None, g.errors
    assert [s.subgroups for s in g.podgroup.subgroup_sets] == [("leader", "workers")]
    got = place(result, made)["ml/jobset-js"].assignments
    assert len(got) == 7
    assert len(set(racks_of(got).values())) == 1, got


def test_grove_scaling_group_replicas_each_in_one_rack_the_podgang_in_one_zone() -> None:
    # A PodCliqueSet's prefill scaling group (a leader and 3 workers, 8 GPUs each) with 3 replicas,
    # all in the base PodGang: its topologyConstraintGroupConfigs put each replica in one rack, the
    # PodCliqueSet's constraint the whole PodGang in one zone. Six nodes of each of z1's racks are
    # taken, so no rack of z1 holds even a replica's minimum (a leader and 2 workers): the PodGang
    # goes to z2, whole. Three of each z2 rack's are taken: filled rack by rack, a replica would
    # straddle two racks.
    from tests.test_grouping_grove import pcs

    workload = pcs(sg_replicas=3, sg_min=3)
    for c in workload["spec"]["template"]["cliques"]:
        c["spec"]["podSpec"] = template(gpus=0 if c["name"] == "frontend" else 8)["spec"]
    made, _ = pods_of(workload)
    result = group(workload)
    taken = {f"z1-b{b}-r{r}-n{n}": {GPU: 8000} for b in (1, 2) for r in (1, 2) for n in range(1, 7)}
    taken |= {f"z2-b{b}-r{r}-n{n}": {GPU: 8000} for b in (1, 2) for r in (1, 2) for n in range(1, 4)}
    got = place(result, made, nodes=64, **taken)["ml/podgang-llm-0"].assignments
    assert len(got) == 13
    racks = racks_of(got)
    g = result.groups["ml/podgang-llm-0"]
    assert g.podgroup is not None
    by_replica: dict[str, set[str]] = {}
    for pod, leaf in g.subgroup_of.items():
        parent = next(s.parent for s in g.podgroup.subgroups if s.name == leaf)
        if parent is not None:
            by_replica.setdefault(parent, set()).add(racks[pod])
    assert sorted(by_replica) == [f"llm-0-prefill-{j}" for j in range(3)]
    assert all(len(r) == 1 for r in by_replica.values()), by_replica
    assert {node.split("-")[0] for node in got.values()} == {"z2"}
