"""Kubeflow Trainer's TrainJob: its pods (Pod -> Job -> JobSet -> TrainJob, as Trainer and the
JobSet controller make them) are one gang named after the TrainJob, with the tree of the JobSet
Trainer made; the JobSet that Trainer makes from the TrainJob and its runtime (the simulator's
synthesis), as Trainer v2.3.0 makes it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from extender.grouping import ObjectIndex, group_pods, synthesize
from extender.grouping.kinds.trainjob_runtime import strategic_merge
from extender.model.errors import InvalidObject
from extender.model.pod import parse_pod
from tests.grouping_builders import NS, members, only, render, template

API = "trainer.kubeflow.org/v1alpha1"
STEP = "trainer.kubeflow.org/trainjob-ancestor-step"
SEG4_RACK = {"kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": "rack"}


def runtime(
    jobs: list[dict[str, Any]] | None = None,
    name: str = "torch-distributed",
    kind: str = "ClusterTrainingRuntime",
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A runtime: by default one Job `node` of the trainer step (torch's shape)."""
    if jobs is None:
        jobs = [rjob("node", step="trainer")]
    meta: dict[str, Any] = {"name": name}
    if kind == "TrainingRuntime":
        meta["namespace"] = NS
    tmpl: dict[str, Any] = {"spec": {"replicatedJobs": jobs}}
    if annotations:
        tmpl["metadata"] = {"annotations": dict(annotations)}
    return {"apiVersion": API, "kind": kind, "metadata": meta, "spec": {"template": tmpl, **spec}}


def rjob(
    name: str, step: str | None = None, parallelism: int | None = None, ann: Mapping[str, str] | None = None
) -> dict[str, Any]:
    pod = template(ann, gpus=0)
    pod["spec"]["containers"][0]["name"] = "node"
    job_spec: dict[str, Any] = {"template": pod}
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    out: dict[str, Any] = {"name": name, "template": {"spec": job_spec}}
    if step is not None:
        out["template"]["metadata"] = {"labels": {STEP: step}}
    return out


def trainjob(
    name: str = "tj",
    runtime_ref: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = dict(annotations)
    ref = dict(runtime_ref or {"name": "torch-distributed"})
    return {"apiVersion": API, "kind": "TrainJob", "metadata": meta, "spec": {"runtimeRef": ref, **spec}}


def pod_patch(job: str, annotations: Mapping[str, str], **pod_spec: Any) -> dict[str, Any]:
    """A runtime patch of one Job's pod template (Trainer's spec.runtimePatches)."""
    pod: dict[str, Any] = {"metadata": {"annotations": dict(annotations)}}
    if pod_spec:
        pod["spec"] = pod_spec
    rjobs = [{"name": job, "template": {"spec": {"template": pod}}}]
    return {"manager": "example.com/me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": rjobs}}}}


