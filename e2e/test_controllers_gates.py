"""The real JobSet controller in gates mode: the stock kube-scheduler, topogang's admission webhook
and JobSet's own pod webhooks on the same pods (e2e/controllers.py, e2e/gates_support.py).

Setup (once for the module): `topogang serve --mode=gates` with its webhook registered, and the
JobSet controller built from its Go module with its webhooks. Each test labels its namespace for
both webhooks and gets its own fake GPU nodes (8 GPUs each), labelled zone > block > rack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from e2e.controllers import Controllers, controlled_namespace_label, delete_workloads
from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.gates_support import ENABLED, gates_serving
from e2e.scenario import create, wait_all_bound
from e2e.test_controllers import assert_one_job_per_rack, exclusive_jobset, racks_for_three_jobs
from e2e.test_extender import TOPOLOGY
from e2e.topogang import Topogang
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def running(control_plane: ControlPlane, kubeconfig: Path) -> AsyncIterator[tuple[Topogang, Controllers]]:
    async with (
        await KubeClient.connect(kubeconfig) as kube,
        gates_serving(kubeconfig, control_plane, TOPOLOGY) as server,
        Controllers.start(control_plane, kube, ("jobset",)) as controllers,
    ):
        yield server, controllers


@pytest_asyncio.fixture(loop_scope="session")
async def ns(running: tuple[Topogang, Controllers], kube: KubeClient, namespace: str) -> AsyncIterator[str]:
    labels = {**controlled_namespace_label(), **ENABLED}
    await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": labels}})
    yield namespace
    await delete_workloads(kube, namespace)


async def test_a_jobset_with_exclusive_topology_runs_one_job_per_rack_in_gates_mode(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # topogang's webhook gates every pod; JobSet's admits a Job's followers only once its leader is
    # scheduled. topogang plans the whole JobSet when the three leaders are there and ungates them
    # (pinned to their planned nodes) with the followers' room held; kube-scheduler binds them;
    # each follower JobSet then creates is ungated into its held room.
    nodes = await racks_for_three_jobs(fake_gpu_nodes)
    await create(kube, exclusive_jobset(), ns)
    placed = await wait_all_bound(kube, ns, 12, within=120)
    await assert_one_job_per_rack(kube, ns, nodes, placed)
