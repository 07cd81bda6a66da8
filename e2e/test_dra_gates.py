"""Gates mode with GPUs from ResourceClaims: the stock kube-scheduler (its DynamicResources plugin
on, no extender), topogang's admission webhook gating gang pods, and topogang ungating the whole
gang pinned to the nodes it planned by counting each node's devices (e2e/dra.py publishes the
slices, 8 devices per node). Setup as in test_gates.py (its `gates` fixture)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from e2e.controlplane import FakeGpuNodes, GpuNodeShape
from e2e.dra import allocations, claim_pod, claim_template, device_class, publish, unpublish
from e2e.scenario import create, create_podgroup, eventually, install, wait_all_bound
from e2e.test_extender import node_racks
from e2e.test_gates import enable, gates, pinned_node, pod_map  # noqa: F401 (gates: the module's fixture)
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane_only, pytest.mark.controlplane]


@pytest_asyncio.fixture(loop_scope="session")
async def slices(kube: KubeClient) -> AsyncIterator[None]:
    await install(kube, [], device_class())
    yield
    await unpublish(kube)


@pytest.mark.usefixtures("gates", "slices")
async def test_a_gang_of_claims_is_ungated_pinned_to_its_planned_nodes_and_allocated_there(
    kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # z0-b0-r0 (3 nodes), z0-b0-r1 (4 nodes): 8 devices each; 4 pods x 8 devices in one rack fit r1 only.
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3, shape=GpuNodeShape(gpus=0))
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4, shape=GpuNodeShape(gpus=0))
    await publish(kube, nodes)
    await enable(kube, namespace)
    await create(kube, claim_template(), namespace)
    spec = {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    await create_podgroup(kube, namespace, "train", spec)
    for i in range(4):
        await create(kube, claim_pod(f"w-{i}", labels={"scheduling.x-k8s.io/pod-group": "train"}), namespace)
    placed = await wait_all_bound(kube, namespace, 4)
    rack_of = await node_racks(kube, nodes)
    assert {rack_of[n] for n in placed.values()} == {rack_of[nodes[-1]]}
    assert len(set(placed.values())) == 4
    for name, pod in (await pod_map(kube, namespace)).items():
        assert pinned_node(pod) == pod["spec"]["nodeName"], name  # bound where topogang planned it

    async def allocated() -> dict[str, list[tuple[str, str, str]]] | None:
        held = await allocations(kube, namespace)
        return held if len(held) == 4 and all(held.values()) else None

    held = await eventually(allocated, within=30, what="4 claims allocated")
    for pod_name, devices in held.items():
        assert {pool for _, pool, _ in devices} == {placed[pod_name]}
