"""Defragmentation in gates mode: an elastic gang's pod beyond its minimum is moved within its
gang's block, and its replacement, gated as every gang member is, is ungated to the room held
for it (the scenario of test_defrag.py, with the stock kube-scheduler and topogang's webhook)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.gates_support import ENABLED, gates_serving
from e2e.test_defrag import optional_member_moves
from e2e.test_extender import TOPOLOGY
from e2e.topogang import Topogang
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane_only, pytest.mark.controlplane]


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def gates(kubeconfig: Path, control_plane: ControlPlane) -> AsyncIterator[Topogang]:
    async with gates_serving(kubeconfig, control_plane, TOPOLOGY) as server:
        yield server


async def test_an_optional_member_moves_within_its_block_and_its_gated_replacement_is_ungated_there(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": ENABLED}})
    await optional_member_moves(gates, kube, namespace, fake_gpu_nodes)
