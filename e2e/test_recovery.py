"""A crash between a gate's binds, on the real control plane: the gang is finished or taken back.

A process that dies while POSTing a gang's Bindings leaves the binds it sent in place and the
rest never sent. That moment is staged here without racing a SIGKILL: with kube-scheduler and
topogang stopped, the test creates a gang and binds part of it through the Binding API (the binds
that landed), then starts `topogang serve` (2 s bind timeout, 3 s recovery grace) and
kube-scheduler pointed at it, as after a restart. Each test has its own namespace and fake GPU
nodes (8 GPUs each), drawn in the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes, SchedulerSwitch
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, install, pods, wait_all_bound
from e2e.test_extender import TOPOLOGY
from e2e.test_operations import condition, podgroup, podgroup_events
from e2e.topogang import CRDS, Topogang, scheduler_config
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]


@pytest_asyncio.fixture(loop_scope="session")
async def crds(kubeconfig: Path) -> AsyncIterator[None]:
    async with await KubeClient.connect(kubeconfig) as kube:
        await install(kube, CRDS, TOPOLOGY)
    yield


async def part_bound_gang(kube: KubeClient, namespace: str, nodes: list[str]) -> None:
    """A PodGroup of 3 pods (minMember 3) with g-0 and g-1 bound to NODES[0], NODES[1]."""
    await create_podgroup(kube, namespace, "g", {"minMember": 3})
    for i in range(3):
        await create(kube, gpu_pod(f"g-{i}", annotations={"pod-group-name": "g"}), namespace)
    for i in range(2):
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": f"g-{i}", "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i]},
        }
        await kube.post(f"/api/v1/namespaces/{namespace}/pods/g-{i}/binding", binding)


async def restart(control_plane: ControlPlane, scheduler: SchedulerSwitch, server: Topogang) -> None:
    await scheduler.use(scheduler_config(server.url, server.tls))


@contextlib.asynccontextmanager
async def recovering(
    control_plane: ControlPlane,
    scheduler: SchedulerSwitch,
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    count: int,
) -> AsyncIterator[tuple[Topogang, list[str]]]:
    """COUNT nodes in one rack, gang g part-bound there while no scheduler ran, then topogang
    (2 s bind timeout, 3 s recovery grace) and kube-scheduler started: the server and the nodes."""
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=count)
    await scheduler.stop()
    await part_bound_gang(kube, namespace, nodes)
    args = ["--recovery-grace", "3"]
    async with Topogang.start(kubeconfig, control_plane.logs_dir, bind_timeout=2.0, args=args) as server:
        await restart(control_plane, scheduler, server)
        yield server, nodes


async def test_a_part_bound_gang_that_cannot_finish_is_evicted_and_says_so(
    crds: None,
    control_plane: ControlPlane,
    scheduler: SchedulerSwitch,
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
) -> None:
    #   z0-b0-r0 (2 nodes): g-0 and g-1 bound, no room left for g-2
    async with recovering(control_plane, scheduler, kube, kubeconfig, namespace, fake_gpu_nodes, 2) as (server, _):

        async def evicted() -> bool:
            left = {p["metadata"]["name"]: p for p in await pods(kube, namespace)}
            return all(n not in left or left[n]["metadata"].get("deletionTimestamp") for n in ("g-0", "g-1"))

        try:
            await eventually(evicted, within=60, what="the bound members g-0 and g-1 to be evicted")
        except TimeoutError:
            print(f"--- last lines of {server.log_path} ---\n{server.tail(40)}")
            raise

        async def said() -> dict[str, Any] | None:
            pg = await podgroup(kube, namespace, "g")
            return (
                pg if pg is not None and condition(pg, "Unschedulable").get("reason") == "PartialGangEvicted" else None
            )

        pg = await eventually(said, within=30, what="PodGroup g to say its bound pods were evicted")
        assert pg["status"]["message"].startswith("evicted 2 bound pod(s): the gang was found below its minimum")
        events = await podgroup_events(kube, namespace, "g")
        assert any(r == "PartialGangEvicted" for _, r, _ in events), events


async def test_a_part_bound_gang_that_can_finish_is_finished(
    crds: None,
    control_plane: ControlPlane,
    scheduler: SchedulerSwitch,
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
) -> None:
    #   z0-b0-r0 (3 nodes): g-0 and g-1 bound, room for g-2 on the third
    async with recovering(control_plane, scheduler, kube, kubeconfig, namespace, fake_gpu_nodes, 3) as (_, nodes):
        placed = await wait_all_bound(kube, namespace, 3, within=60)
        assert placed == {"g-0": nodes[0], "g-1": nodes[1], "g-2": nodes[2]}
        pg = await eventually(lambda: podgroup(kube, namespace, "g"), within=10, what="PodGroup g to exist")
        assert pg is not None
        left = {p["metadata"]["name"]: p["metadata"].get("deletionTimestamp") for p in await pods(kube, namespace)}
        assert left == {"g-0": None, "g-1": None, "g-2": None}
