"""A proxy between one client (topogang) and kube-apiserver that a test can make misbehave.

It terminates TLS with the control plane's own serving certificate (so the client's kubeconfig
keeps its CA) and sends every request on to the real API server as the admin identity, streaming
watches through. The test switches faults on and off while a gang is in flight:

    proxy = await FaultProxy.start(plane)          # proxy.kubeconfig: the admin's, pointed here
    proxy.throttle(retry_after=1)                  # every request answered 429 + Retry-After
    proxy.slow(1.5)                                # every request held 1.5 s before it is sent on
    proxy.clear()                                  # back to passing everything through
    await proxy.expire_watches("pods")             # open pod watches get an ERROR 410 and end
    await proxy.cut_watches()                      # open watches' connections are dropped
    proxy.counts                                   # how many requests each fault answered

Only the client pointed at it sees the faults: kube-scheduler, kwok and the controllers keep
talking to the API server directly, as they would in a cluster where one client is throttled.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import orjson
import yaml
from aiohttp import web

from e2e.controlplane import ControlPlane
from e2e.topogang import _free_port

# A request the fault applies to: (method, path, is it a watch).
Match = Callable[[str, str, bool], bool]
FORWARDED = ("Accept", "Content-Type", "User-Agent")
RESOURCES = {"pods": "/pods", "nodes": "/nodes"}


def everything(method: str, path: str, watch: bool) -> bool:
    return True


def not_watches(method: str, path: str, watch: bool) -> bool:
    return not watch


def writes(method: str, path: str, watch: bool) -> bool:
    return method in ("POST", "PUT", "PATCH", "DELETE")


@dataclass(eq=False)  # one per stream, kept in a set by identity
class _Watch:
    path: str
    stop: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class FaultProxy:
    def __init__(self, plane: ControlPlane, port: int) -> None:
        self.plane = plane
        self.port = port
        self.url = f"https://127.0.0.1:{port}"
        self.kubeconfig = plane.workdir / f"kubeconfig-proxy-{port}"
        self.counts: collections.Counter[str] = collections.Counter()
        self._throttle: tuple[float, Match] | None = None
        self._slow: tuple[float, Match] | None = None
        self._watches: set[_Watch] = set()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- faults ---------------------------------------------------------------------------------

    def throttle(self, retry_after: float = 1.0, match: Match = everything) -> None:
        """Answer matching requests 429 Too Many Requests with Retry-After, as APF does."""
        self._throttle = (retry_after, match)

    def slow(self, seconds: float, match: Match = everything) -> None:
        """Hold matching requests SECONDS before sending them on."""
        self._slow = (seconds, match)

    def clear(self) -> None:
        self._throttle = self._slow = None

    async def expire_watches(self, resource: str = "pods") -> int:
        """End the open watches of RESOURCE with an ERROR event 410 Expired (what the API server
        sends when the resourceVersion a watch resumes from was compacted); returns how many."""
        return self._stop(resource, "expire")

    async def cut_watches(self, resource: str | None = None) -> int:
        """Drop the connections of the open watches (of RESOURCE, else all); returns how many."""
        return self._stop(resource, "cut")

    def _stop(self, resource: str | None, how: str) -> int:
        suffix = RESOURCES[resource] if resource else ""
        hit = [w for w in self._watches if w.path.endswith(suffix) and not w.stop.done()]
        for watch in hit:
            watch.stop.set_result(how)
        return len(hit)

    def watching(self, resource: str) -> int:
        return sum(1 for w in self._watches if w.path.endswith(RESOURCES[resource]))

    # -- running --------------------------------------------------------------------------------

    @classmethod
    async def start(cls, plane: ControlPlane) -> FaultProxy:
        proxy = cls(plane, _free_port())
        await proxy._start()
        return proxy

    async def _start(self) -> None:
        pki = self.plane.pki
        upstream = ssl.create_default_context(cafile=str(pki.ca.cert))
        admin = pki.clients["admin"]
        upstream.load_cert_chain(str(admin.cert), str(admin.key))
        # Bodies are passed on decompressed (the API server gzips large lists): the client is
        # not told of an encoding, so it must get plain JSON.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=upstream, limit=0))
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(str(pki.serving.cert), str(pki.serving.key))
        doc = yaml.safe_load(self.plane.kubeconfig.read_text())
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=serving).start()
        doc["clusters"][0]["cluster"]["server"] = self.url
        self.kubeconfig.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    async def close(self) -> None:
        self._stop(None, "cut")
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> FaultProxy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- one request ----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch") in ("true", "1")
        method, path = request.method, request.path
        if self._throttle is not None and self._throttle[1](method, path, watch):
            self.counts["throttled"] += 1
            return _too_many(self._throttle[0])
        if self._slow is not None and self._slow[1](method, path, watch):
            self.counts["slowed"] += 1
            await asyncio.sleep(self._slow[0])
        body = await request.read()
        headers = {k: request.headers[k] for k in FORWARDED if k in request.headers}
        assert self._session is not None
        upstream = self._session.request(
            method,
            self.plane.server + request.path_qs,
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        try:
            async with upstream as answer:
                if not watch or answer.status != 200:
                    content = await answer.read()
                    return web.Response(status=answer.status, body=content, headers=_headers_of(answer))
                return await self._stream(request, answer)
        except aiohttp.ClientConnectionError:
            # The API server is down: the client sees its connection dropped, as without a proxy.
            self.counts["upstream_down"] += 1
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable() from None

    async def _stream(self, request: web.Request, answer: aiohttp.ClientResponse) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=_headers_of(answer))
        await response.prepare(request)
        watch = _Watch(request.path)
        self._watches.add(watch)
        chunk: asyncio.Future[bytes] | None = None
        try:
            while True:
                chunk = asyncio.ensure_future(answer.content.readany())
                await asyncio.wait({chunk, watch.stop}, return_when=asyncio.FIRST_COMPLETED)
                if watch.stop.done():
                    return await self._end(request, response, watch.stop.result())
                try:
                    data = chunk.result()
                except aiohttp.ClientError:  # the API server went away: so does the client's watch
                    return await self._end(request, response, "upstream")
                if not data:
                    await response.write_eof()
                    return response
                await response.write(data)
        finally:
            self._watches.discard(watch)
            if chunk is not None:  # a read left waiting when the stream ended another way
                chunk.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await chunk

    async def _end(self, request: web.Request, response: web.StreamResponse, how: str) -> web.StreamResponse:
        if how == "expire":
            self.counts["expired"] += 1
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "too old resource version (fault proxy)",
                "reason": "Expired",
                "code": 410,
            }
            await response.write(orjson.dumps({"type": "ERROR", "object": status}) + b"\n")
            await response.write_eof()
            return response
        self.counts["cut" if how == "cut" else "upstream_down"] += 1
        if request.transport is not None:
            request.transport.abort()
        return response


def _too_many(retry_after: float) -> web.Response:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "Too many requests, please try again later. (fault proxy)",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": int(retry_after)},
        "code": 429,
    }
    headers = {"Retry-After": f"{retry_after:g}", "Content-Type": "application/json"}
    return web.Response(status=429, body=orjson.dumps(status), headers=headers)


def _headers_of(answer: aiohttp.ClientResponse) -> dict[str, str]:
    return {k: v for k, v in answer.headers.items() if k in ("Content-Type", "Retry-After", "Audit-Id")}
