"""A new leader and gangs below their minimum, on the real control plane: a gang cut off between
two binds is finished or taken back; a gang that ran whole and lost a pod is kept.

A process that dies while POSTing a gang's Bindings leaves the binds it sent in place and the
rest never sent. That moment is staged here without racing a SIGKILL: with kube-scheduler and
topogang stopped, the test creates a gang and binds part of it through the Binding API (the binds
that landed), then starts `topogang serve` (2 s bind timeout, 3 s recovery grace) and
kube-scheduler pointed at it, as after a restart. A degraded gang is staged the same way: bound
whole, then one pod deleted and made again, as its workload would after losing a node. Each test
has its own namespace and fake GPU nodes (8 GPUs each), drawn in the test.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes, SchedulerSwitch
from e2e.failover import log_entries
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


async def bind(kube: KubeClient, namespace: str, pod: str, node: str) -> None:
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    await kube.post(f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", binding)


async def part_bound_gang(
    kube: KubeClient, namespace: str, nodes: list[str], name: str = "g", spec: Mapping[str, Any] | None = None
) -> None:
    """A PodGroup of 3 pods (minMember 3, or SPEC) with <name>-0 and -1 bound to NODES[0], NODES[1]
    (or as many as NODES names)."""
    await create_podgroup(kube, namespace, name, spec or {"minMember": 3})
    for i in range(3):
        await create(kube, gpu_pod(f"{name}-{i}", annotations={"pod-group-name": name}), namespace)
    for i, node in enumerate(nodes[:2]):
        await bind(kube, namespace, f"{name}-{i}", node)


def api_time(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def after_the_api_servers_clock_passes(kube: KubeClient, namespace: str, moment: float) -> None:
    """Wait until the API server stamps new objects later than MOMENT (its times have one-second
    steps): a probe ConfigMap's creationTimestamp says so."""

    async def passed() -> bool:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "clock-"}}
        made = await create(kube, body, namespace)
        return api_time(made["metadata"]["creationTimestamp"]) > moment

    await eventually(passed, within=10, what="the API server's clock to pass the binds", every=0.2)


async def degraded_gang(kube: KubeClient, namespace: str, nodes: list[str], name: str, spec: Mapping[str, Any]) -> None:
    """A PodGroup of 3 pods bound whole to NODES, then <name>-2 deleted and made again after the
    others were bound: a gang that ran and lost a pod, its replacement not bound."""
    await create_podgroup(kube, namespace, name, spec)
    for i in range(3):
        await create(kube, gpu_pod(f"{name}-{i}", annotations={"pod-group-name": name}), namespace)
        await bind(kube, namespace, f"{name}-{i}", nodes[i])
    bound = []
    for i in range(3):
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}-{i}")
        scheduled = [c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        bound.append(api_time(scheduled[0]["lastTransitionTime"]))
    await after_the_api_servers_clock_passes(kube, namespace, max(bound))
    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}-2", {"gracePeriodSeconds": "0"})
    await eventually(lambda: _gone(kube, namespace, f"{name}-2"), within=30, what=f"{name}-2 to be deleted", every=0.2)
    await create(kube, gpu_pod(f"{name}-2", annotations={"pod-group-name": name}), namespace)


async def evicted(kube: KubeClient, namespace: str, names: tuple[str, ...]) -> bool:
    """Whether every pod of NAMES is gone or being deleted."""
    left = {p["metadata"]["name"]: p for p in await pods(kube, namespace)}
    return all(n not in left or left[n]["metadata"].get("deletionTimestamp") for n in names)


async def _gone(kube: KubeClient, namespace: str, pod: str) -> bool:
    return pod not in {p["metadata"]["name"] for p in await pods(kube, namespace)}


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
        try:
            await eventually(
                lambda: evicted(kube, namespace, ("g-0", "g-1")), within=60, what="g-0 and g-1 to be evicted"
            )
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


async def test_a_new_leader_keeps_a_gang_that_ran_whole_and_evicts_one_cut_off_mid_bind(
    crds: None,
    control_plane: ControlPlane,
    scheduler: SchedulerSwitch,
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
) -> None:
    #   z0-b0-r0 (2 nodes): d-0 and d-1 bound; d-2 (made again after they were bound) has no room
    #   z0-b0-r1 (2 nodes): c-0 bound, c-1 and c-2 created before it, never bound; room for one
    # Both gangs require one rack, so neither can finish; both are below their minimum.
    in_rack = {"minMember": 3, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    r0 = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    r1 = await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=2)
    await scheduler.stop()
    await degraded_gang(kube, namespace, [*r0, r1[1]], "d", in_rack)
    await part_bound_gang(kube, namespace, r1[:1], "c", in_rack)
    args = ["--recovery-grace", "3"]
    async with Topogang.start(kubeconfig, control_plane.logs_dir, bind_timeout=2.0, args=args) as server:
        await restart(control_plane, scheduler, server)

        try:
            # Both gangs got the same deadline: once the cut one is evicted, the degraded one
            # would have been too.
            cut = ("c-0",)
            await eventually(lambda: evicted(kube, namespace, cut), within=60, what="c-0 (the gang cut off) evicted")
            kept = {p["metadata"]["name"]: p for p in await pods(kube, namespace)}
            assert {"d-0", "d-1"} <= kept.keys(), sorted(kept)  # the degraded gang's pods: not evicted
            assert all(kept[n]["metadata"].get("deletionTimestamp") is None for n in ("d-0", "d-1")), kept.keys()
            assert {kept[n]["spec"].get("nodeName") for n in ("d-0", "d-1")} == set(r0)
            lines = [
                e
                for e in log_entries(server.log_path)
                if e.get("event") == "gangs found running below their minimum kept"
            ]
            assert [line["groups"] for line in lines] == [[f"{namespace}/d"]], lines
        except (AssertionError, TimeoutError):
            print(f"--- last lines of {server.log_path} ---\n{server.tail(40)}")
            raise
        pg = await podgroup(kube, namespace, "d")
        assert pg is None or condition(pg, "Unschedulable").get("reason") != "PartialGangEvicted"
