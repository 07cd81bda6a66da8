"""The mutating admission webhook: gang pods get topogang's scheduling gate (gates mode) and pods of
segmented SubGroups get their segment index (both modes).

The API server POSTs an AdmissionReview (admission.k8s.io/v1) for each pod created in the
namespaces the MutatingWebhookConfiguration selects; the answer always allows the pod, with a
JSONPatch when there is something to add:

- gates mode, a managed gang pod (grouping/admission.py): `spec.schedulingGates` gains
  `scheduling.topogang.io/gang`; the ungater (kube/ungate.py) removes it once the gang is planned.
  A pod that already has a nodeName is never gated (the API server forbids it, and nothing would
  schedule it anyway).
- gates mode, a plain pod that would replace a moved pod (defragmentation: same namespace and
  controller, requests that fit a move's held room not claimed yet, `Moves.awaiting`): the same
  gate; the ungater pins it to that room, or only ungates it when no move is left for it.
- a pod of a segmented part: env vars TOPOGANG_SEGMENT_INDEX, TOPOGANG_SEGMENT_SIZE,
  TOPOGANG_INDEX_IN_SEGMENT and KAI_SEGMENT_INDEX in every container and init container (a
  variable the pod already sets is left alone) and the label scheduling.topogang.io/segment-index.

The decision is one `group_pods` of the pod alone against the live cache: tens of microseconds,
no API call. A pod whose workload (or PodGroup) the cache does not show yet waits for it up to a
second, polling the cache: its gang and segment come from that spec. Until the cache has synced
the webhook answers 503, which the API server treats as a failed call (the configuration's
failurePolicy decides: see manifests/gates/webhook/webhook.yaml).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import structlog
from aiohttp import web

from extender.core.scheduler import GangScheduler
from extender.grouping.admission import Admission, admit
from extender.grouping.result import SegmentPosition
from extender.model.errors import InvalidObject
from extender.model.pod import TOPOGANG_GATE, PodInfo, parse_pod

GATE = TOPOGANG_GATE
SEGMENT_LABEL = "scheduling.topogang.io/segment-index"
PATH = "/mutate-pods"
MAX_BODY = 16 * 2**20
GATES, EXTENDER = "gates", "extender"
# A pod created right after its workload may reach us before the workload does (the cache is a
# watch behind); it waits this long for it, well inside the webhook's timeoutSeconds.
OWNER_WAIT = 1.0

log = structlog.get_logger("topogang")

JSONPatch = list[dict[str, Any]]


def segment_env(segment: SegmentPosition) -> dict[str, str]:
    return {
        "TOPOGANG_SEGMENT_INDEX": str(segment.segment),
        "TOPOGANG_SEGMENT_SIZE": str(segment.size),
        "TOPOGANG_INDEX_IN_SEGMENT": str(segment.index_in_segment),
        "KAI_SEGMENT_INDEX": str(segment.segment),  # KAI's segment design's name for the same number
    }


def _escape(key: str) -> str:
    """A map key as a JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def gate_ops(pod: Mapping[str, Any]) -> JSONPatch:
    spec = pod.get("spec") or {}
    gates = spec.get("schedulingGates")
    if spec.get("nodeName"):
        return []
    if not gates:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]
    if any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates):
        return []
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]


def segment_ops(pod: Mapping[str, Any], segment: SegmentPosition) -> JSONPatch:
    ops: JSONPatch = []
    meta = pod.get("metadata") or {}
    if meta.get("labels"):
        path = f"/metadata/labels/{_escape(SEGMENT_LABEL)}"
        ops.append({"op": "add", "path": path, "value": str(segment.segment)})
    else:
        ops.append({"op": "add", "path": "/metadata/labels", "value": {SEGMENT_LABEL: str(segment.segment)}})
    env = segment_env(segment)
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(kind) or []):
            have = container.get("env")
            names = {e.get("name") for e in have or [] if isinstance(e, Mapping)}
            add = [{"name": k, "value": v} for k, v in env.items() if k not in names]
            if not add:
                continue
            if not have:
                ops.append({"op": "add", "path": f"/spec/{kind}/{i}/env", "value": add})
            else:
                ops.extend({"op": "add", "path": f"/spec/{kind}/{i}/env/-", "value": e} for e in add)
    return ops


def _response(uid: str, ops: JSONPatch, warnings: Sequence[str] = ()) -> dict[str, Any]:
    answer: dict[str, Any] = {"uid": uid, "allowed": True}
    if ops:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(orjson.dumps(ops)).decode()
    if warnings:
        answer["warnings"] = list(warnings)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}


