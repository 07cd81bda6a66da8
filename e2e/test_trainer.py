"""Kubeflow Trainer's TrainJob with the real Trainer and JobSet controllers (e2e/controllers.py).

Setup (once for the module): topogang serve with kube-scheduler calling it (e2e/topogang.py
`serving`), the JobSet controller and Trainer's controller manager as processes built from their
Go modules (versions in e2e/controlplane/versions.env), with their CRDs and webhooks. No pod is
made by hand: Trainer makes a JobSet from the TrainJob and its runtime, the JobSet controller
its Jobs, kube-controller-manager their pods.

Where the annotations are written is where Trainer lets users write them: the runtime's JobSet
template (the Topology), a runtime patch of the TrainJob (the segments, on the pods of the Job
`node`) and the TrainJob's own metadata (one block for the whole gang).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controllers import Controllers, controlled_namespace_label, delete_workloads
from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.scenario import create, eventually, wait_all_bound
from e2e.test_controllers import GPU8, PAUSE, labelled, node_racks
from e2e.test_extender import BLOCK, RACK, TOPOLOGY
from e2e.test_operations import podgroup, podgroup_events
from e2e.topogang import Topogang, serving
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

API = "trainer.kubeflow.org/v1alpha1"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def running(control_plane: ControlPlane, kubeconfig: Path) -> AsyncIterator[tuple[Topogang, Controllers]]:
    async with (
        await KubeClient.connect(kubeconfig) as kube,
        Controllers.start(control_plane, kube, ("jobset", "trainer")) as controllers,
        serving(kubeconfig, control_plane, TOPOLOGY) as server,
    ):
        yield server, controllers


@pytest_asyncio.fixture(loop_scope="session")
async def ns(running: tuple[Topogang, Controllers], kube: KubeClient, namespace: str) -> AsyncIterator[str]:
    await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": controlled_namespace_label()}})
    yield namespace
    await delete_workloads(kube, namespace)


def torch_runtime() -> dict[str, Any]:
    """A namespaced TrainingRuntime shaped as Trainer's torch-distributed: one Job `node` of the
    trainer step; its JobSet template names the Topology."""
    pod = {"spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "node", "image": PAUSE}]}}
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"backoffLimit": 0, "template": pod},
        },
    }
    return {
        "apiVersion": API,
        "kind": "TrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "metadata": {"annotations": {"kai.scheduler/topology": "e2e-dc"}},
                "spec": {"replicatedJobs": [node]},
            },
        },
    }


def trainjob(name: str, nodes: int, segment: int) -> dict[str, Any]:
    segments = {"kai.scheduler/segment-size": str(segment), "kai.scheduler/segment-topology-required-placement": RACK}
    pod_patch = {"template": {"spec": {"template": {"metadata": {"annotations": segments}}}}}
    patch = {
        "manager": "e2e.topogang.io/test",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", **pod_patch}]}}},
    }
    return {
        "apiVersion": API,
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": {"kai.scheduler/topology-required-placement": BLOCK}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed", "kind": "TrainingRuntime"},
            "trainer": {"numNodes": nodes, "resourcesPerNode": GPU8},
            "runtimePatches": [patch],
        },
    }


async def test_a_trainjob_is_one_gang_with_rack_segments_in_one_block(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # 8 nodes in 2 segments of 4, each segment in one rack, the whole job in one block:
    #   z0-b0-r0..r2 (3 nodes each): 9 nodes in one block, but no rack holds a segment
    #   z0-b1-r0..r1 (4 nodes each): the one block that holds the job
    #   z0-b2-r0     (4 nodes): a rack for one segment, in another block
    nodes = []
    for block, racks, count in ((0, 3, 3), (1, 2, 4), (2, 1, 4)):
        for rack in range(racks):
            nodes += await fake_gpu_nodes.add(zone=0, block=block, rack=rack, count=count)
    await create(kube, torch_runtime(), ns)
    await create(kube, trainjob("llm", nodes=8, segment=4), ns)
    placed = await wait_all_bound(kube, ns, 8, within=180)
    rack_of = await node_racks(kube, nodes)
    labels = await labelled(kube, ns)
    # The JobSet controller's Job `llm-node-0` (indexed) made them; a pod's index is its completion index.
    assert {labels[p]["batch.kubernetes.io/job-name"] for p in placed} == {"llm-node-0"}
    index = {int(labels[p]["batch.kubernetes.io/job-completion-index"]): rack_of[node] for p, node in placed.items()}
    assert sorted(index) == list(range(8))
    segments = [{index[i] for i in range(s * 4, s * 4 + 4)} for s in range(2)]
    assert all(len(racks) == 1 for racks in segments), segments
    assert {r for racks in segments for r in racks} == {"z0-b1-r0", "z0-b1-r1"}

    # One gang named after the TrainJob: its PodGroup belongs to the TrainJob, says where the gang
    # runs, and its Events are about it; none is made for the JobSet Trainer created. (kwok
    # completes a Job's pods once they run: the gang goes on from Scheduled to Finished.)
    async def scheduled() -> dict[str, Any] | None:
        pg = await podgroup(kube, ns, "trainjob-llm")
        status = (pg or {}).get("status", {})
        return pg if status.get("phase") in ("Scheduled", "Finished") and status.get("bound") == 8 else None

    pg = await eventually(scheduled, within=60, what="PodGroup trainjob-llm Scheduled with every pod bound")
    (done,) = [c for c in pg["status"]["conditions"] if c["type"] == "Scheduled"]
    assert done["status"] == "True"
    assert pg["spec"]["topologyConstraints"]["global"]["requiredTopologyLevel"] == BLOCK
    (owner,) = pg["metadata"]["ownerReferences"]
    assert (owner["apiVersion"], owner["kind"], owner["name"]) == (API, "TrainJob", "llm")
    tj = await kube.get(f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/llm")
    assert owner["uid"] == tj["metadata"]["uid"]
    assert tj["spec"]["runtimePatches"][0]["time"], "Trainer's own webhook defaulted the TrainJob (it is served)"
    assert await podgroup(kube, ns, "jobset-llm") is None
    js = await kube.get(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/llm")
    assert js["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"

    async def said() -> bool:
        events = await podgroup_events(kube, ns, "trainjob-llm")
        return any(e[:2] in (("Normal", "Scheduled"), ("Normal", "Finished")) for e in events)

    await eventually(said, within=30, what="a Scheduled or Finished Event about PodGroup trainjob-llm")
