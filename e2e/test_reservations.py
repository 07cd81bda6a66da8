"""Reservations on the real control plane: a large gang that waits holds its block, small gangs
that end before it is expected to start backfill there, the others wait.

Cluster: block z0/b0 of 2 racks x 4 nodes (64 GPUs), kept busy by eight gangs of 8 one-GPU pods
(one node each); block z0/b1 of 4 nodes, full of plain 8-GPU pods, too small for the large gang
anyway, so b0 is the only block that can ever hold it. The large gang: 64 one-GPU pods required
in one block. While it waits, the test ends the small gangs of b0 one by one (it plays their
finishing, as a kubelet would report it) and submits new ones: two without a runtime bound, one
whose `activeDeadlineSeconds` ends long after the large gang's estimated start, one whose bound
ends before it.

With reservations (topogang's default), b0 is held: the bounded short gang backfills into it, the
others wait, and the large gang starts once the small gangs that ran there have ended. Without
(`--reservations 0`), the first new gang takes the first node that frees, and the large gang is
still waiting at the end.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.gates_support import ENABLED, gates_serving
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, pods, says
from e2e.test_extender import BLOCK, TOPOLOGY
from e2e.topogang import Topogang, serving
from extender.kube import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

PODGROUPS = "/apis/scheduling.topogang.io/v1alpha1/namespaces/{ns}/podgroups"
HELD = "held for another gang"
# The large gang starts within this many seconds of the last small gang of its block ending: a
# sweep (5 s), its members woken, 64 pods through kube-scheduler and the gate, on a loaded machine.
START_SLACK = 90.0


@pytest_asyncio.fixture(loop_scope="session")
async def serving_with(
    kubeconfig: Path, control_plane: ControlPlane, request: pytest.FixtureRequest
) -> AsyncIterator[Topogang]:
    """topogang as the test asks (`on`, `off`: extender mode with reservations on or off;
    `gates`: gates mode, reservations on), and the cluster wired to call it."""
    mode: str = request.param
    if mode == "gates":
        async with gates_serving(kubeconfig, control_plane, TOPOLOGY) as server:
            yield server
        return
    async with serving(
        kubeconfig, control_plane, TOPOLOGY, args=["--reservations", "0"] if mode == "off" else []
    ) as server:
        yield server


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    server = request.node.funcargs.get("serving_with")
    if isinstance(server, Topogang) and report is not None and report.failed:
        print(f"--- last lines of {server.log_path} ---\n{server.tail()}")


def one_gpu_pod(name: str, group: str, deadline: int | None = None) -> dict[str, Any]:
    body = gpu_pod(name, gpus=1, annotations={"pod-group-name": group})
    if deadline is not None:
        body["spec"]["activeDeadlineSeconds"] = deadline
    return body


async def small_gang(kube: KubeClient, namespace: str, name: str, deadline: int | None = None) -> None:
    await create_podgroup(kube, namespace, name, {"minMember": 8}, topology=None)
    for i in range(8):
        await create(kube, one_gpu_pod(f"{name}-{i}", name, deadline), namespace)


async def bound_nodes(kube: KubeClient, namespace: str, prefix: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in await pods(kube, namespace)
        if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    }


async def all_bound(kube: KubeClient, namespace: str, prefix: str, count: int, within: float = 90) -> dict[str, str]:
    async def check() -> dict[str, str] | None:
        placed = await bound_nodes(kube, namespace, prefix)
        return placed if len(placed) == count else None

    return await eventually(check, within=within, what=f"{count} pods {prefix}* bound")


async def end(kube: KubeClient, namespace: str, prefix: str, count: int) -> None:
    """The pods PREFIX-0.. finish (deleted at once, as a finished Job's pods free their room)."""
    for i in range(count):
        await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{prefix}-{i}", {"gracePeriodSeconds": "0"})

    async def gone() -> bool:
        return not any(p["metadata"]["name"].startswith(f"{prefix}-") for p in await pods(kube, namespace))

    await eventually(gone, within=60, what=f"the pods of {prefix} to be gone")


async def held_out(kube: KubeClient, namespace: str, gang: str) -> None:
    async def refused() -> bool:  # on its pods (extender mode), on its PodGroup (gates mode)
        return await says(kube, namespace, f"{gang}-0", HELD) or await says(kube, namespace, gang, HELD)

    await eventually(refused, within=60, what=f"{gang} to be refused for room held for another gang")


async def reservation(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    async def made() -> dict[str, Any] | None:
        pg = await kube.get(f"{PODGROUPS.format(ns=namespace)}/{name}")
        found = pg.get("status", {}).get("reservation")
        return dict(found) if found else None

    return await eventually(made, within=60, what=f"PodGroup {name} to show the room held for it")


async def fill(kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes) -> list[str]:
    """b1 full of plain pods, b0's eight nodes busy with eight small gangs; returns b0's nodes."""
    await fake_gpu_nodes.add(zone=0, block=1, rack=0, count=4)
    for i in range(4):
        await create(kube, gpu_pod(f"plain-{i}"), namespace)
    await all_bound(kube, namespace, "plain-", 4)
    b0 = [*await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)]
    b0 += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4)
    for g in range(8):
        await small_gang(kube, namespace, f"s{g}")
    await all_bound(kube, namespace, "s", 64)
    return b0


