"""Kueue in front of topogang, with the real Kueue controller (e2e/controllers.py).

The supported combination: Kueue keeps the quota (ClusterQueue, LocalQueue, a ResourceFlavor
without spec.topologyName) and topogang places the pods of the workloads Kueue admits. Kueue
suspends a Job with a queue-name label at creation (its webhook) and unsuspends it when it
admits it; only then does the Job controller create pods, so a Job over quota has no pod, and
topogang, which plans for pods, holds no room for it. The refused combination: a workload that
Kueue's own Topology Aware Scheduling places (a flavor with spec.topologyName) is not placed by
topogang as well; its pods say why.

Setup (once for the module): topogang serve with kube-scheduler calling it, and Kueue's
controller manager (the batch/job integration) with its CRDs and webhooks.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controllers import Controllers, controlled_namespace_label, delete_workloads
from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.scenario import create, eventually, pods, says, wait_all_bound
from e2e.test_extender import BLOCK, RACK, TOPOLOGY, ZONE
from e2e.topogang import Topogang, serving
from extender.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def running(control_plane: ControlPlane, kubeconfig: Path) -> AsyncIterator[tuple[Topogang, Controllers]]:
    async with (
        await KubeClient.connect(kubeconfig) as kube,
        Controllers.start(control_plane, kube, ("kueue",)) as controllers,
        serving(kubeconfig, control_plane, TOPOLOGY) as server,
    ):
        yield server, controllers


@pytest_asyncio.fixture(loop_scope="session")
async def ns(running: tuple[Topogang, Controllers], kube: KubeClient, namespace: str) -> AsyncIterator[str]:
    await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": controlled_namespace_label()}})
    yield namespace
    await delete_workloads(kube, namespace)


@pytest_asyncio.fixture(loop_scope="session")
async def cluster_objects(kube: KubeClient) -> AsyncIterator[list[str]]:
    """Paths of the cluster-scoped Kueue objects a test makes, deleted after it."""
    made: list[str] = []
    yield made
    for path in reversed(made):
        try:
            await kube.delete(path)
        except ApiError as exc:
            if exc.status != 404:
                raise


async def queues(
    kube: KubeClient, namespace: str, made: list[str], gpus: int, flavor: dict[str, Any] | None = None
) -> str:
    """A ResourceFlavor, a ClusterQueue with GPUS of quota in it and a LocalQueue in NAMESPACE;
    the LocalQueue's name."""
    suffix = uuid.uuid4().hex[:6]
    flavor_name, cq = f"e2e-gpus-{suffix}", f"e2e-cq-{suffix}"
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor_name}}
    body["spec"] = dict(flavor or {})
    await kube.post(f"{KUEUE}/resourceflavors", body)
    made.append(f"{KUEUE}/resourceflavors/{flavor_name}")
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": cq},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": flavor_name,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "100"},
                                {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    await kube.post(f"{KUEUE}/clusterqueues", cluster_queue)
    made.append(f"{KUEUE}/clusterqueues/{cq}")
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq"}}
    local["spec"] = {"clusterQueue": cq}
    await kube.post(f"{KUEUE}/namespaces/{namespace}/localqueues", local)

    async def active() -> bool:
        got = await kube.get(f"{KUEUE}/clusterqueues/{cq}")
        return any(c["type"] == "Active" and c["status"] == "True" for c in got.get("status", {}).get("conditions", []))

    await eventually(active, within=60, what=f"ClusterQueue {cq} to be active")
    return "lq"


def gpu_job(name: str, pods_: int, queue: str | None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods_,
            "parallelism": pods_,
            "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": "e2e-dc", **(annotations or {})}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "8", "cpu": "1"},
                                "limits": {"nvidia.com/gpu": "8"},
                            },
                        }
                    ],
                },
            },
        },
    }


async def job_pods(kube: KubeClient, namespace: str, job: str) -> list[dict[str, Any]]:
    return [p for p in await pods(kube, namespace) if p["metadata"].get("labels", {}).get("job-name") == job]


