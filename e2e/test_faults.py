"""API-server trouble while a gang is in flight, on a real control plane of this module's own.

Setup (once for the module): a control plane of its own (these tests restart kube-apiserver and
etcd; no other module may see that), the CRDs and the Topology `e2e-dc`, a fault proxy
(e2e/faultproxy.py) in front of the API server, `topogang serve` talking to the API server only
through it, and kube-scheduler (talking to the API server directly) configured with topogang and
a second, test-side extender after it (`Slow`, from test_reliability) that paces the members:
0.2 s per pod, so a gang of 16 is in flight for a few seconds. When the sixth member of a test's
gang is steered, the test's fault starts (in the background: kube-scheduler keeps going):

    kube-apiserver restarted            etcd restarted (down 3 s)
    the pod watch ended with 410 Gone   every request answered 429 for 4 s
    every write held 2.5 s for 6 s

and each test asserts that the gang ends whole (all 16 bound, none left partial), nothing is left
reserved (topogang_reservations 0, no status.reservation on the PodGroup), nothing is stuck (a
second gang made after the fault binds whole too), and the trouble was said: a log line and a
count in topogang_api_trouble_total{kind}.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest
import pytest_asyncio

from e2e.controlplane import Binaries, ControlPlane, FakeGpuNodes, api_client
from e2e.faultproxy import FaultProxy
from e2e.scenario import create, create_podgroup, gpu_pod, install, pods
from e2e.test_extender import TOPOLOGY
from e2e.test_operations import metrics, podgroup
from e2e.test_reliability import Slow, serving_slow
from e2e.topogang import CRDS, Topogang, scheduler_config
from extender.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

T = TypeVar("T")
GANG = 16  # pods of 8 GPUs, one per node
FAULT_AT = 6  # the fault starts when this many members have been steered
PACE = 0.2  # seconds kube-scheduler's second extender takes per pod
Fault = Callable[[], Coroutine[Any, Any, None]]
KEEP_ENV = "TOPOGANG_FAULTS_WORKDIR"  # set: the plane's files and logs are kept there


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(binaries=Binaries.locate(), scheduler=True, workdir=os.environ.get(KEEP_ENV)) as started:
        yield started


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def proxy(plane: ControlPlane) -> AsyncIterator[FaultProxy]:
    async with await FaultProxy.start(plane) as started:
        yield started


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def slow() -> AsyncIterator[Slow]:
    async with serving_slow() as extender:
        yield extender


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def kube(plane: ControlPlane) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(plane.kubeconfig) as raw:
        yield raw


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def topogang(plane: ControlPlane, proxy: FaultProxy, slow: Slow, kube: KubeClient) -> AsyncIterator[Topogang]:
    await install(kube, CRDS, TOPOLOGY)
    # Leader election on, with the shipped timings, as in a cluster: an API server away longer
    # than the renew deadline costs the replica its leadership, and it must take it back.
    # Binding ahead off: kube-scheduler here has a second extender (the one that paces the gang),
    # whose verdict a gang bound ahead would skip; docs/cli.md says to turn it off then.
    args = ["--leader-elect=true", "--lease-namespace=default", "--lease-name=topogang-faults", "--bind-ahead=false"]
    async with Topogang.start(proxy.kubeconfig, plane.logs_dir, args=args) as server:
        config = scheduler_config(server.url, server.tls)
        config["extenders"].append(
            {"urlPrefix": slow.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "30s"}
        )
        await plane.restart_scheduler_async(config)
        yield server


@pytest_asyncio.fixture(loop_scope="session")
async def nodes(plane: ControlPlane) -> AsyncIterator[FakeGpuNodes]:
    async with api_client(plane.kubeconfig) as api:
        made = FakeGpuNodes(api, name_prefix=f"faults{len(_namespaces)}")
        yield made
        await _through_trouble(made.delete_all)


@pytest_asyncio.fixture(loop_scope="session")
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    name = f"faults-{len(_namespaces) + 1}"
    _namespaces.append(name)
    await kube.post("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    await _through_trouble(lambda: kube.delete(f"/api/v1/namespaces/{name}/pods"))


_namespaces: list[str] = []


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest, topogang: Topogang) -> Any:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"--- last lines of {topogang.log_path} ---\n{topogang.tail(60)}")


@dataclass(frozen=True)
class Rig:
    """What every test here works with: one fixture instead of seven arguments per test."""

    plane: ControlPlane
    proxy: FaultProxy
    topogang: Topogang
    slow: Slow
    kube: KubeClient
    namespace: str
    nodes: FakeGpuNodes


@pytest.fixture
def rig(
    plane: ControlPlane,
    proxy: FaultProxy,
    topogang: Topogang,
    slow: Slow,
    kube: KubeClient,
    namespace: str,
    nodes: FakeGpuNodes,
) -> Rig:
    return Rig(plane, proxy, topogang, slow, kube, namespace, nodes)


async def _through_trouble(call: Callable[[], Awaitable[T]], within: float = 60.0) -> T:
    """CALL, tried again while the API server is restarting (refused, 5xx, timed out)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            return await call()
        except (aiohttp.ClientError, OSError, TimeoutError, ApiError) as exc:
            if (isinstance(exc, ApiError) and exc.status < 500) or asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.25)


