"""How group_pods decides each pod's group (extender/grouping/group.py): explicit PodGroups, the
owner walk from the topmost owner down, hand-off, waiting for owners not yet visible, the
one-gang-per-owner fallback of owners that ask for it, and plain pods.
"""

from __future__ import annotations

from extender.grouping import ObjectIndex, group_pods
from tests.builders import podgroup
from tests.grouping_builders import (
    group,
    job,
    jobset,
    kubeflow,
    members,
    obj,
    only,
    owned_pod,
    raycluster,
    rayjob,
    render,
    template,
)

PG = podgroup({"minMember": 2}, name="pg", namespace="ml")


def test_pod_group_annotation_or_label_joins_the_podgroup_as_written() -> None:
    by_annotation = owned_pod("a", annotations={"pod-group-name": "pg"})
    by_label = owned_pod("b", labels={"scheduling.x-k8s.io/pod-group": "pg"})
    result = group(pods=[by_annotation, by_label], podgroups={"ml/pg": PG})
    g = only(result)
    assert (g.key, g.podgroup, g.source, g.owner) == ("ml/pg", PG, "PodGroup ml/pg", None)
    assert result.pod_group == {"ml/a": "ml/pg", "ml/b": "ml/pg"}


def test_explicit_podgroup_wins_over_the_owner() -> None:
    p = owned_pod("x", ("kubeflow.org/v1", "TFJob", "train"), annotations={"pod-group-name": "pg"})
    result = group(kubeflow("TFJob", {"Worker": 1}), pods=[p], podgroups={"ml/pg": PG})
    assert result.pod_group["ml/x"] == "ml/pg"
    assert result.pod_group["ml/train-worker-0"] == "ml/tfjob-train"


def test_pod_naming_a_missing_podgroup_waits() -> None:
    result = group(pods=[owned_pod("x", annotations={"pod-group-name": "later"})])
    assert result.waiting == {"ml/x": "PodGroup ml/later (named by the pod) does not exist yet"}
    assert not result.groups


def test_pod_without_owner_or_group_is_plain() -> None:
    result = group(pods=[owned_pod("lonely")])
    assert (dict(result.groups), dict(result.pod_group), dict(result.waiting)) == ({}, {}, {})


def test_daemonset_and_static_pods_stay_plain() -> None:
    pods = [owned_pod("ds-1", ("apps/v1", "DaemonSet", "ds")), owned_pod("static-1", ("v1", "Node", "n1"))]
    assert not group(pods=pods).pod_group


def test_known_owner_not_visible_makes_its_pods_wait() -> None:
    p = owned_pod(
        "train-worker-0", ("kubeflow.org/v1", "TFJob", "train"), {"training.kubeflow.org/replica-type": "worker"}
    )
    result = group(pods=[p])
    assert result.waiting == {"ml/train-worker-0": "TFJob ml/train is not visible yet; its spec decides the PodGroup"}


def test_unknown_owner_chain_that_asks_falls_back_to_one_gang_of_the_topmost_owner() -> None:
    # Its annotations ask for a gang (tests/test_plain_owners.py: without them its pods are plain).
    deployment = obj(
        "apps/v1",
        "Deployment",
        "web",
        metadata={"annotations": {"kai.scheduler/topology-required-placement": "block"}},
        spec={"replicas": 3, "template": template({"kai.scheduler/topology-preferred-placement": "rack"})},
    )
    rs = obj("apps/v1", "ReplicaSet", "web-5d8f", owner=("apps/v1", "Deployment", "web"))
    pods = [owned_pod(f"web-5d8f-{c}", ("apps/v1", "ReplicaSet", "web-5d8f")) for c in "abc"]
    g = only(group(objects=[deployment, rs], pods=pods))
    assert render(g) == ["ml/deployment-web sub=1 required=block", "  deployment min=3 preferred=rack"]
    assert g.owner is not None
    assert (g.owner.kind, g.owner.name) == ("Deployment", "web")


def test_fallback_reads_the_pods_when_the_owner_is_not_visible() -> None:
    ann = {"kai.scheduler/topology-required-placement": "rack"}
    pods = [owned_pod(f"w-{i}", ("example.com/v1", "Worker", "w"), annotations=ann) for i in range(2)]
    assert render(only(group(pods=pods))) == ["ml/worker-w sub=1", "  worker min=2 required=rack"]


def test_known_owner_below_an_unknown_one_claims_the_pod() -> None:
    # pod -> Job -> CronJob: no grouper knows CronJob, the Job grouper takes the pod
    cron = obj("batch/v1", "CronJob", "nightly")
    nightly = job(2, 2, name="nightly-123")
    nightly["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "controller": True}
    ]
    g = only(group(nightly, objects=[cron]))
    assert g.key == "ml/job-nightly-123"


def test_topmost_known_owner_wins() -> None:
    # JobSet -> Job -> Pod: both are known, the JobSet (topmost) groups the pods
    result = group(jobset([("w", 2, 1)]))
    assert list(result.groups) == ["ml/jobset-js"]


def test_rayjob_hands_its_submitter_pod_to_the_job_grouper() -> None:
    rj = rayjob([("gpu", 1, 1)])
    submitter = job(1, 1, indexed=False, name="rj-submitter")
    submitter["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "controller": True}
    ]
    sub_pod = owned_pod("rj-submitter-x", ("batch/v1", "Job", "rj-submitter"), gpus=0)
    result = group(rj, objects=[submitter], pods=[sub_pod])
    assert result.pod_group["ml/rj-submitter-x"] == "ml/job-rj-submitter"
    assert members(result.groups["ml/rayjob-rj"]) == {
        "gpu": ["rj-raycluster-gpu-worker-0"],
        "head": ["rj-raycluster-head"],
    }


def test_owner_cycle_ends_the_walk() -> None:
    a = obj("example.com/v1", "A", "a", owner=("example.com/v1", "B", "b"))
    b = obj("example.com/v1", "B", "b", owner=("example.com/v1", "A", "a"))
    # The pod asks for a gang, so that the gang's key shows which owner ended the walk.
    p = owned_pod("p", ("example.com/v1", "A", "a"), annotations={"kai.scheduler/topology": "default"})
    result = group_pods([p], ObjectIndex([a, b]), {})
    assert list(result.groups) == ["ml/b-b"]


def test_several_workloads_in_one_call() -> None:
    result = group(kubeflow("TFJob", {"Worker": 2}), raycluster([("g", 1, 1)]), job(1, 1, name="j"))
    assert sorted(result.groups) == ["ml/job-j", "ml/raycluster-rc", "ml/tfjob-train"]
    assert all(g.valid for g in result.groups.values())
    assert len(result.pod_group) == 2 + 2 + 1


def test_derived_key_taken_by_an_explicit_podgroup() -> None:
    taken = podgroup({"minMember": 1}, name="job-j", namespace="ml")
    p = owned_pod("x", annotations={"pod-group-name": "job-j"})
    result = group(job(1, 1, name="j"), pods=[p], podgroups={"ml/job-j": taken})
    assert result.groups["ml/job-j"].podgroup is taken
    derived = next(g for k, g in result.groups.items() if k != "ml/job-j")
    assert [str(e) for e in derived.errors] == [
        "Job ml/j: metadata.name: its PodGroup key ml/job-j is taken by PodGroup ml/job-j"
    ]
