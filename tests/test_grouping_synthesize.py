"""synthesize(): the pods (and intermediate owners) each workload's controller would create:
names, the controller's labels, owner references that lead back to the workload, and the
template's labels, annotations, requests, tolerations and nodeSelector.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.grouping import can_synthesize, synthesize
from extender.model.errors import InvalidObject
from extender.model.pod import parse_pod
from tests.grouping_builders import job as batch_job
from tests.grouping_builders import jobset, kubeflow, lws, raycluster, rayjob, template


def owners(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["kind"], r["name"]) for r in body["metadata"]["ownerReferences"] if r["controller"]]


def labels(body: dict[str, Any], *keys: str) -> dict[str, str]:
    return {k: body["metadata"]["labels"][k] for k in keys if k in body["metadata"]["labels"]}


KF = ("training.kubeflow.org/job-name", "training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index")
KF_ROLE = (*KF, "training.kubeflow.org/job-role")

CASES: list[tuple[str, dict[str, Any], tuple[str, ...], list[tuple[str, dict[str, str], list[tuple[str, str]]]]]] = [
    (
        "tfjob",
        kubeflow("TFJob", {"Chief": 1, "Worker": 2}),
        KF_ROLE,
        [
            (
                "train-chief-0",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "chief",
                    "training.kubeflow.org/replica-index": "0",
                    "training.kubeflow.org/job-role": "master",
                },
                [("TFJob", "train")],
            ),
            (
                "train-worker-0",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": "0",
                },
                [("TFJob", "train")],
            ),
            (
                "train-worker-1",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": "1",
                },
                [("TFJob", "train")],
            ),
        ],
    ),
    (
        "pytorchjob-master",
        kubeflow("PyTorchJob", {"Master": 1}),
        KF_ROLE,
        [
            (
                "train-master-0",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "master",
                    "training.kubeflow.org/replica-index": "0",
                    "training.kubeflow.org/job-role": "master",
                },
                [("PyTorchJob", "train")],
            ),
        ],
    ),
    (
        "jaxjob",
        kubeflow("JAXJob", {"Worker": 1}),
        KF,
        [
            (
                "train-worker-0",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": "0",
                },
                [("JAXJob", "train")],
            )
        ],
    ),
    (
        "xgboostjob",
        kubeflow("XGBoostJob", {"Worker": 1}),
        KF,
        [
            (
                "train-worker-0",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": "0",
                },
                [("XGBoostJob", "train")],
            )
        ],
    ),
    (
        "mpijob-launcher-through-a-job-workers-from-1-when-launcher-is-a-worker",
        kubeflow("MPIJob", {"Launcher": 1, "Worker": 2}, runLauncherAsWorker=True),
        (*KF, "batch.kubernetes.io/job-name"),
        [
            (
                "train-launcher-0",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "launcher",
                    "training.kubeflow.org/replica-index": "0",
                    "batch.kubernetes.io/job-name": "train-launcher",
                },
                [("Job", "train-launcher")],
            ),
            (
                "train-worker-0",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": "1",
                },
                [("MPIJob", "train")],
            ),
            (
                "train-worker-1",
                {
                    "training.kubeflow.org/job-name": "train",
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": "2",
                },
                [("MPIJob", "train")],
            ),
        ],
    ),
    (
        "indexed-job",
        batch_job(2, 2),
        ("batch.kubernetes.io/job-name", "job-name", "batch.kubernetes.io/job-completion-index"),
        [
            (
                "batch-0",
                {
                    "batch.kubernetes.io/job-name": "batch",
                    "job-name": "batch",
                    "batch.kubernetes.io/job-completion-index": "0",
                },
                [("Job", "batch")],
            ),
            (
                "batch-1",
                {
                    "batch.kubernetes.io/job-name": "batch",
                    "job-name": "batch",
                    "batch.kubernetes.io/job-completion-index": "1",
                },
                [("Job", "batch")],
            ),
        ],
    ),
    (
        "leaderworkerset-leader-at-worker-index-0",
        lws(replicas=1, size=3),
        (
            "leaderworkerset.sigs.k8s.io/name",
            "leaderworkerset.sigs.k8s.io/group-index",
            "leaderworkerset.sigs.k8s.io/worker-index",
        ),
        [
            (
                "llm-0",
                {
                    "leaderworkerset.sigs.k8s.io/name": "llm",
                    "leaderworkerset.sigs.k8s.io/group-index": "0",
                    "leaderworkerset.sigs.k8s.io/worker-index": "0",
                },
                [("StatefulSet", "llm")],
            ),
            (
                "llm-0-1",
                {
                    "leaderworkerset.sigs.k8s.io/name": "llm",
                    "leaderworkerset.sigs.k8s.io/group-index": "0",
                    "leaderworkerset.sigs.k8s.io/worker-index": "1",
                },
                [("StatefulSet", "llm-0")],
            ),
            (
                "llm-0-2",
                {
                    "leaderworkerset.sigs.k8s.io/name": "llm",
                    "leaderworkerset.sigs.k8s.io/group-index": "0",
                    "leaderworkerset.sigs.k8s.io/worker-index": "2",
                },
                [("StatefulSet", "llm-0")],
            ),
        ],
    ),
    (
        "jobset-through-its-jobs",
        jobset([("w", 2, 1)]),
        (
            "jobset.sigs.k8s.io/jobset-name",
            "jobset.sigs.k8s.io/replicatedjob-name",
            "jobset.sigs.k8s.io/job-index",
            "jobset.sigs.k8s.io/job-global-index",
            "batch.kubernetes.io/job-completion-index",
        ),
        [
            (
                f"js-w-{j}-0",
                {
                    "jobset.sigs.k8s.io/jobset-name": "js",
                    "jobset.sigs.k8s.io/replicatedjob-name": "w",
                    "jobset.sigs.k8s.io/job-index": str(j),
                    "jobset.sigs.k8s.io/job-global-index": str(j),
                    "batch.kubernetes.io/job-completion-index": "0",
                },
                [("Job", f"js-w-{j}")],
            )
            for j in range(2)
        ],
    ),
    (
        "raycluster",
        raycluster([("gpu", 1, 1)]),
        ("ray.io/cluster", "ray.io/node-type", "ray.io/group"),
        [
            (
                "rc-head",
                {"ray.io/cluster": "rc", "ray.io/node-type": "head", "ray.io/group": "headgroup"},
                [("RayCluster", "rc")],
            ),
            (
                "rc-gpu-worker-0",
                {"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "gpu"},
                [("RayCluster", "rc")],
            ),
        ],
    ),
    (
        "rayjob-through-its-raycluster",
        rayjob([("gpu", 1, 1)]),
        ("ray.io/cluster", "ray.io/node-type"),
        [
            (
                "rj-raycluster-head",
                {"ray.io/cluster": "rj-raycluster", "ray.io/node-type": "head"},
                [("RayCluster", "rj-raycluster")],
            ),
            (
                "rj-raycluster-gpu-worker-0",
                {"ray.io/cluster": "rj-raycluster", "ray.io/node-type": "worker"},
                [("RayCluster", "rj-raycluster")],
            ),
        ],
    ),
]


@pytest.mark.parametrize(("workload", "keys", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_synthesized_pods(
    workload: dict[str, Any], keys: tuple[str, ...], want: list[tuple[str, dict[str, str], list[tuple[str, str]]]]
) -> None:
    out = synthesize(workload)
    got = [(p["metadata"]["name"], labels(p, *keys), owners(p)) for p in out.pods]
    assert got == want
    for p in out.pods:  # every pod is one the model reads
        parse_pod(p)


OWNER_CASES: list[tuple[str, dict[str, Any], list[tuple[str, str, list[tuple[str, str]]]]]] = [
    (
        "mpijob-launcher-job",
        kubeflow("MPIJob", {"Launcher": 1, "Worker": 1}),
        [("Job", "train-launcher", [("MPIJob", "train")])],
    ),
    (
        "leaderworkerset-statefulsets",
        lws(replicas=2, size=2),
        [
            ("StatefulSet", "llm", [("LeaderWorkerSet", "llm")]),
            ("StatefulSet", "llm-0", [("Pod", "llm-0")]),
            ("StatefulSet", "llm-1", [("Pod", "llm-1")]),
        ],
    ),
    (
        "jobset-jobs",
        jobset([("w", 2, 1)]),
        [("Job", "js-w-0", [("JobSet", "js")]), ("Job", "js-w-1", [("JobSet", "js")])],
    ),
    ("rayjob-raycluster", rayjob([("g", 1, 1)]), [("RayCluster", "rj-raycluster", [("RayJob", "rj")])]),
    ("tfjob-owns-its-pods", kubeflow("TFJob", {"Worker": 1}), []),
]


@pytest.mark.parametrize(("workload", "want"), [c[1:] for c in OWNER_CASES], ids=[c[0] for c in OWNER_CASES])
def test_intermediate_owners(workload: dict[str, Any], want: list[tuple[str, str, list[tuple[str, str]]]]) -> None:
    got = [(o["kind"], o["metadata"]["name"], owners(o)) for o in synthesize(workload).owners]
    assert got == want


def test_template_is_copied_into_each_pod() -> None:
    t = template({"example.com/note": "x"}, gpus=8, labels={"app": "trainer"})
    t["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    t["spec"]["nodeSelector"] = {"example.com/pool": "gpu"}
    w = kubeflow("TFJob", {"Worker": 1})
    w["spec"]["tfReplicaSpecs"]["Worker"]["template"] = t
    body = synthesize(w).pods[0]
    assert body["metadata"]["annotations"] == {"example.com/note": "x"}
    assert body["metadata"]["labels"]["app"] == "trainer"
    p = parse_pod(body)
    assert p.requests["nvidia.com/gpu"] == 8000
    assert p.placement.node_selector == (("example.com/pool", "gpu"),)
    assert [t.key for t in p.placement.tolerations] == ["nvidia.com/gpu"]
    assert p.controller is not None
    assert p.controller.uid == body["metadata"]["ownerReferences"][0]["uid"]
    body["spec"]["containers"][0]["name"] = "changed"  # a copy, not the workload's own template
    assert t["spec"]["containers"][0]["name"] == "main"


def test_names_and_uids_are_stable() -> None:
    w = lws(replicas=1, size=2)
    assert synthesize(w) == synthesize(w)


def test_unsupported_kind_and_bad_fields_raise() -> None:
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {}}
    assert not can_synthesize("apps/v1", "DaemonSet")
    with pytest.raises(
        InvalidObject, match=r"DaemonSet default/agent: kind: topogang cannot create the pods of DaemonSet"
    ):
        synthesize(daemonset)
    with pytest.raises(InvalidObject, match=r"spec.tfReplicaSpecs.Worker.replicas: expected an integer >= 0, got -1"):
        synthesize(kubeflow("TFJob", {"Worker": -1}))
    selector = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"}, "spec": {"clusterSelector": {}}}
    with pytest.raises(InvalidObject, match=r"spec.rayClusterSpec: has no rayClusterSpec"):
        synthesize(selector)
