"""Builders for Dynamic Resource Allocation objects (resource.k8s.io/v1 bodies), for unit tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.core.cluster import ClusterState
from extender.model.dra.claims import ClaimInfo, TemplateInfo, parse_claim_template, parse_resource_claim
from extender.model.dra.slices import DeviceClassInfo, DeviceSlice, parse_device_class, parse_resource_slice
from extender.model.pod import PodInfo, parse_pod

DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"


def slice_body(node: str | None, count: int = 8, driver: str = DRIVER, **where: Any) -> dict[str, Any]:
    """A driver's slice of COUNT devices (gpu-0 ..) for NODE (or for `where`: nodeSelector, allNodes)."""
    name = node or "shared"
    devices = [
        {"name": f"gpu-{i}", "attributes": {"model": {"string": "H100"}, "index": {"int": i}}} for i in range(count)
    ]
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
    }
    spec.update({"nodeName": node} if node else where)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{driver}"},
        "spec": spec,
    }


def device_slice(node: str | None, count: int = 8, **where: Any) -> DeviceSlice:
    return parse_resource_slice(slice_body(node, count, **where))


def class_body(name: str = CLASS, driver: str = DRIVER, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def device_class(name: str = CLASS, driver: str = DRIVER, extended: str | None = None) -> DeviceClassInfo:
    return parse_device_class(class_body(name, driver, extended))


def exactly(
    count: int | None = 8, cls: str = CLASS, mode: str | None = None, selectors: Sequence[str] = ()
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        body["count"] = count
    if mode:
        body["allocationMode"] = mode
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return body


def claim_spec(*requests: Mapping[str, Any]) -> dict[str, Any]:
    """requests: `exactly(...)` bodies, or {"firstAvailable": [...]} ones."""
    out = []
    for i, r in enumerate(requests):
        out.append({"name": f"r{i}", **(dict(r) if "firstAvailable" in r else {"exactly": dict(r)})})
    return {"devices": {"requests": out}}


def template(name: str = "gpus", *requests: Mapping[str, Any], namespace: str = "default") -> TemplateInfo:
    body = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(*(requests or (exactly(),)))},
    }
    return parse_claim_template(body)


def claim(
    name: str, *requests: Mapping[str, Any], allocated: Sequence[tuple[str, str]] = (), namespace: str = "default"
) -> ClaimInfo:
    """A claim; `allocated`: (pool, device) pairs of DRIVER its status.allocation names."""
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(*(requests or (exactly(),))),
    }
    if allocated:
        results = [{"request": "r0", "driver": DRIVER, "pool": p, "device": d} for p, d in allocated]
        body["status"] = {"allocation": {"devices": {"results": results}}}
    return parse_resource_claim(body)


def claim_pod(
    name: str,
    template_name: str | None = "gpus",
    claim_name: str | None = None,
    group: str | None = None,
    generated: str | None = None,
    node_name: str | None = None,
) -> PodInfo:
    """A pod whose GPUs come through one claim (from a template, or a claim of its own)."""
    ref: dict[str, Any] = {"name": "gpu"}
    if claim_name:
        ref["resourceClaimName"] = claim_name
    else:
        ref["resourceClaimTemplateName"] = template_name
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "annotations": {"pod-group-name": group} if group else {}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
            "resourceClaims": [ref],
        },
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    if generated:
        body["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": generated}]}
    return parse_pod(body)


def publish(state: ClusterState, nodes: Sequence[str], count: int = 8) -> None:
    """A driver's slices for NODES and a DeviceClass selecting its devices."""
    state.set_dra("DeviceClass", CLASS, device_class())
    for n in nodes:
        s = device_slice(n, count)
        state.set_dra("ResourceSlice", s.name, s)
