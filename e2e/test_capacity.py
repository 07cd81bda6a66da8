"""Room counted as kube-scheduler v1.37 counts it, on the real control plane.

- Pod-level resources (PodLevelResources, beta and on by default since 1.34): a pod that writes
  only `spec.resources.limits.cpu` gets the request from the API server's defaulting on create
  (PodLevelResourcesFixDefaulting, beta and on in 1.37), and topogang must count it: a gang bound
  ahead (topogang posts the Bindings, kube-scheduler's own filters never see those pods) would
  otherwise be packed onto one node far past its cpu.
- Another scheduler's nomination: a pod nominated to a node (`status.nominatedNodeName`, as
  kube-scheduler writes it after preempting for the pod) keeps that room from a gang of equal or
  lower priority until the nomination is cleared; then the gang is woken and placed.

Each test has its own namespace and one rack of four 8-GPU, 128-cpu nodes:

    z0-b0-r0 (4 nodes)
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.controlplane import FakeGpuNodes
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, pods, says, wait_all_bound
from e2e.test_extender import topogang
from e2e.topogang import Topogang
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane]
__all__ = ["topogang"]  # the module fixture: topogang serving, kube-scheduler pointed at it

NODE_CPU = 128  # e2e/controlplane/fakenodes.py


def pod_level_cpu_member(name: str, cpu: int) -> dict[str, Any]:
    """A gang member asking one GPU in its container and CPU only as a pod-level limit."""
    body = gpu_pod(name, gpus=1, annotations={"pod-group-name": "g"})
    container = body["spec"]["containers"][0]
    container["resources"] = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    body["spec"]["resources"] = {"limits": {"cpu": str(cpu)}}
    return body


async def test_pod_level_requests_the_api_server_defaults_are_counted(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # Four pods of 1 GPU and 100 cpus (a pod-level limit): one per node, though their GPUs would
    # fit four to a node.
    cpu = 100
    assert 2 * cpu > NODE_CPU
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    await create_podgroup(kube, namespace, "g", {"minMember": 4}, topology=None)
    for i in range(4):
        await create(kube, pod_level_cpu_member(f"g-{i}", cpu), namespace)
    stored = await kube.get(f"/api/v1/namespaces/{namespace}/pods/g-0")
    assert stored["spec"]["resources"]["requests"] == {"cpu": str(cpu)}  # the API server's defaulting
    placed = await wait_all_bound(kube, namespace, 4)
    assert sorted(placed.values()) == sorted(nodes), placed  # one member per node


async def test_a_gang_leaves_the_room_another_scheduler_nominated_a_pod_to_until_it_is_cleared(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # A plain pod of 8 GPUs nominated to the first node; no scheduler runs it (its schedulerName
    # names none), so the nomination stays until the test clears it. The gang of four 8-GPU pods
    # then fits in three nodes only.
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    waiting = gpu_pod("pre")
    waiting["spec"]["schedulerName"] = "e2e-no-such-scheduler"
    await create(kube, waiting, namespace)
    status = f"/api/v1/namespaces/{namespace}/pods/pre/status"
    await kube.patch(status, {"status": {"nominatedNodeName": nodes[0]}})
    # topogang's pod watch delivers events in resourceVersion order: it sees the nomination before
    # the gang's pods, created after it, so the gang is planned with it in view.
    await create_podgroup(kube, namespace, "g", {"minMember": 4}, topology=None)
    for i in range(4):
        await create(kube, gpu_pod(f"g-{i}", annotations={"pod-group-name": "g"}), namespace)

    async def refused() -> bool:
        return all([await says(kube, namespace, f"g-{i}", "only 3 fit") for i in range(4)])

    await eventually(refused, within=60, what="each member to be refused: the nominated node's room is kept")
    assert not any(p["spec"].get("nodeName") for p in await pods(kube, namespace))
    # The nomination is cleared (the pod went elsewhere, or kube-scheduler gave up on it): the
    # parked members are woken and the gang takes the whole rack.
    await kube.patch(status, {"status": {"nominatedNodeName": None}})
    placed = await wait_all_bound(kube, namespace, 4)
    assert sorted(placed.values()) == sorted(nodes), placed
