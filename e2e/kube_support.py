"""Helpers for the tests of extender.kube on a real API server: CRDs made up for one test,
waiting on the cache's state, pods nothing schedules."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from extender.kube import ApiError, KubeClient

T = TypeVar("T")

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# No scheduler has this name, so pods asking for it stay Pending until a test binds them.
NO_SCHEDULER = "topogang-e2e-nobody"


async def until(check: Callable[[], T | None], what: str, timeout_s: float = 30.0) -> T:
    """Polls the sync CHECK (e.g. a look at the ClusterState the cache fills) until it returns
    something other than None or False; TimeoutError naming WHAT after TIMEOUT_S."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def crd_manifest(
    group: str, kind: str, plural: str, *, version: str = "v1alpha1", namespaced: bool = True
) -> dict[str, Any]:
    """A CRD that takes anything (`x-kubernetes-preserve-unknown-fields`), so tests can store
    objects that topogang's parsers reject."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


@contextlib.asynccontextmanager
async def installed_crd(kube: KubeClient, manifest: dict[str, Any], *, timeout_s: float = 60.0) -> AsyncIterator[str]:
    """Creates the CRD, waits until its API serves, yields its collection path; deletes it
    afterwards and waits until it is gone, so later tests can create it again."""
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{spec['names']['plural']}"
    await kube.post(CRDS, manifest)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await kube.list(path)
                break
            except ApiError as exc:
                if exc.status != 404 or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.1)
        yield path
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(f"{CRDS}/{name}")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                await kube.get(f"{CRDS}/{name}")
            except ApiError as exc:
                if exc.status == 404:
                    break
                raise
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def crd_present(kube: KubeClient, manifest: dict[str, Any], *, timeout_s: float = 60.0) -> AsyncIterator[str]:
    """The CRD as another test (or the cluster) has it, if it is installed; else MANIFEST,
    installed for the duration (see installed_crd). Yields its collection path."""
    spec = manifest["spec"]
    path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{spec['names']['plural']}"
    try:
        await kube.get(f"{CRDS}/{manifest['metadata']['name']}")
    except ApiError as exc:
        if exc.status != 404:
            raise
        async with installed_crd(kube, manifest, timeout_s=timeout_s) as installed:
            yield installed
        return
    yield path
