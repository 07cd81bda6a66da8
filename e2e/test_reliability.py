"""No partial gang, on the real control plane: the bind gate, faults while members wait, gates.

Setup (once for the module): the CRDs and the Topology `e2e-dc`, `topogang serve` with a short
bind timeout (2 s of silence) and call budget (1.5 s), and kube-scheduler restarted from
scheduler-config/extender.yaml with a second, test-side extender after topogang (`Slow`). It
passes every node it is offered, after a delay chosen per namespace by the test, which is how a
large cluster's per-pod cost is stood in for here (kube-scheduler needs ~70 ms per pod at 5,000
nodes); it also records the one node topogang steered each pod to, and can run a step while a
given pod's filter call is held. Each test has its own namespace and fake GPU nodes (8 GPUs).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from aiohttp import web

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, install, pods, wait_all_bound
from e2e.test_extender import TOPOLOGY, bound_lines
from e2e.test_operations import condition, metrics, podgroup, podgroup_events
from e2e.topogang import CRDS, Topogang, scheduler_config
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

BIND_TIMEOUT = 2.0
CALL_BUDGET = 1.5


@dataclass
class Slow:
    """A filter-only extender in the test process: waits, records, passes every node."""

    delay: dict[str, float] = field(default_factory=dict)  # namespace -> seconds per filter call
    steered: dict[str, str] = field(default_factory=dict)  # "ns/pod" -> the one node topogang left
    # namespace -> (n, seconds, step): when the n-th pod of the namespace is steered, run the step,
    # then hold that call for the seconds
    hold: dict[str, tuple[int, float, Callable[[], Awaitable[None]]]] = field(default_factory=dict)
    url: str = ""

    async def filter(self, request: web.Request) -> web.Response:
        args = orjson.loads(await request.read())
        meta = args["Pod"]["metadata"]
        namespace = str(meta.get("namespace", "default"))
        key = f"{namespace}/{meta['name']}"
        names = list(args.get("NodeNames") or [])
        if key in self.steered:
            return self._pass(names)  # a retry: the delay stands for a new pod's cost, paid once
        if len(names) == 1:
            self.steered[key] = names[0]
            held = self.hold.get(namespace)
            if held is not None and sum(1 for k in self.steered if k.startswith(f"{namespace}/")) == held[0]:
                del self.hold[namespace]
                await held[2]()
                await asyncio.sleep(held[1])
        await asyncio.sleep(self.delay.get(namespace, 0.0))
        return self._pass(names)

    @staticmethod
    def _pass(names: list[str]) -> web.Response:
        reply = {"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
        return web.Response(body=orjson.dumps(reply), content_type="application/json")


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def slow() -> AsyncIterator[Slow]:
    async with serving_slow() as extender:
        yield extender


@contextlib.asynccontextmanager
async def serving_slow() -> AsyncIterator[Slow]:
    """A Slow extender served on a free port of 127.0.0.1 (its url set)."""
    extender = Slow()
    app = web.Application()
    app.router.add_post("/slow/filter", extender.filter)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    extender.url = f"http://127.0.0.1:{port}/slow"
    try:
        yield extender
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def topogang(kubeconfig: Path, control_plane: ControlPlane, slow: Slow) -> AsyncIterator[Topogang]:
    async with await KubeClient.connect(kubeconfig) as kube:
        await install(kube, CRDS, TOPOLOGY)
    # The gate itself is under test (members arriving one by one), and kube-scheduler runs a
    # second extender: bound ahead, its members would never meet either.
    budget = ["--bind-call-budget", str(CALL_BUDGET), "--bind-ahead", "false"]
    async with Topogang.start(kubeconfig, control_plane.logs_dir, bind_timeout=BIND_TIMEOUT, args=budget) as server:
        config = scheduler_config(server.url, server.tls)
        config["extenders"].append(
            {"urlPrefix": slow.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "30s"}
        )
        await control_plane.restart_scheduler_async(config)
        try:
            yield server
        finally:
            await control_plane.restart_scheduler_async(None)


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest, topogang: Topogang) -> Any:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"--- last lines of {topogang.log_path} ---\n{topogang.tail(60)}")


def log_lines(server: Topogang, message: str, namespace: str) -> list[dict[str, Any]]:
    out = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if entry.get("event") == message and namespace in str(entry.get("group", "")):
            out.append(entry)
    return out


def budget_spent(figures: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return figures.get(("topogang_binds_failed_total", (("reason", "call_budget"),)), 0.0)


# -- the bind gate waits while members keep arriving ------------------------------------------------


async def test_a_gang_slower_to_reach_bind_than_the_bind_timeout_binds_whole(
    topogang: Topogang, slow: Slow, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (12 nodes): one gang of 12 pods of 8 GPUs; kube-scheduler takes 0.4 s per pod, so
    #   its members reach bind over ~5 s: longer than the 2 s bind timeout and the 1.5 s call budget
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=12)
    slow.delay[namespace] = 0.4
    before = budget_spent(await metrics(topogang))
    await create_podgroup(kube, namespace, "wide", {"minMember": 12})
    for i in range(12):
        await create(kube, gpu_pod(f"wide-{i}", annotations={"pod-group-name": "wide"}), namespace)
    placed = await wait_all_bound(kube, namespace, 12, within=120)
    assert len(set(placed.values())) == 12
    assert log_lines(topogang, "bind gate timed out", namespace) == []
    bound = await bound_lines(topogang, namespace, 12)
    assert [line["pods"] for line in bound] == [12]  # one gate, opened once, for the whole gang
    # Some calls ran out of budget and were answered retryable; their pods were bound all the same.
    assert budget_spent(await metrics(topogang)) > before


# -- hole 1: the plan is checked again when the gate opens --------------------------------------------


async def test_a_planned_node_cordoned_while_members_wait_is_never_bound_to(
    topogang: Topogang, slow: Slow, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (5 nodes): a gang of 3; while the last member is being filtered, the node of a
    #   member already at the gate is cordoned
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=5)
    await create_podgroup(kube, namespace, "g", {"minMember": 3})
    cordoned: list[str] = []

    async def cordon_a_waiting_members_node() -> None:
        ours = [k for k in slow.steered if k.startswith(f"{namespace}/")]
        node = slow.steered[ours[0]]  # the first member steered: at the gate by now
        cordoned.append(node)
        await kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})

    # The third member steered is the last of the gang to reach bind; its filter call is held
    # for 1 s after the node of the first is cordoned.
    slow.hold[namespace] = (3, 1.0, cordon_a_waiting_members_node)
    for i in range(3):
        await create(kube, gpu_pod(f"g-{i}", annotations={"pod-group-name": "g"}), namespace)
    placed = await wait_all_bound(kube, namespace, 3, within=90)
    assert cordoned, "the last member's filter call was never held"
    assert cordoned[0] not in placed.values()
    lines = log_lines(topogang, "bind gate found planned nodes gone", namespace)
    assert [line["nodes"] for line in lines] == [cordoned]

    async def said() -> bool:
        return any(r == "GangReplanned" and cordoned[0] in n for _, r, n in await podgroup_events(kube, namespace, "g"))

    await eventually(said, within=30, what="a GangReplanned Event on PodGroup g naming the cordoned node")


# -- hole 3: pods held by a scheduling gate are not present ----------------------------------------------


async def test_a_gang_with_a_gated_member_is_not_planned_until_the_gate_is_removed(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (3 nodes): a gang of 3, one of them held by a scheduling gate
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    await create_podgroup(kube, namespace, "held", {"minMember": 3})
    for i in range(3):
        body = gpu_pod(f"held-{i}", annotations={"pod-group-name": "held"})
        if i == 2:
            body["spec"]["schedulingGates"] = [{"name": "example.com/admission"}]
        await create(kube, body, namespace)

    async def incomplete() -> dict[str, Any] | None:
        # The status is written as soon as the PodGroup exists (0 pods): wait for all three.
        pg = await podgroup(kube, namespace, "held")
        if pg is None or pg.get("status", {}).get("pods") != 3:
            return None
        return pg if condition(pg, "Unschedulable").get("reason") == "GangIncomplete" else None

    pg = await eventually(incomplete, within=30, what="PodGroup held to be GangIncomplete with its 3 pods")
    assert "held by scheduling gate(s) example.com/admission" in pg["status"]["message"]
    await asyncio.sleep(BIND_TIMEOUT + 1)  # long enough for a gate to have timed out, were it planned
    later = await podgroup(kube, namespace, "held")
    assert later is not None
    assert (later["status"]["pods"], later["status"]["planned"], later["status"]["bound"]) == (3, 0, 0)
    assert log_lines(topogang, "bind gate timed out", namespace) == []
    assert log_lines(topogang, "gang placed", namespace) == []
    await kube.patch(f"/api/v1/namespaces/{namespace}/pods/held-2", {"spec": {"schedulingGates": None}})
    placed = await wait_all_bound(kube, namespace, 3, within=60)
    assert len(set(placed.values())) == 3
    assert not any(p["spec"].get("nodeName") is None for p in await pods(kube, namespace))


# -- hole 4: finished workloads, and no Warning for a gang still being created -----------------------------


async def test_a_finished_job_says_finished_and_was_never_warned_about_while_created(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (3 nodes): a Job of 3 pods of 8 GPUs, made one by one by the Job controller and
    #   completed by kwok as soon as they run
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    container = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "done"},
        "spec": {
            "completions": 3,
            "parallelism": 3,
            "template": {
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
            },
        },
    }
    await create(kube, job, namespace)

    async def finished() -> dict[str, Any] | None:
        pg = await podgroup(kube, namespace, "job-done")
        return pg if pg is not None and pg.get("status", {}).get("phase") == "Finished" else None

    pg = await eventually(finished, within=90, what="PodGroup job-done to be Finished")
    assert pg["status"]["message"] == "finished: 3 pod(s) succeeded, 0 failed"
    assert condition(pg, "Unschedulable")["status"] == "False"
    assert all(p["status"]["phase"] == "Succeeded" for p in await pods(kube, namespace))
    events = await podgroup_events(kube, namespace, "job-done")
    assert [e for e in events if e[0] == "Warning"] == []
    assert ("Normal", "Finished", "finished: 3 pod(s) succeeded, 0 failed") in events
