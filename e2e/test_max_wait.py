"""A maximum wait on the real control plane: a priority-0 gang that needs a whole block starts
within a bound although priority-1,000 gangs keep the block busy; without a maximum it waits.

Cluster: block z0/b0 of 2 racks x 4 nodes (64 GPUs), the only block. Eight gangs of 8 one-GPU
pods at priority 1,000 keep it busy, one node each. The large gang: 64 one-GPU pods required in
one block, priority 0, `scheduling.topogang.io/max-wait: 60s` on its PodGroup. The test plays the
kubelet: every STEP seconds the small gang that has run longest ends if it has run RUN seconds,
and a new priority-1,000 gang is submitted.

With reservations the large gang holds b0 at once (first at its priority), but room it holds
goes to higher priorities: each new small gang takes the node that frees. Once the large gang is
overdue (60 s after its PodGroup was made), its room is kept from them: no new small gang starts
there, the running ones end within RUN, and it starts. The bound the test allows, from its
PodGroup's creation: its maximum wait, a sweep to notice (5 s), RUN for the small gangs running
then to end, and START_SLACK for its 64 pods to be planned and bound (e2e/test_reservations.py's
allowance). Without a maximum, the same churn goes on until that bound has passed, and the large
gang is still waiting: strict priority order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.gates_support import ENABLED, gates_serving
from e2e.scenario import create, eventually, gpu_pod, pods, says
from e2e.test_extender import BLOCK, TOPOLOGY, logged
from e2e.test_preemption import priority_classes
from e2e.test_reservations import HELD, PODGROUPS, START_SLACK, all_bound, bound_nodes, end
from e2e.topogang import Topogang, serving
from extender.kube import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

MAX_WAIT = 60.0  # the large gang's maximum wait, seconds
STEP = 4.0  # seconds between two turns of the churn
RUN = 8 * STEP  # how long each small gang runs: eight on the block, one ending each turn
SWEEP = 5.0  # topogang's sweep (extender/server/serve.py EXPIRE_EVERY): when overdue is noticed
BOUND = MAX_WAIT + SWEEP + RUN + START_SLACK  # from the large gang's creation to its start


@pytest_asyncio.fixture(loop_scope="session")
async def serving_in(
    kubeconfig: Path, control_plane: ControlPlane, request: pytest.FixtureRequest
) -> AsyncIterator[Topogang]:
    """topogang in the mode the test asks for (extender, gates), reservations on (the default)."""
    if request.param == "gates":
        async with gates_serving(kubeconfig, control_plane, TOPOLOGY) as server:
            yield server
        return
    async with serving(kubeconfig, control_plane, TOPOLOGY) as server:
        yield server


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    server = request.node.funcargs.get("serving_in")
    if isinstance(server, Topogang) and report is not None and report.failed:
        print(f"--- last lines of {server.log_path} ---\n{server.tail()}")


async def small_gang(kube: KubeClient, namespace: str, name: str) -> None:
    """8 one-GPU pods at priority 1,000, no topology constraint (one node holds them)."""
    spec = {"minMember": 8, "priorityClassName": "e2e-high"}
    await create(kube, podgroup(name, spec), namespace)
    for i in range(8):
        body = gpu_pod(f"{name}-{i}", gpus=1, annotations={"pod-group-name": name})
        body["spec"]["priorityClassName"] = "e2e-high"
        await create(kube, body, namespace)


def podgroup(name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta = {"name": name, "annotations": {"kai.scheduler/topology": "e2e-dc", **(annotations or {})}}
    return {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "PodGroup", "metadata": meta, "spec": spec}


async def large_gang(kube: KubeClient, namespace: str, max_wait: str | None) -> float:
    """The priority-0 gang of one block; returns when its PodGroup was made (this clock)."""
    spec = {"minMember": 64, "topologyConstraints": {"global": {"requiredTopologyLevel": BLOCK}}}
    made = time.monotonic()
    await create(
        kube, podgroup("big", spec, {"scheduling.topogang.io/max-wait": max_wait} if max_wait else {}), namespace
    )
    for i in range(64):
        await create(kube, gpu_pod(f"big-{i}", gpus=1, annotations={"pod-group-name": "big"}), namespace)
    return made


@dataclass
class Churn:
    """Small gangs coming and going on the block: name -> when it started (bound)."""

    kube: KubeClient
    namespace: str
    running: dict[str, float] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)  # gangs submitted during the churn -> seen bound
    made: int = 0

    async def fill(self) -> None:
        """Eight small gangs on the block; they end one a turn (as if started RUN/8 apart)."""
        for g in range(8):
            await small_gang(self.kube, self.namespace, f"s{g}")
        await all_bound(self.kube, self.namespace, "s", 64)
        now = time.monotonic()
        self.running = {f"s{g}": now - RUN + (g + 1) * STEP for g in range(8)}

    async def turn(self) -> None:
        """One turn: the gangs waiting that were bound start running; the one that has run RUN
        ends; a new one is submitted."""
        now = time.monotonic()
        bound: dict[str, int] = {}
        for p in await pods(self.kube, self.namespace):
            if p["spec"].get("nodeName"):
                gang = p["metadata"]["name"].rpartition("-")[0]
                bound[gang] = bound.get(gang, 0) + 1
        for name in list(self.waiting):
            if bound.get(name) == 8:
                self.waiting.remove(name)
                self.running[name] = self.started[name] = now
        for name, since in list(self.running.items()):
            if now - since >= RUN:
                del self.running[name]
                await end(self.kube, self.namespace, name, 8)
        name = f"n{self.made}"
        self.made += 1
        await small_gang(self.kube, self.namespace, name)
        self.waiting.append(name)


async def held_out(kube: KubeClient, namespace: str, gangs: list[str]) -> set[str]:
    """GANGS whose PodGroup status says now that the room they want is held for another gang."""
    out = set()
    for name in gangs:
        status = (await kube.get(f"{PODGROUPS.format(ns=namespace)}/{name}")).get("status") or {}
        if HELD in str(status.get("message", "")):
            out.add(name)
    return out


def placed_after_overdue(server: Topogang, namespace: str, group: str) -> list[str]:
    """NAMESPACE's gangs other than GROUP that topogang placed after its "gang overdue" line about
    GROUP, in its log's order (one process writes it: the order of its decisions)."""
    overdue = f"{namespace}/{group}"
    seen = False
    after = []
    for entry in logged(server):
        name = str(entry.get("group", ""))
        if entry.get("event") == "gang overdue" and name == overdue:
            seen = True
        elif seen and entry.get("event") == "gang placed" and name.startswith(f"{namespace}/") and name != overdue:
            after.append(name)
    assert seen, f"topogang logged no 'gang overdue' line about {overdue}"
    return after


