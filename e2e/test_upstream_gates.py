"""Kubernetes' own gang API through topogang in gates mode: the stock kube-scheduler with the
GenericWorkload, TopologyAwareWorkloadScheduling and CompositePodGroup gates (so with its own
GangScheduling and TopologyPlacementGenerator plugins on: both deciders configured), topogang's
webhook gating each gang pod and topogang ungating whole gangs pinned to their planned nodes. The
in-tree plugins then only see gangs whose nodes topogang chose; they agree with the pins.

The control plane of test_upstream.py (one of its own for this module), the same gangs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.gates_support import ENABLED, WEBHOOKS, bundled, gates_args, webhook_config
from e2e.scenario import eventually
from e2e.test_upstream import (
    GATES,
    job_with_scheduling,
    job_with_segments,
    one_podgroup,
    plane,
    space,
    three_levels,
    upstream_kube,
)
from e2e.topogang import Topogang, _free_port
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane_only, pytest.mark.controlplane]

__all__ = ["plane", "space", "upstream_kube"]  # the fixtures this module shares


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def gates(plane: ControlPlane, upstream_kube: KubeClient) -> AsyncIterator[Topogang]:
    name = f"topogang-e2e-{uuid.uuid4().hex[:6]}"
    port = _free_port()
    await upstream_kube.post(WEBHOOKS, webhook_config(name, f"https://127.0.0.1:{port}"))
    try:
        async with Topogang.start(plane.kubeconfig, plane.logs_dir, args=gates_args(name, port)) as server:
            await eventually(
                lambda: bundled(upstream_kube, name), within=30, what="topogang to set the webhook's caBundle"
            )
            await plane.start_scheduler_async(None, [f"--feature-gates={GATES}"])  # stock, gates on
            try:
                yield server
            finally:
                await plane.stop_scheduler_async()
    finally:
        await upstream_kube.delete(f"{WEBHOOKS}/{name}")


@pytest_asyncio.fixture(loop_scope="session")
async def gated(
    gates: Topogang, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> tuple[str, FakeGpuNodes]:
    ns, _ = space
    await upstream_kube.patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": ENABLED}})
    return space


async def test_gates_mode_places_an_upstream_podgroup_whole_in_one_rack(
    upstream_kube: KubeClient, gated: tuple[str, FakeGpuNodes]
) -> None:
    placed = await one_podgroup(upstream_kube, *gated)
    ns, _ = gated
    for pod in placed:
        body = await upstream_kube.get(f"/api/v1/namespaces/{ns}/pods/{pod}")
        terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [placed[pod]]  # topogang's pin


async def test_gates_mode_places_a_three_level_composite_podgroup(
    upstream_kube: KubeClient, gated: tuple[str, FakeGpuNodes]
) -> None:
    await three_levels(upstream_kube, *gated)


async def test_gates_mode_places_a_job_with_spec_scheduling(
    upstream_kube: KubeClient, gated: tuple[str, FakeGpuNodes]
) -> None:
    await job_with_scheduling(upstream_kube, *gated)


async def test_gates_mode_cuts_a_jobs_gang_into_topogangs_segments(
    upstream_kube: KubeClient, gated: tuple[str, FakeGpuNodes]
) -> None:
    await job_with_segments(upstream_kube, *gated)
