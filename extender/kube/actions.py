"""KubeActions: the writes the extender makes, in two lanes of bounded concurrency.

Bindings have a lane of their own: a gang's Bindings never queue behind best-effort writes
(wake-ups, nominations, Events, evictions), which share the other. Every write goes through a
client fenced by leadership (kube/lease.py `may_write`): one that may no longer be the
leader's is not sent (NotLeading), and the best-effort ones drop it without a word.

bind    POST pods/{name}/binding with the pod's uid as a precondition, as kube-scheduler's
        default binder does; any failure (409 already bound, 409 uid mismatch, 404, not the
        leader) raises ApiError with the API's message.
wake    merge-patch `scheduling.topogang.io/plan-generation: "<n>"` onto each pod: an update
        to the pod itself moves a parked pod back to kube-scheduler's active queue. Best
        effort: a pod gone (404) is skipped, other failures are logged, nothing raises.
evict   POST pods/{name}/eviction (policy/v1) with the pod's uid as a precondition: the API
        server deletes the pod gracefully unless a PodDisruptionBudget forbids it now (429:
        BLOCKED, the caller tries again later). A pod already gone, or replaced by another of
        the same name, counts as EVICTED; other failures raise ApiError.
event   an events.k8s.io/v1 Event from reportingController `topogang`. Repeats of the same
        event (object, type, reason, message) within `SERIES_WINDOW` bump its series (count,
        lastObservedTime) instead of creating Events, patched at most once per
        `series_interval`, so a pending gang retried every second writes little.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from extender.kube.client import ApiError, KubeClient, NotLeading
from extender.kube.resources import EVENTS, PODS
from extender.model.pod import PLAN_GENERATION_ANNOTATION

REPORTING_CONTROLLER = "topogang"
EVENT_ACTION = "Scheduling"
SERIES_WINDOW = 360.0  # seconds: a repeat after this much silence starts a new Event (client-go: 6 min)
NOTE_LIMIT = 1024  # bytes: the API server rejects longer notes
EVENT_CACHE_SIZE = 4096
T = TypeVar("T")
EVICTED, BLOCKED = "evicted", "blocked"


@dataclass
class _Series:
    """One Event written, and the repeats of it since."""

    namespace: str
    name: str
    count: int = 1
    written: int = 1  # the count the API server has
    last_seen: float = 0.0  # monotonic
    last_write: float = 0.0  # monotonic
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class KubeActions:
    def __init__(
        self,
        client: KubeClient,
        *,
        concurrency: int = 32,
        instance: str | None = None,
        series_interval: float = 30.0,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.client = client
        self.log = log or structlog.get_logger("topogang.kube")
        self.instance = instance or os.environ.get("POD_NAME") or socket.gethostname()
        self.series_interval = series_interval
        self._writes = asyncio.Semaphore(concurrency)  # wake-ups, nominations, Events, evictions
        self._binds = asyncio.Semaphore(concurrency)  # Bindings: never behind the others
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()

    async def _write(self, call: Awaitable[T]) -> T:
        async with self._writes:
            return await call

    # -- bind ------------------------------------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        async with self._binds:
            await self.client.post(PODS.object_path("v1", name, namespace, "binding"), body)

    # -- wake ------------------------------------------------------------------------------------------

    async def wake(self, pods: Sequence[tuple[str, str]], generation: int) -> None:
        patch = {"metadata": {"annotations": {PLAN_GENERATION_ANNOTATION: str(generation)}}}

        async def one(namespace: str, name: str) -> None:
            try:
                await self._write(self.client.patch(PODS.object_path("v1", name, namespace), patch))
            except ApiError as exc:
                if not _moot(exc):
                    self.log.warning("wake failed", pod=f"{namespace}/{name}", error=str(exc))

        await asyncio.gather(*(one(ns, name) for ns, name in pods))

    async def nominate(
        self, pods: Sequence[tuple[str, str]], generation: int, node_of: Callable[[str, str], str | None]
    ) -> None:
        """Set status.nominatedNodeName of each (namespace, name) to NODE_OF(namespace, name), asked
        when its write goes out (None: no write), in the order given, with the wake annotation in
        the same pods/status write (that endpoint takes metadata changes too): kube-scheduler
        (1.35+) tries a pod's nominated node first, alone, extenders included, and the annotation
        requeues a pod it had parked (a status change alone would not)."""

        async def one(namespace: str, name: str) -> None:
            async with self._writes:
                node = node_of(namespace, name)
                if node is None:
                    return
                patch = {
                    "metadata": {"annotations": {PLAN_GENERATION_ANNOTATION: str(generation)}},
                    "status": {"nominatedNodeName": node},
                }
                try:
                    await self.client.patch(PODS.object_path("v1", name, namespace, "status"), patch)
                except ApiError as exc:
                    if not _moot(exc) and not _bound_already(exc):
                        self.log.warning("nominate failed", pod=f"{namespace}/{name}", node=node, error=str(exc))

        await asyncio.gather(*(one(ns, name) for ns, name in pods))

    # -- evict ---------------------------------------------------------------------------------------

    async def evict(self, namespace: str, name: str, uid: str) -> str:
        """Evict one pod through the Eviction API: EVICTED, or BLOCKED by a PodDisruptionBudget."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        try:
            path = PODS.object_path("v1", name, namespace, "eviction")
            await self._write(self.client.post(path, body, retry_throttled=False))
        except ApiError as exc:
            if exc.status == 429:
                return BLOCKED
            if exc.status == 404 or (exc.status == 409 and "UID in precondition" in exc.message):
                return EVICTED  # gone already, or another pod by now
            raise
        return EVICTED

    # -- events ----------------------------------------------------------------------------------------

    async def event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Normal",
        related: Mapping[str, str] | None = None,
    ) -> None:
        """Record an Event about INVOLVED (apiVersion, kind, namespace, name, uid); RELATED: a
        second object it concerns (the same keys), e.g. a moved pod's controller."""
        note = _truncate(message, NOTE_LIMIT)
        namespace = involved.get("namespace") or "default"
        key = (*(involved.get(k, "") for k in ("apiVersion", "kind", "namespace", "name", "uid")), type, reason, note)
        now = time.monotonic()
        series = self._series.get(key)
        if series is not None and now - series.last_seen > SERIES_WINDOW:
            series = None
        if series is None:
            series = _Series(namespace, _event_name(involved.get("name", "")), last_seen=now, last_write=now)
            self._remember(key, series)
            body = self._body(series, involved, reason, note, type, related)
            async with series.lock:
                try:
                    await self._write(self.client.post(EVENTS.collection_path("v1", namespace), body))
                except NotLeading:
                    self._series.pop(key, None)  # the new leader tells it, if it still holds
                except BaseException:
                    self._series.pop(key, None)
                    raise
            return
        series.count += 1
        series.last_seen = now
        self._series.move_to_end(key)
        if now - series.last_write < self.series_interval:
            return  # written with the next repeat after the interval
        async with series.lock:
            if series.count == series.written:
                return
            count = series.count
            series.last_write = now
            patch = {"series": {"count": count, "lastObservedTime": _micro_time()}}
            path = EVENTS.object_path("v1", series.name, series.namespace)
            try:
                await self._write(self.client.patch(path, patch))
            except ApiError as exc:
                if isinstance(exc, NotLeading):
                    return
                if exc.status != 404:
                    raise
                self._series.pop(key, None)  # deleted (events expire after an hour): start anew
                return
            series.written = max(series.written, count)

    def _remember(self, key: tuple[str, ...], series: _Series) -> None:
        self._series[key] = series
        while len(self._series) > EVENT_CACHE_SIZE:
            self._series.popitem(last=False)

    def _body(
        self,
        series: _Series,
        involved: Mapping[str, str],
        reason: str,
        note: str,
        type: str,
        related: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        regarding = _reference(involved)
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": series.name, "namespace": series.namespace},
            "eventTime": _micro_time(),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": EVENT_ACTION,
            "reason": reason,
            "note": note,
            "type": type,
            "regarding": regarding,
        }
        if related:
            body["related"] = _reference(related)
        return body


def _reference(obj: Mapping[str, str]) -> dict[str, str]:
    return {k: obj[k] for k in ("apiVersion", "kind", "namespace", "name", "uid") if obj.get(k)}


def _moot(exc: ApiError) -> bool:
    """A best-effort write that failed for nothing worth a word: the pod is gone, or this
    replica is no longer the leader (the new one writes what is still needed)."""
    return exc.status == 404 or isinstance(exc, NotLeading)


def _bound_already(exc: ApiError) -> bool:
    """A nomination that reached its pod after it was bound: the API server refuses a nominated
    node on a bound pod, and the pod no longer needs steering (bound where planned, or the bind
    check said why not)."""
    return exc.status == 422 and "already bound" in exc.message


def _event_name(obj: str) -> str:
    """<object>.<hex>, as client-go names Events, unique even for many in one nanosecond."""
    return f"{obj[:200] or 'topogang'}.{time.time_ns():x}{uuid.uuid4().hex[:6]}"


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _truncate(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode(errors="ignore") + "..."