async def large_gang(kube: KubeClient, namespace: str, gated: bool = False) -> None:
    await create_podgroup(
        kube, namespace, "big", {"minMember": 64, "topologyConstraints": {"global": {"requiredTopologyLevel": BLOCK}}}
    )
    for i in range(64):
        await create(kube, one_gpu_pod(f"big-{i}", "big"), namespace)

    if gated:
        return  # its pods are gated: kube-scheduler does not see them, topogang plans them itself

    # The cluster is full: kube-scheduler's own filters refuse every node, and topogang is not
    # even asked (its sweep finds the gang waiting, which is what the reservation needs).
    async def refused() -> bool:
        return await says(kube, namespace, "big-0", "Insufficient nvidia.com/gpu")

    await eventually(refused, within=90, what="the large gang to be refused for want of room")


@pytest.mark.parametrize("serving_with", ["on", "gates"], indirect=True, ids=["extender", "gates"])
async def test_a_large_gang_holds_its_block_and_starts_while_bounded_small_gangs_backfill(
    serving_with: Topogang,
    kube: KubeClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    request: pytest.FixtureRequest,
) -> None:
    gated = "gates" in request.node.callspec.id
    if gated:
        await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": ENABLED}})
    b0 = set(await fill(kube, namespace, fake_gpu_nodes))
    await large_gang(kube, namespace, gated)
    held = await reservation(kube, namespace, "big")
    assert held["domain"] == "block z0/z0-b0"
    assert held["nodes"] == 8
    assert held["estimatedStart"] >= held["since"]

    await end(kube, namespace, "s0", 8)
    await small_gang(kube, namespace, "n0")  # no bound: it would hold the node for who knows how long
    await held_out(kube, namespace, "n0")
    await small_gang(kube, namespace, "long", deadline=24 * 3600)  # ends long after the estimated start
    await held_out(kube, namespace, "long")
    await small_gang(kube, namespace, "short", deadline=60)  # ends before the estimated start
    backfilled = await all_bound(kube, namespace, "short-", 8)
    assert set(backfilled.values()) <= b0

    await end(kube, namespace, "short", 8)  # it ran its minute (the test plays the end)
    for g in range(1, 8):
        await end(kube, namespace, f"s{g}", 8)
        if g == 4:
            await small_gang(kube, namespace, "n1")
            await held_out(kube, namespace, "n1")
    ended = time.monotonic()
    placed = await all_bound(kube, namespace, "big-", 64, within=START_SLACK)
    assert time.monotonic() - ended <= START_SLACK
    assert set(placed.values()) == b0
    # The gangs without a bound, and the one bounded too long, waited: none of them ran in b0.
    for gang in ("n0", "n1", "long"):
        assert not await bound_nodes(kube, namespace, f"{gang}-")

    async def let_go() -> bool:  # the status is written after the binds (it still said bound: 0 once)
        pg = await kube.get(f"{PODGROUPS.format(ns=namespace)}/big")
        return "reservation" not in pg.get("status", {})

    await eventually(let_go, within=30, what="PodGroup big to drop its reservation once it started")


@pytest.mark.parametrize("serving_with", ["off"], indirect=True, ids=["reservations-off"])
async def test_without_reservations_the_large_gang_is_still_waiting_at_the_end(
    serving_with: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    b0 = set(await fill(kube, namespace, fake_gpu_nodes))
    await large_gang(kube, namespace)
    await end(kube, namespace, "s0", 8)
    await small_gang(kube, namespace, "n0")
    taken = await all_bound(kube, namespace, "n0-", 8)  # the freed node goes to whoever asks next
    assert set(taken.values()) <= b0
    for g in range(1, 8):
        await end(kube, namespace, f"s{g}", 8)
        if g == 4:
            await small_gang(kube, namespace, "n1")
            await all_bound(kube, namespace, "n1-", 8)

    # Every small gang that ran in b0 has ended, and b0 is still not free: the large gang, tried
    # again on the room that freed, waits (six of its eight nodes free: 48 of its 64 pods).
    async def tried_again() -> bool:
        return await says(kube, namespace, "big-0", "the best block fits 48")

    await eventually(tried_again, within=60, what="the large gang to be refused on the room left")
    assert not await bound_nodes(kube, namespace, "big-")
    pg = await kube.get(f"{PODGROUPS.format(ns=namespace)}/big")
    assert "reservation" not in pg.get("status", {})