async def until(check: Callable[[], Awaitable[T | None]], *, within: float, what: str) -> T:
    """CHECK's first result that is not None/False, asked again while the API server is in trouble."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ApiError):
            found = await check()
            if found is not None and found is not False:
                return found
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"after {within:.0f}s still waiting for {what}")
        await asyncio.sleep(0.25)


def log_lines(server: Topogang, event: str) -> list[dict[str, Any]]:
    out = []
    for raw in server.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            line = orjson.loads(raw)
            if isinstance(line, dict) and line.get("event") == event:
                out.append(line)
    return out


def trouble(figures: dict[tuple[str, tuple[tuple[str, str], ...]], float], kind: str) -> float:
    return figures.get(("topogang_api_trouble_total", (("kind", kind),)), 0.0)


async def gang(kube: KubeClient, namespace: str, name: str) -> None:
    await create_podgroup(kube, namespace, name, {"minMember": GANG})
    for i in range(GANG):
        await create(kube, gpu_pod(f"{name}-{i}", annotations={"pod-group-name": name}), namespace)


async def bound(kube: KubeClient, namespace: str, prefix: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in await pods(kube, namespace)
        if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    }


async def through_a_fault(rig: Rig, fault: Fault) -> None:
    """Gang `a` in flight when FAULT starts; then it and gang `b` (made after the fault) must end
    whole with nothing reserved."""
    topogang, slow, kube, namespace, nodes = rig.topogang, rig.slow, rig.kube, rig.namespace, rig.nodes
    await nodes.add(zone=0, block=0, rack=0, count=GANG)
    slow.delay[namespace] = PACE
    started: list[asyncio.Task[None]] = []

    async def start_the_fault() -> None:
        started.append(asyncio.create_task(fault()))

    slow.hold[namespace] = (FAULT_AT, 0.0, start_the_fault)
    await gang(kube, namespace, "a")

    async def fault_started() -> bool:
        return bool(started)

    await until(fault_started, within=60, what=f"the fault to start at member {FAULT_AT}")
    await started[0]
    placed = await until(
        lambda: _all(bound(kube, namespace, "a-")), within=120, what=f"all {GANG} pods of gang a to be bound"
    )
    assert len(set(placed.values())) == GANG
    # Nothing stuck: a gang made after the fault is planned from a cache that caught up.
    await _through_trouble(lambda: nodes.add(zone=0, block=0, rack=1, count=GANG))
    await _through_trouble(lambda: gang(kube, namespace, "b"))
    await until(lambda: _all(bound(kube, namespace, "b-")), within=120, what=f"all {GANG} pods of gang b to be bound")

    async def nothing_reserved() -> bool:
        seen = await metrics(topogang)
        pgs = [await podgroup(kube, namespace, n) for n in ("a", "b")]
        return seen[("topogang_reservations", ())] == 0 and all(
            pg is not None and "reservation" not in pg.get("status", {}) and pg["status"].get("phase") == "Scheduled"
            for pg in pgs
        )

    await until(nothing_reserved, within=30, what="no reservation left and both PodGroups Scheduled")


async def _all(found: Awaitable[dict[str, str]]) -> dict[str, str] | None:
    placed = await found
    return placed if len(placed) == GANG else None


def said(topogang: Topogang, kind: str) -> list[dict[str, Any]]:
    return [line for line in log_lines(topogang, "API server trouble") if line.get("kind") == kind]


def for_a_while(proxy: FaultProxy, start: Callable[[], None], seconds: float) -> Fault:
    """A fault that turns the proxy's misbehaviour START on for SECONDS, then clears it."""

    async def fault() -> None:
        start()
        try:
            await asyncio.sleep(seconds)
        finally:
            proxy.clear()

    return fault


async def noticed(rig: Rig, before: dict[tuple[str, tuple[tuple[str, str], ...]], float], kind: str) -> None:
    """topogang counted trouble of KIND since BEFORE (its metrics then) and said so in its log."""
    after = await metrics(rig.topogang)
    assert trouble(after, kind) > trouble(before, kind)
    assert said(rig.topogang, kind)


# -- the tests ---------------------------------------------------------------------------------------


async def test_kube_apiserver_restarted_mid_gang(rig: Rig) -> None:
    before = await metrics(rig.topogang)

    async def restart() -> None:
        await rig.plane.restart_async("kube-apiserver")

    await through_a_fault(rig, restart)
    await noticed(rig, before, "unavailable")


async def test_etcd_restarted_mid_gang(rig: Rig) -> None:
    before = await metrics(rig.topogang)

    async def restart() -> None:
        await rig.plane.restart_async("etcd", down=3.0)

    await through_a_fault(rig, restart)
    after = await metrics(rig.topogang)
    kinds = [k for k in ("unavailable", "slow") if trouble(after, k) > trouble(before, k)]
    assert kinds, "etcd down for 3 s went unnoticed"
    assert all(said(rig.topogang, k) for k in kinds)


async def test_the_pod_watch_expired_mid_gang_relists(rig: Rig) -> None:
    before = await metrics(rig.topogang)

    async def expire() -> None:
        assert await rig.proxy.expire_watches("pods") >= 1

    await through_a_fault(rig, expire)
    after = await metrics(rig.topogang)
    assert trouble(after, "relist") > trouble(before, "relist")
    relisted = [line for line in log_lines(rig.topogang, "relisted") if line.get("resource") == "pods"]
    assert relisted
    assert "410" in relisted[-1]["reason"], relisted


async def test_every_request_throttled_mid_gang(rig: Rig) -> None:
    before = await metrics(rig.topogang)
    await through_a_fault(rig, for_a_while(rig.proxy, lambda: rig.proxy.throttle(retry_after=1), 4))
    assert rig.proxy.counts["throttled"] > 0
    await noticed(rig, before, "throttled")


async def test_a_slow_api_server_mid_gang(rig: Rig) -> None:
    before = await metrics(rig.topogang)

    def writes(method: str, path: str, watch: bool) -> bool:
        return method != "GET"

    await through_a_fault(rig, for_a_while(rig.proxy, lambda: rig.proxy.slow(2.5, writes), 6))
    assert rig.proxy.counts["slowed"] > 0
    await noticed(rig, before, "slow")
