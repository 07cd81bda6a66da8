"""A node fails under a running gang: only the broken part is repaired, on the real control plane.

The gang is KAI's segment design's story 2: a TFJob whose 16 workers form 4 segments of 4, each required in
one rack, the whole job required in one zone (`create_tfjob`). There is no training-operator
here, so the test stands in for it and for the pod garbage collector: when a node is deleted,
the pod that ran on it is deleted and created again under the same name, and any pod of the job
that goes away (evicted by topogang) is created again the same way.

Setup: the module fixtures of test_extender.py (topogang serve, kube-scheduler from
scheduler-config/extender.yaml as shipped).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from e2e.controlplane import FakeGpuNodes
from e2e.scenario import create, events_about, eventually, pods, wait_all_bound
from e2e.test_extender import create_tfjob, node_racks, show_topogang_log, topogang
from e2e.topogang import Topogang
from extender.grouping import synthesize
from extender.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane]
__all__ = ["show_topogang_log", "topogang"]  # the module fixtures, shared with test_extender.py

SEGMENT_2 = [f"train-worker-{i}" for i in range(8, 12)]


@contextlib.asynccontextmanager
async def operator(kube: KubeClient, namespace: str) -> AsyncIterator[None]:
    """Creates again, under the same name, every pod of the TFJob that goes away."""
    tfjob = await kube.get(f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/train")
    bodies = {b["metadata"]["name"]: b for b in synthesize(tfjob).pods}

    async def loop() -> None:
        while True:
            present = {p["metadata"]["name"] for p in await pods(kube, namespace)}
            for name, body in bodies.items():
                if name not in present:
                    body["spec"]["terminationGracePeriodSeconds"] = 0
                    with contextlib.suppress(ApiError):  # 409: the old one is still terminating
                        await create(kube, body, namespace)
            await asyncio.sleep(0.3)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def fail_node_under(kube: KubeClient, nodes: FakeGpuNodes, namespace: str, pod: str, node: str) -> None:
    """NODE is deleted; the pod garbage collector deletes POD, which ran there."""
    await nodes.delete([node])
    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}", {"gracePeriodSeconds": "0"})


async def bound_again(kube: KubeClient, namespace: str, before: dict[str, str], names: list[str]) -> dict[str, str]:
    """Every pod bound, those of NAMES on nodes other than BEFORE's (they were recreated)."""

    async def settled() -> dict[str, str] | None:
        items = await pods(kube, namespace)
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")}
        whole = len(placed) == len(before) and all(placed.get(n) and placed[n] != before[n] for n in names)
        return placed if whole else None

    try:
        return await eventually(settled, within=120, what=f"{names} bound again")
    except TimeoutError:
        for p in await pods(kube, namespace):
            meta = p["metadata"]
            print(meta["name"], meta["uid"], meta.get("deletionTimestamp"), p["spec"].get("nodeName"), p["status"])
        raise


async def running_tfjob(
    kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, racks: list[tuple[int, int, int]]
) -> tuple[dict[str, str], dict[str, str]]:
    """Nodes in RACKS (zone, rack, nodes; block 0), then story 2's TFJob, all bound: pod -> node,
    node -> rack."""
    nodes = []
    for zone, rack, count in racks:
        nodes += await fake_gpu_nodes.add(zone=zone, block=0, rack=rack, count=count)
    names = await create_tfjob(kube, namespace, zone_required=True)
    placed = await wait_all_bound(kube, namespace, len(names))
    return placed, await node_racks(kube, nodes)


async def test_a_replacement_goes_to_a_spare_node_of_its_segments_rack_and_nothing_moves(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0..r3 (5 nodes each): every segment's rack has a spare node
    before, rack_of = await running_tfjob(kube, namespace, fake_gpu_nodes, [(0, r, 5) for r in range(4)])
    segment_rack = rack_of[before["train-worker-9"]]
    async with operator(kube, namespace):
        await fail_node_under(kube, fake_gpu_nodes, namespace, "train-worker-9", before["train-worker-9"])
        after = await bound_again(kube, namespace, before, ["train-worker-9"])
    assert rack_of[after["train-worker-9"]] == segment_rack
    assert {k: v for k, v in after.items() if k != "train-worker-9"} == {
        k: v for k, v in before.items() if k != "train-worker-9"
    }


async def test_a_segment_whose_rack_has_no_spare_node_moves_whole_and_the_others_stay(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0..r4 (4 nodes each): four racks hold the segments, one is free
    #   z1-b0-r0 (4 nodes): a free rack in another zone, which the job's zone rules out
    racks = [(0, r, 4) for r in range(5)] + [(1, 0, 4)]
    before, rack_of = await running_tfjob(kube, namespace, fake_gpu_nodes, racks)
    used = {rack_of[before[f"train-worker-{i}"]] for i in range(16)}
    [free] = {r for r in rack_of.values() if r.startswith("z0")} - used
    async with operator(kube, namespace):
        await fail_node_under(kube, fake_gpu_nodes, namespace, "train-worker-9", before["train-worker-9"])
        after = await bound_again(kube, namespace, before, SEGMENT_2)
    assert {rack_of[after[n]] for n in SEGMENT_2} == {free}  # segment 2 moved whole, in the zone
    others = [f"train-worker-{i}" for i in range(16) if f"train-worker-{i}" not in SEGMENT_2]
    assert {n: after[n] for n in others} == {n: before[n] for n in others}  # same pods, same nodes
    pods_now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await pods(kube, namespace)}
    assert len(pods_now) == len(before)

    async def told() -> list[str] | None:
        # (events_about reads both Event APIs, which show the same Event)
        said = {m for m in await events_about(kube, namespace, "tfjob-train") if m.startswith("moving SubGroup")}
        return sorted(said) or None

    [said] = await eventually(told, within=30, what="a GangRepair Event on PodGroup tfjob-train")
    assert f"SubGroup worker-seg-2 from rack z0/z0-b0/{rack_of[before['train-worker-8']]}" in said
    assert f"to rack z0/z0-b0/{free} whole" in said

    async def recorded() -> str | None:
        pg = await kube.get(f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{namespace}/podgroups/tfjob-train")
        return pg.get("status", {}).get("lastRepair", {}).get("message")

    assert await eventually(recorded, within=30, what="status.lastRepair on PodGroup tfjob-train") == said
