"""Preemption end to end: a real kube-scheduler asks topogang (`preemptVerb`), topogang evicts a
gang's victims through the Eviction API, and the preemptor binds where they were.

Every test has its own namespace and one zone of three racks of four 8-GPU nodes:

    z0-b0-r0 (4 nodes)   z0-b0-r1 (4 nodes)   z0-b0-r2 (4 nodes)

filled by two low-priority gangs: `wide` (8 pods, one zone: two racks) and `small` (4 pods, one
rack: the third). Each member carries the label `e2e-gang: <its gang>` (PodDisruptionBudgets
select by it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.controlplane import FakeGpuNodes
from e2e.scenario import create, create_podgroup, events_about, eventually, gpu_pod, pods, wait_all_bound
from e2e.test_extender import log_lines, node_racks, topogang
from e2e.topogang import Topogang
from extender.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane]
__all__ = ["topogang"]  # the module fixture: topogang serving, kube-scheduler pointed at it

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
PRIORITIES = {"e2e-low": 10, "e2e-high": 1000}


async def priority_classes(kube: KubeClient) -> None:
    for name, value in PRIORITIES.items():
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        try:
            await kube.post(PRIORITY_CLASSES, {**body, "value": value})
        except ApiError as exc:
            if exc.status != 409:
                raise


def member(name: str, group: str, priority: str) -> dict[str, Any]:
    body = gpu_pod(name, labels={"e2e-gang": group}, annotations={"pod-group-name": group})
    body["spec"]["priorityClassName"] = priority
    return body


async def gang(kube: KubeClient, ns: str, name: str, size: int, level: str, priority: str) -> None:
    spec = {"minMember": size, "priorityClassName": priority}
    spec["topologyConstraints"] = {"global": {"requiredTopologyLevel": level}}
    await create_podgroup(kube, ns, name, spec)
    for i in range(size):
        await create(kube, member(f"{name}-{i}", name, priority), ns)


async def full_zone(kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes) -> dict[str, str]:
    """The zone of the drawing, full; pod name -> rack."""
    await priority_classes(kube)
    nodes = []
    for rack in range(3):
        nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=rack, count=4)
    await gang(kube, ns, "wide", 8, "zone", "e2e-low")
    await wait_all_bound(kube, ns, 8)
    await gang(kube, ns, "small", 4, "rack", "e2e-low")
    placed = await wait_all_bound(kube, ns, 12)
    rack_of = await node_racks(kube, nodes)
    return {pod: rack_of[node] for pod, node in placed.items()}


async def test_a_rack_gang_evicts_exactly_the_one_rack_gang_and_binds_there(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    before = await full_zone(kube, namespace, fake_gpu_nodes)
    small_rack = {before[f"small-{i}"] for i in range(4)}
    assert len(small_rack) == 1
    await gang(kube, namespace, "urgent", 4, "rack", "e2e-high")

    async def urgent_bound() -> dict[str, str] | None:
        items = await pods(kube, namespace)
        bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
        urgent = {k: v for k, v in bound.items() if k.startswith("urgent-") and v}
        return bound if len(urgent) == 4 else None

    now = await eventually(urgent_bound, within=90, what="the urgent gang to bind")
    assert sorted(k for k in now if k.startswith("small-")) == []  # all of `small`, evicted whole
    assert sorted(k for k in now if k.startswith("wide-")) == [f"wide-{i}" for i in range(8)]
    rack_of = await node_racks(kube, sorted({n for k, n in now.items() if k.startswith("urgent-")}))
    assert set(rack_of.values()) == small_rack
    notes = await events_about(kube, namespace, "small-0")
    assert any(f"Preempted by {namespace}/urgent for rack" in n for n in notes), notes


async def test_a_gang_no_eviction_could_help_evicts_nothing(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    await full_zone(kube, namespace, fake_gpu_nodes)
    await gang(kube, namespace, "huge", 5, "rack", "e2e-high")  # racks hold 4

    async def refused() -> bool:
        pg = await kube.get(f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{namespace}/podgroups/huge")
        return "in one rack" in str((pg.get("status") or {}).get("message", ""))

    await eventually(refused, within=60, what="the huge gang's status to say why it waits")
    await asyncio.sleep(5)  # kube-scheduler keeps retrying (and asking topogang) meanwhile
    items = await pods(kube, namespace)
    names = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
    running = sorted([f"wide-{i}" for i in range(8)] + [f"small-{i}" for i in range(4)])
    assert sorted(k for k, v in names.items() if v) == running, names
    assert [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")] == []


async def test_a_plain_high_priority_pod_preempts_as_kube_scheduler_would(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    await full_zone(kube, namespace, fake_gpu_nodes)
    plain = gpu_pod("plain")
    plain["spec"]["priorityClassName"] = "e2e-high"
    await create(kube, plain, namespace)

    async def plain_bound() -> list[dict[str, Any]] | None:
        items = await pods(kube, namespace)
        return items if any(p["metadata"]["name"] == "plain" and p["spec"].get("nodeName") for p in items) else None

    items = await eventually(plain_bound, within=90, what="the plain pod to bind")
    gone = {f"wide-{i}" for i in range(8)} | {f"small-{i}" for i in range(4)}
    gone -= {p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")}
    assert len(gone) == 1, gone  # kube-scheduler's choice: one pod on one node


def budgets_path(ns: str) -> str:
    return f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"


async def budget(kube: KubeClient, ns: str, name: str, group: str, min_available: int) -> None:
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"e2e-gang": group}}},
    }
    await kube.post(budgets_path(ns), body)


async def test_a_gang_preempts_around_a_disruption_budget_and_waits_while_every_set_breaks_one(
    topogang: Topogang | None, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    """`small` is the cheapest victim, but a budget lets only one of its four pods go. While
    `wide` is under a budget too, the urgent gang evicts nothing and its PodGroup says which
    budget; once wide's budget is deleted it preempts `wide` and binds whole, and `small` runs on."""
    # The budgets exist before their pods, so topogang knows them by the time they are asked about.
    await budget(kube, namespace, "keep-small", "small", 3)
    await budget(kube, namespace, "keep-wide", "wide", 8)
    before = await full_zone(kube, namespace, fake_gpu_nodes)
    wide_racks = {before[f"wide-{i}"] for i in range(8)}

    async def allowed_one() -> bool:  # the disruption controller counted small's healthy pods
        pdb = await kube.get(f"{budgets_path(namespace)}/keep-small")
        return (pdb.get("status") or {}).get("disruptionsAllowed") == 1

    await eventually(allowed_one, within=60, what="keep-small to allow one disruption")
    await gang(kube, namespace, "urgent", 4, "rack", "e2e-high")
    podgroup = f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{namespace}/podgroups/urgent"
    said = f"preempting would overrun PodDisruptionBudget {namespace}/keep-small by 3 pod(s) (it allows 1 now)"

    async def refused() -> dict[str, Any] | None:
        status = (await kube.get(podgroup)).get("status") or {}
        return status if said in str(status.get("message", "")) else None

    status = await eventually(refused, within=60, what="the urgent gang's status to name keep-small")
    assert any(c.get("reason") == "DisruptionBudget" for c in status.get("conditions", [])), status
    items = await pods(kube, namespace)
    assert [p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")] == []

    await kube.delete(f"{budgets_path(namespace)}/keep-wide")

    async def urgent_bound() -> dict[str, str] | None:
        items = await pods(kube, namespace)
        bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
        urgent = {k: v for k, v in bound.items() if k.startswith("urgent-") and v}
        return bound if len(urgent) == 4 else None

    now = await eventually(urgent_bound, within=90, what="the urgent gang to bind")
    rack_of = await node_racks(kube, sorted({n for k, n in now.items() if k.startswith("urgent-")}))
    assert len(set(rack_of.values())) == 1
    assert set(rack_of.values()) <= wide_racks
    items = await pods(kube, namespace)
    running = {p["metadata"]["name"] for p in items if p["spec"].get("nodeName")}
    running -= {p["metadata"]["name"] for p in items if p["metadata"].get("deletionTimestamp")}
    assert running == {f"small-{i}" for i in range(4)} | {f"urgent-{i}" for i in range(4)}
    for i in range(4):
        assert not [n for n in await events_about(kube, namespace, f"small-{i}") if "Preempted by" in n]
    if topogang is not None:  # no eviction of small's pods was even tried
        tried = log_lines(topogang, "evicted", namespace) + log_lines(topogang, "eviction blocked", namespace)
        assert not [line for line in tried if any("/small-" in p for p in line.get("pods", []))], tried
