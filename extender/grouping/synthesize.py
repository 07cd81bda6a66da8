"""The pods a workload's controller would create, for a workload given without pods.

    synthesize(workload) -> Synthesized(pods, owners)

Each pod is a raw v1 Pod: the PodTemplate's labels, annotations and spec (requests,
tolerations, nodeSelector, affinity) plus what the controller adds (its labels, and a controller
ownerReference); `owners` are the intermediate objects between the pods and the workload, so
that the grouper's owner walk finds them:

    Job             Job -> Pod                             <job>-<i>
    Kubeflow v1     TFJob ... -> Pod                       <job>-<replica type>-<i>
    MPIJob v2beta1  MPIJob -> Job <job>-launcher -> Pod    <job>-launcher-0
                    MPIJob -> Pod                          <job>-worker-<i>
    LeaderWorkerSet LWS -> StatefulSet <lws> -> leader Pod <lws>-<g>
                    leader Pod -> StatefulSet <lws>-<g> -> Pod <lws>-<g>-<w>   (w = 1..size-1)
    JobSet          JobSet -> Job <js>-<rjob>-<j> -> Pod   <js>-<rjob>-<j>-<i>
    RayCluster      RayCluster -> Pod                      <rc>-head, <rc>-<group>-worker-<i>
    RayJob          RayJob -> RayCluster <rj>-raycluster -> Pod   (the submitter Job comes later,
                    once the cluster runs, and is not created here)

Real controllers add a random suffix to some of these names; synthesized names have none, so
they are stable. UIDs are derived from kind, namespace and name (uuid5) unless the workload
has one. A workload that cannot be read raises InvalidObject naming the field.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.grouping import names as n
from extender.grouping.kinds.job import job_replicas
from extender.grouping.kinds.lws import requests_accelerator, subgroup_index
from extender.grouping.values import count, list_at, mapping_at, positive_int
from extender.model.errors import FieldError, InvalidObject
from extender.model.limits import MAX_WORKLOAD_PODS, beyond

JSON = dict[str, Any]

OPERATOR_NAMES = {
    "TFJob": "tfjob-controller",
    "PyTorchJob": "pytorchjob-controller",
    "JAXJob": "jaxjob-controller",
    "XGBoostJob": "xgboostjob-controller",
    "MPIJob": "mpi-operator",
}
MASTER_ROLES = frozenset({"chief", "master"})


class _TooMany(Exception):
    """The workload would have more pods than MAX_WORKLOAD_PODS (the error is in `_Out.errors`)."""


@dataclass(frozen=True)
class Synthesized:
    pods: tuple[JSON, ...]
    owners: tuple[JSON, ...]  # intermediate owner objects (Jobs, StatefulSets, RayClusters)


def can_synthesize(api_version: str, kind: str) -> bool:
    return (api_version, kind) in _KINDS


def uid_for(kind: str, namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"topogang/{kind}/{namespace}/{name}"))


class _Out:
    def __init__(self, workload: Mapping[str, Any], default_namespace: str) -> None:
        meta = workload.get("metadata")
        self.meta: Mapping[str, Any] = meta if isinstance(meta, Mapping) else {}
        self.api_version = str(workload.get("apiVersion") or "")
        self.kind = str(workload.get("kind") or "")
        self.name = str(self.meta.get("name") or "")
        self.namespace = str(self.meta.get("namespace") or default_namespace)
        self.uid = str(self.meta.get("uid") or uid_for(self.kind, self.namespace, self.name))
        self.obj = f"{self.kind} {self.namespace}/{self.name or '<unnamed>'}"
        self.errors: list[FieldError] = []
        self.pods: list[JSON] = []
        self.owners: list[JSON] = []
        self.expected = 0  # pods announced so far, checked before they are made
        spec = workload.get("spec")
        self.spec: Mapping[str, Any] = spec if isinstance(spec, Mapping) else {}
        if not self.name:
            self.errors.append(FieldError(self.obj, "metadata.name", "expected a non-empty string"))
        if not isinstance(spec, Mapping):
            self.errors.append(FieldError(self.obj, "spec", "expected an object"))

    def expect(self, pods: int, field: str) -> None:
        """Count `pods` more before making them; past MAX_WORKLOAD_PODS, stop with an error."""
        self.expected += pods
        if self.expected > MAX_WORKLOAD_PODS:
            why = f"would make {self.expected:,} pods or more; {beyond(MAX_WORKLOAD_PODS)}"
            self.errors.append(FieldError(self.obj, field, why))
            raise _TooMany

    def ref(self) -> JSON:
        return owner_ref(self.api_version, self.kind, self.name, self.uid)

    def owner(self, api_version: str, kind: str, name: str, owner: JSON, labels: Mapping[str, str], spec: Any) -> JSON:
        """Add an intermediate owner object; return its ownerReference for its children."""
        uid = uid_for(kind, self.namespace, name)
        body: JSON = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid,
                "labels": dict(labels),
                "ownerReferences": [owner],
            },
            "spec": copy.deepcopy(spec),
        }
        self.owners.append(body)
        return owner_ref(api_version, kind, name, uid)

    def pod(
        self,
        name: str,
        template: Mapping[str, Any],
        owner: JSON,
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None = None,
    ) -> JSON:
        meta = template.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        spec = template.get("spec")
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid_for("Pod", self.namespace, name),
                "labels": {**_strs(meta.get("labels")), **labels},
                "annotations": {**_strs(meta.get("annotations")), **(annotations or {})},
                "ownerReferences": [owner],
            },
            "spec": copy.deepcopy(dict(spec)) if isinstance(spec, Mapping) else {"containers": []},
            "status": {"phase": "Pending"},
        }
        self.pods.append(body)
        return body


def owner_ref(api_version: str, kind: str, name: str, uid: str) -> JSON:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _strs(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items() if v is not None}


def _job_pods(
    out: _Out,
    job_name: str,
    job_ref: JSON,
    job_spec: Mapping[str, Any],
    where: str,
    extra: Mapping[str, str],
    extra_annotations: Mapping[str, str] | None = None,
) -> None:
    """The pods of one batch/v1 Job: parallelism of them (capped by completions), indexed or not."""
    replicas = job_replicas(job_spec, out.obj, where, out.errors)
    template = mapping_at(job_spec, "template", out.obj, where, out.errors)
    indexed = job_spec.get("completionMode") == "Indexed"
    out.expect(replicas, f"{where}.parallelism")
    uid = str(job_ref["uid"])
    for i in range(replicas):
        labels = {
            n.JOB_CONTROLLER_UID: uid,
            n.JOB_CONTROLLER_UID_LEGACY: uid,
            n.JOB_NAME: job_name,
            n.JOB_NAME_LEGACY: job_name,
            **extra,
        }
        annotations = dict(extra_annotations or {})
        if indexed:
            labels[n.JOB_COMPLETION_INDEX] = str(i)
            annotations[n.JOB_COMPLETION_INDEX] = str(i)
        out.pod(f"{job_name}-{i}", template, job_ref, labels, annotations)


def _job(out: _Out) -> None:
    _job_pods(out, out.name, out.ref(), out.spec, "spec", {})


def _kubeflow(out: _Out) -> None:
    field = n.KUBEFLOW_REPLICA_SPECS[(out.api_version, out.kind)]
    specs = mapping_at(out.spec, field, out.obj, "spec", out.errors)
    launcher_as_worker = out.kind == "MPIJob" and out.spec.get("runLauncherAsWorker") is True
    for rtype in specs:
        where = f"spec.{field}.{rtype}"
        rs = mapping_at(specs, str(rtype), out.obj, f"spec.{field}", out.errors)
        replicas = count(rs, "replicas", 1, out.obj, where, out.errors)
        template = mapping_at(rs, "template", out.obj, where, out.errors)
        lower = str(rtype).lower()
        base = {
            n.KF_JOB_NAME: out.name,
            n.KF_OPERATOR_NAME: OPERATOR_NAMES[out.kind],
            n.KF_REPLICA_TYPE: lower,
        }
        if out.kind == "MPIJob" and lower == "launcher":
            labels = {**base, n.KF_REPLICA_INDEX: "0", n.KF_JOB_ROLE: "launcher"}
            job_ref = out.owner(n.BATCH_V1, "Job", f"{out.name}-launcher", out.ref(), labels, {"template": template})
            job_spec = {"parallelism": replicas, "completions": replicas, "template": template}
            _job_pods(out, f"{out.name}-launcher", job_ref, job_spec, where, labels)
            continue
        out.expect(replicas, f"{where}.replicas")
        for i in range(replicas):
            index = i + 1 if launcher_as_worker and lower == "worker" else i
            labels = {**base, n.KF_REPLICA_INDEX: str(index)}
            if lower in MASTER_ROLES and i == 0:
                labels[n.KF_JOB_ROLE] = "master"
            out.pod(f"{out.name}-{lower}-{i}", template, out.ref(), labels)


def _lws(out: _Out) -> None:
    replicas = count(out.spec, "replicas", 1, out.obj, "spec", out.errors)
    lwt = mapping_at(out.spec, "leaderWorkerTemplate", out.obj, "spec", out.errors)
    where = "spec.leaderWorkerTemplate"
    size = max(count(lwt, "size", 1, out.obj, where, out.errors), 1)
    worker_t = mapping_at(lwt, "workerTemplate", out.obj, where, out.errors)
    leader_t = mapping_at(lwt, "leaderTemplate", out.obj, where, out.errors) if "leaderTemplate" in lwt else worker_t
    policy = mapping_at(lwt, "subGroupPolicy", out.obj, where, out.errors)
    # a bad subGroupSize makes the group Invalid in the grouper; the pods can still be made
    sgs = positive_int(policy.get("subGroupSize"), out.obj, f"{where}.subGroupPolicy.subGroupSize", [])
    excluded = policy.get("subGroupPolicyType") == "LeaderExcluded"
    shift = sgs is not None and (not requests_accelerator(leader_t) or ((size - 1) % sgs == 0 and size % sgs != 0))
    base = {n.LWS_NAME: out.name}

    def subgroup(w: int) -> dict[str, str]:
        i = None if sgs is None else subgroup_index(w, size, sgs, shift, excluded)
        return {} if i is None else {n.LWS_SUBGROUP_INDEX: str(i)}

    size_ann = {n.LWS_SIZE: str(size)}
    if sgs is not None:
        size_ann[n.LWS_SUBGROUP_SIZE] = str(sgs)
    leader_sts = out.owner(n.APPS_V1, "StatefulSet", out.name, out.ref(), base, {"replicas": replicas})
    out.expect(replicas * size, "spec.replicas")
    for g in range(replicas):
        leader_name = f"{out.name}-{g}"
        group = {**base, n.LWS_GROUP_INDEX: str(g), n.LWS_GROUP_KEY: uid_for("group", out.namespace, leader_name)}
        leader_labels = {**group, n.LWS_WORKER_INDEX: "0", **subgroup(0)}
        leader = out.pod(leader_name, leader_t, leader_sts, leader_labels, size_ann)
        if size == 1:
            continue
        leader_ref = owner_ref("v1", "Pod", leader_name, str(leader["metadata"]["uid"]))
        workers_sts = out.owner(n.APPS_V1, "StatefulSet", leader_name, leader_ref, group, {"replicas": size - 1})
        for w in range(1, size):
            labels = {**group, n.LWS_WORKER_INDEX: str(w), **subgroup(w)}
            out.pod(f"{leader_name}-{w}", worker_t, workers_sts, labels, {**size_ann, n.LWS_LEADER_NAME: leader_name})


def _jobset(out: _Out) -> None:
    rjobs = list_at(out.spec, "replicatedJobs", out.obj, "spec", out.errors)
    replicas_of = [
        count(r, "replicas", 1, out.obj, f"spec.replicatedJobs[{i}]", out.errors) if isinstance(r, Mapping) else 0
        for i, r in enumerate(rjobs)
    ]
    global_index = 0
    for i, raw in enumerate(rjobs):
        where = f"spec.replicatedJobs[{i}]"
        rjob: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        name = str(rjob.get("name") or "")
        if not name:
            out.errors.append(FieldError(out.obj, f"{where}.name", "expected a non-empty name"))
            continue
        job_template = mapping_at(rjob, "template", out.obj, where, out.errors)
        job_spec = mapping_at(job_template, "spec", out.obj, f"{where}.template", out.errors)
        for j in range(replicas_of[i]):
            job_name = f"{out.name}-{name}-{j}"
            labels = {
                n.JS_NAME: out.name,
                n.JS_REPLICATED_JOB: name,
                n.JS_REPLICATED_JOB_REPLICAS: str(replicas_of[i]),
                n.JS_JOB_INDEX: str(j),
                n.JS_JOB_GLOBAL_INDEX: str(global_index),
                n.JS_JOB_KEY: uid_for("job-key", out.namespace, job_name),
            }
            global_index += 1
            job_ref = out.owner(n.BATCH_V1, "Job", job_name, out.ref(), labels, job_spec)
            _job_pods(out, job_name, job_ref, job_spec, f"{where}.template.spec", labels, labels)


def _ray_pods(out: _Out, cluster: str, cluster_ref: JSON, spec: Mapping[str, Any], where: str) -> None:
    head = mapping_at(spec, "headGroupSpec", out.obj, where, out.errors)
    head_t = mapping_at(head, "template", out.obj, f"{where}.headGroupSpec", out.errors)
    base = {n.RAY_CLUSTER: cluster, n.RAY_IS_NODE: "yes"}
    out.pod(
        f"{cluster}-head",
        head_t,
        cluster_ref,
        {**base, n.RAY_NODE_TYPE: "head", n.RAY_GROUP: n.RAY_HEAD_GROUP, n.RAY_IDENTIFIER: f"{cluster}-head"},
    )
    for i, raw in enumerate(list_at(spec, "workerGroupSpecs", out.obj, where, out.errors)):
        at = f"{where}.workerGroupSpecs[{i}]"
        wg: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        group = str(wg.get("groupName") or "")
        if not group:
            out.errors.append(FieldError(out.obj, f"{at}.groupName", "expected a non-empty name"))
            continue
        if wg.get("suspend") is True:
            continue
        minimum = count(wg, "minReplicas", 0, out.obj, at, out.errors)
        replicas = count(wg, "replicas", minimum, out.obj, at, out.errors)
        hosts = max(count(wg, "numOfHosts", 1, out.obj, at, out.errors), 1)
        template = mapping_at(wg, "template", out.obj, at, out.errors)
        labels = {**base, n.RAY_NODE_TYPE: "worker", n.RAY_GROUP: group, n.RAY_IDENTIFIER: f"{cluster}-worker"}
        out.expect(replicas * hosts, f"{at}.replicas")
        for k in range(replicas * hosts):
            out.pod(f"{cluster}-{group}-worker-{k}", template, cluster_ref, labels)


def _raycluster(out: _Out) -> None:
    _ray_pods(out, out.name, out.ref(), out.spec, "spec")


def _rayjob(out: _Out) -> None:
    if out.spec.get("rayClusterSpec") is None:
        msg = "has no rayClusterSpec (it uses an existing cluster): give that cluster's pods instead"
        out.errors.append(FieldError(out.obj, "spec.rayClusterSpec", msg))
        return
    spec = mapping_at(out.spec, "rayClusterSpec", out.obj, "spec", out.errors)
    cluster = f"{out.name}-raycluster"
    labels = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": out.name}
    cluster_ref = out.owner(n.RAY_V1, "RayCluster", cluster, out.ref(), labels, spec)
    _ray_pods(out, cluster, cluster_ref, spec, "spec.rayClusterSpec")


_KINDS = {
    (n.BATCH_V1, "Job"): _job,
    **dict.fromkeys(n.KUBEFLOW_REPLICA_SPECS, _kubeflow),
    (n.LWS_V1, "LeaderWorkerSet"): _lws,
    (n.JOBSET_V1ALPHA2, "JobSet"): _jobset,
    (n.RAY_V1, "RayCluster"): _raycluster,
    (n.RAY_V1, "RayJob"): _rayjob,
}


def synthesize(workload: Mapping[str, Any], default_namespace: str = "default") -> Synthesized:
    """The pods and intermediate owners `workload`'s controller would create; raises InvalidObject."""
    out = _Out(workload, default_namespace)
    make = _KINDS.get((out.api_version, out.kind))
    if make is None:
        kinds = ", ".join(sorted(f"{k} {v}" for v, k in _KINDS))
        msg = (
            f"topogang cannot create the pods of {out.kind} {out.api_version}; give them in the input (it can: {kinds})"
        )
        raise InvalidObject([FieldError(out.obj, "kind", msg)])
    try:
        if not out.errors:
            make(out)
    except _TooMany:
        pass
    if out.errors:
        raise InvalidObject(out.errors)
    return Synthesized(tuple(out.pods), tuple(out.owners))
