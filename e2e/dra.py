"""Dynamic Resource Allocation on the real control plane, as a GPU driver would publish it: one
ResourceSlice of 8 devices per fake node (pool = the node's name), a DeviceClass selecting the
driver's devices, a ResourceClaimTemplate of 8 of them, and pods whose GPUs are claims from it
(kube-controller-manager's resourceclaim controller makes one claim per pod; kube-scheduler's
DynamicResources plugin allocates it). Shared by the extender-mode and the gates-mode tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from extender.kube.client import ApiError, KubeClient

DRIVER = "gpu.e2e.topogang.io"
CLASS = DRIVER
TEMPLATE = "gpus"
RESOURCE = "/apis/resource.k8s.io/v1"
SLICE_LABEL = "e2e.topogang.io/dra-slice"


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def resource_slice(node: str, count: int = 8) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(count)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}", "labels": {SLICE_LABEL: "true"}},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim_template(count: int = 8) -> dict[str, Any]:
    request = {"name": "gpus", "exactly": {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def claim_pod(
    name: str, *, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A pod of 1 cpu whose 8 GPUs are a claim made from the template."""
    container = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": {
            "containers": [container],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": TEMPLATE}],
            "terminationGracePeriodSeconds": 0,
        },
    }


async def publish(kube: KubeClient, nodes: Iterable[str]) -> None:
    """The driver's slices for NODES (the DeviceClass is installed once per module)."""
    for node in nodes:
        await kube.post(f"{RESOURCE}/resourceslices", resource_slice(node))


async def unpublish(kube: KubeClient) -> None:
    listing = await kube.get(f"{RESOURCE}/resourceslices", {"labelSelector": f"{SLICE_LABEL}=true"})
    for item in listing.get("items", []):
        try:
            await kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")
        except ApiError as exc:
            if exc.status != 404:
                raise


async def allocations(kube: KubeClient, namespace: str) -> dict[str, list[tuple[str, str, str]]]:
    """Per pod a claim is reserved for: the (driver, pool, device) its claims hold."""
    listing = await kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
    out: dict[str, list[tuple[str, str, str]]] = {}
    for claim in listing.get("items", []):
        status = claim.get("status", {})
        results = status.get("allocation", {}).get("devices", {}).get("results", [])
        for consumer in status.get("reservedFor", []):
            out.setdefault(consumer["name"], []).extend((r["driver"], r["pool"], r["device"]) for r in results)
    return out
