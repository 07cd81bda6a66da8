"""Workloads `topogang simulate` is given without pods: a Deployment, ReplicaSet or StatefulSet
gets the pods its controller would create; any other object it cannot use is named in a warning
that says what to give instead, never dropped without a word.

Cluster: two nodes of 8 GPUs, racks r1 and r2 (tests/test_simulate_cli.py's NODES).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli import main
from extender.grouping import ObjectIndex, synthesize
from extender.model.errors import InvalidObject
from extender.model.pod import parse_pod
from extender.simulate.loader import load
from extender.simulate.runner import Simulation
from tests.grouping_builders import jobset, lws
from tests.test_simulate_cli import NODES, pods, write

GENERATED = "[bcdfghjklmnpqrstvwxz2456789]"  # the API server's alphabet for generated names


def workload(kind: str, name: str, replicas: int | None = 2, **spec: Any) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}, "annotations": {"note": "x"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
    }
    body: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}, "template": template, **spec}
    if replicas is not None:
        body["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": "ml"}, "spec": body}


def simulate(tmp: Path, capsys: pytest.CaptureFixture[str], *docs: dict[str, Any] | str) -> dict[str, Any]:
    text = NODES + "".join("---\n" + (d if isinstance(d, str) else json.dumps(d)) + "\n" for d in docs)
    code = main(["simulate", "-o", "json", "-f", str(write(tmp, "in.yaml", text))])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_a_deployment_makes_a_replicaset_whose_pods_are_named_as_generateName_names_them() -> None:
    made = synthesize(workload("Deployment", "web", replicas=3))
    (rs,) = made.owners
    rs_name, pod_hash = rs["metadata"]["name"], rs["metadata"]["labels"]["pod-template-hash"]
    assert re.fullmatch(f"{GENERATED}{{6,10}}", pod_hash)
    assert rs_name == f"web-{pod_hash}"
    assert (rs["kind"], rs["metadata"]["ownerReferences"][0]["kind"]) == ("ReplicaSet", "Deployment")
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": pod_hash}
    names = [p["metadata"]["name"] for p in made.pods]
    assert len(set(names)) == 3
    assert all(re.fullmatch(f"{rs_name}-{GENERATED}{{5}}", n) for n in names), names
    for body in made.pods:
        assert body["metadata"]["labels"] == {"app": "web", "pod-template-hash": pod_hash}
        assert body["metadata"]["annotations"] == {"note": "x"}
        pod = parse_pod(body)
        assert pod.controller is not None
        assert (pod.controller.kind, pod.controller.name, pod.controller.uid) == (
            "ReplicaSet",
            rs_name,
            rs["metadata"]["uid"],
        )
    assert synthesize(workload("Deployment", "web", replicas=3)) == made  # stable: no random draw
    changed = workload("Deployment", "web", replicas=3)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "v2"
    assert synthesize(changed).owners[0]["metadata"]["name"] != rs_name  # a new template, a new ReplicaSet


def test_a_replicaset_names_its_pods_with_five_characters_and_never_twice() -> None:
    made = synthesize(workload("ReplicaSet", "cache", replicas=3000))
    names = [p["metadata"]["name"] for p in made.pods]
    assert len(set(names)) == 3000
    assert all(re.fullmatch(f"cache-{GENERATED}{{5}}", n) for n in names)
    (one,) = synthesize(workload("ReplicaSet", "c" * 70, replicas=None)).pods  # replicas defaults to 1
    assert len(one["metadata"]["name"]) == 63  # the prefix is cut to 58, as generateName cuts it
    assert one["metadata"]["name"].startswith("c" * 58)


def test_a_statefulset_names_its_pods_by_ordinal() -> None:
    sts = workload("StatefulSet", "db", replicas=2, serviceName="db-headless", ordinals={"start": 3})
    sts["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": {}}]
    made = synthesize(sts)
    assert made.owners == ()
    assert [p["metadata"]["name"] for p in made.pods] == ["db-3", "db-4"]
    first = made.pods[0]
    labels = first["metadata"]["labels"]
    assert labels["app"] == "db"
    assert labels["statefulset.kubernetes.io/pod-name"] == "db-3"
    assert labels["apps.kubernetes.io/pod-index"] == "3"
    assert labels["controller-revision-hash"].startswith("db-")
    assert (first["spec"]["hostname"], first["spec"]["subdomain"]) == ("db-3", "db-headless")
    assert first["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-3"}}]
    assert first["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    assert [p["metadata"]["name"] for p in synthesize(workload("StatefulSet", "one", replicas=None)).pods] == ["one-0"]


def test_deployments_statefulsets_and_replicasets_are_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = simulate(
        tmp_path,
        capsys,
        workload("Deployment", "web"),
        workload("StatefulSet", "db"),
        workload("ReplicaSet", "cache", replicas=1),
    )
    placed = {p["name"]: p["node"] for p in doc["pods"]}
    assert len(placed) == 5
    assert all(placed.values()), placed
    assert {"db-0", "db-1"} <= set(placed)
    assert sum(1 for n in placed if re.fullmatch(f"web-{GENERATED}+-{GENERATED}{{5}}", n)) == 2
    assert sum(1 for n in placed if re.fullmatch(f"cache-{GENERATED}{{5}}", n)) == 1
    assert doc["warnings"] == []


def test_a_deployment_given_with_its_pods_or_its_replicaset_is_not_made_twice(tmp_path: Path) -> None:
    deployment = workload("Deployment", "web", replicas=2)
    rs = workload("ReplicaSet", "web-abc", replicas=2)
    rs["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u", "controller": True}
    ]
    path = write(tmp_path, "in.yaml", NODES + f"---\n{json.dumps(deployment)}\n---\n{json.dumps(rs)}\n")
    simulation = Simulation(load([str(path)]))
    assert sorted(simulation.state.pods) == sorted(f"ml/{p['metadata']['name']}" for p in synthesize(rs).pods)
    # its pods given (a ReplicaSet's, as a cluster dump has them): nothing is made
    given = synthesize(deployment)
    docs = [deployment, *given.owners, *given.pods]
    write(tmp_path, "in.yaml", NODES + "".join(f"---\n{json.dumps(d)}\n" for d in docs))
    simulation = Simulation(load([str(path)]))
    assert sorted(simulation.state.pods) == sorted(f"ml/{p['metadata']['name']}" for p in given.pods)
    assert simulation.warnings == []


def test_a_deployment_of_a_billion_replicas_is_invalid_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = "apiVersion: scheduling.topogang.io/v1alpha1\nkind: PodGroup\nmetadata: {name: good}\nspec: {minMember: 1}\n"
    text = NODES + "---\n" + json.dumps(workload("Deployment", "huge", replicas=10**9)) + "\n---\n" + good
    assert main(["simulate", "-o", "json", "-f", str(write(tmp_path, "in.yaml", text + pods("good", 1)))]) == 3
    doc = json.loads(capsys.readouterr().out)
    (huge,) = [g for g in doc["podGroups"] if g["name"] == "deployment-huge"]
    assert huge["phase"] == "Invalid"
    assert huge["message"].endswith(
        "Deployment ml/huge: spec.replicas: is 1,000,000,000; topogang's limit is 100,000 (the README lists the limits)"
    )
    assert {p["name"]: p["node"] for p in doc["pods"]} == {"good-0": "n1"}


CRONJOB = """apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: ml}
spec: {schedule: "0 1 * * *", jobTemplate: {spec: {template: {spec: {containers: [{name: c}]}}}}}
"""
TRAINJOB = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj, namespace: ml}
spec: {runtimeRef: {name: torch-distributed}, trainer: {numNodes: 4}}
"""
TFJOB_V2 = """apiVersion: kubeflow.org/v2
kind: TFJob
metadata: {name: tf, namespace: ml}
spec: {tfReplicaSpecs: {Worker: {replicas: 2, template: {spec: {containers: [{name: c}]}}}}}
"""
UNKNOWN = """apiVersion: example.com/v1
kind: Trainer
metadata: {name: mine, namespace: ml}
spec: {workers: 4}
"""
SERVICE = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ml}\nspec: {}\n"


def test_objects_it_cannot_use_are_named_with_what_to_give_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "in.yaml", NODES + "".join(f"---\n{d}" for d in (CRONJOB, TFJOB_V2, UNKNOWN, SERVICE)))
    code = main(["simulate", "-f", str(path)])
    out = capsys.readouterr().out.replace(f"{tmp_path}/", "")
    assert code == 0
    assert out.splitlines()[-7:] == [
        "Warnings (4):",
        "  in.yaml:17: CronJob ml/nightly (batch/v1): not simulated: topogang does not make its pods; a CronJob"
        " makes a Job at each run: give that Job, or its pods",
        "  in.yaml:22: TFJob ml/tf (kubeflow.org/v2): not simulated: topogang makes the pods of TFJob kubeflow.org/v1,"
        " not kubeflow.org/v2; give it as kubeflow.org/v1, or give its pods",
        "  in.yaml:27: Trainer ml/mine (example.com/v1): not simulated: topogang reads no Trainer; if it makes pods,"
        " give them in the input (their ownerReferences naming it, as its controller sets them), or pods that"
        " name a PodGroup",
        "  not read by the simulator: Service ml/web",
        "",
        "0 pod(s) placed, 0 pending, 0 PodGroup(s), 4 warning(s).",
    ]


def test_json_lists_the_warnings_and_stderr_says_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "in.yaml", NODES + "---\n" + CRONJOB)
    assert main(["simulate", "-o", "json", "-f", str(path)]) == 0
    out, err = capsys.readouterr()
    (warning,) = json.loads(out)["warnings"]
    assert warning.startswith(f"{path}:17: CronJob ml/nightly (batch/v1): not simulated")
    assert err == f"topogang simulate: warning: {warning}\n"


