"""The aiohttp application: routes, thin handlers, health and readiness.

`create_app` takes a ready `Extender` and a readiness check; `topogang serve` (serve.py) builds
those from a kubeconfig. Handlers decode, call the Extender and encode; a malformed body is a
400 whose JSON `Error` names the field; a bug is a 500 with the error logged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
import structlog
from aiohttp import web

from extender.server import wire
from extender.server.extender import Extender

EXTENDER = web.AppKey("extender", Extender)
READY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
JSON = "application/json"
# Without nodeCacheCapable, kube-scheduler sends every candidate Node in full: allow big bodies.
MAX_BODY = 256 * 2**20

log = structlog.get_logger("topogang")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def _guarded(handler: Handler) -> Handler:
    async def run(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except wire.WireError as exc:
            log.warning("bad request", path=request.path, error=str(exc))
            return _json(orjson.dumps({"Error": str(exc)}), status=400)
        except Exception as exc:
            log.exception("request failed", path=request.path)
            return _json(orjson.dumps({"Error": f"topogang: internal error: {exc}"}), status=500)

    return run


async def _filter(request: web.Request) -> web.StreamResponse:
    args = wire.decode_args(await request.read())
    return _json(request.app[EXTENDER].filter(args))


async def _prioritize(request: web.Request) -> web.StreamResponse:
    args = wire.decode_args(await request.read())
    return _json(request.app[EXTENDER].prioritize(args))


async def _bind(request: web.Request) -> web.StreamResponse:
    args = wire.decode_binding(await request.read())
    return _json(await request.app[EXTENDER].bind(args))


async def _preempt(request: web.Request) -> web.StreamResponse:
    return _json(request.app[EXTENDER].preempt(await request.read()))


async def _healthz(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.StreamResponse:
    if request.app[READY]():
        return web.Response(text="ok")
    return web.Response(text="caches not synced", status=503)


def create_app(extender: Extender, ready: Callable[[], bool], prefix: str = "") -> web.Application:
    """The extender's routes under `prefix` (kube-scheduler's urlPrefix path, e.g. "/topogang")."""
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    app = web.Application(client_max_size=MAX_BODY)
    app[EXTENDER] = extender
    app[READY] = ready
    app.router.add_post(f"{prefix}/filter", _guarded(_filter))
    app.router.add_post(f"{prefix}/prioritize", _guarded(_prioritize))
    app.router.add_post(f"{prefix}/bind", _guarded(_bind))
    app.router.add_post(f"{prefix}/preempt", _guarded(_preempt))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app
