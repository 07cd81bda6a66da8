"""The product end to end: a real kube-scheduler calls `topogang serve`, and the API server shows
where every pod landed.

Setup (once for the module): the CRDs of topogang and of the workload kinds, a Topology over the
fake nodes' labels, `topogang serve` as its own process, and kube-scheduler restarted from
scheduler-config/extender.yaml as shipped (urlPrefix pointed at that server). With
TOPOGANG_E2E_KUBECONFIG set, topogang and the scheduler are expected to be deployed already
(e.g. `make e2e-kind`) and only the scenarios run.

Each test gets its own namespace and its own fake GPU nodes (8 GPUs each), labelled
topology.topogang.io/zone > block > rack; the drawing in each test shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from e2e.controlplane import FAKE_NODE_LABEL, ControlPlane, FakeGpuNodes, FakeTopology
from e2e.scenario import (
    create,
    create_podgroup,
    events_about,
    eventually,
    gpu_pod,
    install,
    pods,
    says,
    wait_all_bound,
)
from e2e.topogang import CRDS, Topogang, scheduler_config
from extender.grouping import synthesize
from extender.kube.client import KubeClient
from tests.builders import decode_prefill_spec

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane]

ZONE, BLOCK, RACK = "topology.topogang.io/zone", "topology.topogang.io/block", "topology.topogang.io/rack"
TOPOLOGY = {
    "apiVersion": "scheduling.topogang.io/v1alpha1",
    "kind": "Topology",
    "metadata": {"name": "e2e-dc"},
    "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": BLOCK}, {"nodeLabel": RACK}]},
}


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def topogang(kubeconfig: Path, request: pytest.FixtureRequest) -> AsyncIterator[Topogang | None]:
    async with await KubeClient.connect(kubeconfig) as kube:
        await install(kube, CRDS, TOPOLOGY)
    if os.environ.get("TOPOGANG_E2E_KUBECONFIG"):
        yield None  # deployed in the cluster under test
        return
    plane: ControlPlane = request.getfixturevalue("control_plane")
    async with Topogang.start(kubeconfig, plane.logs_dir) as server:
        await plane.restart_scheduler_async(scheduler_config(server.url, server.tls))
        try:
            yield server
        finally:
            await plane.restart_scheduler_async(None)


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest, topogang: Topogang | None) -> Any:
    yield
    report = getattr(request.node, "rep_call", None)
    if topogang is not None and report is not None and report.failed:
        print(f"--- last lines of {topogang.log_path} ---\n{topogang.tail()}")


def logged(server: Topogang) -> list[dict[str, Any]]:
    """topogang's JSON log lines so far, in the order written (one process writes them)."""
    out = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            out.append(orjson.loads(line))
    return out


def log_lines(server: Topogang, message: str, namespace: str) -> list[dict[str, Any]]:
    """topogang's log lines MESSAGE about NAMESPACE's gangs or pods."""
    return [
        e
        for e in logged(server)
        if e.get("event") == message and f"{namespace}/" in f"{e.get('group', '')}{e.get('pod', '')}"
    ]


async def bound_lines(server: Topogang, namespace: str, pods: int) -> list[dict[str, Any]]:
    """topogang's "bound" lines about NAMESPACE once they account for PODS bound pods.

    The line is written when the last Binding POST of its batch has returned, which can be after
    the pod watch has shown every pod bound: read the log before that and the line is not there yet.
    """

    async def logged() -> list[dict[str, Any]] | None:
        lines = log_lines(server, "bound", namespace)
        return lines if sum(x["pods"] - x["failed"] for x in lines) >= pods else None

    return await eventually(logged, within=30, what=f"topogang to log {pods} pods of {namespace} bound")


def racks_of(placed: dict[str, str], node_rack: dict[str, str]) -> dict[str, str]:
    return {pod: node_rack[node] for pod, node in placed.items()}


async def node_racks(kube: KubeClient, names: list[str]) -> dict[str, str]:
    out = {}
    for name in names:
        node = await kube.get(f"/api/v1/nodes/{name}")
        out[name] = node["metadata"]["labels"][RACK]
    return out


async def create_tfjob(kube: KubeClient, namespace: str, *, zone_required: bool) -> list[str]:
    """A TFJob (its CRD only; no operator) and the pods training-operator would create for it."""
    annotations = {"kai.scheduler/topology": "e2e-dc"}
    if zone_required:
        annotations["kai.scheduler/topology-required-placement"] = ZONE
    container = {"name": "tensorflow", "image": "registry.k8s.io/pause:3.10"}
    gpu = {"requests": {"nvidia.com/gpu": "8", "cpu": "1"}, "limits": {"nvidia.com/gpu": "8"}}
    tfjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "train", "annotations": annotations},
        "spec": {
            "tfReplicaSpecs": {
                "Chief": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [dict(container, resources={"requests": {"cpu": "1"}})]}},
                },
                "Worker": {
                    "replicas": 16,
                    "template": {
                        "metadata": {
                            "annotations": {
                                "kai.scheduler/segment-size": "4",
                                "kai.scheduler/segment-topology-required-placement": RACK,
                            }
                        },
                        "spec": {"containers": [dict(container, resources=gpu)]},
                    },
                },
            }
        },
    }
    created = await create(kube, tfjob, namespace)
    made = synthesize(created)
    names = []
    for body in made.pods:
        body["spec"]["terminationGracePeriodSeconds"] = 0
        await create(kube, body, namespace)
        names.append(body["metadata"]["name"])
    return names


# -- an Indexed Job with segments, its pods made by the real Job controller ---------------------------


async def test_indexed_job_with_segments(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (3 nodes)  z0-b0-r1 (4 nodes)  z0-b0-r2 (4 nodes): segments of 4 skip rack r0
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=2, count=4)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed", "annotations": {"kai.scheduler/topology": "e2e-dc"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": 8,
            "parallelism": 8,
            "template": {
                "metadata": {
                    "annotations": {
                        "kai.scheduler/segment-size": "4",
                        "kai.scheduler/segment-topology-required-placement": "rack",
                    }
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        },
    }
    await create(kube, job, namespace)
    placed = await wait_all_bound(kube, namespace, 8)
    rack_of = racks_of(placed, await node_racks(kube, nodes))
    index_of = {
        p["metadata"]["name"]: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        for p in await pods(kube, namespace)
    }
    segments: dict[int, set[str]] = {}
    for pod, rack in rack_of.items():
        segments.setdefault(index_of[pod] // 4, set()).add(rack)
    assert all(len(r) == 1 for r in segments.values()), segments
    assert {r for rs in segments.values() for r in rs} == {"z0-b0-r1", "z0-b0-r2"}


# -- a PodGroup like KAI's hierarchical PodGroup design's example 2 -------------------------------------------


async def test_podgroup_leaders_and_workers_per_block(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0, z0-b0-r1, z0-b1-r0, z0-b1-r1: 4 nodes each
    nodes = await fake_gpu_nodes.create(FakeTopology(zones=1, blocks_per_zone=2, racks_per_block=2, nodes_per_rack=4))
    members = []
    for part in ("decode", "prefill"):
        members += [(f"{part}-worker-{i}", f"{part}-workers") for i in range(4)] + [
            (f"{part}-leader", f"{part}-leaders")
        ]
    await create_podgroup(kube, namespace, "serving", decode_prefill_spec())
    for name, sg in members:
        await create(
            kube,
            gpu_pod(name, labels={"kai.scheduler/subgroup-name": sg}, annotations={"pod-group-name": "serving"}),
            namespace,
        )
    placed = await wait_all_bound(kube, namespace, len(members))
    rack_of = racks_of(placed, await node_racks(kube, nodes))
    for part in ("decode", "prefill"):
        workers = {rack_of[f"{part}-worker-{i}"] for i in range(4)}
        assert len(workers) == 1
        blocks = {r.rsplit("-", 1)[0] for r in (*workers, rack_of[f"{part}-leader"])}
        assert len(blocks) == 1, f"{part} spans blocks {blocks}"


# -- gangs that cannot or can only partly fit -------------------------------------------------------


async def test_infeasible_gang_stays_wholly_pending_with_its_reason(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, kubeconfig: Path
) -> None:
    #   z0-b0-r0 (3 nodes), z0-b0-r1 (3 nodes): 4 pods that need one rack never fit
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=3)
    await create_podgroup(
        kube, namespace, "big", {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    )
    for i in range(4):
        await create(kube, gpu_pod(f"big-{i}", annotations={"pod-group-name": "big"}), namespace)
    want = "4 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; the best rack fits 3"

    async def reason_on_every_pod() -> bool:
        for i in range(4):
            if not any(want in m for m in await events_about(kube, namespace, f"big-{i}")):
                return False
        return True

    await eventually(reason_on_every_pod, within=60, what=f"an Event saying {want!r} on each pod")
    assert not any(p["spec"].get("nodeName") for p in await pods(kube, namespace))
    # `topogang explain` against the live cluster says the same.
    explained = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "extender.cli", "explain", f"{namespace}/big", "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(explained.communicate(), 120)
    assert explained.returncode == 0, err.decode()
    text = out.decode()
    # stdout is the explanation alone (the informers' logs go to stderr), and its headline
    # names the reason rather than "waiting to be planned".
    assert text.startswith(f"{namespace}/big  (PodGroup {namespace}/big)  Pending\n  does not fit: "), text
    assert f"\n  does not fit: PodGroup {namespace}/big: {want}" in text
    assert f"Planning it now: does not fit: PodGroup {namespace}/big: {want}" in text


async def test_members_refused_while_their_gang_was_incomplete_come_to_show_why_it_does_not_fit(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # The members are created one at a time, each after kube-scheduler refused it for the gang
    # being incomplete, so the first three sit in its unschedulable queue (retried at its
    # 5-minute flush) when the last one shows that the complete gang does not fit.
    #   z0-b0-r0 (3 nodes), z0-b0-r1 (3 nodes): 4 pods that need one rack never fit
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=3)
    await create_podgroup(
        kube, namespace, "late", {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    )
    for i in range(4):
        await create(kube, gpu_pod(f"late-{i}", annotations={"pod-group-name": "late"}), namespace)
        if i < 3:
            said = f"gang {i + 1}/4 pods present"
            await eventually(
                lambda i=i, said=said: says(kube, namespace, f"late-{i}", said), within=60, what=f"late-{i}: {said!r}"
            )
    want = "4 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; the best rack fits 3"

    async def reason_on_every_pod() -> bool:
        return all([await says(kube, namespace, f"late-{i}", want) for i in range(4)])

    await eventually(reason_on_every_pod, within=60, what=f"an Event saying {want!r} on each pod")
    assert not any(p["spec"].get("nodeName") for p in await pods(kube, namespace))


async def test_two_competing_gangs_one_runs_whole_the_other_waits_whole(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (6 nodes): room for one gang of 4, not two
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=6)
    for gang in ("a", "b"):
        await create_podgroup(kube, namespace, gang, {"minMember": 4})
    for i in range(4):  # interleaved, as two users submitting at once
        for gang in ("a", "b"):
            await create(kube, gpu_pod(f"{gang}-{i}", annotations={"pod-group-name": gang}), namespace)
    placed = await wait_all_bound(kube, namespace, 4)
    winner = {name.split("-")[0] for name in placed}
    assert len(winner) == 1, placed
    loser = ({"a", "b"} - winner).pop()

    async def loser_refused() -> bool:
        for i in range(4):
            if not any("only 2 fit" in m for m in await events_about(kube, namespace, f"{loser}-{i}")):
                return False
        return True

    await eventually(loser_refused, within=60, what=f"gang {loser} to be refused with its reason")
    now = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in await pods(kube, namespace)}
    assert sum(1 for n, node in now.items() if n.startswith(loser) and node) == 0


async def submit_two_elastic_gangs(kube: KubeClient, namespace: str, *, podgroups_last: bool = False) -> None:
    """PodGroups `first` and `second`, 6 pods of 8 GPUs each and minMember 4, their pods
    interleaved as two users submitting at once. PODGROUPS_LAST: the pods first, so that both
    gangs are whole when their PodGroups appear (gates mode looks at them then)."""
    if not podgroups_last:
        for gang in ("first", "second"):
            await create_podgroup(kube, namespace, gang, {"minMember": 4})
    for i in range(6):
        for gang in ("first", "second"):
            await create(kube, gpu_pod(f"{gang}-{i}", annotations={"pod-group-name": gang}), namespace)
    if podgroups_last:
        for gang in ("first", "second"):
            await create_podgroup(kube, namespace, gang, {"minMember": 4})


async def both_minimums_run(kube: KubeClient, namespace: str) -> None:
    """Until 4 pods of each gang run (not being deleted) on 8 nodes of their own: both minimums,
    which fill the 8 nodes (nothing more can bind after), whether the first gang's optional pods
    left their room to the second's minimum or gave it back (evicted)."""

    async def four_each() -> dict[str, str] | None:
        running = {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in await pods(kube, namespace)
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        }
        return running if Counter(n.split("-")[0] for n in running) == {"first": 4, "second": 4} else None

    running = await eventually(four_each, within=90, what="4 pods of each gang to run")
    assert len(set(running.values())) == 8


async def test_two_elastic_gangs_that_arrive_together_both_start_their_minimum(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (4 nodes)   z0-b0-r1 (4 nodes): room for both minimums (4 + 4), not both gangs whole (6 + 6)
    await fake_gpu_nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=2, nodes_per_rack=4))
    await submit_two_elastic_gangs(kube, namespace)
    await both_minimums_run(kube, namespace)


async def test_a_gang_becomes_feasible_when_nodes_are_added(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0: 2 nodes, then 2 more
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    await create_podgroup(
        kube, namespace, "grow", {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    )
    for i in range(4):
        await create(kube, gpu_pod(f"grow-{i}", annotations={"pod-group-name": "grow"}), namespace)

    async def refused() -> bool:
        # Every one of the four, those refused while the gang was incomplete included.
        return all([await says(kube, namespace, f"grow-{i}", "the best rack fits 2") for i in range(4)])

    await eventually(refused, within=60, what="each member to be refused for want of room")
    assert not any(p["spec"].get("nodeName") for p in await pods(kube, namespace))
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    placed = await wait_all_bound(kube, namespace, 4)
    assert len(set(placed.values())) == 4


async def test_a_gang_is_bound_whole_as_it_is_planned_with_at_most_one_write_per_member(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (8 nodes): one gang of 64 pods of 1 GPU, created one by one. Each member
    #   kube-scheduler asks about before the last is created is refused (one status write:
    #   PodScheduled False, whose text does not change as the gang fills, so a retry of a parked
    #   member writes nothing); the call about the last plans the gang and topogang binds all of
    #   it then (--bind-ahead): no member is woken or nominated, none retries a bind.
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=8)
    await create_podgroup(kube, namespace, "big", {"minMember": 64})
    writes: Counter[str] = Counter()  # pod -> writes to it seen before it was bound
    bound: set[str] = set()
    _, version = await kube.list(f"/api/v1/namespaces/{namespace}/pods")

    async def watch() -> None:
        params = {"resourceVersion": version}
        async for kind, obj in kube.watch(f"/api/v1/namespaces/{namespace}/pods", params, timeout_seconds=120):
            name = obj["metadata"]["name"]
            if obj["spec"].get("nodeName"):
                bound.add(name)
            elif kind == "MODIFIED" and name not in bound:
                writes[name] += 1

    watching = asyncio.create_task(watch())
    try:
        for i in range(64):
            await create(kube, gpu_pod(f"big-{i}", gpus=1, annotations={"pod-group-name": "big"}), namespace)
        await wait_all_bound(kube, namespace, 64, within=120)

        async def watched() -> bool:
            return len(bound) == 64

        await eventually(watched, within=30, what="the watch to see every pod bound")
    finally:
        watching.cancel()
    assert max(writes.values(), default=0) <= 1, writes.most_common(5)
    if topogang is not None:
        lines = await bound_lines(topogang, namespace, 64)
        assert [(x["pods"], x["ahead"], x["failed"]) for x in lines] == [(64, True, 0)]
        assert log_lines(topogang, "bind refused", namespace) == []


async def test_plain_pods_schedule_as_usual_beside_gangs(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (4 nodes): a gang of 2 and three plain pods of 2 GPUs
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    await create_podgroup(kube, namespace, "g", {"minMember": 2}, topology=None)
    for i in range(2):
        await create(kube, gpu_pod(f"g-{i}", annotations={"pod-group-name": "g"}), namespace)
    for i in range(3):
        await create(kube, gpu_pod(f"plain-{i}", gpus=2), namespace)
    placed = await wait_all_bound(kube, namespace, 5)
    assert {n for n in placed if n.startswith("plain-")} == {"plain-0", "plain-1", "plain-2"}
    gpus: Counter[str] = Counter()
    for name, node in placed.items():
        gpus[node] += 8 if name.startswith("g-") else 2
    assert max(gpus.values()) <= 8


# -- seed fidelity: PodGroup fields and Kueue objects that reach the API server -----------------------

PODGROUPS = "/apis/scheduling.topogang.io/v1alpha1/namespaces/{ns}/podgroups"


async def podgroup_condition(kube: KubeClient, namespace: str, name: str, kind: str) -> dict[str, Any]:
    pg = await kube.get(f"{PODGROUPS.format(ns=namespace)}/{name}")
    return next((c for c in pg.get("status", {}).get("conditions", []) if c["type"] == kind), {})


async def test_a_queue_that_does_not_exist_keeps_the_gang_pending_until_it_is_created(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (1 node); KAI's Queue API is installed (e2e/crds/queues-flavors.yaml)
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=1)
    queue = f"team-{namespace}"
    await create_podgroup(kube, namespace, "queued", {"minMember": 1, "queue": queue})
    await create(kube, gpu_pod("queued-0", annotations={"pod-group-name": "queued"}), namespace)

    async def pending_on_queue() -> dict[str, Any] | None:
        c = await podgroup_condition(kube, namespace, "queued", "Unschedulable")
        return c if c.get("reason") == "QueueNotFound" else None

    c = await eventually(pending_on_queue, within=60, what="Unschedulable QueueNotFound on the PodGroup")
    assert f"spec.queue {queue!r} does not exist" in c["message"]
    assert not any(p["spec"].get("nodeName") for p in await pods(kube, namespace))
    await create(kube, {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": queue}})
    await wait_all_bound(kube, namespace, 1)


async def test_scheduling_backoff_and_mark_unschedulable(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (1 node): 2 pods of 8 GPUs never fit
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=1)
    spec = {"minMember": 2, "schedulingBackoff": 1, "markUnschedulable": False}
    await create_podgroup(kube, namespace, "quiet", spec)
    for i in range(2):
        await create(kube, gpu_pod(f"quiet-{i}", annotations={"pod-group-name": "quiet"}), namespace)

    async def marked() -> dict[str, Any] | None:
        c = await podgroup_condition(kube, namespace, "quiet", "UnschedulableOnNodePool")
        return c if c.get("status") == "True" else None

    c = await eventually(marked, within=60, what="UnschedulableOnNodePool on the PodGroup")
    assert c["reason"] == "NoCapacity"
    listed = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    reasons = {e.get("reason") for e in listed.get("items", []) if e.get("regarding", {}).get("kind") == "Pod"}
    assert "GangNotScheduled" not in reasons


async def test_pods_admitted_to_a_resource_flavor_use_its_topology(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (2 nodes), z0-b1-r0 (2 nodes). A second Topology exists, so a PodGroup naming
    #   none is ambiguous unless its pods' ResourceFlavor names one.
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    await fake_gpu_nodes.add(zone=0, block=1, rack=0, count=2)
    blocks = {**TOPOLOGY, "metadata": {"name": f"blocks-{namespace}"}}
    blocks["spec"] = {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": BLOCK}]}
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": f"tas-{namespace}"},
        "spec": {"nodeLabels": {FAKE_NODE_LABEL: "true"}, "topologyName": blocks["metadata"]["name"]},
    }
    await create(kube, blocks)
    await create(kube, flavor)
    try:
        spec = {"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}}
        await create_podgroup(kube, namespace, "flavored", spec, topology=None)
        for i in range(2):
            body = gpu_pod(f"flavored-{i}", annotations={"pod-group-name": "flavored"})
            body["spec"]["nodeSelector"] = {FAKE_NODE_LABEL: "true"}
            await create(kube, body, namespace)
        placed = await wait_all_bound(kube, namespace, 2)
        blocks_used = set()
        for node in placed.values():
            labels = (await kube.get(f"/api/v1/nodes/{node}"))["metadata"]["labels"]
            blocks_used.add(labels[BLOCK])
        assert len(blocks_used) == 1  # the flavor's Topology held them in one block
    finally:
        await kube.delete(f"/apis/kueue.x-k8s.io/v1beta1/resourceflavors/{flavor['metadata']['name']}")
        await kube.delete(f"/apis/scheduling.topogang.io/v1alpha1/topologies/{blocks['metadata']['name']}")


async def test_a_coarser_subgroup_constraint_is_a_warning_in_the_podgroup_status(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (2 nodes)
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    spec = {
        "minMember": 1,
        "subGroups": [{"name": "a", "minMember": 2}],
        "topologyConstraints": {
            "global": {"requiredTopologyLevel": RACK},
            "subGroups": {"a": {"requiredTopologyLevel": BLOCK}},
        },
    }
    await create_podgroup(kube, namespace, "nested", spec)
    for i in range(2):
        labels = {"kai.scheduler/subgroup-name": "a"}
        await create(kube, gpu_pod(f"nested-{i}", labels=labels, annotations={"pod-group-name": "nested"}), namespace)
    await wait_all_bound(kube, namespace, 2)
    want = (
        f"spec.topologyConstraints.subGroups.a.requiredTopologyLevel={BLOCK!r} cannot take effect: it is coarser"
        f" than spec.topologyConstraints.global.requiredTopologyLevel={RACK!r} above it"
    )

    async def warned() -> str | None:
        pg = await kube.get(f"{PODGROUPS.format(ns=namespace)}/nested")
        message = str(pg.get("status", {}).get("message", ""))
        return message if want in message else None

    await eventually(warned, within=60, what="the warning in the PodGroup's status message")


# -- Deployments, their pods made by the real Deployment and ReplicaSet controllers ---------------------


def deployment(name: str, replicas: int, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Deployment of REPLICAS pods of 8 GPUs; ANNOTATIONS on its pod template."""
    labels = {"app": name}
    template = {"metadata": {"labels": labels, "annotations": dict(annotations or {})}, "spec": gpu_pod(name)["spec"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template},
    }


@contextlib.asynccontextmanager
async def deployed(kube: KubeClient, namespace: str, body: dict[str, Any]) -> AsyncIterator[None]:
    """`deployment` BODY created in NAMESPACE; on exit deleted with its ReplicaSets and pods, and
    waited for, so that its ReplicaSet makes no pods again while the namespace is torn down."""
    await create(kube, body, namespace)
    name = body["metadata"]["name"]
    try:
        yield
    finally:
        path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
        await kube.delete(path, {"propagationPolicy": "Foreground"})

        async def gone() -> bool:
            return not [p for p in await pods(kube, namespace) if p["metadata"].get("labels", {}).get("app") == name]

        await eventually(gone, within=60, what=f"the pods of {path} to be deleted")


async def running(kube: KubeClient, namespace: str, count: int) -> dict[str, str]:
    """Until COUNT pods of NAMESPACE are bound and Running; pod name -> node."""

    async def ran() -> dict[str, str] | None:
        items = [p for p in await pods(kube, namespace) if p.get("status", {}).get("phase") == "Running"]
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")}
        return placed if len(placed) >= count else None

    return await eventually(ran, within=90, what=f"{count} pods of {namespace} to be Running")


async def test_a_deployments_replicas_that_fit_run_though_another_does_not(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (2 nodes, added once the 3 replicas exist): room for two replicas of 8 GPUs, not
    #   three. A Deployment that does not ask to be a gang is plain pods: two run, the third waits
    #   for room on its own. (Were it a gang of its pods, none would run.)
    async with deployed(kube, namespace, deployment("web", 3)):

        async def all_pending() -> bool:
            items = await pods(kube, namespace)
            return len(items) == 3 and not any(p["spec"].get("nodeName") for p in items)

        await eventually(all_pending, within=60, what="the Deployment's 3 pods, none bound")
        await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
        placed = await running(kube, namespace, 2)
        assert len(set(placed.values())) == 2
        items = await pods(kube, namespace)
        assert len(items) == 3
        (third,) = [p["metadata"]["name"] for p in items if not p["spec"].get("nodeName")]
        # kube-scheduler's own filters refuse it (no node has its GPUs), not a gang's refusal.
        await eventually(
            lambda: says(kube, namespace, third, "Insufficient nvidia.com/gpu"),
            within=60,
            what=f"{third}: kube-scheduler's Insufficient nvidia.com/gpu",
        )
        assert not any("topogang" in m for m in await events_about(kube, namespace, third))
        listed = await kube.get(PODGROUPS.format(ns=namespace))
        assert listed.get("items", []) == []  # no gang was derived


async def test_a_deployment_that_asks_to_be_a_gang_is_placed_all_or_nothing(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (2 nodes, then 3): its topology annotation makes the Deployment one gang of its
    #   3 replicas, so none runs while only two fit, and all three are bound together once a
    #   third node comes.
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    asks = {"kai.scheduler/topology": "e2e-dc", "kai.scheduler/topology-required-placement": RACK}
    async with deployed(kube, namespace, deployment("train", 3, asks)):
        want = "3 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; the best rack fits 2"

        async def refused_whole() -> bool:
            names = [p["metadata"]["name"] for p in await pods(kube, namespace)]
            return len(names) == 3 and all([await says(kube, namespace, name, want) for name in names])

        await eventually(refused_whole, within=60, what=f"an Event saying {want!r} on each replica")
        assert not any(p["spec"].get("nodeName") for p in await pods(kube, namespace))
        await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=1)
        placed = await running(kube, namespace, 3)
        assert len(set(placed.values())) == 3
        if topogang is not None:
            lines = await bound_lines(topogang, namespace, 3)
            assert [(x["group"], x["pods"], x["failed"]) for x in lines] == [(f"{namespace}/deployment-train", 3, 0)]