def test_an_owner_its_pods_reach_and_an_object_given_twice(tmp_path: Path) -> None:
    # A TrainJob whose pods are given (with its JobSet): used, no warning. A Service given twice:
    # the later one replaces the first, as kubectl applies them, and the warning says so.
    owned = pods("x", 1).replace(
        "annotations: {pod-group-name: x}",
        "ownerReferences: [{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, name: tj, controller: true}]",
    )
    text = NODES + "---\n" + TRAINJOB.replace("namespace: ml", "namespace: default") + owned
    text += "---\n" + SERVICE + "---\n" + SERVICE
    simulation = Simulation(load([str(write(tmp_path, "in.yaml", text))]))
    shown = [w.replace(f"{tmp_path}/", "") for w in simulation.warnings]
    assert shown == [
        "in.yaml:27: Service ml/web is given again at in.yaml:32, which replaces it",
        "not read by the simulator: Service ml/web",
    ]


@pytest.mark.parametrize(
    "workload_body", [lws(replicas=2, size=3), jobset([("workers", 2, 2)])], ids=["leaderworkerset", "jobset"]
)
def test_a_workload_given_with_the_objects_its_controller_made_gets_its_pods_once(
    tmp_path: Path, workload_body: dict[str, Any]
) -> None:
    # A dump of a LeaderWorkerSet and its StatefulSets (or a JobSet and its Jobs), without pods:
    # the StatefulSets and Jobs are not expanded on their own beside their workload's pods.
    made = synthesize(workload_body)
    docs = [workload_body, *made.owners]
    path = write(tmp_path, "in.yaml", NODES + "".join(f"---\n{json.dumps(d)}\n" for d in docs))
    simulation = Simulation(load([str(path)]))
    assert sorted(simulation.state.pods) == sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in made.pods
    )
    assert simulation.warnings == []


def test_a_statefulset_start_ordinal_is_not_a_size() -> None:
    far = workload("StatefulSet", "db", replicas=1, ordinals={"start": 2_000_000_000})
    assert [p["metadata"]["name"] for p in synthesize(far).pods] == ["db-2000000000"]
    with pytest.raises(InvalidObject, match=r"spec.ordinals.start: expected an integer >= 0, got -1"):
        synthesize(workload("StatefulSet", "db", ordinals={"start": -1}))


# -- Kubeflow Trainer's TrainJob: made through its runtime, as Trainer makes its JobSet ------------

TORCH_RUNTIME = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: x}]}}}
"""
TRAINJOB_8_GPUS = TRAINJOB.replace("numNodes: 4}", 'numNodes: 2, resourcesPerNode: {requests: {nvidia.com/gpu: "8"}}}')


def test_a_trainjob_is_simulated_through_its_runtime_as_one_gang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = simulate(tmp_path, capsys, TORCH_RUNTIME, TRAINJOB_8_GPUS)
    assert {p["name"]: p["node"] for p in doc["pods"]} == {"tj-node-0-0": "n1", "tj-node-0-1": "n2"}
    assert [(g["name"], g["phase"]) for g in doc["podGroups"]] == [("trainjob-tj", "Scheduled")]
    assert doc["warnings"] == []  # the runtime was read


def test_a_trainjob_given_with_the_jobset_trainer_made_gets_its_pods_from_it(tmp_path: Path) -> None:
    # A dump of a TrainJob and its JobSet and Jobs, without the runtime: the JobSet is used as
    # Trainer made it, its pods made once.
    made = synthesize(yaml.safe_load(TRAINJOB_8_GPUS), objects=ObjectIndex([yaml.safe_load(TORCH_RUNTIME)]))
    docs = [TRAINJOB_8_GPUS, *(json.dumps(o) for o in made.owners)]
    simulation = Simulation(load([str(write(tmp_path, "in.yaml", NODES + "".join(f"---\n{d}\n" for d in docs)))]))
    assert sorted(simulation.state.pods) == ["ml/tj-node-0-0", "ml/tj-node-0-1"]
    assert simulation.warnings == []


def test_a_trainjob_whose_runtime_is_not_given_is_invalid_saying_what_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "in.yaml", NODES + "---\n" + TRAINJOB)
    assert main(["simulate", "-o", "json", "-f", str(path)]) == 3
    (group,) = json.loads(capsys.readouterr().out)["podGroups"]
    assert (group["name"], group["phase"]) == ("trainjob-tj", "Invalid")
    assert group["message"].endswith(
        "TrainJob ml/tj: spec.runtimeRef.name: names ClusterTrainingRuntime torch-distributed, which is not in the"
        " input: give it (kubectl get clustertrainingruntime torch-distributed -o yaml), or the JobSet Trainer made"
        " for this TrainJob"
    )
