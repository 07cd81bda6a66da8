"""Grove on the real control plane: a PodCliqueSet and what Grove's operator would create for it
(PodCliqueScalingGroup, PodCliques, PodGangs, pods gated until their PodGang lists them), its
CRDs only (e2e/crds/grove.yaml; no operator). kube-scheduler calls `topogang serve`, which groups
the pods by the PodGang their grove.io/podgang label names, as KAI's Grove plugin does.

Setup (once for the module): topogang's and the workload kinds' CRDs (Grove's among them), the
Topology `e2e-dc`, `topogang serve` and kube-scheduler restarted from
scheduler-config/extender.yaml pointed at it. The test has its own namespace and fake GPU nodes.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.scenario import collection, create, eventually, wait_all_bound
from e2e.test_extender import RACK, TOPOLOGY, ZONE, node_racks, racks_of
from e2e.topogang import Topogang, serving
from extender.grouping import synthesize
from extender.grouping.kinds.grove import SCHEDULING_GATE
from extender.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane]

JSON = dict[str, Any]
PODGROUPS = "/apis/scheduling.topogang.io/v1alpha1/namespaces/{ns}/podgroups"
GPU = {"requests": {"nvidia.com/gpu": "8", "cpu": "1"}, "limits": {"nvidia.com/gpu": "8"}}
# What Grove's ClusterTopologyBinding would translate the user's domains to (the fake nodes' labels).
LEVEL_KEYS = {"zone": ZONE, "rack": RACK}


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def topogang(kubeconfig: Path, control_plane: ControlPlane) -> AsyncIterator[Topogang]:
    async with serving(kubeconfig, control_plane, TOPOLOGY) as server:
        yield server


def clique(name: str, replicas: int, resources: JSON) -> JSON:
    container = {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources}
    pod_spec = {"containers": [container], "terminationGracePeriodSeconds": 0}
    return {"name": name, "spec": {"roleName": name, "replicas": replicas, "podSpec": pod_spec}}


def podcliqueset(prefill_replicas: int) -> JSON:
    """A frontend and a prefill scaling group (a leader and 3 workers of 8 GPUs), 2 replicas
    required: each replica in one rack, the PodGang in one zone."""
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {"name": "llm"},
        "spec": {
            "replicas": 1,
            "template": {
                "topologyConstraint": {"topologyName": "e2e-dc", "pack": {"required": "zone"}},
                "cliques": [
                    clique("frontend", 1, {"requests": {"cpu": "100m"}}),
                    clique("leader", 1, GPU),
                    clique("worker", 3, GPU),
                ],
                "podCliqueScalingGroups": [
                    {
                        "name": "prefill",
                        "cliqueNames": ["leader", "worker"],
                        "replicas": prefill_replicas,
                        "minAvailable": 2,
                        "topologyConstraint": {"pack": {"required": "rack"}},
                    }
                ],
            },
        },
    }


def translated(obj: Any) -> Any:
    """A synthesized PodGang's domains as Grove writes them: node label keys."""
    if isinstance(obj, dict):
        return {
            k: LEVEL_KEYS.get(v, v) if k in ("required", "preferred") and isinstance(v, str) else translated(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [translated(v) for v in obj]
    return obj


class Grove:
    """Creates what Grove's operator would, in order, each owner reference carrying the uid the
    API server gave its owner (the garbage collector deletes objects whose owner uid is gone)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.uids: dict[str, str] = {}  # synthesized uid -> the API server's
        self.created: set[tuple[str, str]] = set()
        self.pods: list[str] = []

    async def make(self, body: JSON) -> JSON:
        doc = copy.deepcopy(body)
        meta = doc["metadata"]
        for ref in meta.get("ownerReferences", []):
            ref["uid"] = self.uids.get(ref["uid"], ref["uid"])
        made = await create(self.kube, doc, self.namespace)
        self.uids[meta.get("uid", "")] = made["metadata"]["uid"]
        self.created.add((doc["kind"], meta["name"]))
        return made

    async def sync(self, pcs: JSON) -> list[str]:
        """Everything the PodCliqueSet's spec calls for that does not exist yet: owners, PodGangs,
        then the pods, gated, and the gates lifted once their PodGang lists them. Returns the new pods."""
        made = synthesize(pcs)
        for owner in made.owners:
            if (owner["kind"], owner["metadata"]["name"]) not in self.created:
                await self.make(translated(owner) if owner["kind"] == "PodGang" else owner)
        new = [p for p in made.pods if ("Pod", p["metadata"]["name"]) not in self.created]
        for pod in new:
            pod["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
            await self.make(pod)
        pods_path = collection("v1", "Pod", self.namespace)
        for pod in new:  # Grove lifts its gate once the PodGang is initialized
            await self.kube.patch(f"{pods_path}/{pod['metadata']['name']}", {"spec": {"schedulingGates": None}})
        names = [p["metadata"]["name"] for p in new]
        self.pods += names
        return names


async def podgroup(kube: KubeClient, namespace: str, name: str) -> JSON | None:
    try:
        return await kube.get(f"{PODGROUPS.format(ns=namespace)}/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def test_a_podgang_binds_whole_each_scaling_group_replica_in_one_rack_the_gang_in_one_zone(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   zone z0: rack r0 (3 nodes)  rack r1 (4 nodes)     zone z1: rack r0 (4 nodes)  rack r1 (4 nodes)
    # The base PodGang (frontend + 2 prefill replicas of 4) needs two racks of 4 in one zone: z1.
    # The scaled PodGang (prefill replica 3, beyond minAvailable) needs one rack of 4: z0's r1.
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4)
    nodes += await fake_gpu_nodes.add(zone=1, block=0, rack=0, count=4)
    nodes += await fake_gpu_nodes.add(zone=1, block=0, rack=1, count=4)
    rack_of_node = await node_racks(kube, nodes)
    pcs = await create(kube, podcliqueset(2), namespace)
    grove = Grove(kube, namespace)
    base = await grove.sync(pcs)
    assert len(base) == 9

    placed = racks_of(await wait_all_bound(kube, namespace, 9), rack_of_node)
    for j in (0, 1):
        replica = {placed[p] for p in base if p.startswith(f"llm-0-prefill-{j}-")}
        assert len(replica) == 1, f"prefill replica {j} spans racks {replica}"
    assert {r.split("-")[0] for r in placed.values()} == {"z1"}, placed

    async def owned_podgroup() -> JSON | None:
        pg = await podgroup(kube, namespace, "podgang-llm-0")
        return pg if pg and pg["metadata"].get("ownerReferences") else None

    pg = await eventually(owned_podgroup, within=30, what="PodGroup podgang-llm-0")
    (owner,) = pg["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("PodGang", "llm-0")
    assert [s["name"] for s in pg["spec"]["subGroups"] if "parent" not in s] == [
        "llm-0-prefill-0",
        "llm-0-prefill-1",
        "llm-0-frontend",
    ]

    # Scaled out (HPA on the scaling group): replica 2 is its own PodGang, under the group's rack.
    await kube.patch(
        f"{collection('grove.io/v1alpha1', 'PodCliqueScalingGroup', namespace)}/llm-0-prefill",
        {"spec": {"replicas": 3}},
    )
    scaled = await grove.sync({**pcs, "spec": podcliqueset(3)["spec"]})
    assert sorted(scaled) == ["llm-0-prefill-2-leader-0", *(f"llm-0-prefill-2-worker-{i}" for i in range(3))]
    placed = racks_of(await wait_all_bound(kube, namespace, 13), rack_of_node)
    assert {placed[p] for p in scaled} == {"z0-b0-r1"}, placed
