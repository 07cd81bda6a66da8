"""Defragmentation end to end: a block gang waits because three movable Deployments sit one per
rack of the only block that could hold it; topogang moves them (through the Eviction API, their
PodDisruptionBudgets respected), their controllers recreate them in the room held for them in
the other block, and the gang binds whole in the block they left.

Every test has its own namespace and five 8-GPU nodes:

    z0-b0-r0 (1 node)   z0-b0-r1 (1 node)   z0-b0-r2 (1 node)   |   z0-b1-r0 (2 nodes)
    a 1-GPU replica of Deployments d0, d1, d2 on each node of b0 |   empty, added last

The gang `big` asks for 3 pods of 8 GPUs in one block: b1 is too small, and b0 is not whole.
Every pod has the priority 0: nothing can be preempted, only moved.

Each test runs in both modes: `[extender]` (kube-scheduler calling topogang) and `[gates]` (the
stock kube-scheduler, topogang's webhook registered with the API server, the namespace labelled
for it): there each replacement is gated at creation and pinned by the ungater to its held room.
The last test moves an elastic gang's pod beyond its minimum within its own gang's block.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.gates_support import ENABLED, gates_serving
from e2e.scenario import create, create_podgroup, events_about, eventually, gpu_pod, install, pods, wait_all_bound
from e2e.test_extender import BLOCK, RACK, TOPOLOGY, log_lines
from e2e.topogang import CRDS, Topogang, serving
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane]

MOVABLE = "scheduling.topogang.io/movable"
EXTENDER, GATES = "extender", "gates"


@pytest.fixture(scope="module", params=[EXTENDER, pytest.param(GATES, marks=pytest.mark.controlplane_only)])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def topogang(kubeconfig: Path, mode: str, request: pytest.FixtureRequest) -> AsyncIterator[Topogang | None]:
    """topogang in MODE: kube-scheduler pointed at it, or its webhook registered (gates)."""
    if os.environ.get("TOPOGANG_E2E_KUBECONFIG"):  # deployed in the cluster under test (extender mode)
        async with await KubeClient.connect(kubeconfig) as kube:
            await install(kube, CRDS, TOPOLOGY)
        yield None
        return
    plane: ControlPlane = request.getfixturevalue("control_plane")
    if mode == GATES:
        async with gates_serving(kubeconfig, plane, TOPOLOGY) as server:
            yield server
        return
    async with serving(kubeconfig, plane, TOPOLOGY) as server:
        yield server


@pytest_asyncio.fixture(loop_scope="session", autouse=True)
async def gated_namespace(mode: str, topogang: Topogang | None, kube: KubeClient, namespace: str) -> None:
    """Gates mode: the test's namespace is one the webhook selects."""
    if mode == GATES:
        await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": ENABLED}})


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest, topogang: Topogang | None) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if topogang is not None and report is not None and report.failed:
        print(f"--- last lines of {topogang.log_path} ---\n{topogang.tail()}")


def pinned_to(pod: dict[str, Any]) -> list[str]:
    """The nodes POD's required node affinity allows by name (the ungater's pin)."""
    affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return [
        v
        for term in affinity.get("nodeSelectorTerms") or []
        for f in term.get("matchFields") or []
        if f.get("key") == "metadata.name"
        for v in f.get("values") or []
    ]


def replicas(name: str) -> dict[str, Any]:
    """A Deployment of one 1-GPU pod that says it may be moved."""
    labels = {"app": name}
    spec = gpu_pod(name, gpus=1)["spec"]
    template = {"metadata": {"labels": labels, "annotations": {MOVABLE: "true"}}, "spec": spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }


def budget(name: str, app: str, min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }


def live(items: list[dict[str, Any]], app: str) -> list[dict[str, Any]]:
    return [
        p
        for p in items
        if p["metadata"].get("labels", {}).get("app") == app and not p["metadata"].get("deletionTimestamp")
    ]


@contextlib.asynccontextmanager
async def three_replicas(kube: KubeClient, ns: str, nodes: FakeGpuNodes, keep: int) -> AsyncIterator[dict[str, str]]:
    """The drawing: d0..d2 one per rack of b0 (each rack's node added just before its Deployment,
    the ones before it cordoned meanwhile), then block b1. Each Deployment has a budget
    of minAvailable KEEP (0: one may go; 1: none may). Yields Deployment -> b0 node. On exit the
    Deployments go first, so their controllers make no pods while the namespace is torn down."""
    where: dict[str, str] = {}
    try:
        for rack in range(3):
            (node,) = await nodes.add(zone=0, block=0, rack=rack, count=1)
            name = f"d{rack}"
            await kube.post(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", budget(f"keep-{name}", name, keep))
            await create(kube, replicas(name), ns)
            where[name] = ""

            async def bound(app: str = name) -> str | None:
                mine = live(await pods(kube, ns), app)
                return mine[0]["spec"].get("nodeName") if len(mine) == 1 else None

            where[name] = await eventually(bound, within=60, what=f"{name}'s pod to bind")
            assert where[name] == node, where  # one replica per rack: the premise of the test
            await cordon(kube, node, True)  # the next replica goes to the next rack's node
        for node in where.values():
            await cordon(kube, node, False)
        await nodes.add(zone=0, block=1, rack=0, count=2)
        for rack in range(3):  # the disruption controller counted each Deployment's healthy pod

            async def counted(name: str = f"keep-d{rack}") -> bool:
                pdb = await kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}")
                return (pdb.get("status") or {}).get("disruptionsAllowed") == 1 - keep

            await eventually(counted, within=60, what=f"keep-d{rack} to count its pod")
        yield where
    finally:
        for name in where:  # (those created)
            await kube.delete(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}", {"propagationPolicy": "Foreground"})

        async def gone() -> bool:
            return not [p for p in await pods(kube, ns) if p["metadata"].get("labels", {}).get("app")]

        await eventually(gone, within=60, what="the Deployments' pods to be deleted")


