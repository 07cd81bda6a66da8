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
from collections.abc import Callable
from dataclasses import dataclass

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
ROUTES: web.AppKey[Routes] = web.AppKey("routes")
NOT_LEADER = "topogang: not the leader; this replica only keeps its cache warm (the Service sends calls to the leader)"
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
MAX_BODY = DEFAULT_MAX_BODY_MIB * 2**20  # why this size: limits.py

log = structlog.get_logger("topogang")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = JSON


Verb = Callable[[Extender, bytes], bytes]


def _filter(extender: Extender, body: bytes) -> bytes:
    args = wire.decode_args(body)
    validate.pod("ExtenderArgs.Pod.metadata.", args.namespace, args.name)
    return extender.filter(args)


def _prioritize(extender: Extender, body: bytes) -> bytes:
    args = wire.decode_args(body)
    validate.pod("ExtenderArgs.Pod.metadata.", args.namespace, args.name)
    return extender.prioritize(args)


async def _bind(extender: Extender, body: bytes) -> bytes:
    args = wire.decode_binding(body)
    validate.dns1123_label("ExtenderBindingArgs.PodNamespace", args.namespace)
    validate.dns1123_subdomain("ExtenderBindingArgs.PodName", args.name, "pod")
    validate.dns1123_subdomain("ExtenderBindingArgs.Node", args.node, "node")
    return await extender.binds.bind(args)


def _preempt(extender: Extender, body: bytes) -> bytes:
    args = wire.decode_preempt(body)
    namespace, _, name = args.pod_key.partition("/")
    validate.pod("ExtenderPreemptionArgs.Pod.metadata.", namespace, name)
    return extender.preempt(args)


# Answered at once (no I/O), so a transport can reply within the callback that read the request.
SYNC_VERBS: dict[str, Verb] = {"filter": _filter, "prioritize": _prioritize, "preempt": _preempt}
VERBS = (*SYNC_VERBS, "bind")


class Routes:
    """What topogang answers, whatever the transport (aiohttp's HTTP/1.1 here, http2.py's
    HTTP/2): the extender verbs under the prefix (POST) and the probes and metrics (GET)."""

    def __init__(
        self,
        extender: Extender | None,
        metrics: Metrics,
        ready: Callable[[], bool],
        leading: Callable[[], bool],
        prefix: str,
        max_body: int,
    ) -> None:
        self.extender = extender
        self.metrics = metrics
        self.ready = ready
        self.leading = leading
        self.max_body = max_body
        self.verbs = {f"{prefix}/{verb}": verb for verb in VERBS} if extender is not None else {}

    def post_now(self, path: str, body: bytes | None) -> Answer | None:
        """The answer to a POST of BODY to PATH when it needs no I/O (filter, prioritize, preempt,
        or no route); None when it does (bind: `post`)."""
        verb = self.verbs.get(path)
        if verb == "bind":
            return None
        if verb is None:
            return Answer(404, b"404: Not Found", "text/plain")
        start = time.perf_counter()
        answer = self._guard(verb, path, body) or self._call(verb, path, body, SYNC_VERBS[verb])
        self.metrics.observe_request(verb, answer.status, time.perf_counter() - start)
        return answer

    async def post(self, path: str, body: bytes | None) -> Answer | None:
        """The answer to a POST of BODY (None: it was over max_body) to PATH; None: no route."""
        verb = self.verbs.get(path)
        if verb is None:
            return None
        if verb != "bind":
            return self.post_now(path, body)
        start = time.perf_counter()
        answer = self._guard(verb, path, body)
        if answer is None:
            try:
                assert self.extender is not None
                answer = Answer(200, await _bind(self.extender, body or b""))
            except Exception as exc:
                answer = self._failed(path, exc)
        self.metrics.observe_request(verb, answer.status, time.perf_counter() - start)
        return answer

    def _guard(self, verb: str, path: str, body: bytes | None) -> Answer | None:
        """The answer without calling the verb: a body over the limit, or a follower; else None."""
        if body is None:
            log.warning("request body too large", path=path, limit=self.max_body)
            return Answer(413, too_large(self.max_body, verb))
        if not self.leading():
            return self._not_leader(verb)
        return None

    def _call(self, verb: str, path: str, body: bytes | None, call: Verb) -> Answer:
        assert self.extender is not None
        try:
            return Answer(200, call(self.extender, body or b""))
        except Exception as exc:
            return self._failed(path, exc)

    @staticmethod
    def _failed(path: str, exc: Exception) -> Answer:
        """A malformed request is a 400 naming the field; anything else a 500, logged."""
        if isinstance(exc, wire.WireError):
            log.warning("bad request", path=path, error=str(exc))
            return Answer(400, wire.encode_error(str(exc)))
        log.exception("request failed", path=path, exc_info=exc)
        return Answer(500, wire.encode_error(f"topogang: internal error: {exc}"))

    def _not_leader(self, verb: str) -> Answer:
        if verb == "bind":
            self.metrics.bind_failed(BIND_NOT_LEADER)
        if verb in ("filter", "bind"):
            return Answer(200, wire.encode_error(NOT_LEADER))  # the result type's own Error field
        return Answer(503, wire.encode_error(NOT_LEADER))

    def get(self, path: str) -> Answer | None:
        """The probes (/healthz, /synced, /readyz) and /metrics; None: no route."""
        if path == "/healthz":
            return Answer(200, b"ok", TEXT)
        if path in ("/synced", "/readyz"):
            if not self.ready():
                return Answer(503, b"caches not synced", TEXT)
            if path == "/readyz" and not self.leading():
                return Answer(503, b"not the leader", TEXT)
            return Answer(200, b"ok", TEXT)
        if path == "/metrics":
            return Answer(200, self.metrics.exposition(), CONTENT_TYPE)
        return None


def _response(answer: Answer) -> web.Response:
    return web.Response(body=answer.body, status=answer.status, headers={"Content-Type": answer.content_type})


async def _post(request: web.Request) -> web.StreamResponse:
    routes = request.app[ROUTES]
    try:
        body: bytes | None = await request.read()
    except web.HTTPRequestEntityTooLarge:
        body = None
    answer = await routes.post(request.path, body)
    if answer is None:
        raise web.HTTPNotFound()
    return _response(answer)


async def _get(request: web.Request) -> web.StreamResponse:
    answer = request.app[ROUTES].get(request.path)
    if answer is None:
        raise web.HTTPNotFound()
    return _response(answer)


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
    app = _app(Routes(extender, extender.metrics, ready, leading, prefix, max_body))
    app[EXTENDER] = extender
    for path in app[ROUTES].verbs:
        app.router.add_post(path, _post)
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
    return _app(Routes(None, metrics, ready, leading, "", max_body))


def _app(routes: Routes) -> web.Application:
    app = web.Application(client_max_size=routes.max_body)
    app[ROUTES] = routes
    app[READY] = routes.ready
    app[LEADING] = routes.leading
    app[METRICS] = routes.metrics
    for path in ("/healthz", "/readyz", "/synced", "/metrics"):
        app.router.add_get(path, _get)
    return app
