"""Small async helpers for scenarios, working with any kubeconfig (the local control plane or
kind)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

T = TypeVar("T")


@contextlib.asynccontextmanager
async def api_client(kubeconfig: Path | str) -> AsyncIterator[client.ApiClient]:
    """An ApiClient for KUBECONFIG (its current context), closed on exit."""
    api = await config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    try:
        yield api
    finally:
        await api.close()


async def wait_for(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout_s: float,
    what: str,
    interval: float = 0.2,
) -> T:
    """Calls CHECK until it returns something other than None (or False) and returns that;
    TimeoutError naming WHAT after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


async def create_namespace(api: client.ApiClient, prefix: str = "e2e", *, timeout_s: float = 60.0) -> str:
    """Creates a uniquely named namespace and waits for its `default` ServiceAccount (pods
    cannot be created before it exists)."""
    core = client.CoreV1Api(api)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await core.create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]

    async def has_default_sa() -> bool:
        try:
            await core.read_namespaced_service_account("default", name)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    await wait_for(has_default_sa, timeout_s=timeout_s, what=f"ServiceAccount {name}/default")
    return name


async def delete_namespace(api: client.ApiClient, name: str) -> None:
    """Deletes NAME without waiting for it to go (pods on kwok nodes are deleted by kwok). Its pods
    go first, at once: a namespace being terminated keeps pending pods for a while, and a scheduler
    would keep trying them on the next test's nodes."""
    core = client.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        await core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        await core.delete_namespace(name)


def gpu_pod(
    name: str,
    gpus: int,
    *,
    gpu_resource: str = "nvidia.com/gpu",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler_name: str | None = None,
) -> dict[str, Any]:
    """A pod with one container asking for GPUS GPUs (requests = limits, as extended resources
    require)."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {
                    "requests": {gpu_resource: str(gpus), "cpu": "1", "memory": "1Gi"},
                    "limits": {gpu_resource: str(gpus)},
                },
            }
        ],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
    }


async def create_pod(api: client.ApiClient, namespace: str, manifest: dict[str, Any]) -> client.V1Pod:
    """Creates a pod from a manifest such as gpu_pod's."""
    core = client.CoreV1Api(api)
    return await core.create_namespaced_pod(namespace, manifest)  # type: ignore[arg-type]


async def read_pod(api: client.ApiClient, namespace: str, name: str) -> client.V1Pod:
    return await client.CoreV1Api(api).read_namespaced_pod(name, namespace)


async def wait_pod_running(
    api: client.ApiClient, namespace: str, name: str, *, timeout_s: float = 60.0
) -> client.V1Pod:
    """Waits until the pod is bound to a node and its phase is Running; returns it."""
    core = client.CoreV1Api(api)

    async def running() -> client.V1Pod | None:
        pod = await core.read_namespaced_pod(name, namespace)
        if pod.spec.node_name and pod.status and pod.status.phase == "Running":
            return pod
        return None

    return await wait_for(running, timeout_s=timeout_s, what=f"pod {namespace}/{name} to run")


async def wait_pod_unschedulable(api: client.ApiClient, namespace: str, name: str, *, timeout_s: float = 60.0) -> str:
    """Waits until the scheduler has marked the pod Unschedulable; returns the message."""
    core = client.CoreV1Api(api)

    async def unschedulable() -> str | None:
        pod = await core.read_namespaced_pod(name, namespace)
        for c in (pod.status.conditions if pod.status else None) or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return str(c.message or "")
        return None

    return await wait_for(unschedulable, timeout_s=timeout_s, what=f"pod {namespace}/{name} to be unschedulable")
