"""Every bad value makes its group Invalid with a message naming the annotation, label or field
and the value; no pod of it gets a PodGroup, and the other groups of the same call are grouped
as usual (here: a Job named `ok`).
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.grouping.result import GroupingResult
from extender.model.pod import PodInfo
from tests.grouping_builders import errors, group, job, jobset, kubeflow, lws, owned_pod, render

TOPO = {"kai.scheduler/topology": "default"}
WORKER = "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.metadata.annotations"
JOB = "Job ml/batch: spec.template.metadata.annotations"
LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
GOOD = job(2, 2, name="ok")


def workers(ann: dict[str, str], n: int = 8, **spec: Any) -> dict[str, Any]:
    return kubeflow("TFJob", {"Worker": (n, ann)}, annotations=TOPO, **spec)


def slices(ann: dict[str, str]) -> dict[str, Any]:
    return job(8, 8, ann=ann)


CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "segment-size-zero",
        workers({"kai.scheduler/segment-size": "0"}),
        f"{WORKER}[kai.scheduler/segment-size]: expected a positive integer, got '0'",
    ),
    (
        "segment-size-not-a-number",
        workers({"kai.scheduler/segment-size": "four"}),
        f"{WORKER}[kai.scheduler/segment-size]: expected a positive integer, got 'four'",
    ),
    (
        "segment-size-negative",
        workers({"kai.scheduler/segment-size": "-2"}),
        f"{WORKER}[kai.scheduler/segment-size]: expected a positive integer, got '-2'",
    ),
    (
        "segment-level-empty",
        workers({"kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": ""}),
        f"{WORKER}[kai.scheduler/segment-topology-required-placement]:"
        " expected a topology level such as a node label, got ''",
    ),
    (
        "segment-level-without-size",
        workers({"kai.scheduler/segment-topology-required-placement": "rack"}),
        f"{WORKER}[kai.scheduler/segment-topology-required-placement]:"
        " 'rack' needs kai.scheduler/segment-size to cut segments",
    ),
    (
        "workload-level-empty",
        kubeflow("TFJob", {"Worker": 2}, annotations={"kai.scheduler/topology-required-placement": ""}),
        "TFJob ml/train: metadata.annotations[kai.scheduler/topology-required-placement]:"
        " expected a topology level such as a node label, got ''",
    ),
    (
        "template-level-with-a-space",
        workers({"kai.scheduler/topology-preferred-placement": "rack zone"}),
        f"{WORKER}[kai.scheduler/topology-preferred-placement]:"
        " expected a topology level such as a node label, got 'rack zone'",
    ),
    (
        "pod-index-label-blank",
        workers({"kai.scheduler/segment-size": "4", "kai.scheduler/pod-index-label": " "}),
        f"{WORKER}[kai.scheduler/pod-index-label]: expected a label name, got ' '",
    ),
    (
        "segments-and-slices-together",
        workers({"kai.scheduler/segment-size": "4", "kueue.x-k8s.io/podset-slice-size": "4"}),
        f"{WORKER}[kueue.x-k8s.io/podset-slice-size]: set either KAI segments (kai.scheduler/segment-size)"
        " or Kueue slices (kueue.x-k8s.io/podset-slice-size), not both",
    ),
    (
        "kueue-level-conflicts-with-kai",
        workers(
            {"kai.scheduler/topology-required-placement": "rack", "kueue.x-k8s.io/podset-required-topology": "block"}
        ),
        f"{WORKER}[kueue.x-k8s.io/podset-required-topology]:"
        " 'block' conflicts with kai.scheduler/topology-required-placement='rack'",
    ),
    (
        "kueue-required-and-preferred",
        slices({"kueue.x-k8s.io/podset-required-topology": "rack", "kueue.x-k8s.io/podset-preferred-topology": "b"}),
        f"{JOB}[kueue.x-k8s.io/podset-preferred-topology]: set only one of kueue.x-k8s.io/podset-required-topology,"
        " kueue.x-k8s.io/podset-preferred-topology",
    ),
    (
        "kueue-unconstrained-not-a-bool",
        slices({"kueue.x-k8s.io/podset-unconstrained-topology": "yes"}),
        f"{JOB}[kueue.x-k8s.io/podset-unconstrained-topology]:"
        " expected a boolean as Kueue reads one (true, false, 1, 0, t, f, True, FALSE...), got 'yes'",
    ),
    (
        "kueue-slice-size-not-dividing",
        slices({"kueue.x-k8s.io/podset-slice-required-topology": "rack", "kueue.x-k8s.io/podset-slice-size": "3"}),
        f"{JOB}[kueue.x-k8s.io/podset-slice-size]: 3 does not divide the 8 replicas of job",
    ),
    (
        "kueue-slice-topology-without-size",
        slices({"kueue.x-k8s.io/podset-slice-required-topology": "rack"}),
        f"{JOB}[kueue.x-k8s.io/podset-slice-required-topology]: 'rack' needs kueue.x-k8s.io/podset-slice-size",
    ),
    (
        "kueue-slice-size-without-topology",
        slices({"kueue.x-k8s.io/podset-slice-size": "4"}),
        f"{JOB}[kueue.x-k8s.io/podset-slice-size]: '4' needs kueue.x-k8s.io/podset-slice-required-topology",
    ),
    (
        "kueue-layers-not-json",
        slices({LAYERS: "not json"}),
        f"{JOB}[{LAYERS}]: expected a JSON list of {{topology, size}} layers, got 'not json'"
        " (Expecting value: line 1 column 1 (char 0))",
    ),
    (
        "kueue-layers-empty",
        slices({LAYERS: "[]"}),
        f"{JOB}[{LAYERS}]: expected a JSON list of 1 to 3 layers, got '[]'",
    ),
    (
        "kueue-layers-four",
        slices(
            {
                LAYERS: '[{"topology": "a", "size": 8}, {"topology": "b", "size": 4}, {"topology": "c", "size": 2},'
                ' {"topology": "d", "size": 1}]'
            }
        ),
        f'{JOB}[{LAYERS}]: expected a JSON list of 1 to 3 layers, got \'[{{"topology": "a", "size": 8}},'
        ' {"topology": "b", "size": 4}, {"topology": "c", "size": 2}, {"topology": "d", "size": 1}]\'',
    ),
    (
        "kueue-layer-not-dividing-the-one-above",
        slices({LAYERS: '[{"topology": "a", "size": 4}, {"topology": "b", "size": 3}]'}),
        f"{JOB}[{LAYERS}][1].size: size 3 does not divide the size 4 of layer 0",
    ),
    (
        "kueue-layer-not-dividing-the-replicas",
        slices({LAYERS: '[{"topology": "a", "size": 3}]'}),
        f"{JOB}[{LAYERS}][0].size: size 3 does not divide the 8 replicas of job",
    ),
    (
        "kueue-layer-without-size",
        slices({LAYERS: '[{"topology": "a"}]'}),
        f"{JOB}[{LAYERS}][0].size: missing: each layer needs a size",
    ),
    (
        "kueue-layer-size-zero",
        slices({LAYERS: '[{"topology": "a", "size": "0"}]'}),
        f"{JOB}[{LAYERS}][0].size: expected a positive integer, got '0'",
    ),
    (
        "kueue-layer-topology-not-a-string",
        slices({LAYERS: '[{"topology": 5, "size": 4}]'}),
        f"{JOB}[{LAYERS}][0].topology: expected a node label, got 5",
    ),
    (
        "kueue-layers-with-slice-size",
        slices({LAYERS: '[{"topology": "a", "size": 4}]', "kueue.x-k8s.io/podset-slice-size": "4"}),
        f"{JOB}[kueue.x-k8s.io/podset-slice-size]: cannot be combined with {LAYERS}",
    ),
    (
        "lws-exclusive-topology-empty",
        lws(1, 2, annotations={"leaderworkerset.sigs.k8s.io/exclusive-topology": ""}),
        "LeaderWorkerSet ml/llm: metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topology]:"
        " expected a topology level such as a node label, got ''",
    ),
    (
        "lws-subgroup-size-dividing-neither",
        lws(1, 8, annotations={"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}, sub_group_size=3),
        "LeaderWorkerSet ml/llm: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize:"
        " 3 divides neither the size 8 nor size - 1",
    ),
    (
        "lws-subgroup-size-zero",
        lws(1, 8, annotations={"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}, sub_group_size=0),
        "LeaderWorkerSet ml/llm: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize:"
        " expected a positive integer, got 0",
    ),
    (
        "lws-subgroup-size-above-size",
        lws(1, 8, annotations={"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}, sub_group_size=9),
        "LeaderWorkerSet ml/llm: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize:"
        " is 9, more than the group size 8",
    ),
    (
        "lws-leader-excluded-needs-size-minus-one-divisible",
        lws(
            1,
            8,
            annotations={"leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"},
            sub_group_size=4,
            policy_type="LeaderExcluded",
        ),
        "LeaderWorkerSet ml/llm: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize:"
        " LeaderExcluded needs size - 1 = 7 divisible by 4",
    ),
    (
        "min-available-above-replicas",
        kubeflow("TFJob", {"Worker": 2}, runPolicy={"schedulingPolicy": {"minAvailable": 5}}),
        "TFJob ml/train: spec.runPolicy.schedulingPolicy.minAvailable: is 5 but the job has 2 replicas",
    ),
    (
        "min-available-below-the-other-replica-types",
        kubeflow("TFJob", {"Chief": 1, "PS": 2, "Worker": 2}, runPolicy={"schedulingPolicy": {"minAvailable": 2}}),
        "TFJob ml/train: spec.runPolicy.schedulingPolicy.minAvailable:"
        " is 2 but the replica types other than worker need 3 pods",
    ),
]


def check(result: GroupingResult, bad: str, message: str) -> None:
    invalid = result.groups[bad]
    assert invalid.podgroup is None
    assert errors(invalid) == [message]
    assert result.groups["ml/job-ok"].valid
    assert render(result.groups["ml/job-ok"]) == ["ml/job-ok sub=1", "  job min=2"]
    assert sorted(k for k, g in result.pod_group.items() if g == bad)  # its pods are in the group


@pytest.mark.parametrize(("workload", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_value_makes_only_its_group_invalid(workload: dict[str, Any], message: str) -> None:
    result = group(workload, GOOD)
    bad = next(k for k in result.groups if k != "ml/job-ok")
    check(result, bad, message)


TFJOB = ("kubeflow.org/v1", "TFJob", "train")
WORKER_TYPE = {"training.kubeflow.org/replica-type": "worker"}
POD_CASES: list[tuple[str, PodInfo, str]] = [
    (
        "index-label-missing",
        owned_pod("stray", TFJOB, WORKER_TYPE),
        "Pod ml/stray: metadata.labels[training.kubeflow.org/replica-index]:"
        " missing: the pod's index is needed to pick its segment",
    ),
    (
        "index-label-not-a-number",
        owned_pod("stray", TFJOB, {**WORKER_TYPE, "training.kubeflow.org/replica-index": "abc"}),
        "Pod ml/stray: metadata.labels[training.kubeflow.org/replica-index]:"
        " expected a non-negative integer, got 'abc'",
    ),
    (
        "index-outside-the-replica-range",
        owned_pod("stray", TFJOB, {**WORKER_TYPE, "training.kubeflow.org/replica-index": "4"}),
        "Pod ml/stray: metadata.labels[training.kubeflow.org/replica-index]:"
        " '4' is outside the replica range 0..3 of worker",
    ),
    (
        "replica-type-unknown",
        owned_pod("stray", TFJOB, {"training.kubeflow.org/replica-type": "evaluator"}),
        "Pod ml/stray: metadata.labels[training.kubeflow.org/replica-type]:"
        " 'evaluator' names no replica type of TFJob ml/train (have: worker)",
    ),
    (
        "replica-type-missing",
        owned_pod("stray", TFJOB),
        "Pod ml/stray: metadata.labels[training.kubeflow.org/replica-type]: missing",
    ),
]


@pytest.mark.parametrize(("stray", "message"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES])
def test_bad_pod_label_makes_its_group_invalid(stray: PodInfo, message: str) -> None:
    tfjob = workers({"kai.scheduler/segment-size": "2"}, n=4)
    check(group(tfjob, GOOD, pods=[stray]), "ml/tfjob-train", message)


def test_leaderworkerset_worker_index_past_the_group_size() -> None:
    past = owned_pod(
        "llm-0-9",
        ("apps/v1", "StatefulSet", "llm-0"),
        {"leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/worker-index": "9"},
    )
    result = group(lws(1, 5, name="llm"), GOOD, pods=[past])
    check(
        result,
        "ml/leaderworkerset-llm-0",
        "Pod ml/llm-0-9: metadata.labels[leaderworkerset.sigs.k8s.io/worker-index]: '9' is not a worker index 0..4",
    )


def test_leaderworkerset_group_index_outside_the_replicas() -> None:
    stray = owned_pod(
        "llm-7",
        ("apps/v1", "StatefulSet", "llm"),
        {"leaderworkerset.sigs.k8s.io/group-index": "7", "leaderworkerset.sigs.k8s.io/worker-index": "0"},
    )
    result = group(lws(1, 2), GOOD, pods=[stray])
    assert result.groups["ml/leaderworkerset-llm-0"].valid
    check(
        result,
        "ml/leaderworkerset-llm",
        "Pod ml/llm-7: metadata.labels[leaderworkerset.sigs.k8s.io/group-index]: '7' is not a group index 0..0",
    )


def test_jobset_pod_without_job_index() -> None:
    stray = owned_pod(
        "js-x", ("jobset.x-k8s.io/v1alpha2", "JobSet", "js"), {"jobset.sigs.k8s.io/replicatedjob-name": "w"}
    )
    result = group(jobset([("w", 1, 2)]), GOOD, pods=[stray])
    check(result, "ml/jobset-js", "Pod ml/js-x: metadata.labels[jobset.sigs.k8s.io/job-index]: missing")


# -- Kueue's Topology Aware Scheduling and topogang never both decide a placement ---------------------------------


def kueue_tas_placed(workload: dict[str, Any], *template_path: str) -> dict[str, Any]:
    """WORKLOAD as Kueue starts it after admitting it to a flavor with spec.topologyName: its
    scheduling gate on the PodTemplate at TEMPLATE_PATH."""
    at: Any = workload
    for key in template_path:
        at = at[key]
    at.setdefault("spec", {})["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    return workload


TAS_SAYS = (
    "has Kueue's scheduling gate kueue.x-k8s.io/topology: Kueue's Topology Aware Scheduling places these pods"
    " (the workload was admitted to a ResourceFlavor with spec.topologyName), and topogang does not decide a"
    " placement Kueue decides; admit it to a flavor without spec.topologyName (Kueue keeps the quota, topogang"
    " places), or leave its pods to kube-scheduler alone (no schedulerName topogang-scheduler)"
)


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        (kueue_tas_placed(job(4, 4), "spec", "template"), "Job ml/batch: spec.template.spec.schedulingGates"),
        (
            kueue_tas_placed(kubeflow("TFJob", {"Worker": 4}), "spec", "tfReplicaSpecs", "Worker", "template"),
            "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.spec.schedulingGates",
        ),
    ],
    ids=["job", "tfjob"],
)
def test_a_workload_placed_by_kueues_tas_is_refused_with_a_message(workload: dict[str, Any], field: str) -> None:
    result = group(workload, GOOD)
    bad = next(k for k in result.groups if k != "ml/job-ok")
    check(result, bad, f"{field}: {TAS_SAYS}")


def test_a_workload_kueue_admitted_without_tas_is_grouped() -> None:
    admitted = job(4, 4, ann={"kueue.x-k8s.io/workload": "job-batch-1a2b3"})
    admitted["spec"]["template"]["spec"]["nodeSelector"] = {"cloud.example.com/flavor": "on-demand"}
    result = group(admitted, GOOD)
    assert all(g.valid for g in result.groups.values())
