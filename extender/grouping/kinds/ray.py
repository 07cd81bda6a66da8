"""KubeRay's RayCluster and RayJob: a `head` SubGroup and one SubGroup per worker group.

A worker group's SubGroup is named by its `groupName`; its pods are replicas x numOfHosts, its
minimum minReplicas x numOfHosts (KubeRay's default minReplicas is 0: an elastic group). A RayJob
is grouped from `spec.rayClusterSpec` and claims the pods of the RayCluster it owns; its submitter
Job's pod is not a Ray node and is handed on (to the Job grouper). A RayJob that selects an
existing cluster (`spec.clusterSelector`) has no cluster spec and is handed off whole.
Ray has no pod index label: segments need `kai.scheduler/pod-index-label`.

Synthesized: RayCluster -> Pod `<rc>-head`, `<rc>-<group>-worker-<i>`; RayJob -> RayCluster
`<rj>-raycluster` -> Pod (the submitter Job comes later, once the cluster runs, and is not
created here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.grouping.grouper import Claim, Classifier, Link, Part, WorkloadDraft, single
from extender.grouping.kinds.common import gang, spec, template
from extender.grouping.kinds.kind import WorkloadKind, owner
from extender.grouping.synthesis import JSON, Synthesis
from extender.grouping.values import count, label_field, list_at, mapping_at
from extender.model.errors import FieldError
from extender.model.pod import PodInfo
from extender.model.raw import literal

RAY_V1 = "ray.io/v1"
CLUSTER = "ray.io/cluster"
NODE_TYPE = "ray.io/node-type"
GROUP = "ray.io/group"
IDENTIFIER = "ray.io/identifier"
IS_NODE = "ray.io/is-ray-node"
HEAD_GROUP = "headgroup"

HEAD = "head"


def cluster_parts(cluster: Mapping[str, Any], obj: str, where: str, errors: list[FieldError]) -> list[Part]:
    head = mapping_at(cluster, "headGroupSpec", obj, where, errors)
    _, head_ann, head_where = template(head, "template", obj, f"{where}.headGroupSpec", errors)
    parts = [Part(HEAD, 1, 1, head_ann, head_where)]
    for i, raw in enumerate(list_at(cluster, "workerGroupSpecs", obj, where, errors)):
        at = f"{where}.workerGroupSpecs[{i}]"
        wg: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        name = wg.get("groupName")
        if not isinstance(name, str) or not name:
            errors.append(FieldError(obj, f"{at}.groupName", f"expected a non-empty name, got {literal(name)}"))
            continue
        if name == HEAD:
            errors.append(FieldError(obj, f"{at}.groupName", f"{name!r} is the head's SubGroup name"))
            continue
        hosts = max(count(wg, "numOfHosts", 1, obj, at, errors), 1)
        minimum = count(wg, "minReplicas", 0, obj, at, errors)
        replicas = count(wg, "replicas", minimum, obj, at, errors)
        if wg.get("suspend") is True:
            replicas = minimum = 0
        _, ann, t_where = template(wg, "template", obj, at, errors)
        parts.append(Part(name, replicas * hosts, min(minimum, replicas) * hosts, ann, t_where))
    return parts


def _classifier(key: str, obj: str, parts: list[Part]) -> Classifier:
    names = {p.name for p in parts}

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim:
        if pod.labels.get(NODE_TYPE) == HEAD:
            return Claim(key, HEAD)
        group = pod.labels.get(GROUP)
        if group is None or group not in names or group == HEAD:
            have = ", ".join(sorted(names - {HEAD}))
            why = "missing" if group is None else f"{group!r} names no worker group of {obj} (have: {have})"
            return Claim(key, None, FieldError(f"Pod {pod.key}", label_field(GROUP), why))
        return Claim(key, group)

    return classify


def group_raycluster(link: Link) -> WorkloadDraft:
    errors: list[FieldError] = []
    parts = cluster_parts(spec(link, errors), link.label, "spec", errors)
    draft = gang(link, parts, errors)
    return single(draft, _classifier(draft.key, link.label, parts))


def group_rayjob(link: Link) -> WorkloadDraft | None:
    errors: list[FieldError] = []
    s = spec(link, errors)
    if s.get("rayClusterSpec") is None:
        return None
    cluster = mapping_at(s, "rayClusterSpec", link.label, "spec", errors)
    parts = cluster_parts(cluster, link.label, "spec.rayClusterSpec", errors)
    draft = gang(link, parts, errors)
    inner = _classifier(draft.key, link.label, parts)

    def classify(pod: PodInfo, below: Sequence[Link]) -> Claim | None:
        if not any(b.ref.kind == "RayCluster" for b in below):
            return None  # the submitter Job's pod: not a Ray node
        return inner(pod, below)

    return single(draft, classify)


def _ray_pods(out: Synthesis, cluster: str, cluster_ref: JSON, cluster_spec: Mapping[str, Any], where: str) -> None:
    head = mapping_at(cluster_spec, "headGroupSpec", out.obj, where, out.errors)
    head_t = mapping_at(head, "template", out.obj, f"{where}.headGroupSpec", out.errors)
    base = {CLUSTER: cluster, IS_NODE: "yes"}
    out.pod(
        f"{cluster}-head",
        head_t,
        cluster_ref,
        {**base, NODE_TYPE: "head", GROUP: HEAD_GROUP, IDENTIFIER: f"{cluster}-head"},
    )
    groups = list_at(cluster_spec, "workerGroupSpecs", out.obj, where, out.errors)
    for _, at, wg, group in out.named(groups, "groupName", f"{where}.workerGroupSpecs"):
        if wg.get("suspend") is True:
            continue
        minimum = count(wg, "minReplicas", 0, out.obj, at, out.errors)
        replicas = count(wg, "replicas", minimum, out.obj, at, out.errors)
        hosts = max(count(wg, "numOfHosts", 1, out.obj, at, out.errors), 1)
        worker_t = mapping_at(wg, "template", out.obj, at, out.errors)
        labels = {**base, NODE_TYPE: "worker", GROUP: group, IDENTIFIER: f"{cluster}-worker"}
        out.expect(replicas * hosts, f"{at}.replicas")
        for k in range(replicas * hosts):
            out.pod(f"{cluster}-{group}-worker-{k}", worker_t, cluster_ref, labels)


def synthesize_raycluster(out: Synthesis) -> None:
    _ray_pods(out, out.name, out.ref(), out.spec, "spec")


def synthesize_rayjob(out: Synthesis) -> None:
    if out.spec.get("rayClusterSpec") is None:
        msg = "has no rayClusterSpec (it uses an existing cluster): give that cluster's pods instead"
        out.errors.append(FieldError(out.obj, "spec.rayClusterSpec", msg))
        return
    cluster_spec = mapping_at(out.spec, "rayClusterSpec", out.obj, "spec", out.errors)
    cluster = f"{out.name}-raycluster"
    labels = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": out.name}
    cluster_ref = out.owner(RAY_V1, "RayCluster", cluster, out.ref(), labels, cluster_spec)
    _ray_pods(out, cluster, cluster_ref, cluster_spec, "spec.rayClusterSpec")


KINDS = (
    WorkloadKind(owner("ray.io", "v1", "RayCluster", "rayclusters"), group_raycluster, synthesize_raycluster),
    WorkloadKind(owner("ray.io", "v1", "RayJob", "rayjobs"), group_rayjob, synthesize_rayjob),
)