class Webhook:
    """Decides what a pod being created gets; `mode` is gates or extender (env vars only)."""

    def __init__(
        self,
        scheduler: GangScheduler,
        mode: str,
        ready: Callable[[], bool],
        observe: Callable[[int, float], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.mode = mode
        self.ready = ready
        self.observe = observe  # (HTTP status, seconds) of each review answered

    def review(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The AdmissionReview answer for BODY, from what the cache shows now."""
        uid, raw, namespace = _request(body)
        if raw is None:
            return _response(uid, [])
        return self._answer(uid, raw, *self._admit(raw, namespace))

    async def review_waiting(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """`review`, but a pod whose workload or PodGroup the cache does not show yet (created a
        moment before it) waits for it up to OWNER_WAIT: its segment is read from that spec."""
        uid, raw, namespace = _request(body)
        if raw is None:
            return _response(uid, [])
        pod, admission = self._admit(raw, namespace)
        deadline = time.monotonic() + OWNER_WAIT
        while admission is not None and admission.waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            pod, admission = self._admit(raw, namespace)
        return self._answer(uid, raw, pod, admission)

    def _answer(
        self, uid: str, raw: Mapping[str, Any], pod: PodInfo | None, admission: Admission | None
    ) -> dict[str, Any]:
        ops: JSONPatch = []
        warnings: list[str] = []
        if pod is None or admission is None:
            return _response(uid, ops)
        if self.mode == GATES and (admission.managed or self._replaces_moved(pod)):
            ops += gate_ops(raw)
        if admission.segment is not None:
            ops += segment_ops(raw, admission.segment)
        if admission.grouping is not None and admission.grouping.errors:
            problems = "; ".join(map(str, admission.grouping.errors))
            warnings.append(f"topogang: gang {admission.gang} is invalid: {problems}")
        return _response(uid, ops, warnings[:1])

    def _replaces_moved(self, pod: PodInfo) -> bool:
        """A plain pod its controller makes in place of a moved one: gated, so that the ungater
        pins it to the room held for it (kube-scheduler alone could put it back where it was)."""
        move = self.scheduler.defragmenting.moves.awaiting(pod, None)
        if move is not None:
            log.info("moved pod's replacement gated", pod=pod.key, moved=move.pod, node=move.node, group=move.group)
        return move is not None

    def _admit(self, raw: Mapping[str, Any], namespace: str) -> tuple[PodInfo | None, Admission | None]:
        meta = dict(raw.get("metadata") or {})
        if not meta.get("name"):  # generateName: the API server names it after admission
            meta["name"] = f"{meta.get('generateName') or 'pod-'}(new)"
        if namespace and not meta.get("namespace"):
            meta["namespace"] = namespace
        try:
            pod = parse_pod({**raw, "metadata": meta}, namespace or "default")
        except InvalidObject:
            return None, None  # the API server's own validation will say what is wrong with it
        state = self.scheduler.state
        return pod, admit(pod, self.scheduler.membership.lookup, state.podgroups, state.pods)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        response = await self._handle(request, start)
        if self.observe is not None:
            self.observe(response.status, time.perf_counter() - start)
        return response

    async def _handle(self, request: web.Request, start: float) -> web.Response:
        if not self.ready():
            return web.Response(text="topogang: caches not synced yet", status=503)
        try:
            body = orjson.loads(await request.read())
            answer = await self.review_waiting(body if isinstance(body, dict) else {})
        except (orjson.JSONDecodeError, ValueError) as exc:
            return web.Response(text=f"topogang: bad AdmissionReview: {exc}", status=400)
        response = answer["response"]
        if "patch" in response:
            obj = (body.get("request") or {}).get("object") or {}
            meta = obj.get("metadata") or {}
            log.debug(
                "pod admitted",
                pod=f"{body['request'].get('namespace', '')}/{meta.get('name') or meta.get('generateName', '')}",
                patch=orjson.loads(base64.b64decode(response["patch"])),
                ms=round((time.perf_counter() - start) * 1000, 3),
            )
        return web.Response(body=orjson.dumps(answer), content_type="application/json")


def _request(body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None, str]:
    """(uid, the pod being created or None when the request is not one, its namespace)."""
    request = body.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("object"), Mapping):
        raise ValueError("AdmissionReview.request.object: expected the Pod being created")
    uid = str(request.get("uid", ""))
    raw: Mapping[str, Any] = request["object"]
    if request.get("operation", "CREATE") != "CREATE" or raw.get("kind", "Pod") != "Pod":
        return uid, None, ""
    return uid, raw, str(request.get("namespace") or "")


async def _healthz(_: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


def create_webhook_app(webhook: Webhook) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(PATH, webhook.handle)
    app.router.add_get("/healthz", _healthz)
    return app
