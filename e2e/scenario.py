"""Small helpers for the extender scenarios, on topogang's own raw-JSON client: they work on
any cluster a kubeconfig reaches (the local control plane, or kind)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from extender.kube.client import ApiError, KubeClient

T = TypeVar("T")
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

PATHS = {  # (apiVersion, kind) -> (path prefix, plural, namespaced)
    ("v1", "Pod"): ("/api/v1", "pods", True),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps", True),
    ("batch/v1", "Job"): ("/apis/batch/v1", "jobs", True),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments", True),
    ("kubeflow.org/v1", "TFJob"): ("/apis/kubeflow.org/v1", "tfjobs", True),
    ("kubeflow.org/v1", "PyTorchJob"): ("/apis/kubeflow.org/v1", "pytorchjobs", True),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", True),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): ("/apis/trainer.kubeflow.org/v1alpha1", "trainjobs", True),
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): (
        "/apis/trainer.kubeflow.org/v1alpha1",
        "trainingruntimes",
        True,
    ),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): ("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets", True),
    ("grove.io/v1alpha1", "PodCliqueSet"): ("/apis/grove.io/v1alpha1", "podcliquesets", True),
    ("grove.io/v1alpha1", "PodCliqueScalingGroup"): ("/apis/grove.io/v1alpha1", "podcliquescalinggroups", True),
    ("grove.io/v1alpha1", "PodClique"): ("/apis/grove.io/v1alpha1", "podcliques", True),
    ("scheduler.grove.io/v1alpha1", "PodGang"): ("/apis/scheduler.grove.io/v1alpha1", "podgangs", True),
    ("scheduling.topogang.io/v1alpha1", "PodGroup"): ("/apis/scheduling.topogang.io/v1alpha1", "podgroups", True),
    ("scheduling.topogang.io/v1alpha1", "Topology"): ("/apis/scheduling.topogang.io/v1alpha1", "topologies", False),
    ("scheduling.run.ai/v2", "Queue"): ("/apis/scheduling.run.ai/v2", "queues", False),
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"): ("/apis/kueue.x-k8s.io/v1beta1", "resourceflavors", False),
    ("scheduling.k8s.io/v1beta1", "PodGroup"): ("/apis/scheduling.k8s.io/v1beta1", "podgroups", True),
    ("scheduling.k8s.io/v1alpha3", "PodGroup"): ("/apis/scheduling.k8s.io/v1alpha3", "podgroups", True),
    ("scheduling.k8s.io/v1alpha3", "CompositePodGroup"): (
        "/apis/scheduling.k8s.io/v1alpha3",
        "compositepodgroups",
        True,
    ),
    ("resource.k8s.io/v1", "DeviceClass"): ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceSlice"): ("/apis/resource.k8s.io/v1", "resourceslices", False),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
}


def collection(api_version: str, kind: str, namespace: str | None) -> str:
    prefix, plural, namespaced = PATHS[(api_version, kind)]
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


async def eventually(check: Callable[[], Awaitable[T | None]], *, within: float, what: str, every: float = 0.25) -> T:
    """CHECK's first result that is not None or False; TimeoutError naming WHAT otherwise."""
    deadline = time.monotonic() + within
    last: T | None = None
    while True:
        last = await check()
        if last is not None and last is not False:
            return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"after {within:.0f}s still waiting for {what}")
        await asyncio.sleep(every)


async def apply_crds(kube: KubeClient, files: Sequence[Path]) -> None:
    """Create the CRDs in FILES (those that exist are left as they are) and wait until served."""
    names = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            names.append(doc["metadata"]["name"])
            try:
                await kube.post(CRD_PATH, doc)
            except ApiError as exc:
                if exc.status != 409:
                    raise

    async def established() -> bool:
        for name in names:
            crd = await kube.get(f"{CRD_PATH}/{name}")
            conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
            if conds.get("Established") != "True":
                return False
        return True

    await eventually(established, within=60, what=f"CRDs {', '.join(names)} to be established")


async def create(kube: KubeClient, body: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
    meta = dict(body.get("metadata") or {})
    meta.pop("uid", None)  # the API server assigns it
    ns = namespace or meta.get("namespace")
    if ns:
        meta["namespace"] = ns
    doc = {**body, "metadata": meta}
    return await kube.post(collection(str(body["apiVersion"]), str(body["kind"]), ns), doc)


async def install(kube: KubeClient, crds: Sequence[Path], *objects: Mapping[str, Any]) -> None:
    """The CRDs, then each cluster-scoped object unless a module before made it already."""
    await apply_crds(kube, crds)
    for body in objects:
        try:
            await create(kube, body)
        except ApiError as exc:
            if exc.status != 409:
                raise


async def pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
    return list(listing.get("items", []))


async def wait_all_bound(kube: KubeClient, namespace: str, count: int, *, within: float = 90) -> dict[str, str]:
    """Until COUNT pods of NAMESPACE are bound; pod name -> node."""

    async def bound() -> dict[str, str] | None:
        items = await pods(kube, namespace)
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
        placed = {k: v for k, v in nodes.items() if v}
        return placed if len(placed) >= count else None

    return await eventually(bound, within=within, what=f"{count} pods of {namespace} to be bound")


async def events_about(kube: KubeClient, namespace: str, name: str) -> list[str]:
    """Messages of the Events on one object (core/v1 and events.k8s.io/v1)."""
    out = []
    core = await kube.get(f"/api/v1/namespaces/{namespace}/events")
    for e in core.get("items", []):
        if e.get("involvedObject", {}).get("name") == name:
            out.append(str(e.get("message", "")))
    new = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    for e in new.get("items", []):
        if e.get("regarding", {}).get("name") == name:
            out.append(str(e.get("note", "")))
    return out


async def says(kube: KubeClient, namespace: str, name: str, text: str) -> bool:
    """Whether an Event on object NAME says TEXT."""
    return any(text in m for m in await events_about(kube, namespace, name))


async def create_podgroup(
    kube: KubeClient, namespace: str, name: str, spec: Mapping[str, Any], topology: str | None = "e2e-dc"
) -> dict[str, Any]:
    """A topogang PodGroup; its constraints use TOPOLOGY (the kai.scheduler/topology annotation)."""
    annotations = {"kai.scheduler/topology": topology} if topology else {}
    body = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "annotations": annotations},
        "spec": dict(spec),
    }
    return await create(kube, body, namespace)


def gpu_pod(
    name: str, gpus: int = 8, *, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }
