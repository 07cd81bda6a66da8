"""Kubernetes' own gang API through topogang, on a control plane that serves it: the API server
with scheduling.k8s.io v1beta1 and v1alpha3 and the GenericWorkload, TopologyAwareWorkloadScheduling,
CompositePodGroup and WorkloadWithJob gates (kube-controller-manager too: its Job controller makes
a Job's Workload and PodGroup), kube-scheduler with the same gates.

Setup (once for the module): that control plane of its own (the session's serves none of it),
the CRDs and Topology of test_extender.py, `topogang serve` in extender mode and kube-scheduler
from the shipped configuration (its profile turns the in-tree GangScheduling,
TopologyPlacementGenerator and PodGroupPodsCount plugins off: topogang decides gangs). The gates
mode tests start their own topogang with its webhook, and the stock kube-scheduler.

Each test gets its own namespace and fake GPU nodes (8 GPUs each), zone > block > rack.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from e2e.controlplane import ControlPlane, FakeGpuNodes, FakeTopology, api_client, create_namespace, delete_namespace
from e2e.scenario import collection, create, eventually, gpu_pod, install, pods, says, wait_all_bound
from e2e.test_extender import BLOCK, RACK, TOPOLOGY, ZONE, node_racks
from e2e.topogang import CRDS, Topogang, scheduler_config
from extender.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane_only, pytest.mark.controlplane]

GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true,WorkloadWithJob=true"
SERVED = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
IN_TREE = ("GangScheduling", "TopologyPlacementGenerator", "PodGroupPodsCount")
V1BETA1, V1ALPHA3 = "scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Any:
    gates = f"--feature-gates={GATES}"
    extra = {"kube-apiserver": [f"--runtime-config={SERVED}", gates], "kube-controller-manager": [gates]}
    p = ControlPlane(scheduler=False, extra_args=extra)
    p.start()
    try:
        yield p
    finally:
        p.stop()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def upstream_kube(plane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(plane.kubeconfig) as kube:
        await install(kube, CRDS, TOPOLOGY)
        yield kube


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def extender(plane: ControlPlane, upstream_kube: KubeClient) -> AsyncIterator[Topogang]:
    async with Topogang.start(plane.kubeconfig, plane.logs_dir) as server:
        await plane.start_scheduler_async(scheduler_config(server.url, server.tls), [f"--feature-gates={GATES}"])
        try:
            yield server
        finally:
            await plane.stop_scheduler_async()


@pytest_asyncio.fixture(loop_scope="session")
async def space(plane: ControlPlane) -> AsyncIterator[tuple[str, FakeGpuNodes]]:
    """A namespace and a fake GPU node set of its own."""
    async with api_client(plane.kubeconfig) as api:
        ns = await create_namespace(api)
        nodes = FakeGpuNodes(api, name_prefix=f"gpu-{uuid.uuid4().hex[:4]}")
        try:
            yield ns, nodes
        finally:
            await nodes.delete_all()
            await delete_namespace(api, ns)


def group(name: str, count: int, key: str | None, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": count}}}
    if key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    if parent is not None:  # Kubernetes asks a child for the Workload template it came from
        spec["parentCompositePodGroupName"] = parent
        spec["workloadRef"] = {"workloadName": "job", "templateName": name}
    return {"apiVersion": V1BETA1, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def composite(name: str, count: int, key: str, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minGroupCount": count}},
        "schedulingConstraints": {"topology": [{"key": key}]},
        "workloadRef": {"workloadName": "job", "templateName": name},
    }
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    return {"apiVersion": V1ALPHA3, "kind": "CompositePodGroup", "metadata": {"name": name}, "spec": spec}


def member(name: str, podgroup: str) -> dict[str, Any]:
    pod = gpu_pod(name)
    pod["spec"]["schedulingGroup"] = {"podGroupName": podgroup}
    return pod


async def one_podgroup(kube: KubeClient, ns: str, nodes: FakeGpuNodes) -> dict[str, str]:
    """A gang of 4 in one rack, where each rack has 3 free nodes but one: the gang must find it."""
    names = await nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=3, nodes_per_rack=3))
    extra = await nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=1, nodes_per_rack=1))
    assert extra
    await create(kube, group("train", 4, RACK), ns)
    for i in range(4):
        await create(kube, member(f"w-{i}", "train"), ns)
    placed = await wait_all_bound(kube, ns, 4)
    racks = await node_racks(kube, [*names, *extra])
    assert len({racks[n] for n in placed.values()}) == 1, placed
    return placed


async def three_levels(kube: KubeClient, ns: str, nodes: FakeGpuNodes) -> None:
    """A job in one zone, two halves each in one block, four groups of 2 pods each in one rack."""
    names = await nodes.create(FakeTopology(zones=1, blocks_per_zone=2, racks_per_block=2, nodes_per_rack=2))
    await create(kube, composite("job", 2, ZONE), ns)
    for h in range(2):
        await create(kube, composite(f"half-{h}", 2, BLOCK, parent="job"), ns)
        for g in range(2):
            await create(kube, group(f"half-{h}-g{g}", 2, RACK, parent=f"half-{h}"), ns)
    for h in range(2):
        for g in range(2):
            for i in range(2):
                await create(kube, member(f"half-{h}-g{g}-{i}", f"half-{h}-g{g}"), ns)
    placed = await wait_all_bound(kube, ns, 8)
    racks = await node_racks(kube, names)
    for h in range(2):
        half = {racks[node] for pod, node in placed.items() if pod.startswith(f"half-{h}-")}
        assert len({r.rsplit("-", 1)[0] for r in half}) == 1, f"half-{h} spans blocks: {half}"
        for g in range(2):
            leaf = {racks[node] for pod, node in placed.items() if pod.startswith(f"half-{h}-g{g}-")}
            assert len(leaf) == 1, f"half-{h}-g{g} spans racks {leaf}"


async def job_with_scheduling(kube: KubeClient, ns: str, nodes: FakeGpuNodes) -> None:
    """Kubernetes' Job controller makes the Workload and PodGroup; its pods name the PodGroup."""
    names = await nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=2, nodes_per_rack=3))
    template = gpu_pod("x")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "completionMode": "Indexed",
            "scheduling": {
                "schedulingPolicy": {"gang": {"minCount": 3}},
                "schedulingConstraints": {"topology": [{"key": RACK}]},
            },
            "template": {"spec": {**template["spec"], "restartPolicy": "Never"}},
        },
    }
    await create(kube, job, ns)
    placed = await wait_all_bound(kube, ns, 3)
    racks = await node_racks(kube, names)
    assert len({racks[n] for n in placed.values()}) == 1, placed
    listed = await kube.get(f"/apis/{V1BETA1}/namespaces/{ns}/podgroups")
    made = [pg["metadata"]["name"] for pg in listed["items"]]
    assert len(made) == 1
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in await pods(kube, ns)} == set(made)


