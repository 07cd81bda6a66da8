"""Every built-in grouper: the PodGroup tree and minima it derives from the workload's spec, and
which SubGroup each synthesized pod joins (KAI's segment design's replica-type SubGroups).

Trees are rendered one SubGroup a line (tests/grouping_builders.render): `min=` is minMember
(pods), `sub=` is minSubGroup (child SubGroups).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.grouping_builders import group, job, jobset, kubeflow, lws, members, only, raycluster, rayjob, render

CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "tfjob-one-subgroup-per-replica-type",
        kubeflow("TFJob", {"Chief": 1, "PS": 2, "Worker": 4}),
        ["ml/tfjob-train sub=3", "  chief min=1", "  ps min=2", "  worker min=4"],
    ),
    (
        "tfjob-minavailable-leaves-the-rest-to-workers",
        kubeflow("TFJob", {"Chief": 1, "Worker": 8}, runPolicy={"schedulingPolicy": {"minAvailable": 5}}),
        ["ml/tfjob-train sub=2", "  chief min=1", "  worker min=4"],
    ),
    (
        "pytorchjob-master-and-workers",
        kubeflow("PyTorchJob", {"Master": 1, "Worker": 3}),
        ["ml/pytorchjob-train sub=2", "  master min=1", "  worker min=3"],
    ),
    (
        "pytorchjob-elastic-minreplicas-is-the-worker-minimum",
        kubeflow("PyTorchJob", {"Master": 1, "Worker": 8}, elasticPolicy={"minReplicas": 2, "maxReplicas": 8}),
        ["ml/pytorchjob-train sub=2", "  master min=1", "  worker min=2"],
    ),
    (
        "pytorchjob-minavailable-wins-over-elastic-policy",
        kubeflow(
            "PyTorchJob",
            {"Master": 1, "Worker": 8},
            elasticPolicy={"minReplicas": 2},
            runPolicy={"schedulingPolicy": {"minAvailable": 7}},
        ),
        ["ml/pytorchjob-train sub=2", "  master min=1", "  worker min=6"],
    ),
    ("jaxjob-workers", kubeflow("JAXJob", {"Worker": 4}), ["ml/jaxjob-train sub=1", "  worker min=4"]),
    (
        "xgboostjob-master-and-workers",
        kubeflow("XGBoostJob", {"Master": 1, "Worker": 3}),
        ["ml/xgboostjob-train sub=2", "  master min=1", "  worker min=3"],
    ),
    (
        "mpijob-launcher-and-workers",
        kubeflow("MPIJob", {"Launcher": 1, "Worker": 4}),
        ["ml/mpijob-train sub=2", "  launcher min=1", "  worker min=4"],
    ),
    (
        "mpijob-minavailable",
        kubeflow("MPIJob", {"Launcher": 1, "Worker": 4}, runPolicy={"schedulingPolicy": {"minAvailable": 3}}),
        ["ml/mpijob-train sub=2", "  launcher min=1", "  worker min=2"],
    ),
    ("job-indexed-parallelism", job(4, 8), ["ml/job-batch sub=1", "  job min=4"]),
    ("job-parallelism-capped-by-completions", job(8, 3), ["ml/job-batch sub=1", "  job min=3"]),
    ("job-defaults-to-one-pod", job(None, None, indexed=False), ["ml/job-batch sub=1", "  job min=1"]),
    (
        "jobset-one-subgroup-per-replicated-job-and-job-index",
        jobset([("leader", 1, 1), ("workers", 2, 4)]),
        [
            "ml/jobset-js sub=2",
            "  leader sub=1",
            "    leader-0 min=1",
            "  workers sub=2",
            "    workers-0 min=4",
            "    workers-1 min=4",
        ],
    ),
    (
        "raycluster-head-and-worker-groups-by-minreplicas",
        raycluster([("gpu-workers", 4, 2), ("cpu", 2, None)]),
        ["ml/raycluster-rc sub=3", "  head min=1", "  gpu-workers min=2", "  cpu min=0"],
    ),
    (
        "rayjob-groups-its-cluster-spec",
        rayjob([("gpu", 2, 1)]),
        ["ml/rayjob-rj sub=2", "  head min=1", "  gpu min=1"],
    ),
]


@pytest.mark.parametrize(("workload", "tree"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_builtin_grouper_tree(workload: dict[str, Any], tree: list[str]) -> None:
    result = group(workload)
    assert render(only(result)) == tree
    assert not result.waiting
    assert set(result.pod_group.values()) == {only(result).key}


MEMBERS: list[tuple[str, dict[str, Any], dict[str, list[str]]]] = [
    (
        "tfjob",
        kubeflow("TFJob", {"Chief": 1, "PS": 2, "Worker": 2}),
        {
            "chief": ["train-chief-0"],
            "ps": ["train-ps-0", "train-ps-1"],
            "worker": ["train-worker-0", "train-worker-1"],
        },
    ),
    (
        "mpijob-launcher-through-its-job",
        kubeflow("MPIJob", {"Launcher": 1, "Worker": 2}),
        {"launcher": ["train-launcher-0"], "worker": ["train-worker-0", "train-worker-1"]},
    ),
    (
        "jobset-pods-by-job-index",
        jobset([("workers", 2, 2)]),
        {"workers-0": ["js-workers-0-0", "js-workers-0-1"], "workers-1": ["js-workers-1-0", "js-workers-1-1"]},
    ),
    (
        "raycluster-pods-by-group-label",
        raycluster([("gpu", 2, 2)]),
        {"gpu": ["rc-gpu-worker-0", "rc-gpu-worker-1"], "head": ["rc-head"]},
    ),
    (
        "rayjob-pods-through-its-raycluster",
        rayjob([("gpu", 1, 1)]),
        {"gpu": ["rj-raycluster-gpu-worker-0"], "head": ["rj-raycluster-head"]},
    ),
]


@pytest.mark.parametrize(("workload", "want"), [c[1:] for c in MEMBERS], ids=[c[0] for c in MEMBERS])
def test_pods_join_their_replica_type(workload: dict[str, Any], want: dict[str, list[str]]) -> None:
    assert members(only(group(workload))) == want


def test_leaderworkerset_one_podgroup_per_group() -> None:
    result = group(lws(replicas=2, size=3))
    assert {k: render(g) for k, g in result.groups.items()} == {
        "ml/leaderworkerset-llm-0": ["ml/leaderworkerset-llm-0 sub=2", "  leader min=1", "  workers min=2"],
        "ml/leaderworkerset-llm-1": ["ml/leaderworkerset-llm-1 sub=2", "  leader min=1", "  workers min=2"],
    }
    assert members(result.groups["ml/leaderworkerset-llm-1"]) == {
        "leader": ["llm-1"],
        "workers": ["llm-1-1", "llm-1-2"],
    }


def test_leaderworkerset_of_size_one_has_only_a_leader() -> None:
    result = group(lws(replicas=1, size=1))
    assert render(only(result)) == ["ml/leaderworkerset-llm-0 sub=1", "  leader min=1"]


def test_kubeflow_order_is_the_replica_index() -> None:
    g = only(group(kubeflow("TFJob", {"Worker": 3})))
    assert dict(g.order) == {"ml/train-worker-0": 0, "ml/train-worker-1": 1, "ml/train-worker-2": 2}


def test_owner_is_the_workload() -> None:
    g = only(group(kubeflow("PyTorchJob", {"Master": 1})))
    assert g.owner is not None
    assert (g.owner.api_version, g.owner.kind, g.owner.name) == ("kubeflow.org/v1", "PyTorchJob", "train")
    assert g.source == "PyTorchJob ml/train"


def test_default_index_labels_are_seed_000s_table() -> None:
    from extender.grouping.kinds import DEFAULT_INDEX_LABELS

    assert {kind: label for (_, kind), label in DEFAULT_INDEX_LABELS.items()} == {
        "Job": "batch.kubernetes.io/job-completion-index",
        "PyTorchJob": "training.kubeflow.org/replica-index",
        "TFJob": "training.kubeflow.org/replica-index",
        "MPIJob": "training.kubeflow.org/replica-index",
        "JAXJob": "training.kubeflow.org/replica-index",
        "XGBoostJob": "training.kubeflow.org/replica-index",
        "LeaderWorkerSet": "leaderworkerset.sigs.k8s.io/worker-index",
    }
