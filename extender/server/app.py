"""The aiohttp application: routes, thin handlers, health, readiness and metrics.

`create_app` takes a ready `Extender`, a readiness check and a leadership check; `topogang
serve` (serve.py) builds those from a kubeconfig. Handlers decode, call the Extender and
encode; a malformed body is a 400 whose JSON `Error` names the field; a bug is a 500 with the
error logged; a body over the limit (limits.py) is a 413; a pod name or namespace Kubernetes
would not accept is a 400 (validate.py). Every extender call is timed into
`topogang_extender_request_duration_seconds`. `create_health_app` is the probes' listener alone.

Two readiness answers: `/synced` is 200 once the caches have synced, leader or follower (the
Deployment's readinessProbe: both replicas Ready, so rollouts and the PDB work); `/readyz` is
200 only on a synced leader (for people and scripts asking "is this the one that schedules?").
The Service finds the leader by its pod label (kube/leader_label.py), not by readiness. A
replica that is not the leader refuses extender calls that reach it anyway: filter and bind
with their result's `Error` ("topogang: not the leader ..."), prioritize and preempt, whose
results have no such field, with a 503 carrying the same `Error`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from extender.server import validate, wire
from extender.server.extender import Extender
from extender.server.limits import DEFAULT_MAX_BODY_MIB, too_large
from extender.server.metrics import BIND_NOT_LEADER, CONTENT_TYPE, Metrics

EXTENDER = web.AppKey("extender", Extender)
READY: web.AppKey[Callable[[], bool]] = web.AppKey("ready")
LEADING: web.AppKey[Callable[[], bool]] = web.AppKey("leading")
METRICS = web.AppKey("metrics", Metrics)
NOT_LEADER = "topogang: not the leader; this replica only keeps its cache warm (the Service sends calls to the leader)"
JSON = "application/json"
MAX_BODY = DEFAULT_MAX_BODY_MIB * 2**20  # why this size: limits.py

log = structlog.get_logger("topogang")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def _guarded(verb: str, handler: Handler) -> Handler:
    """Time the call, refuse it on a follower, turn errors into their JSON answers."""

    async def run(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        app = request.app
        try:
            if app[LEADING]():
                response = await handler(request)
            else:
                response = _not_leader(verb, app[METRICS])
        except web.HTTPRequestEntityTooLarge:
            log.warning("request body too large", path=request.path, limit=request.client_max_size)
            response = too_large(request.client_max_size, verb)
        except wire.WireError as exc:
            log.warning("bad request", path=request.path, error=str(exc))
            response = _json(wire.encode_error(str(exc)), status=400)
        except Exception as exc:
            log.exception("request failed", path=request.path)
            response = _json(wire.encode_error(f"topogang: internal error: {exc}"), status=500)
        app[METRICS].observe_request(verb, response.status, time.perf_counter() - start)
        return response

    return run


def _not_leader(verb: str, metrics: Metrics) -> web.Response:
    if verb == "bind":
        metrics.bind_failed(BIND_NOT_LEADER)
    if verb in ("filter", "bind"):
        return _json(wire.encode_error(NOT_LEADER))  # the result type's own Error field
    return _json(wire.encode_error(NOT_LEADER), status=503)


async def _filter(request: web.Request) -> web.StreamResponse:
    args = wire.decode_args(await request.read())
    validate.pod("ExtenderArgs.Pod.metadata.", args.namespace, args.name)
    return _json(request.app[EXTENDER].filter(args))


async def _prioritize(request: web.Request) -> web.StreamResponse:
    args = wire.decode_args(await request.read())
    validate.pod("ExtenderArgs.Pod.metadata.", args.namespace, args.name)
    return _json(request.app[EXTENDER].prioritize(args))


async def _bind(request: web.Request) -> web.StreamResponse:
    args = wire.decode_binding(await request.read())
    validate.dns1123_label("ExtenderBindingArgs.PodNamespace", args.namespace)
    validate.dns1123_subdomain("ExtenderBindingArgs.PodName", args.name, "pod")
    validate.dns1123_subdomain("ExtenderBindingArgs.Node", args.node, "node")
    return _json(await request.app[EXTENDER].bind(args))


async def _preempt(request: web.Request) -> web.StreamResponse:
    args = wire.decode_preempt(await request.read())
    namespace, _, name = args.pod_key.partition("/")
    validate.pod("ExtenderPreemptionArgs.Pod.metadata.", namespace, name)
    return _json(request.app[EXTENDER].preempt(args))


async def _healthz(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


async def _synced(request: web.Request) -> web.StreamResponse:
    if not request.app[READY]():
        return web.Response(text="caches not synced", status=503)
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.StreamResponse:
    if not request.app[READY]():
        return web.Response(text="caches not synced", status=503)
    if not request.app[LEADING]():
        return web.Response(text="not the leader", status=503)
    return web.Response(text="ok")


async def _metrics(request: web.Request) -> web.StreamResponse:
    return web.Response(body=request.app[METRICS].exposition(), headers={"Content-Type": CONTENT_TYPE})


def _always() -> bool:
    return True


def create_app(
    extender: Extender,
    ready: Callable[[], bool],
    prefix: str = "",
    *,
    leading: Callable[[], bool] = _always,
    max_body: int = MAX_BODY,
) -> web.Application:
    """The extender's routes under `prefix` (kube-scheduler's urlPrefix path, e.g. "/topogang");
    `leading` says whether this replica may plan and bind (always, without leader election);
    a body over `max_body` bytes is a 413."""
    prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
    app = create_health_app(extender.metrics, ready, leading=leading, max_body=max_body)
    app[EXTENDER] = extender
    app.router.add_post(f"{prefix}/filter", _guarded("filter", _filter))
    app.router.add_post(f"{prefix}/prioritize", _guarded("prioritize", _prioritize))
    app.router.add_post(f"{prefix}/bind", _guarded("bind", _bind))
    app.router.add_post(f"{prefix}/preempt", _guarded("preempt", _preempt))
    return app


def create_health_app(
    metrics: Metrics,
    ready: Callable[[], bool],
    *,
    leading: Callable[[], bool] = _always,
    max_body: int = MAX_BODY,
) -> web.Application:
    """/healthz, /synced, /readyz and /metrics alone: the plain-HTTP listener of --health-listen,
    for the kubelet's probes, which present no client certificate to the mTLS port."""
    app = web.Application(client_max_size=max_body)
    app[READY] = ready
    app[LEADING] = leading
    app[METRICS] = metrics
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/synced", _synced)
    app.router.add_get("/metrics", _metrics)
    return app
