"""API-server trouble as KubeClient meets it: 429s waited out as Retry-After asks, each kind of
trouble counted and said once per episode. The client talks to a small aiohttp server here (the
e2e tests put a fault proxy in front of a real kube-apiserver)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client as k8s
from structlog.testing import capture_logs

from extender.kube.client import ApiError, KubeClient
from extender.kube.trouble import SLOW, THROTTLED, UNAVAILABLE, Trouble


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_episode_is_said_when_it_starts_and_when_it_is_over() -> None:
    clock = Clock()
    trouble = Trouble(quiet_seconds=5.0, clock=clock)
    with capture_logs() as logs:
        for _ in range(3):
            trouble.status(429, "POST", "/api/v1/namespaces/ml/pods/p/binding", "slow down", 0.01)
        trouble.status(503, "GET", "/api/v1/pods", "etcd leader changed", 0.01)
        clock.now += 1
        trouble.status(200, "GET", "/api/v1/pods", "", 0.01)  # too soon: still in trouble
        assert trouble.troubled == [THROTTLED, UNAVAILABLE]
        clock.now += 5
        trouble.status(200, "GET", "/api/v1/pods", "", 0.01)
        trouble.status(200, "GET", "/api/v1/pods", "", 3.0)
    assert trouble.counts == {THROTTLED: 3, UNAVAILABLE: 1, SLOW: 1}
    said = [(e["event"], e["kind"]) for e in logs]
    assert said == [
        ("API server trouble", THROTTLED),
        ("API server trouble", UNAVAILABLE),
        ("API server trouble over", THROTTLED),
        ("API server trouble over", UNAVAILABLE),
        ("API server trouble", SLOW),
    ]
    assert logs[0]["request"] == "POST /api/v1/namespaces/ml/pods/p/binding"
    assert logs[2]["requests"] == 3


class Server:
    """Answers each request with the next scripted (status, headers); 200 {} when none is left."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str]]] = []
        self.requests = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        status, headers = self.script.pop(0) if self.script else (200, {})
        body = b"{}" if status == 200 else b'{"kind": "Status", "code": %d, "message": "no"}' % status
        return web.Response(status=status, body=body, headers=headers, content_type="application/json")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(port: int) -> KubeClient:
    configuration = type.__call__(k8s.Configuration)
    configuration.host = f"http://127.0.0.1:{port}"
    return KubeClient(k8s.ApiClient(configuration=configuration), timeout=5.0)


@pytest_asyncio.fixture
async def served() -> AsyncIterator[tuple[Server, KubeClient]]:
    server = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = _port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    async with _client(port) as client:
        yield server, client
    await runner.cleanup()


async def test_a_429_with_retry_after_is_sent_again_after_the_wait(served: tuple[Server, KubeClient]) -> None:
    server, client = served
    server.script = [(429, {"Retry-After": "0"}), (429, {"Retry-After": "0"})]
    assert await client.post("/api/v1/namespaces/ml/pods/p/binding", {"kind": "Binding"}) == {}
    assert server.requests == 3
    assert client.trouble.counts[THROTTLED] == 2


async def test_a_429_that_means_no_is_not_retried(served: tuple[Server, KubeClient]) -> None:
    server, client = served
    server.script = [(429, {"Retry-After": "0"})]  # an eviction a PodDisruptionBudget forbids
    with pytest.raises(ApiError) as caught:
        await client.post("/api/v1/namespaces/ml/pods/p/eviction", {}, retry_throttled=False)
    assert caught.value.status == 429
    assert server.requests == 1


async def test_throttling_that_does_not_end_gives_up_and_a_5xx_without_retry_after_fails(
    served: tuple[Server, KubeClient],
) -> None:
    server, client = served
    server.script = [(429, {"Retry-After": "0"})] * 10
    with pytest.raises(ApiError):
        await client.get("/api/v1/pods")
    assert server.requests == 5
    server.script = [(500, {})]
    with pytest.raises(ApiError):
        await client.get("/api/v1/pods")
    assert client.trouble.counts[UNAVAILABLE] == 1


async def test_a_refused_connection_is_unavailable() -> None:
    async with _client(_port()) as client:  # nothing listens there
        with pytest.raises(OSError, match="Cannot connect"):
            await client.get("/api/v1/pods")
        assert client.trouble.counts[UNAVAILABLE] == 1
