"""Builders and renderers shared by the grouping tests: workloads as raw objects, and PodGroup
trees rendered one SubGroup a line so that tests compare whole trees at a glance:

    ml/tfjob-train sub=3 required=zone
      chief min=1
      worker sub=2
        worker-seg-0 min=4 required=rack
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from extender.grouping import GroupingResult, ObjectIndex, can_synthesize, group_pods, synthesize
from extender.grouping.result import Grouping
from extender.model.pod import PodInfo, parse_pod
from extender.model.podgroup import PodGroupSpec, TopologyConstraint

NS = "ml"
JSON = dict[str, Any]


def template(
    annotations: Mapping[str, str] | None = None, gpus: int = 1, labels: Mapping[str, str] | None = None
) -> JSON:
    resources = {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"}} if gpus else {"requests": {"cpu": "1"}}
    meta: JSON = {}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    return {"metadata": meta, "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]}}


def meta(name: str, annotations: Mapping[str, str] | None = None) -> JSON:
    out: JSON = {"name": name, "namespace": NS}
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def kubeflow(
    kind: str,
    specs: Mapping[str, int | tuple[int, Mapping[str, str]]],
    name: str = "train",
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> JSON:
    field = {
        "TFJob": "tfReplicaSpecs",
        "PyTorchJob": "pytorchReplicaSpecs",
        "JAXJob": "jaxReplicaSpecs",
        "XGBoostJob": "xgbReplicaSpecs",
        "MPIJob": "mpiReplicaSpecs",
    }[kind]
    replica_specs: JSON = {}
    for rtype, value in specs.items():
        replicas, ann = (value, {}) if isinstance(value, int) else value
        replica_specs[rtype] = {"replicas": replicas, "template": template(ann)}
    api = "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1"
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": meta(name, annotations),
        "spec": {field: replica_specs, **spec},
    }


def job(
    parallelism: int | None = 4,
    completions: int | None = None,
    indexed: bool = True,
    ann: Mapping[str, str] | None = None,
    name: str = "batch",
    annotations: Mapping[str, str] | None = None,
) -> JSON:
    spec: JSON = {"template": template(ann)}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, annotations), "spec": spec}


def lws(
    replicas: int = 2,
    size: int = 4,
    annotations: Mapping[str, str] | None = None,
    worker_ann: Mapping[str, str] | None = None,
    leader: JSON | None = None,
    sub_group_size: int | None = None,
    policy_type: str | None = None,
    name: str = "llm",
    worker_gpus: int = 1,
) -> JSON:
    lwt: JSON = {"size": size, "workerTemplate": template(worker_ann, gpus=worker_gpus)}
    if leader is not None:
        lwt["leaderTemplate"] = leader
    if sub_group_size is not None:
        lwt["subGroupPolicy"] = {"subGroupSize": sub_group_size}
        if policy_type:
            lwt["subGroupPolicy"]["subGroupPolicyType"] = policy_type
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta(name, annotations),
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
    }


def jobset(
    rjobs: Iterable[tuple[str, int, int]],
    ann: Mapping[str, Mapping[str, str]] | None = None,
    annotations: Mapping[str, str] | None = None,
    job_ann: Mapping[str, Mapping[str, str]] | None = None,
    name: str = "js",
) -> JSON:
    """rjobs: (name, replicas, parallelism) each; ann: pod template annotations by rjob name."""
    out = []
    for rname, replicas, parallelism in rjobs:
        job_template: JSON = {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "completionMode": "Indexed",
                "template": template((ann or {}).get(rname)),
            }
        }
        if job_ann and rname in job_ann:
            job_template["metadata"] = {"annotations": dict(job_ann[rname])}
        out.append({"name": rname, "replicas": replicas, "template": job_template})
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta(name, annotations),
        "spec": {"replicatedJobs": out},
    }


def ray_cluster_spec(groups: Iterable[tuple[str, int, int | None]], head_ann: Mapping[str, str] | None = None) -> JSON:
    """groups: (groupName, replicas, minReplicas) each."""
    workers = []
    for gname, replicas, minimum in groups:
        wg: JSON = {"groupName": gname, "replicas": replicas, "template": template()}
        if minimum is not None:
            wg["minReplicas"] = minimum
        workers.append(wg)
    return {"headGroupSpec": {"template": template(head_ann, gpus=0)}, "workerGroupSpecs": workers}


def raycluster(groups: Iterable[tuple[str, int, int | None]], name: str = "rc", **kw: Any) -> JSON:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta(name),
        "spec": ray_cluster_spec(groups, **kw),
    }


def rayjob(groups: Iterable[tuple[str, int, int | None]], name: str = "rj") -> JSON:
    spec = {"entrypoint": "python run.py", "rayClusterSpec": ray_cluster_spec(groups)}
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta(name), "spec": spec}


def pods_of(
    *workloads: Mapping[str, Any], objects: Iterable[Mapping[str, Any]] = ()
) -> tuple[list[PodInfo], list[JSON]]:
    """Synthesized pods of the workloads, parsed, and the intermediate owners; OBJECTS: what else
    a synthesis may read (a TrainJob's runtime)."""
    pods: list[PodInfo] = []
    owners: list[JSON] = []
    given = ObjectIndex(objects)
    for w in workloads:
        s = synthesize(w, objects=given)
        pods.extend(parse_pod(p) for p in s.pods)
        owners.extend(s.owners)
    return pods, owners


def group(
    *workloads: Mapping[str, Any],
    objects: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[PodInfo] = (),
    podgroups: Mapping[str, PodGroupSpec] | None = None,
) -> GroupingResult:
    """Group the synthesized pods of `workloads` plus `pods`, seeing the workloads and `objects`."""
    made, owners = pods_of(*workloads)
    index = ObjectIndex([*workloads, *owners, *objects])
    return group_pods([*made, *pods], index, podgroups or {})


def group_file(path: Path) -> tuple[GroupingResult, list[PodInfo]]:
    """The gangs of an example file (or folder): its workloads' synthesized pods, grouped seeing every object
    of the file; also the pods."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    docs: list[JSON] = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    workloads = [d for d in docs if can_synthesize(str(d.get("apiVersion")), str(d.get("kind")))]
    pods, owners = pods_of(*workloads, objects=docs)
    pods += [parse_pod(d) for d in docs if d.get("kind") == "Pod"]  # pods the file gives (scheduling.k8s.io groups)
    # objects of the file win over synthesized ones, as in the simulator
    return group_pods(pods, ObjectIndex([*owners, *docs]), {}), pods


def only(result: GroupingResult) -> Grouping:
    assert len(result.groups) == 1, list(result.groups)
    return next(iter(result.groups.values()))


def _constraint(c: TopologyConstraint | None) -> str:
    if c is None:
        return ""
    out = ""
    if c.required:
        out += f" required={c.required}"
    if c.preferred:
        out += f" preferred={c.preferred}"
    if c.topology:
        out += f" topology={c.topology}"
    if c.exclusive:
        out += " exclusive"
    return out


def _mins(min_member: int | None, min_subgroup: int | None) -> str:
    parts = []
    if min_member is not None:
        parts.append(f"min={min_member}")
    if min_subgroup is not None:
        parts.append(f"sub={min_subgroup}")
    return " ".join(parts)


def render(g: Grouping | PodGroupSpec | None) -> list[str]:
    """The PodGroup tree one SubGroup a line, children indented below their parent."""
    pg = g.podgroup if isinstance(g, Grouping) else g
    assert pg is not None, g.errors if isinstance(g, Grouping) else None
    lines = [
        f"{pg.key} {_mins(pg.min_member, pg.min_subgroup)}{_constraint(pg.global_constraint)}".replace(
            "  ", " "
        ).rstrip()
    ]

    def walk(parent: str | None, depth: int) -> None:
        for sg in pg.children_of(parent):
            c = _constraint(pg.subgroup_constraints.get(sg.name))
            lines.append(f"{'  ' * depth}{sg.name} {_mins(sg.min_member, sg.min_subgroup)}{c}")
            walk(sg.name, depth + 1)

    walk(None, 1)
    return lines


def members(g: Grouping) -> dict[str, list[str]]:
    """leaf SubGroup -> pod names in index order."""
    out: dict[str, list[str]] = {}
    for key, leaf in g.subgroup_of.items():
        out.setdefault(leaf, []).append(key)
    return {
        leaf: [k.split("/", 1)[1] for k in sorted(keys, key=lambda k: (g.order.get(k, 0), k))]
        for leaf, keys in sorted(out.items())
    }


def errors(g: Grouping) -> list[str]:
    return [str(e) for e in g.errors]


def owned_pod(
    name: str,
    owner: tuple[str, str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gpus: int = 1,
) -> PodInfo:
    """A pod as given in the input: owner is (apiVersion, kind, name) of its controller."""
    body: JSON = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": template(gpus=gpus)["spec"],
    }
    if owner is not None:
        api, kind, oname = owner
        ref = {"apiVersion": api, "kind": kind, "name": oname, "uid": f"uid-{oname}", "controller": True}
        body["metadata"]["ownerReferences"] = [ref]
    return parse_pod(body)


def obj(api_version: str, kind: str, name: str, owner: tuple[str, str, str] | None = None, **rest: Any) -> JSON:
    """A raw object for the ObjectLookup (an owner in a pod's chain)."""
    metadata: JSON = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    if owner is not None:
        api, kind_, oname = owner
        metadata["ownerReferences"] = [{"apiVersion": api, "kind": kind_, "name": oname, "controller": True}]
    return {"apiVersion": api_version, "kind": kind, "metadata": {**metadata, **rest.pop("metadata", {})}, **rest}
