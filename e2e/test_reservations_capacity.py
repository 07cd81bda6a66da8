"""Room held for a waiting gang on the real control plane counts what the planner counts.

- A gang that cannot run even with nothing running (its rack's second node carries a taint its
  pods do not tolerate: 1 of the 2 nodes it needs) holds no room, in both modes: its PodGroup's
  status says how far short it falls even with nothing running, and a pod without a runtime
  bound takes the node that is free.
- GPUs from DRA claims (e2e/dra.py: 8 devices per node, a claim of 8 per pod): both nodes of
  the rack run a pod whose claim holds all 8 devices, with no runtime bound. The gang (2 pods in
  one rack) is held the rack from when those pods are expected to end (30 minutes at least, the
  reservations' floor), not from now; when one of them ends, a pod bounded to 120 s backfills
  its node, and a pod without a bound is kept off it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes, GpuNodeShape
from e2e.dra import allocations, claim_pod, claim_template, device_class, publish, unpublish
from e2e.gates_support import ENABLED, gates_serving
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, install, pods, says, wait_all_bound
from e2e.test_extender import RACK, TOPOLOGY
from e2e.topogang import Topogang, serving
from extender.kube import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

PODGROUPS = "/apis/scheduling.topogang.io/v1alpha1/namespaces/{ns}/podgroups"
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
FLOOR = 1800  # seconds an unbounded pod is expected to run at least (reservations.Settings.floor)
IN_A_RACK = {"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": RACK}}}


@pytest_asyncio.fixture(loop_scope="session")
async def serving_with(
    kubeconfig: Path, control_plane: ControlPlane, request: pytest.FixtureRequest
) -> AsyncIterator[Topogang]:
    """topogang in extender mode (`on`) or gates mode (`gates`), reservations on (the default)."""
    async with await KubeClient.connect(kubeconfig) as kube:
        await install(kube, [], device_class())
    if request.param == "gates":
        async with gates_serving(kubeconfig, control_plane, TOPOLOGY) as server:
            yield server
        return
    async with serving(kubeconfig, control_plane, TOPOLOGY) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="session")
async def slices(kube: KubeClient) -> AsyncIterator[None]:
    yield
    await unpublish(kube)


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    server = request.node.funcargs.get("serving_with")
    if isinstance(server, Topogang) and report is not None and report.failed:
        print(f"--- last lines of {server.log_path} ---\n{server.tail()}")


async def podgroup_status(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    pg = await kube.get(f"{PODGROUPS.format(ns=namespace)}/{name}")
    return dict(pg.get("status", {}))


async def bound_to(kube: KubeClient, namespace: str, name: str) -> str | None:
    for p in await pods(kube, namespace):
        if p["metadata"]["name"] == name:
            return p["spec"].get("nodeName") or None
    return None


def seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("serving_with", ["on", "gates"], indirect=True, ids=["extender", "gates"])
async def test_a_gang_no_rack_can_ever_hold_holds_no_room_and_says_why(
    serving_with: Topogang,
    kube: KubeClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    request: pytest.FixtureRequest,
) -> None:
    if "gates" in request.node.callspec.id:
        await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": ENABLED}})
    (free,) = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=1)
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=1, shape=GpuNodeShape(taints=(TAINT,)))
    await create_podgroup(kube, namespace, "big", IN_A_RACK)
    for i in range(2):
        await create(kube, gpu_pod(f"big-{i}", annotations={"pod-group-name": "big"}), namespace)
    want = "the best rack fits 1 even with nothing running; nodes left out: 1 taint dedicated=infer:NoSchedule"

    async def told() -> dict[str, Any] | None:
        status = await podgroup_status(kube, namespace, "big")
        return status if want in status.get("message", "") else None

    status = await eventually(told, within=60, what=f"PodGroup big's status saying {want!r}")
    assert "reservation" not in status
    assert "room held" not in status["message"]
    # Nothing is held: a pod without a runtime bound takes the free node.
    await create(kube, gpu_pod("web"), namespace)
    placed = await wait_all_bound(kube, namespace, 1)
    assert placed == {"web": free}


@pytest.mark.parametrize("serving_with", ["on"], indirect=True, ids=["extender"])
async def test_with_gpus_from_claims_the_gang_waits_for_the_claims_holders_and_short_work_backfills(
    serving_with: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, slices: None
) -> None:
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2, shape=GpuNodeShape(gpus=0))
    await publish(kube, nodes)
    await create(kube, claim_template(), namespace)
    for i in range(2):
        await create(kube, claim_pod(f"run-{i}"), namespace)
    running = await wait_all_bound(kube, namespace, 2)

    async def allocated() -> bool:
        held = await allocations(kube, namespace)
        return len(held) == 2 and all(len(d) == 8 for d in held.values())

    await eventually(allocated, within=30, what="the running pods' claims allocated")
    await create_podgroup(kube, namespace, "big", IN_A_RACK)
    for i in range(2):
        await create(kube, claim_pod(f"big-{i}", annotations={"pod-group-name": "big"}), namespace)

    async def held() -> dict[str, Any] | None:
        found = (await podgroup_status(kube, namespace, "big")).get("reservation")
        return dict(found) if found else None

    room = await eventually(held, within=60, what="PodGroup big to show the room held for it")
    assert room["nodes"] == 2
    # Every device is held by a claim of a pod without a bound: nothing frees before those pods
    # are expected to end (not now, as if the devices' room were free).
    assert seconds(room["estimatedStart"]) - seconds(room["since"]) >= FLOOR

    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/run-0", {"gracePeriodSeconds": "0"})
    await create(kube, claim_pod("web"), namespace)  # no bound: kept off the held room

    async def refused() -> bool:
        return await says(kube, namespace, "web", "room held for a waiting gang")

    await eventually(refused, within=90, what="web to be refused for the room held")
    short = claim_pod("short")
    short["spec"]["activeDeadlineSeconds"] = 120  # ends long before the gang's estimated start
    await create(kube, short, namespace)

    async def backfilled() -> str | None:
        return await bound_to(kube, namespace, "short")

    node = await eventually(backfilled, within=90, what="the 120 s pod to backfill the held room")
    assert node == running["run-0"]
    assert await bound_to(kube, namespace, "web") is None
    assert await bound_to(kube, namespace, "big-0") is None