def made(tj: Mapping[str, Any], *objects: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pods and the JobSet made for TJ."""
    out = synthesize(tj, objects=ObjectIndex(objects))
    (js,) = [o for o in out.owners if o["kind"] == "JobSet"]
    return list(out.pods), js


def grouped(tj: Mapping[str, Any], *objects: Mapping[str, Any]) -> Any:
    """TJ's pods grouped as in a cluster: seeing the TrainJob and the JobSet and Jobs made for it,
    not the runtime (the grouper reads what Trainer made)."""
    out = synthesize(tj, objects=ObjectIndex(objects))
    return group_pods([parse_pod(p) for p in out.pods], ObjectIndex([tj, *out.owners]), {})


# -- the gang --------------------------------------------------------------------------------------


def test_a_trainjobs_pods_are_one_gang_named_after_it_with_its_jobsets_tree() -> None:
    # The runtime's pod template cuts rack segments; the TrainJob's own metadata asks for one block.
    tj = trainjob(
        annotations={"kai.scheduler/topology": "dc", "kai.scheduler/topology-required-placement": "block"},
        trainer={"numNodes": 8},
    )
    result = grouped(tj, runtime([rjob("node", step="trainer", ann=SEG4_RACK)], mlPolicy={"torch": {}}))
    gang = only(result)
    assert gang.key == "ml/trainjob-tj"
    assert (gang.owner.kind, gang.owner.name) == ("TrainJob", "tj")  # type: ignore[union-attr]
    assert render(gang) == [
        "ml/trainjob-tj sub=1 required=block",
        "  node sub=1",
        "    node-0 sub=2",
        "      node-0-seg-0 min=4 required=rack",
        "      node-0-seg-1 min=4 required=rack",
    ]
    assert members(gang) == {
        "node-0-seg-0": [f"tj-node-0-{i}" for i in range(4)],
        "node-0-seg-1": [f"tj-node-0-{i}" for i in range(4, 8)],
    }
    assert gang.podgroup is not None
    assert gang.podgroup.annotations == {"kai.scheduler/topology": "dc"}


def test_a_runtime_patch_puts_segments_on_the_pods_and_the_runtimes_metadata_places_the_gang() -> None:
    # Where Trainer lets a user write annotations besides the TrainJob's metadata: the runtime's
    # JobSet template metadata (copied to the JobSet) and a runtime patch of a Job's pod template.
    tj = trainjob(trainer={"numNodes": 8}, runtimePatches=[pod_patch("node", SEG4_RACK)])
    rt = runtime(annotations={"kai.scheduler/topology": "dc", "kai.scheduler/topology-required-placement": "zone"})
    gang = only(grouped(tj, rt))
    assert render(gang)[0] == "ml/trainjob-tj sub=1 required=zone"
    assert render(gang)[3:] == ["      node-0-seg-0 min=4 required=rack", "      node-0-seg-1 min=4 required=rack"]
    assert gang.podgroup is not None
    assert gang.podgroup.annotations == {"kai.scheduler/topology": "dc"}


def test_the_trainjobs_own_placement_wins_over_its_runtimes() -> None:
    tj = trainjob(annotations={"kueue.x-k8s.io/podset-required-topology": "block"}, trainer={"numNodes": 2})
    gang = only(grouped(tj, runtime(annotations={"kai.scheduler/topology-required-placement": "zone"})))
    assert not gang.errors
    assert render(gang)[0] == "ml/trainjob-tj sub=1 required=block"


def test_a_misspelt_key_names_the_object_it_is_written_on() -> None:
    tj = trainjob(annotations={"kai.scheduler/topology-required-placment": "block"}, trainer={"numNodes": 2})
    rt = runtime(annotations={"kai.scheduler/segment-sise": "2"})
    errors = [str(e) for e in only(grouped(tj, rt)).errors]
    assert any(
        e.startswith("TrainJob ml/tj: metadata.annotations[kai.scheduler/topology-required-placment]") for e in errors
    )
    assert any(e.startswith("JobSet ml/tj: metadata.annotations[kai.scheduler/segment-sise]") for e in errors)


def test_a_segment_annotation_on_a_jobs_pod_template_is_a_field_of_the_jobset() -> None:
    patch = pod_patch("node", {"kai.scheduler/segment-size": "0"})
    tj = trainjob(annotations={"kai.scheduler/topology": "dc"}, trainer={"numNodes": 4}, runtimePatches=[patch])
    (error,) = only(grouped(tj, runtime())).errors
    assert str(error).startswith(
        "JobSet ml/tj: spec.replicatedJobs[0].template.spec.template.metadata.annotations[kai.scheduler/segment-size]:"
    )


def test_pods_a_trainjob_owns_directly_are_not_its_gang() -> None:
    # Trainer makes pods through its JobSet only; a pod owned by the TrainJob itself is left to the
    # rule for owners no grouper reads (plain, unless it asks to be a gang).
    tj = trainjob()
    pod = parse_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "stray",
                "namespace": NS,
                "ownerReferences": [{"apiVersion": API, "kind": "TrainJob", "name": "tj", "controller": True}],
            },
            "spec": {"containers": [{"name": "c"}]},
        }
    )
    result = group_pods([pod], ObjectIndex([tj]), {})
    assert result.groups == {}
    assert result.waiting == {}


# -- the JobSet Trainer makes (the simulator's synthesis) -----------------------------------------


def test_numnodes_and_resources_per_node_go_to_the_trainer_step_and_initializers_run_once() -> None:
    rt = runtime(
        [
            rjob("dataset-initializer", step="dataset-initializer"),
            rjob("model-initializer", step="model-initializer"),
            rjob("node", step="trainer"),
        ],
        mlPolicy={"numNodes": 2, "torch": {}},
    )
    per_node = {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
    pods, js = made(trainjob(trainer={"numNodes": 16, "resourcesPerNode": per_node}), rt)
    jobs = {r["name"]: r for r in js["spec"]["replicatedJobs"]}
    assert [(n, r["replicas"], r["template"]["spec"]["parallelism"]) for n, r in jobs.items()] == [
        ("dataset-initializer", 1, 1),
        ("model-initializer", 1, 1),
        ("node", 1, 16),
    ]
    node = [p for p in pods if p["metadata"]["name"].startswith("tj-node-0-")]
    assert len(node) == 16
    assert len(pods) == 18
    assert node[0]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1", "nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    assert js["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert all(r["template"]["spec"]["completionMode"] == "Indexed" for r in jobs.values())


def test_without_numnodes_the_runtimes_mlpolicy_sets_the_trainer_step() -> None:
    pods, _ = made(trainjob(), runtime(mlPolicy={"numNodes": 3, "torch": {}}))
    assert [p["metadata"]["name"] for p in pods] == ["tj-node-0-0", "tj-node-0-1", "tj-node-0-2"]


@pytest.mark.parametrize(("launcher_as_node", "nodes"), [(False, 4), (True, 3)], ids=["mpi", "launcher-as-node"])
def test_mpi_sets_its_job_of_nodes(launcher_as_node: bool, nodes: int) -> None:
    rt = runtime(
        [rjob("launcher", step="trainer"), rjob("node")],
        mlPolicy={"numNodes": 1, "mpi": {"runLauncherAsNode": launcher_as_node}},
    )
    _, js = made(trainjob(trainer={"numNodes": 4}), rt)
    assert [(r["name"], r["template"]["spec"]["parallelism"]) for r in js["spec"]["replicatedJobs"]] == [
        ("launcher", 1),
        ("node", nodes),
    ]


def test_runtime_patches_merge_in_order_into_the_runtimes_template() -> None:
    rt = runtime(annotations={"a": "runtime", "b": "runtime"})
    rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        "pool": "a",
        "zone": "z1",
    }
    first = pod_patch("node", {"x": "1"}, nodeSelector={"pool": "b"}, tolerations=[{"key": "gpu"}])
    first["trainingRuntimeSpec"]["template"]["metadata"] = {"annotations": {"b": "patch"}}
    second = pod_patch("node", {"y": "2"}, schedulingGates=[{"name": "wait"}])
    pods, js = made(trainjob(trainer={"numNodes": 1}, runtimePatches=[first, second]), rt)
    assert js["metadata"]["annotations"] == {"a": "runtime", "b": "patch"}
    (pod,) = pods
    assert pod["metadata"]["annotations"]["x"] == "1"
    assert pod["metadata"]["annotations"]["y"] == "2"
    assert pod["spec"]["nodeSelector"] == {"pool": "b", "zone": "z1"}
    assert pod["spec"]["tolerations"] == [{"key": "gpu"}]
    assert pod["spec"]["schedulingGates"] == [{"name": "wait"}]


def test_strategic_merge_joins_named_lists_and_replaces_the_others() -> None:
    base = {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}], "tolerations": [{"key": "t"}]}
    patch = {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}, {"name": "b"}], "tolerations": []}
    assert strategic_merge(copy.deepcopy(base), patch) == {
        "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}, {"name": "b"}],
        "tolerations": [],
    }


def test_coscheduling_labels_the_pods_with_the_podgroup_trainer_makes() -> None:
    pods, _ = made(trainjob(), runtime(podGroupPolicy={"coscheduling": {"scheduleTimeoutSeconds": 60}}))
    assert pods[0]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "tj"


def test_a_namespaced_runtime_is_read_from_the_trainjobs_namespace() -> None:
    rt = runtime(kind="TrainingRuntime", name="mine", mlPolicy={"numNodes": 2})
    out = synthesize(trainjob(runtime_ref={"name": "mine", "kind": "TrainingRuntime"}), objects=ObjectIndex([rt]))
    assert len(out.pods) == 2
    assert ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime", NS, "mine") in out.read


def test_the_trainjobs_jobset_when_given_is_used_as_trainer_made_it() -> None:
    _, js = made(trainjob(trainer={"numNodes": 2}), runtime())
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 3
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] = 3
    out = synthesize(trainjob(trainer={"numNodes": 2}), objects=ObjectIndex([js]))  # no runtime
    assert len(out.pods) == 3


@pytest.mark.parametrize(
    ("tj", "objects", "want"),
    [
        (
            trainjob(),
            [],
            "TrainJob ml/tj: spec.runtimeRef.name: names ClusterTrainingRuntime torch-distributed, which is not in"
            " the input: give it (kubectl get clustertrainingruntime torch-distributed -o yaml), or the JobSet"
            " Trainer made for this TrainJob",
        ),
        (
            trainjob(runtime_ref={"name": "x", "kind": "Runtime"}),
            [],
            "TrainJob ml/tj: spec.runtimeRef: expected ClusterTrainingRuntime or TrainingRuntime of"
            " trainer.kubeflow.org, got Runtime of trainer.kubeflow.org",
        ),
        (
            trainjob(runtimePatches=[pod_patch("nodes", {})]),
            [runtime()],
            "TrainJob ml/tj: spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name:"
            " 'nodes' names no replicated Job of the runtime (have: node)",
        ),
        (
            trainjob(runtimePatches=[pod_patch("node", {}, nodeSelecter={"a": "b"})]),
            [runtime()],
            "TrainJob ml/tj: spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec"
            ".template.spec.nodeSelecter: unknown field; did you mean nodeSelector?",
        ),
        (
            trainjob(trainer={"numNodes": -1}),
            [runtime()],
            "TrainJob ml/tj: spec.trainer.numNodes: expected an integer >= 0, got -1",
        ),
        (
            trainjob(podTemplateOverrides=[{"targetJobs": [{"name": "node"}]}]),
            [runtime()],
            "TrainJob ml/tj: spec.podTemplateOverrides: is Trainer v2.1's field; topogang makes a TrainJob's pods as"
            " Trainer v2.3.0 does, with spec.runtimePatches[].trainingRuntimeSpec.template for what it set",
        ),
        (
            trainjob(trainr={"numNodes": 2}),
            [runtime()],
            "TrainJob ml/tj: spec.trainr: unknown field; did you mean trainer?",
        ),
    ],
    ids=[
        "runtime-not-given",
        "not-a-runtime-kind",
        "patch-names-no-job",
        "patch-misspelt-field",
        "bad-numnodes",
        "an-older-releases-field",
        "misspelt-spec-field",
    ],
)
def test_bad_input_names_the_field(tj: dict[str, Any], objects: list[dict[str, Any]], want: str) -> None:
    with pytest.raises(InvalidObject) as exc:
        synthesize(tj, objects=ObjectIndex(objects))
    assert want in [str(e) for e in exc.value.errors]