async def cordon(kube: KubeClient, node: str, off: bool) -> None:
    await kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": off}})


async def big_gang(kube: KubeClient, ns: str) -> None:
    await create_podgroup(
        kube, ns, "big", {"minMember": 3, "topologyConstraints": {"global": {"requiredTopologyLevel": BLOCK}}}
    )
    for i in range(3):
        await create(kube, gpu_pod(f"big-{i}", annotations={"pod-group-name": "big"}), ns)


async def test_a_block_gang_starts_after_three_movable_replicas_move_to_the_other_block(
    mode: str, topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    async with three_replicas(kube, namespace, fake_gpu_nodes, keep=0) as before:
        b0 = set(before.values())
        await big_gang(kube, namespace)

        async def settled() -> dict[str, str] | None:
            items = await pods(kube, namespace)
            big = {
                p["metadata"]["name"]: p["spec"].get("nodeName")
                for p in items
                if p["metadata"]["name"].startswith("big-")
            }
            moved = {app: live(items, app) for app in before}
            if not all(big.values()) or any(len(m) != 1 or not m[0]["spec"].get("nodeName") for m in moved.values()):
                return None
            return big | {app: m[0]["spec"]["nodeName"] for app, m in moved.items()}

        now = await eventually(settled, within=120, what="the gang and the moved replicas to bind")
        assert {now[f"big-{i}"] for i in range(3)} == b0  # the gang has the block they left
        for app in before:
            assert now[app] not in b0  # each replica runs again, in block b1
        items = await pods(kube, namespace)
        for app in before:  # recreated by its controller: a new pod, not the old one
            assert [p["metadata"]["name"] for p in live(items, app)] != []
        said = await events_about(kube, namespace, "big")
        assert any("defragmenting block" in m and "moving 3 pod(s)" in m for m in said), said
        if topogang is not None:
            lines = log_lines(topogang, "gang defragmenting", namespace)
            assert len(lines) == 1, lines
            assert len(lines[0]["preemption"]["victims"]) == 3
            assert set(lines[0]["moves"].values()).isdisjoint(b0)
        if mode == GATES:  # each replacement was gated at creation, then pinned to its held room
            assert topogang is not None
            moves = lines[0]["moves"]
            gated = log_lines(topogang, "moved pod's replacement gated", namespace)
            assert {line["moved"] for line in gated} == set(moves), gated
            ungated = log_lines(topogang, "moved pod's replacement ungated", namespace)
            assert sorted(line["moved"] for line in ungated) == sorted(moves), ungated
            for app in before:
                (replacement,) = live(items, app)
                key = f"{namespace}/{replacement['metadata']['name']}"
                (line,) = [u for u in ungated if u["pod"] == key]
                # (a required affinity can be narrowed only while the pod is gated: the pin says it was)
                assert pinned_to(replacement) == [now[app]] == [line["node"]] == [moves[line["moved"]]]
                assert not replacement["spec"].get("schedulingGates")


async def test_a_budget_that_forbids_the_move_keeps_the_gang_waiting_and_it_says_why(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    async with three_replicas(kube, namespace, fake_gpu_nodes, keep=1) as before:
        await big_gang(kube, namespace)
        podgroup = f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{namespace}/podgroups/big"
        said = "moving pods would overrun PodDisruptionBudget"

        async def refused() -> dict[str, Any] | None:
            status = (await kube.get(podgroup)).get("status") or {}
            return status if said in str(status.get("message", "")) else None

        status = await eventually(refused, within=60, what="the gang's status to name a budget")
        assert f"{namespace}/keep-d" in status["message"]
        assert "(it allows 0 now)" in status["message"]
        assert any(c.get("reason") == "DisruptionBudget" for c in status.get("conditions", [])), status
        items = await pods(kube, namespace)
        assert [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")] == []
        assert {app: live(items, app)[0]["spec"]["nodeName"] for app in before} == before
        assert not [p for p in items if p["metadata"]["name"].startswith("big-") and p["spec"].get("nodeName")]


# -- a gang member beyond its gang's minimum -------------------------------------------------------


async def test_an_elastic_gangs_optional_pod_moves_within_its_block_and_its_replacement_rejoins_it(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    await optional_member_moves(topogang, kube, namespace, fake_gpu_nodes)


async def seen_by_topogang(kube: KubeClient, namespace: str, nodes: list[str]) -> None:
    """Until topogang has seen NODES: a gang of one cpu-only pod pinned to each binds only once
    its plan can use them all (a gang is placed from topogang's own view of the nodes). The pods
    stay; they take no GPU."""
    await create_podgroup(kube, namespace, "seen", {"minMember": len(nodes)})
    for i, node in enumerate(nodes):
        probe = gpu_pod(f"seen-{i}", gpus=0, annotations={"pod-group-name": "seen"})
        probe["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        await create(kube, probe, namespace)

    async def bound() -> bool:
        where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in await pods(kube, namespace)}
        return all(where.get(f"seen-{i}") == node for i, node in enumerate(nodes))

    await eventually(bound, within=60, what="topogang to place a pod on each new node")


async def optional_member_moves(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    """The gang `el` (minimum 2, required in one block; its PodGroup says its pods may move) runs
    its minimum, two bare 8-GPU pods w-0 and w-1, on rack b0/r0, and beyond it the 4-GPU pod of Deployment
    `opt` on rack b0/r1. The gang `big` needs both nodes of one rack: only b0/r1 can be made whole,
    by moving `opt` to b0/r2 (its gang's block), not to b1/r0's node, whose 4 free GPUs would fit
    it tighter."""
    r0 = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    body = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "el", "annotations": {"kai.scheduler/topology": "e2e-dc", MOVABLE: "true"}},
        "spec": {"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": BLOCK}}},
    }
    await create(kube, body, namespace)
    # (the pod beyond the minimum is the youngest; of pods started in the same second, the first
    # by name: `opt-...` before `w-...` either way)
    for i in range(2):
        await create(kube, gpu_pod(f"w-{i}", annotations={"pod-group-name": "el"}), namespace)
    placed = await wait_all_bound(kube, namespace, 2, within=60)
    assert set(placed.values()) == set(r0)
    (r1_first,) = await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=1)
    spec = gpu_pod("opt", gpus=4)["spec"]
    template = {"metadata": {"labels": {"app": "opt"}, "annotations": {"pod-group-name": "el"}}, "spec": spec}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "opt"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "opt"}}, "template": template},
    }
    await create(kube, deployment, namespace)
    try:
        before = await wait_all_bound(kube, namespace, 3, within=60)
        (moved,) = [p for p in before if p.startswith("opt-")]
        assert before[moved] == r1_first  # the only room in the gang's block
        r1 = [r1_first, *await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=1)]
        (r2,) = await fake_gpu_nodes.add(zone=0, block=0, rack=2, count=1)
        (b1,) = await fake_gpu_nodes.add(zone=0, block=1, rack=0, count=1)
        filler = gpu_pod("filler", gpus=4)
        filler["spec"]["nodeName"] = b1
        await create(kube, filler, namespace)
        await seen_by_topogang(kube, namespace, [r1[1], r2, b1])
        await create_podgroup(
            kube, namespace, "big", {"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": RACK}}}
        )
        for i in range(2):
            await create(kube, gpu_pod(f"big-{i}", annotations={"pod-group-name": "big"}), namespace)

        async def settled() -> dict[str, str] | None:
            items = await pods(kube, namespace)
            where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
            opts = [n for n, p in where.items() if n.startswith("opt-") and n != moved]
            if moved in where or len(opts) != 1 or not all(where.get(f"big-{i}") for i in range(2)):
                return None
            return {n: w for n, w in where.items() if w} if where[opts[0]] else None

        now = await eventually(settled, within=120, what="the gang and the moved pod's replacement to bind")
        assert {now["big-0"], now["big-1"]} == set(r1)  # the rack it left
        (replacement,) = [n for n in now if n.startswith("opt-")]
        assert now[replacement] == r2  # its own gang's block, not block b1
        assert {now["w-0"], now["w-1"]} == set(r0)  # the gang's minimum never moved
        if topogang is not None:
            (line,) = log_lines(topogang, "gang defragmenting", namespace)
            assert line["moves"] == {f"{namespace}/{moved}": r2}
            joined = [
                entry
                for entry in log_lines(topogang, "gang placed", namespace)
                if entry.get("outcome") == "extended" and "replaces" in entry.get("reason", "")
            ]
            assert [(e["group"], e["nodes"]) for e in joined] == [(f"{namespace}/el", [r2])], joined
            assert not log_lines(topogang, "gang preempting", namespace)
    finally:
        await kube.delete(f"/apis/apps/v1/namespaces/{namespace}/deployments/opt", {"propagationPolicy": "Foreground"})
