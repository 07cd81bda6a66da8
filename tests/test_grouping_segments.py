"""Segments (KAI's segment design) and Kueue PodSet slices (Kueue's TAS KEP): the SubGroups they add under a replica
type, their minima (elastic segments beyond the minimum are 0), which segment each pod joins,
and when they are ignored with a warning.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.grouping_builders import (
    group,
    job,
    jobset,
    kubeflow,
    lws,
    members,
    only,
    owned_pod,
    raycluster,
    render,
)

TOPO = {"kai.scheduler/topology": "default"}
SEG4_RACK = {"kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": "rack"}
SLICES = "kueue.x-k8s.io/podset-slice-required-topology-constraints"

TREES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "story-2-four-rack-segments-in-one-zone",
        kubeflow(
            "TFJob",
            {"Chief": 1, "PS": 2, "Worker": (16, SEG4_RACK)},
            annotations={**TOPO, "kai.scheduler/topology-required-placement": "zone"},
        ),
        [
            "ml/tfjob-train sub=3 required=zone",
            "  chief min=1",
            "  ps min=2",
            "  worker sub=4",
            "    worker-seg-0 min=4 required=rack",
            "    worker-seg-1 min=4 required=rack",
            "    worker-seg-2 min=4 required=rack",
            "    worker-seg-3 min=4 required=rack",
        ],
    ),
    (
        "seed-000-elasticity-min-12-of-20-size-4",
        kubeflow("PyTorchJob", {"Worker": (20, SEG4_RACK)}, annotations=TOPO, elasticPolicy={"minReplicas": 12}),
        [
            "ml/pytorchjob-train sub=1",
            "  worker sub=5",
            "    worker-seg-0 min=4 required=rack",
            "    worker-seg-1 min=4 required=rack",
            "    worker-seg-2 min=4 required=rack",
            "    worker-seg-3 min=0 required=rack",
            "    worker-seg-4 min=0 required=rack",
        ],
    ),
    (
        "segment-reaching-past-the-minimum-is-mandatory",
        kubeflow("PyTorchJob", {"Worker": (12, SEG4_RACK)}, annotations=TOPO, elasticPolicy={"minReplicas": 6}),
        [
            "ml/pytorchjob-train sub=1",
            "  worker sub=3",
            "    worker-seg-0 min=4 required=rack",
            "    worker-seg-1 min=4 required=rack",
            "    worker-seg-2 min=0 required=rack",
        ],
    ),
    (
        "last-segment-smaller-when-not-divisible",
        kubeflow("TFJob", {"Worker": (10, SEG4_RACK)}, annotations=TOPO),
        [
            "ml/tfjob-train sub=1",
            "  worker sub=3",
            "    worker-seg-0 min=4 required=rack",
            "    worker-seg-1 min=4 required=rack",
            "    worker-seg-2 min=2 required=rack",
        ],
    ),
    (
        "segment-preferred-placement-and-template-topology",
        kubeflow(
            "TFJob",
            {
                "Worker": (
                    4,
                    {
                        "kai.scheduler/topology": "gpu-fabric",
                        "kai.scheduler/segment-size": "2",
                        "kai.scheduler/segment-topology-preferred-placement": "block",
                    },
                )
            },
        ),
        [
            "ml/tfjob-train sub=1",
            "  worker sub=2",
            "    worker-seg-0 min=2 preferred=block topology=gpu-fabric",
            "    worker-seg-1 min=2 preferred=block topology=gpu-fabric",
        ],
    ),
    (
        "segments-without-placement-are-plain-gangs",
        kubeflow("TFJob", {"Worker": (4, {"kai.scheduler/segment-size": "2"})}, annotations=TOPO),
        ["ml/tfjob-train sub=1", "  worker sub=2", "    worker-seg-0 min=2", "    worker-seg-1 min=2"],
    ),
    (
        "template-placement-goes-to-the-replica-type-and-its-topology-wins",
        kubeflow(
            "TFJob",
            {
                "Chief": 1,
                "Worker": (
                    4,
                    {"kai.scheduler/topology": "fabric", "kai.scheduler/topology-required-placement": "block"},
                ),
            },
            annotations={"kai.scheduler/topology": "default", "kai.scheduler/topology-preferred-placement": "zone"},
        ),
        ["ml/tfjob-train sub=2 preferred=zone", "  chief min=1", "  worker min=4 required=block topology=fabric"],
    ),
    (
        "indexed-job-segments",
        job(8, 8, ann=SEG4_RACK, annotations=TOPO),
        [
            "ml/job-batch sub=1",
            "  job sub=2",
            "    job-seg-0 min=4 required=rack",
            "    job-seg-1 min=4 required=rack",
        ],
    ),
    (
        "leaderworkerset-worker-segments",
        lws(replicas=1, size=9, annotations=TOPO, worker_ann=SEG4_RACK),
        [
            "ml/leaderworkerset-llm-0 sub=2",
            "  leader min=1",
            "  workers sub=2",
            "    workers-seg-0 min=4 required=rack",
            "    workers-seg-1 min=4 required=rack",
        ],
    ),
    (
        "kueue-podset-required-and-preferred",
        kubeflow(
            "TFJob",
            {
                "Chief": (1, {"kueue.x-k8s.io/podset-required-topology": "example.com/topology-rack"}),
                "Worker": (4, {"kueue.x-k8s.io/podset-preferred-topology": "example.com/topology-block"}),
            },
        ),
        [
            "ml/tfjob-train sub=2",
            "  chief min=1 required=example.com/topology-rack",
            "  worker min=4 preferred=example.com/topology-block",
        ],
    ),
    (
        "kueue-slices",
        job(
            8,
            8,
            ann={
                "kueue.x-k8s.io/podset-required-topology": "example.com/topology-block",
                "kueue.x-k8s.io/podset-slice-required-topology": "example.com/topology-rack",
                "kueue.x-k8s.io/podset-slice-size": "4",
            },
        ),
        [
            "ml/job-batch sub=1",
            "  job sub=2 required=example.com/topology-block",
            "    job-slice-0 min=4 required=example.com/topology-rack",
            "    job-slice-1 min=4 required=example.com/topology-rack",
        ],
    ),
    (
        "kueue-layered-slices-json",
        job(
            8,
            8,
            ann={
                "kueue.x-k8s.io/podset-required-topology": "example.com/topology-zone",
                SLICES: '[{"topology": "example.com/topology-block", "size": "8"},'
                ' {"topology": "example.com/topology-rack", "size": 4},'
                ' {"topology": "kubernetes.io/hostname", "size": 2}]',
            },
        ),
        [
            "ml/job-batch sub=1",
            "  job sub=1 required=example.com/topology-zone",
            "    job-slice-0 sub=2 required=example.com/topology-block",
            "      job-slice-0-0 sub=2 required=example.com/topology-rack",
            "        job-slice-0-0-0 min=2 required=kubernetes.io/hostname",
            "        job-slice-0-0-1 min=2 required=kubernetes.io/hostname",
            "      job-slice-0-1 sub=2 required=example.com/topology-rack",
            "        job-slice-0-1-0 min=2 required=kubernetes.io/hostname",
            "        job-slice-0-1-1 min=2 required=kubernetes.io/hostname",
        ],
    ),
    (
        "jobset-slice-size-defaults-to-parallelism",
        jobset(
            [("workers", 2, 4)],
            ann={
                "workers": {
                    "kueue.x-k8s.io/podset-preferred-topology": "example.com/topology-block",
                    "kueue.x-k8s.io/podset-slice-required-topology": "example.com/topology-rack",
                }
            },
        ),
        [
            "ml/jobset-js sub=1",
            "  workers sub=2",
            "    workers-0 sub=1 preferred=example.com/topology-block",
            "      workers-0-slice-0 min=4 required=example.com/topology-rack",
            "    workers-1 sub=1 preferred=example.com/topology-block",
            "      workers-1-slice-0 min=4 required=example.com/topology-rack",
        ],
    ),
    (
        "jobset-exclusive-topology-per-job",
        jobset([("workers", 2, 2)], annotations={"alpha.jobset.sigs.k8s.io/exclusive-topology": "rack"}),
        [
            "ml/jobset-js sub=1",
            "  workers sub=2",
            "    workers-0 min=2 required=rack exclusive",
            "    workers-1 min=2 required=rack exclusive",
        ],
    ),
]


@pytest.mark.parametrize(("workload", "tree"), [c[1:] for c in TREES], ids=[c[0] for c in TREES])
def test_segment_tree(workload: dict[str, Any], tree: list[str]) -> None:
    g = only(group(workload))
    assert render(g) == tree
    assert g.warnings == ()


def test_story_2_pods_join_segment_floor_index_over_size() -> None:
    g = only(group(kubeflow("TFJob", {"Worker": (16, SEG4_RACK)}, annotations=TOPO)))
    assert members(g) == {f"worker-seg-{k}": [f"train-worker-{i}" for i in range(4 * k, 4 * k + 4)] for k in range(4)}


def test_layered_slices_assign_by_index() -> None:
    layers = '[{"topology": "example.com/topology-rack", "size": 4}, {"topology": "kubernetes.io/hostname", "size": 2}]'
    g = only(group(job(8, 8, ann={SLICES: layers})))
    assert members(g) == {
        "job-slice-0-0": ["batch-0", "batch-1"],
        "job-slice-0-1": ["batch-2", "batch-3"],
        "job-slice-1-0": ["batch-4", "batch-5"],
        "job-slice-1-1": ["batch-6", "batch-7"],
    }


def test_leaderworkerset_worker_index_is_normalised_by_the_leader_count() -> None:
    # size 9: worker-index 1..8 become 0..7; with segments of 4, worker-index 2 is in segment 0
    # and worker-index 5 (index 4) starts segment 1.
    g = only(group(lws(replicas=1, size=9, annotations=TOPO, worker_ann=SEG4_RACK)))
    assert members(g) == {
        "leader": ["llm-0"],
        "workers-seg-0": ["llm-0-1", "llm-0-2", "llm-0-3", "llm-0-4"],
        "workers-seg-1": ["llm-0-5", "llm-0-6", "llm-0-7", "llm-0-8"],
    }
    assert g.order["ml/llm-0-2"] == 1
    assert g.order["ml/llm-0-5"] == 4


def test_custom_pod_index_label_on_an_unknown_owner() -> None:
    ann = {**TOPO, **SEG4_RACK, "kai.scheduler/pod-index-label": "example.com/rank"}
    owner = ("example.com/v1", "Trainer", "t1")
    pods = [owned_pod(f"t1-{i}", owner, {"example.com/rank": str(i)}, ann) for i in range(8)]
    g = only(group(pods=pods))
    assert render(g) == [
        "ml/trainer-t1 sub=1",
        "  trainer sub=2",
        "    trainer-seg-0 min=4 required=rack topology=default",
        "    trainer-seg-1 min=4 required=rack topology=default",
    ]
    assert members(g)["trainer-seg-1"] == ["t1-4", "t1-5", "t1-6", "t1-7"]


IGNORED: list[tuple[str, dict[str, Any], list[str], str]] = [
    (
        "no-kai-topology-anywhere",
        kubeflow("TFJob", {"Worker": (8, SEG4_RACK)}),
        ["ml/tfjob-train sub=1", "  worker min=8"],
        "TFJob ml/train spec.tfReplicaSpecs.Worker.template: kai.scheduler/segment-size,"
        " kai.scheduler/segment-topology-required-placement ignored:"
        " no kai.scheduler/topology annotation on the PodTemplate or the workload",
    ),
    (
        "raycluster-has-no-index-label",
        {
            **raycluster([("gpu", 4, 4)]),
            "metadata": {"name": "rc", "namespace": "ml", "annotations": TOPO},
        },
        ["ml/raycluster-rc sub=2", "  head min=1", "  gpu min=4"],
        "",
    ),
    (
        "job-not-indexed",
        job(4, 4, indexed=False, ann={**TOPO, **SEG4_RACK}),
        ["ml/job-batch sub=1", "  job min=4"],
        "Job ml/batch spec.template: kai.scheduler/segment-size, kai.scheduler/segment-topology-required-placement"
        " ignored: this kind has no default pod index label; set kai.scheduler/pod-index-label",
    ),
]


@pytest.mark.parametrize(("workload", "tree", "warning"), [c[1:] for c in IGNORED], ids=[c[0] for c in IGNORED])
def test_segments_ignored_with_a_warning(workload: dict[str, Any], tree: list[str], warning: str) -> None:
    if workload["kind"] == "RayCluster":  # segment annotations on a worker group's template
        workload["spec"]["workerGroupSpecs"][0]["template"]["metadata"] = {"annotations": SEG4_RACK}
        warning = (
            "RayCluster ml/rc spec.workerGroupSpecs[0].template: kai.scheduler/segment-size,"
            " kai.scheduler/segment-topology-required-placement ignored:"
            " this kind has no default pod index label; set kai.scheduler/pod-index-label"
        )
    g = only(group(workload))
    assert render(g) == tree
    assert g.warnings == (warning,)


def test_unknown_owner_without_index_label_ignores_segments() -> None:
    owner = ("example.com/v1", "Trainer", "t1")
    pods = [owned_pod(f"t1-{i}", owner, annotations={**TOPO, **SEG4_RACK}) for i in range(4)]
    g = only(group(pods=pods))
    assert render(g) == ["ml/trainer-t1 sub=1", "  trainer min=4"]
    assert g.warnings == (
        "Trainer ml/t1 (read from its Pod ml/t1-0): kai.scheduler/segment-size,"
        " kai.scheduler/segment-topology-required-placement ignored: this kind has no default pod index label;"
        " set kai.scheduler/pod-index-label",
    )


@settings(max_examples=60, deadline=None)
@given(replicas=st.integers(1, 40), size=st.integers(1, 10), data=st.data())
def test_segment_minima_cover_the_minimum_and_pods_follow_their_index(replicas: int, size: int, data: Any) -> None:
    minimum = data.draw(st.integers(0, replicas))
    ann = {"kai.scheduler/segment-size": str(size)}
    w = kubeflow("PyTorchJob", {"Worker": (replicas, ann)}, annotations=TOPO, elasticPolicy={"minReplicas": minimum})
    g = only(group(w))
    assert g.podgroup is not None
    segments = [sg for sg in g.podgroup.subgroups if sg.parent == "worker"]
    assert len(segments) == -(-replicas // size)
    mins = [sg.min_member for sg in segments]
    # mandatory segments (starting below the minimum) require all their pods, elastic ones none
    assert mins == [min(size, replicas - k * size) if k * size < minimum else 0 for k in range(len(segments))]
    assert minimum <= sum(mins) < minimum + size or sum(mins) == minimum == 0
    for i in range(replicas):
        assert g.subgroup_of[f"ml/train-worker-{i}"] == f"worker-seg-{i // size}"