async def test_kueue_admits_a_job_and_topogang_places_it_and_one_over_quota_stays_suspended_holding_no_room(
    running: tuple[Topogang, Controllers],
    kube: KubeClient,
    ns: str,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: list[str],
) -> None:
    # 2 racks of 4 nodes (64 GPUs); the ClusterQueue has 48: a Job of 4 x 8 GPUs is admitted, one
    # of 8 x 8 GPUs never fits the quota. (kwok completes a Job's pods once they run, so the
    # first Job's pods finish soon after they are placed.)
    #   z0-b0-r0 (4 nodes)   z0-b0-r1 (4 nodes)
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4)
    queue = await queues(kube, ns, cluster_objects, gpus=48)
    racked = {"kai.scheduler/topology-required-placement": RACK}
    created = await create(kube, gpu_job("first", 4, queue, racked), ns)
    assert created["spec"]["suspend"] is True, "Kueue's webhook suspends a Job with a queue-name label"
    placed = await wait_all_bound(kube, ns, 4, within=90)
    racks = {(await kube.get(f"/api/v1/nodes/{node}"))["metadata"]["labels"][RACK] for node in placed.values()}
    assert len(racks) == 1, f"topogang placed the admitted gang in one rack, not {racks}"
    assert (await kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/first"))["spec"]["suspend"] is False

    await create(kube, gpu_job("second", 8, queue), ns)

    async def pending_on_quota() -> bool:
        listing = await kube.get(f"{KUEUE}/namespaces/{ns}/workloads")
        for wl in listing.get("items", []):
            owners = [o["name"] for o in wl["metadata"].get("ownerReferences", [])]
            conds = {c["type"]: c for c in wl.get("status", {}).get("conditions", [])}
            if "second" in owners and conds.get("QuotaReserved", {}).get("status") == "False":
                return True
        return False

    await eventually(pending_on_quota, within=60, what="the second Job's Workload to wait for quota")
    assert (await kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/second"))["spec"]["suspend"] is True
    assert await job_pods(kube, ns, "second") == []
    # No room held for it: a gang outside Kueue as big as the second Job takes every node.
    await create(kube, gpu_job("outside", 8, None), ns)

    async def outside_bound() -> set[str] | None:
        bound = {p["spec"].get("nodeName") for p in await job_pods(kube, ns, "outside")}
        return bound if len(bound) == 8 and None not in bound else None

    assert await eventually(outside_bound, within=120, what="the gang outside Kueue on all 8 nodes") == set(nodes)
    assert await job_pods(kube, ns, "second") == []
    assert (await kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/second"))["spec"]["suspend"] is True


async def test_kueue_converts_its_older_api_version_with_the_certificate_its_own_management_keeps(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, cluster_objects: list[str]
) -> None:
    # Kueue runs with its own certificate management on (its default install; nothing under a
    # system path): its rotator keeps the harness's certificate, and the API server calls its
    # conversion webhook by URL when a ClusterQueue, stored as v1beta2, is read as v1beta1.
    await queues(kube, ns, cluster_objects, gpus=8)
    cq = cluster_objects[-1].rsplit("/", 1)[1]
    old = await kube.get(f"/apis/kueue.x-k8s.io/v1beta1/clusterqueues/{cq}")
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    (group,) = old["spec"]["resourceGroups"]
    quotas = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    assert quotas == {"cpu": "100", "nvidia.com/gpu": "8"}


async def test_a_job_placed_by_kueues_topology_aware_scheduling_is_refused_by_topogang_with_a_message(
    running: tuple[Topogang, Controllers],
    kube: KubeClient,
    ns: str,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: list[str],
) -> None:
    #   z0-b0-r0 (4 nodes, labelled for the TAS flavor)
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    suffix = uuid.uuid4().hex[:6]
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": f"e2e-tas-{suffix}"},
        "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": BLOCK}, {"nodeLabel": RACK}]},
    }
    await kube.post(f"{KUEUE}/topologies", topology)
    cluster_objects.append(f"{KUEUE}/topologies/e2e-tas-{suffix}")
    flavor = {"topologyName": f"e2e-tas-{suffix}", "nodeLabels": {ZONE: "z0"}}
    queue = await queues(kube, ns, cluster_objects, gpus=64, flavor=flavor)
    await create(kube, gpu_job("tas", 2, queue, {"kueue.x-k8s.io/podset-required-topology": RACK}), ns)

    async def refused() -> str | None:
        for pod in await job_pods(kube, ns, "tas"):
            name = pod["metadata"]["name"]
            if await says(kube, ns, name, "Kueue's Topology Aware Scheduling places these pods"):
                return str(name)
        return None

    await eventually(refused, within=90, what="an Event on a pod of the TAS Job saying topogang refuses it")
    assert all(not p["spec"].get("nodeName") for p in await job_pods(kube, ns, "tas"))
    # The Job goes with its pods now: left to the namespace's deletion, the Job controller would
    # recreate the deleted pods meanwhile, and their nodeSelector (Kueue's domain) matches the
    # next test's nodes, which have the same topology labels.
    await kube.delete(f"/apis/batch/v1/namespaces/{ns}/jobs/tas", {"propagationPolicy": "Foreground"})

    async def gone() -> bool:
        return not await job_pods(kube, ns, "tas")

    await eventually(gone, within=60, what="the TAS Job's pods to be deleted")


async def test_kueues_multi_layer_slices_are_honoured(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # podset-slice-required-topology-constraints: slices of 4 pods per block, of 2 per rack.
    # Blocks b0 and b1 have 2 racks of 2 nodes; b2 has 4 racks of 1 node (no rack holds a slice
    # of 2), so the two block slices go to b0 and b1, each rack slice whole in one rack.
    #   z0-b0-r0,r1 (2 nodes each)   z0-b1-r0,r1 (2 nodes each)   z0-b2-r0..r3 (1 node each)
    nodes = []
    for block in range(2):
        for rack in range(2):
            nodes += await fake_gpu_nodes.add(zone=0, block=block, rack=rack, count=2)
    for rack in range(4):
        nodes += await fake_gpu_nodes.add(zone=0, block=2, rack=rack, count=1)
    layers = f'[{{"topology": "{BLOCK}", "size": 4}}, {{"topology": "{RACK}", "size": 2}}]'
    await create(
        kube, gpu_job("sliced", 8, None, {"kueue.x-k8s.io/podset-slice-required-topology-constraints": layers}), ns
    )
    placed = await wait_all_bound(kube, ns, 8, within=90)
    labels = {n: (await kube.get(f"/api/v1/nodes/{n}"))["metadata"]["labels"] for n in nodes}
    index = {
        p["metadata"]["name"]: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        for p in await pods(kube, ns)
    }
    blocks: dict[int, set[str]] = {}
    racks: dict[int, set[str]] = {}
    for pod, node in placed.items():
        blocks.setdefault(index[pod] // 4, set()).add(labels[node][BLOCK])
        racks.setdefault(index[pod] // 2, set()).add(labels[node][RACK])
    assert all(len(b) == 1 for b in blocks.values()), blocks
    assert all(len(r) == 1 for r in racks.values()), racks
    assert {b for bs in blocks.values() for b in bs} == {"z0-b0", "z0-b1"}
