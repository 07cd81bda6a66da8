"""A misspelt annotation key is never dropped without a word: on a workload, a PodTemplate, a
JobSet's Job template, a group object or a pod, a key under a prefix topogang reads that its
project does not define and that is close to a key topogang reads makes the gang Invalid, naming
the key where it was written and the key it misspells. A key close to nothing is ignored with a
warning; a key its project defines is left alone. The other groups of the call group as usual."""

from __future__ import annotations

from typing import Any

import pytest

from extender.grouping import ObjectIndex, group_pods
from extender.grouping.result import GroupingResult
from extender.model.errors import InvalidObject
from extender.model.pod import PodInfo, parse_pod
from tests.builders import podgroup
from tests.grouping_builders import errors, group, job, jobset, kubeflow, lws, owned_pod, raycluster, render
from tests.test_upstream_gangs import RACK, pod
from tests.test_upstream_gangs import group as upstream_group

GOOD = job(2, 2, name="ok")
REQUIRED = "kai.scheduler/topology-required-placement"
TYPO = "kai.scheduler/topology-required-placment"
MEANT = f"unknown annotation; did you mean {REQUIRED}?"
TEMPLATE = "spec.template.metadata.annotations"
LWS_SUB = {"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}


def unknown_owner_pods(annotations: dict[str, str]) -> list[PodInfo]:
    """Two pods of an owner no grouper knows and topogang cannot see: they carry their own keys."""
    owner = ("example.com/v1", "Trainer", "t")
    return [owned_pod(f"t-{i}", owner, annotations=annotations) for i in range(2)]


CASES: list[tuple[str, dict[str, Any], list[PodInfo], str]] = [
    (
        "job-workload",
        job(12, 12, annotations={TYPO: "rack"}),
        [],
        f"Job ml/batch: metadata.annotations[{TYPO}]: {MEANT}",
    ),
    (
        "job-template-kueue",
        job(ann={"kueue.x-k8s.io/podset-required-topolgy": "rack"}),
        [],
        f"Job ml/batch: {TEMPLATE}[kueue.x-k8s.io/podset-required-topolgy]: unknown annotation;"
        " did you mean kueue.x-k8s.io/podset-required-topology?",
    ),
    (
        "tfjob-template-segments",
        kubeflow("TFJob", {"Worker": (8, {"kai.scheduler/segment-sise": "4"})}),
        [],
        "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.metadata.annotations[kai.scheduler/segment-sise]:"
        " unknown annotation; did you mean kai.scheduler/segment-size?",
    ),
    (
        "template-case",
        job(ann={"Kai.Scheduler/Topology-Required-Placement": "rack"}),
        [],
        f"Job ml/batch: {TEMPLATE}[Kai.Scheduler/Topology-Required-Placement]: {MEANT}",
    ),
    (
        "template-prefix",
        job(ann={"kai.schedular/topology-required-placement": "rack"}),
        [],
        f"Job ml/batch: {TEMPLATE}[kai.schedular/topology-required-placement]: {MEANT}",
    ),
    (
        "lws-workload",
        lws(1, 2, annotations={"leaderworkerset.sigs.k8s.io/exclusive-topolgy": "rack"}),
        [],
        "LeaderWorkerSet ml/llm: metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topolgy]:"
        " unknown annotation; did you mean leaderworkerset.sigs.k8s.io/exclusive-topology?",
    ),
    (
        "lws-template-cut-into-subgroups",  # no part carries the templates: read for their keys all the same
        lws(1, 8, annotations=LWS_SUB, sub_group_size=4, worker_ann={"scheduling.topogang.io/runtime-bond": "1h"}),
        [],
        "LeaderWorkerSet ml/llm: spec.leaderWorkerTemplate.workerTemplate.metadata.annotations"
        "[scheduling.topogang.io/runtime-bond]: unknown annotation; did you mean scheduling.topogang.io/runtime-bound?",
    ),
    (
        "jobset-workload-prefix",
        jobset([("w", 2, 2)], annotations={"jobset.sigs.k8s.io/exclusive-topology": "rack"}),
        [],
        "JobSet ml/js: metadata.annotations[jobset.sigs.k8s.io/exclusive-topology]:"
        " unknown annotation; did you mean alpha.jobset.sigs.k8s.io/exclusive-topology?",
    ),
    (
        "jobset-job-template",  # once, though both Jobs are made from it
        jobset([("w", 2, 2)], job_ann={"w": {"alpha.jobset.sigs.k8s.io/exclusive-topolgy": "rack"}}),
        [],
        "JobSet ml/js: spec.replicatedJobs[0].template.metadata.annotations[alpha.jobset.sigs.k8s.io/"
        "exclusive-topolgy]: unknown annotation; did you mean alpha.jobset.sigs.k8s.io/exclusive-topology?",
    ),
    (
        "jobset-pod-template",  # once, though each Job reads it
        jobset([("w", 3, 2)], ann={"w": {TYPO: "rack"}}),
        [],
        f"JobSet ml/js: spec.replicatedJobs[0].template.{TEMPLATE}[{TYPO}]: {MEANT}",
    ),
    (
        "raycluster-head-template",
        raycluster([("cpu", 1, None)], head_ann={"kai.scheduler/topolgy": "default"}),
        [],
        "RayCluster ml/rc: spec.headGroupSpec.template.metadata.annotations[kai.scheduler/topolgy]:"
        " unknown annotation; did you mean kai.scheduler/topology?",
    ),
    (
        "pods-of-an-unseen-owner",  # said once for both pods
        {},
        unknown_owner_pods({"scheduling.topogang.io/on-unrepairabel": "EvictGang"}),
        "Pod ml/t-0: metadata.annotations[scheduling.topogang.io/on-unrepairabel]: unknown annotation;"
        " did you mean scheduling.topogang.io/on-unrepairable? (and 1 more pod: ml/t-1)",
    ),
]


def check(result: GroupingResult, message: str) -> None:
    bad = [g for k, g in result.groups.items() if k != "ml/job-ok"]
    assert bad
    for g in bad:
        assert g.podgroup is None
        assert errors(g) == [message]
    assert render(result.groups["ml/job-ok"]) == ["ml/job-ok sub=1", "  job min=2"]


@pytest.mark.parametrize(("workload", "pods", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_misspelt_key_makes_its_gang_invalid_naming_it_where_written(
    workload: dict[str, Any], pods: list[PodInfo], message: str
) -> None:
    workloads = [workload, GOOD] if workload else [GOOD]
    check(group(*workloads, pods=pods), message)


def upstream(group_annotations: dict[str, str], pod_annotations: dict[str, str]) -> GroupingResult:
    root = upstream_group("train", 2, [RACK], annotations=group_annotations)
    bodies = [pod(f"w-{i}", group="train") for i in range(2)]
    for b in bodies:
        b["metadata"]["annotations"] = dict(pod_annotations)
    return group_pods([parse_pod(b) for b in bodies], ObjectIndex([root]), {})


@pytest.mark.parametrize(
    ("group_annotations", "pod_annotations", "message"),
    [
        (
            {"kai.scheduler/topology-preferred-placment": "rack"},
            {},
            "PodGroup ml/train: metadata.annotations[kai.scheduler/topology-preferred-placment]: unknown annotation;"
            " did you mean kai.scheduler/topology-preferred-placement?",
        ),
        (
            {},
            {"kai.scheduler/segment-size": "1", "kai.scheduler/segment-topology-required-placment": "rack"},
            "Pod ml/w-0: metadata.annotations[kai.scheduler/segment-topology-required-placment]: unknown annotation;"
            " did you mean kai.scheduler/segment-topology-required-placement? (and 1 more pod: ml/w-1)",
        ),
    ],
    ids=["group-object", "its-pods"],
)
def test_a_misspelt_key_on_a_scheduling_k8s_io_group_or_its_pods(
    group_annotations: dict[str, str], pod_annotations: dict[str, str], message: str
) -> None:
    g = upstream(group_annotations, pod_annotations).groups["ml/podgroup-train"]
    assert g.podgroup is None
    assert errors(g) == [message]


def test_a_misspelt_key_on_a_podgroup_object_makes_it_invalid() -> None:
    with pytest.raises(InvalidObject) as exc:
        podgroup({"minMember": 1}, namespace="ml", annotations={"kai.scheduler/topolgy": "default"})
    assert [str(e) for e in exc.value.errors] == [
        "PodGroup ml/pg: metadata.annotations[kai.scheduler/topolgy]: unknown annotation;"
        " did you mean kai.scheduler/topology?"
    ]


def test_a_misspelt_key_on_the_pods_of_a_podgroup_object_makes_its_gang_invalid() -> None:
    pg = podgroup({"minMember": 3}, namespace="ml")
    annotations = {"pod-group-name": "pg", "scheduling.topogang.io/runtime-bond": "2h"}
    pods = [owned_pod(f"p-{i}", annotations=annotations) for i in range(5)]
    g = group_pods(pods, ObjectIndex([]), {"ml/pg": pg}).groups["ml/pg"]
    assert g.podgroup is None
    assert errors(g) == [
        "Pod ml/p-0: metadata.annotations[scheduling.topogang.io/runtime-bond]: unknown annotation;"
        " did you mean scheduling.topogang.io/runtime-bound? (and 4 more pods)"
    ]


UNKNOWN = "kai.scheduler/pod-index"


@pytest.mark.parametrize(
    ("workload", "pods", "podgroups", "key", "warning"),
    [
        (
            job(ann={UNKNOWN: "x"}),
            [],
            {},
            "ml/job-batch",
            f"Job ml/batch: {TEMPLATE}[{UNKNOWN}] ignored: not an annotation KAI-Scheduler defines or topogang reads",
        ),
        (
            job(annotations={"scheduling.topogang.io/colour": "blue"}),
            [],
            {},
            "ml/job-batch",
            "Job ml/batch: metadata.annotations[scheduling.topogang.io/colour] ignored:"
            " not an annotation topogang reads",
        ),
        (
            {},
            [owned_pod(f"p-{i}", annotations={"pod-group-name": "pg", "kueue.x-k8s.io/mine": "1"}) for i in range(2)],
            {"ml/pg": podgroup({"minMember": 2}, namespace="ml", annotations={"kai.scheduler/mine": "1"})},
            "ml/pg",
            "PodGroup ml/pg: metadata.annotations[kai.scheduler/mine] ignored:"
            " not an annotation KAI-Scheduler defines or topogang reads",
        ),
    ],
    ids=["template", "workload", "podgroup-object"],
)
def test_a_key_close_to_nothing_topogang_reads_is_ignored_with_a_warning(
    workload: dict[str, Any], pods: list[PodInfo], podgroups: dict[str, Any], key: str, warning: str
) -> None:
    result = group(*([workload] if workload else []), pods=pods, podgroups=podgroups)
    g = result.groups[key]
    assert g.valid
    assert g.warnings[0] == warning


def test_the_pods_unknown_keys_are_warned_about_once() -> None:
    pods = [owned_pod(f"p-{i}", annotations={"pod-group-name": "pg", "kueue.x-k8s.io/mine": "1"}) for i in range(9)]
    g = group(pods=pods, podgroups={"ml/pg": podgroup({"minMember": 2}, namespace="ml")}).groups["ml/pg"]
    assert g.warnings == (
        "Pod ml/p-0: metadata.annotations[kueue.x-k8s.io/mine] ignored: not an annotation Kueue defines or"
        " topogang reads (and 8 more pods)",
    )


def test_keys_their_projects_define_are_left_alone() -> None:
    theirs = {
        "kai.scheduler/queue": "research",
        "kueue.x-k8s.io/queue-name": "lq",
        "kueue.x-k8s.io/priority-class": "high",
        "leaderworkerset.sigs.k8s.io/size": "4",
        "alpha.jobset.sigs.k8s.io/node-selector": "true",
        "scheduling.topogang.io/plan-generation": "3",
    }
    result = group(job(ann=theirs, annotations=theirs), lws(1, 2, annotations=theirs, worker_ann=theirs))
    assert all(g.valid and not g.warnings for g in result.groups.values()), result.groups
