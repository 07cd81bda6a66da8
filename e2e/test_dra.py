"""Gangs whose GPUs are ResourceClaims, end to end: a real kube-scheduler, with its
DynamicResources plugin on (the default in 1.37), calls `topogang serve`; the test publishes
ResourceSlices for the fake nodes as a GPU driver would (e2e/dra.py: 8 devices per node, a
DeviceClass selecting them by driver) and kube-controller-manager makes each pod's claim from a
ResourceClaimTemplate of 8 devices. topogang plans the devices per node; kube-scheduler
allocates them on the planned nodes.

Setup (once for the module): topogang's CRDs, the Topology `e2e-dc`, the DeviceClass, `topogang
serve` and kube-scheduler pointed at it. Each test has its own namespace, nodes and slices.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes, GpuNodeShape
from e2e.dra import CLASS, allocations, claim_pod, claim_template, device_class, publish, unpublish
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, install, says, wait_all_bound
from e2e.test_extender import TOPOLOGY, node_racks
from e2e.topogang import Topogang, serving
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

NO_PLUGIN_GPUS = GpuNodeShape(gpus=0)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def topogang(kubeconfig: Path, control_plane: ControlPlane) -> AsyncIterator[Topogang]:
    async with await KubeClient.connect(kubeconfig) as kube:
        await install(kube, [], device_class())
    async with serving(kubeconfig, control_plane, TOPOLOGY) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="session")
async def slices(kube: KubeClient) -> AsyncIterator[None]:
    yield
    await unpublish(kube)


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest, topogang: Topogang) -> Any:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"--- last lines of {topogang.log_path} ---\n{topogang.tail()}")


def placements(server: Topogang, group: str) -> list[dict[str, Any]]:
    """topogang's log lines about GROUP's plans ("gang placed", "gang repairing"...)."""
    out = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if (
            doc.get("group") == group
            and str(doc.get("event", "")).startswith("gang ")
            and doc["event"] != "gang pending"
        ):
            out.append(doc)
    return out


async def gang(
    kube: KubeClient, namespace: str, name: str, spec: dict[str, Any], pods: list[tuple[str, str | None]]
) -> None:
    """A PodGroup and its claim pods: (pod name, SubGroup or None)."""
    await create_podgroup(kube, namespace, name, spec)
    for pod, subgroup in pods:
        labels = {"kai.scheduler/subgroup-name": subgroup} if subgroup else {}
        await create(kube, claim_pod(pod, labels=labels, annotations={"pod-group-name": name}), namespace)


def in_one_rack(size: int) -> dict[str, Any]:
    return {"minMember": size, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}


async def test_rack_segments_in_one_zone_land_where_planned_with_claims_allocated_there(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, slices: None
) -> None:
    # z0-b0-r0, z0-b0-r1, z1-b0-r0, z1-b0-r1: 4 nodes of 8 DRA devices each, no device-plugin GPUs.
    # The gang: 2 segments of 4 pods x 8 devices, each segment in one rack, both in one zone.
    nodes: list[str] = []
    for zone in (0, 1):
        for rack in (0, 1):
            nodes += await fake_gpu_nodes.add(zone=zone, block=0, rack=rack, count=4, shape=NO_PLUGIN_GPUS)
    await publish(kube, nodes)
    await create(kube, claim_template(), namespace)
    spec = {
        "minMember": 2,
        "subGroups": [{"name": "seg-0", "minMember": 4}, {"name": "seg-1", "minMember": 4}],
        "topologyConstraints": {
            "global": {"requiredTopologyLevel": "zone"},
            "subGroups": {"seg-0": {"requiredTopologyLevel": "rack"}, "seg-1": {"requiredTopologyLevel": "rack"}},
        },
    }
    members = [(f"w-{i}", f"seg-{i // 4}") for i in range(8)]
    await gang(kube, namespace, "train", spec, members)
    placed = await wait_all_bound(kube, namespace, 8)
    rack_of = await node_racks(kube, nodes)
    for s in range(2):
        assert len({rack_of[placed[f"w-{i}"]] for i in range(4 * s, 4 * s + 4)}) == 1, placed
    assert len({rack_of[n].split("-")[0] for n in placed.values()}) == 1, placed
    assert len(set(placed.values())) == 8  # 8 devices each: one pod per node
    # kube-scheduler allocated each pod's 8 devices on the pod's own node (pool = node name).
    held = await eventually(lambda: _all_allocated(kube, namespace, 8), within=30, what="8 claims allocated")
    for pod, devices in held.items():
        assert len(devices) == 8
        assert {pool for _, pool, _ in devices} == {placed[pod]}, (pod, devices)
    # Every pod landed where topogang planned it: one plan, on exactly these nodes.
    [plan] = placements(topogang, f"{namespace}/train")
    assert plan["event"] == "gang placed"
    assert set(plan["nodes"]) == set(placed.values())


async def _all_allocated(kube: KubeClient, namespace: str, count: int) -> dict[str, list[tuple[str, str, str]]] | None:
    held = await allocations(kube, namespace)
    return held if len(held) >= count and all(held.values()) else None


async def test_two_competing_gangs_never_share_a_device(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, slices: None
) -> None:
    # z0-b0-r0, z0-b0-r1: 4 nodes of 8 devices each. Two gangs of 4 pods x 8 devices, one rack each.
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4, shape=NO_PLUGIN_GPUS)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4, shape=NO_PLUGIN_GPUS)
    await publish(kube, nodes)
    await create(kube, claim_template(), namespace)
    await gang(kube, namespace, "a", in_one_rack(4), [(f"a-{i}", None) for i in range(4)])
    await gang(kube, namespace, "b", in_one_rack(4), [(f"b-{i}", None) for i in range(4)])
    placed = await wait_all_bound(kube, namespace, 8)
    rack_of = await node_racks(kube, nodes)
    assert len({rack_of[placed[f"a-{i}"]] for i in range(4)}) == 1
    assert len({rack_of[placed[f"b-{i}"]] for i in range(4)}) == 1
    held = await eventually(lambda: _all_allocated(kube, namespace, 8), within=30, what="8 claims allocated")
    devices = Counter(d for ds in held.values() for d in ds)
    assert len(devices) == 64
    assert max(devices.values()) == 1


async def test_a_gang_needing_more_devices_than_a_rack_has_stays_wholly_pending_with_the_reason(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, slices: None
) -> None:
    # z0-b0-r0, z0-b0-r1: 4 nodes of 8 devices each; 5 pods x 8 devices in one rack never fit.
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4, shape=NO_PLUGIN_GPUS)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4, shape=NO_PLUGIN_GPUS)
    await publish(kube, nodes)
    await create(kube, claim_template(), namespace)
    await gang(kube, namespace, "big", in_one_rack(5), [(f"big-{i}", None) for i in range(5)])
    want = f"5 pods x {{cpu: 1, devices/{CLASS}: 8}} in one rack; the best rack fits 4"

    async def reason_on_every_pod() -> bool:
        return all([await says(kube, namespace, f"big-{i}", want) for i in range(5)])

    await eventually(reason_on_every_pod, within=60, what=f"an Event saying {want!r} on each pod")
    listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
    assert not [p["metadata"]["name"] for p in listing["items"] if p["spec"].get("nodeName")]


async def test_a_mixed_cluster_places_device_plugin_gangs_and_dra_gangs(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, slices: None
) -> None:
    # z0-b0-r0: 4 nodes with 8 device-plugin GPUs (nvidia.com/gpu), no slices;
    # z0-b0-r1: 4 nodes with 8 DRA devices each and no device-plugin GPUs.
    plugin_nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    dra_nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4, shape=NO_PLUGIN_GPUS)
    await publish(kube, dra_nodes)
    await create(kube, claim_template(), namespace)
    await gang(kube, namespace, "dra", in_one_rack(4), [(f"dra-{i}", None) for i in range(4)])
    await create_podgroup(kube, namespace, "plugin", in_one_rack(4))
    for i in range(4):
        await create(kube, gpu_pod(f"plugin-{i}", annotations={"pod-group-name": "plugin"}), namespace)
    placed = await wait_all_bound(kube, namespace, 8)
    assert {placed[f"plugin-{i}"] for i in range(4)} == set(plugin_nodes)
    assert {placed[f"dra-{i}"] for i in range(4)} == set(dra_nodes)


async def test_a_claim_naming_a_missing_device_class_is_in_the_podgroup_status_and_others_are_placed(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, slices: None
) -> None:
    # z0-b0-r0: 4 nodes of 8 devices. Gang "bad" asks for a DeviceClass that does not exist; "good" fits.
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4, shape=NO_PLUGIN_GPUS)
    await publish(kube, nodes)
    await create(kube, claim_template(), namespace)
    bad = claim_template()
    bad["metadata"]["name"] = "nope"
    bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nope"
    await create(kube, bad, namespace)
    await create_podgroup(kube, namespace, "bad", in_one_rack(2))
    for i in range(2):
        body = claim_pod(f"bad-{i}", annotations={"pod-group-name": "bad"})
        body["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "nope"
        await create(kube, body, namespace)
    await gang(kube, namespace, "good", in_one_rack(2), [(f"good-{i}", None) for i in range(2)])
    placed = await wait_all_bound(kube, namespace, 2)
    assert set(placed) == {"good-0", "good-1"}
    want = "names DeviceClass 'gpu.nope', which does not exist"

    async def said() -> bool:
        pg = await kube.get(f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{namespace}/podgroups/bad")
        status = pg.get("status", {})
        return status.get("phase") == "Invalid" and want in status.get("message", "")

    await eventually(said, within=60, what=f"PodGroup bad's status saying {want!r}")