async def job_with_segments(kube: KubeClient, ns: str, nodes: FakeGpuNodes) -> None:
    """topogang's segments on top of Kubernetes' gang: a Job of 4 in one block (spec.scheduling),
    in segments of 2 that each share a rack (KAI's annotations on its template, which reach the
    PodGroup's pods). Racks of 3 nodes: no rack holds all 4."""
    names = await nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=2, nodes_per_rack=3))
    template = gpu_pod("x")
    annotations = {
        "kai.scheduler/topology": TOPOLOGY["metadata"]["name"],
        "kai.scheduler/segment-size": "2",
        "kai.scheduler/segment-topology-required-placement": RACK,
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "seg"},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "completionMode": "Indexed",
            "scheduling": {
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": BLOCK}]},
            },
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {**template["spec"], "restartPolicy": "Never"},
            },
        },
    }
    await create(kube, job, ns)
    await wait_all_bound(kube, ns, 4)
    racks = await node_racks(kube, names)
    by_index = {
        int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): racks[p["spec"]["nodeName"]]
        for p in await pods(kube, ns)
    }
    assert by_index[0] == by_index[1], by_index
    assert by_index[2] == by_index[3], by_index


async def test_extender_mode_places_an_upstream_podgroup_whole_in_one_rack(
    extender: Topogang, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    ns, nodes = space
    await one_podgroup(upstream_kube, ns, nodes)
    # topogang's view of the gang: a topogang PodGroup owned by the upstream one, with its status
    mirror = await eventually(
        lambda: _podgroup_status(upstream_kube, ns, "podgroup-train"), within=30, what="topogang's PodGroup status"
    )
    assert mirror["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"


async def _podgroup(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    """topogang's PodGroup NAME, None until it is written."""
    try:
        return await kube.get(f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{ns}/podgroups/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def _podgroup_status(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    body = await _podgroup(kube, ns, name)
    return body if (body or {}).get("status", {}).get("phase") in ("Running", "Bound", "Scheduled") else None


async def test_extender_mode_places_a_three_level_composite_podgroup(
    extender: Topogang, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    await three_levels(upstream_kube, *space)


async def test_extender_mode_cuts_a_jobs_gang_into_topogangs_segments(
    extender: Topogang, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    await job_with_segments(upstream_kube, *space)


async def test_extender_mode_preempts_for_an_upstream_podgroup_by_the_groups_own_priority(
    extender: Topogang, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    # One rack of 4 nodes, full with gang `low` (disruptionMode all: it goes whole or not at all).
    # Gang `high` asks for the rack with its PodGroup's priorityClassName, which its pods share
    # (kube-scheduler schedules no pod whose priority is not its group's).
    ns, nodes = space
    kube = upstream_kube
    high_class = f"e2e-group-high-{ns}"
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high_class}}
    await kube.post("/apis/scheduling.k8s.io/v1/priorityclasses", {**body, "value": 1000})
    try:
        await nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=1, nodes_per_rack=4))
        low = group("low", 4, RACK)
        low["spec"]["disruptionMode"] = {"all": {}}
        await create(kube, low, ns)
        for i in range(4):
            await create(kube, member(f"low-{i}", "low"), ns)
        await wait_all_bound(kube, ns, 4)
        high = group("high", 4, RACK)
        high["spec"]["priorityClassName"] = high_class
        await create(kube, high, ns)
        stored = await kube.get(f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups/high")
        assert stored["spec"].get("priority") == 1000  # the Priority admission plugin resolved it
        for i in range(4):
            pod = member(f"high-{i}", "high")
            pod["spec"]["priorityClassName"] = high_class
            await create(kube, pod, ns)

        async def high_bound() -> dict[str, str | None] | None:
            bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in await pods(kube, ns)}
            return bound if sum(1 for k, v in bound.items() if k.startswith("high-") and v) == 4 else None

        now = await eventually(high_bound, within=90, what="the high-priority upstream gang to bind")
        assert sorted(k for k in now if k.startswith("low-")) == []  # evicted, whole
    finally:
        await kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{high_class}")


async def test_extender_mode_places_a_job_with_spec_scheduling(
    extender: Topogang, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    await job_with_scheduling(upstream_kube, *space)


def both_deciders(config: dict[str, Any]) -> dict[str, Any]:
    """The shipped configuration with Kubernetes' own gang and topology plugins left on."""
    for profile in config["profiles"]:
        profile.pop("plugins", None)
    return config


@pytest_asyncio.fixture(loop_scope="session")
async def in_tree_too(plane: ControlPlane, extender: Topogang) -> AsyncIterator[None]:
    """kube-scheduler with the extender and its own gang and topology plugins on, for one test."""
    shipped = scheduler_config(extender.url, extender.tls)
    await plane.restart_scheduler_async(
        both_deciders(scheduler_config(extender.url, extender.tls)), [f"--feature-gates={GATES}"]
    )
    try:
        yield
    finally:
        await plane.restart_scheduler_async(shipped, [f"--feature-gates={GATES}"])


async def test_with_both_deciders_on_the_gang_still_lands_as_topogang_planned(
    in_tree_too: None, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    # The in-tree plugins wait for the group and try placements, but each member's filter answer
    # is its one planned node: they can only agree.
    await three_levels(upstream_kube, *space)


async def test_a_member_another_decider_places_is_reported_as_a_split(
    extender: Topogang, upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    #   rack r0: 3 nodes, rack r1: 3 nodes; the gang of 3 is required in one rack. One member names
    #   a scheduler that does not call topogang; the test binds it, as that scheduler would, to a
    #   node of the rack the others are not planned in. (With the in-tree GangScheduling plugin on,
    #   kube-scheduler would hold the other two until all three reach its own queue: never.)
    kube, (ns, nodes) = upstream_kube, space
    names = await nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=2, nodes_per_rack=3))
    racks = await node_racks(kube, names)
    await create(kube, group("split", 3, RACK), ns)
    other = member("m-2", "split")
    other["spec"]["schedulerName"] = "another-scheduler"
    for body in (member("m-0", "split"), member("m-1", "split"), other):
        await create(kube, body, ns)

    async def planned_rack() -> str | None:
        # topogang's PodGroup says where it planned the gang's rack: "rack <zone>/<block>/<rack>"
        mirror = await _podgroup(kube, ns, "podgroup-split")
        domain = ((mirror or {}).get("status") or {}).get("domains", {}).get("split")
        return str(domain).rsplit("/", 1)[-1] if domain else None

    rack = await eventually(planned_rack, within=30, what="topogang to plan the gang")
    assert rack in racks.values()
    elsewhere = next(n for n in names if racks[n] != rack)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "m-2"},
        "target": {"kind": "Node", "name": elsewhere},
    }
    await kube.post(f"/api/v1/namespaces/{ns}/pods/m-2/binding", binding)

    async def split_said() -> dict[str, Any] | None:
        body = await _podgroup(kube, ns, "podgroup-split")
        found = [c for c in (body or {}).get("status", {}).get("conditions", []) if c["type"] == "GangSplit"]
        return found[0] if found and found[0]["status"] == "True" else None

    condition = await eventually(split_said, within=30, what="the GangSplit condition")
    assert condition["reason"] == "SplitBetweenDeciders"
    assert f"pod {ns}/m-2 was bound to node {elsewhere} by another scheduler" in condition["message"]

    # said on Kubernetes' own PodGroup too: its status (beside kube-scheduler's conditions) and an Event
    async def upstream_said() -> bool:
        body = await kube.get(f"/apis/{V1BETA1}/namespaces/{ns}/podgroups/split")
        found = [c for c in body.get("status", {}).get("conditions", []) if c["type"] == "GangSplit"]
        return bool(found) and found[0]["reason"] == "SplitBetweenDeciders"

    await eventually(upstream_said, within=30, what="the GangSplit condition on the scheduling.k8s.io PodGroup")
    await eventually(
        lambda: says(kube, ns, "split", "gang split between two deciders"), within=30, what="the Event on it"
    )
    await eventually(
        lambda: says(kube, ns, "podgroup-split", "gang split between two deciders"),
        within=30,
        what="the GangSplit Event",
    )


EXAMPLES = [
    doc
    for name in ("upstream-composite.yaml", "upstream-job.yaml")
    for doc in yaml.safe_load_all(
        (Path(__file__).resolve().parent.parent / "examples" / "workloads" / name).read_text()
    )
]


async def test_the_upstream_examples_are_accepted_by_the_api_server(
    upstream_kube: KubeClient, space: tuple[str, FakeGpuNodes]
) -> None:
    ns, _ = space
    for doc in EXAMPLES:
        body = {**doc, "metadata": {**doc["metadata"], "namespace": ns}}
        path = f"{collection(doc['apiVersion'], doc['kind'], ns)}?dryRun=All&fieldValidation=Strict"
        await upstream_kube.post(path, body)


async def test_topogang_is_ready_on_an_api_server_that_does_not_serve_these_groups(
    kubeconfig: Path, control_plane: ControlPlane
) -> None:
    # The session's plane serves no scheduling.k8s.io PodGroups: their informers find them not
    # installed, say so once, and readiness does not wait for them (Topogang.start waits for /readyz).
    async with Topogang.start(kubeconfig, control_plane.logs_dir) as server:
        status, _ = await server.request("GET", "/readyz")
        assert status == 200
        log = server.log_path.read_text()
    missing = [line for line in log.splitlines() if "resource not installed" in line and "scheduling.k8s.io" in line]
    assert any("compositepodgroups" in line for line in missing), missing
    assert any("podgroups.scheduling.k8s.io" in line for line in missing), missing