async def block(fake_gpu_nodes: FakeGpuNodes) -> set[str]:
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4)
    return set(nodes)


async def prepared(kube: KubeClient, namespace: str, gated: bool) -> None:
    await priority_classes(kube)
    if gated:
        await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": ENABLED}})


@pytest.mark.parametrize("serving_in", ["extender", "gates"], indirect=True)
async def test_an_overdue_gang_starts_within_its_bound_while_higher_priorities_keep_coming(
    serving_in: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, request: pytest.FixtureRequest
) -> None:
    await prepared(kube, namespace, request.node.callspec.id == "gates")
    b0 = await block(fake_gpu_nodes)
    churn = Churn(kube, namespace)
    await churn.fill()
    made = await large_gang(kube, namespace, f"{MAX_WAIT:g}s")
    started: dict[str, str] = {}
    told: set[str] = set()  # small gangs whose PodGroup said, while they waited, that the room is held
    while time.monotonic() - made <= BOUND:
        started = await bound_nodes(kube, namespace, "big-")
        if len(started) == 64:
            break
        await churn.turn()
        told |= await held_out(kube, namespace, churn.waiting)
        await asyncio.sleep(STEP)  # the small gangs' run time goes by (the test is their kubelet)
    assert len(started) == 64, f"big did not start within {BOUND:g} s of its creation"
    assert set(started.values()) == b0
    # Before it was overdue, the room it held went to the higher priority (strict order) ...
    assert churn.started, "no small gang started while big waited: the churn did not keep the block busy"
    # ... and once topogang found it overdue, no small gang was placed: the order of topogang's own
    # lines, not when the test's turn saw a gang bound (a turn takes STEP plus its API calls).
    assert placed_after_overdue(serving_in, namespace, "big") == [], "small gangs placed after big was overdue"
    assert churn.waiting, "every small gang submitted started: none was held out"
    # Told in its status while it waited (an Event is said only when the reason changes, and a gang
    # made just before big was overdue was first refused for the same reason, GPUs, so its
    # status, not its Events, is where the held room must show).
    assert told, "no waiting small gang's PodGroup said the room is held for another gang"
    assert await says(kube, namespace, "big", "overdue since "), "no Overdue Event on PodGroup big"


@pytest.mark.parametrize("serving_in", ["extender", "gates"], indirect=True)
async def test_without_a_maximum_the_gang_still_waits_when_that_bound_has_passed(
    serving_in: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes, request: pytest.FixtureRequest
) -> None:
    await prepared(kube, namespace, request.node.callspec.id == "gates")
    await block(fake_gpu_nodes)
    churn = Churn(kube, namespace)
    await churn.fill()
    made = await large_gang(kube, namespace, None)

    async def estimated() -> dict[str, Any] | None:  # it waits: its PodGroup says where it stands
        status = (await kube.get(f"{PODGROUPS.format(ns=namespace)}/big")).get("status", {})
        return status if "queuePosition" in status else None

    status = await eventually(estimated, within=60, what="PodGroup big to show its place in the queue")
    assert "overdueSince" not in status
    while time.monotonic() - made <= BOUND:
        await churn.turn()
        await asyncio.sleep(STEP)
    assert not await bound_nodes(kube, namespace, "big-")
    assert len(churn.started) >= 4, churn.started  # the freed nodes kept going to the higher priority
