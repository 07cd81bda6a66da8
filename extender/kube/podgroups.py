"""PodGroupWriter: the leader keeps every gang's PodGroup object and its status current.

Fed by the core's decisions (`touch(group)` from the extender when it plans, binds, times out or
expires a plan) and by the cluster cache's change feed (a pod or PodGroup changed), it works off
the hot path, in a background task:

  - gangs derived from workloads (TFJob, Job, LeaderWorkerSet, ...) are written as
    `scheduling.topogang.io/v1alpha1` PodGroups with server-side apply (field manager
    `topogang`), owned by the workload (controller, blockOwnerDeletion false) so the garbage
    collector deletes them with it, and labelled `app.kubernetes.io/managed-by: topogang`; only
    while the workload is in the cache, so a deleted one's PodGroup is not written again while
    its pods terminate. A PodGroup of that name that topogang does not manage is left alone (and
    said once in the log);
  - every gang that has a topogang PodGroup object, derived or written by a user, gets its
    `status` subresource applied (podgroup_status.status_body), only when it differs from what
    was last written, at most once per `interval` seconds per gang (and the writer waits five
    times what reading the statuses took, so a very large gang's does not crowd out the rest),
    with at most `concurrency` writes in flight;
  - a change of phase (or of why the gang cannot run) gets an Event on the PodGroup: Normal
    `Scheduled` or `Finished`, or Warning `Unschedulable` with the message (KubeActions folds
    repeats); a gang merely incomplete (its pods still being created) gets its one Warning only
    once it has been incomplete for `incomplete_grace` seconds;
  - every `resync` seconds all gangs are looked at again, which also catches what the feed does
    not say (a pod deleted, a gang gone).

What was last written is learnt from the object itself the first time a gang is written (a GET),
so a new leader neither rewrites unchanged statuses nor repeats Events. Only the leader runs it:
`start()` when leadership is won, `stop()` when it is lost. A failed write is one log line and
is tried again at the next change or resync.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from extender.core.decisions import FINISHED, INVALID, PENDING, R_GANG_INCOMPLETE, SCHEDULED
from extender.core.scheduler import GangScheduler
from extender.core.standing import GroupStatus
from extender.kube.background import Background
from extender.kube.client import ApiError, JSONDict
from extender.kube.podgroup_status import (
    API_VERSION,
    KIND,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SPLIT_CONDITION,
    SPLIT_REASON,
    UNSCHEDULABLE_CONDITION,
    conditions_of,
    derived_object,
    status_body,
    transition,
)
from extender.kube.resources import PODGROUPS, UPSTREAM_GROUPS
from extender.model.keys import GroupKey

UPSTREAM_BY_KIND = {r.kind: r for r in UPSTREAM_GROUPS}  # Kubernetes' own PodGroup, CompositePodGroup
FIELD_MANAGER = "topogang"
# Workloads whose users look at the workload itself, not at the objects it makes (a TrainJob
# becomes a JobSet, Jobs and pods): each Event of their gang is said on them too.
EVENTS_ON_WORKLOAD = frozenset({"TrainJob"})
TOPOGANG_PODGROUPS = next(r for r in PODGROUPS if r.api_version(r.versions[0]) == API_VERSION)
SLICE = 0.002  # seconds of status computing between two yields to the event loop (requests go first)


class Client(Protocol):
    async def get(self, path: str) -> JSONDict: ...

    async def apply(
        self, path: str, body: Mapping[str, Any], *, field_manager: str, force: bool = True
    ) -> JSONDict: ...


class Events(Protocol):
    async def event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Normal",
        related: Mapping[str, str] | None = None,
    ) -> None: ...


@dataclass
class _Written:
    uid: str
    generation: int
    status: Mapping[str, Any]  # the status as last written (or read)
    applied: Mapping[str, Any] | None = None  # the derived object as last applied


def _incomplete_for(status: Mapping[str, Any]) -> float:
    """Seconds a written status has said GangIncomplete (0: it does not, or cannot be read)."""
    condition = conditions_of(status).get(UNSCHEDULABLE_CONDITION) or {}
    if condition.get("status") != "True" or condition.get("reason") != R_GANG_INCOMPLETE:
        return 0.0
    try:
        since = datetime.datetime.fromisoformat(str(condition.get("lastTransitionTime")))
    except ValueError:
        return 0.0
    return max(0.0, (datetime.datetime.now(datetime.UTC) - since).total_seconds())


BUSY_SHARE = 5.0  # the writer waits at least this many times what reading the statuses took


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodGroupWriter:
    def __init__(
        self,
        client: Client,
        scheduler: GangScheduler,
        events: Events,
        *,
        interval: float = 1.0,
        resync: float = 30.0,
        incomplete_grace: float = 60.0,
        concurrency: int = 8,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.client = client
        self.scheduler = scheduler
        self.events = events
        self.interval = interval
        self.resync = resync
        self.incomplete_grace = incomplete_grace
        self._incomplete: dict[str, float] = {}  # group -> since when it is incomplete (monotonic)
        self._warned: set[str] = set()  # incomplete gangs whose one Warning was emitted
        self._ticks: dict[str, asyncio.TimerHandle] = {}  # group -> a look again when its grace ends
        self.log = log or structlog.get_logger("topogang.kube")
        self.phases: dict[str, str] = {}  # group -> its phase, as last computed (for metrics)
        self.writes: Counter[str] = Counter()  # "ok" / "failed": status writes (for metrics)
        self._slots = asyncio.Semaphore(concurrency)
        self._written: dict[str, _Written] = {}
        self._dirty: set[str] = set()
        self._dirty_pods: set[str] = set()
        self._wake = asyncio.Event()
        self._loop = Background("podgroup writer", self._run)
        self._said: dict[str, str] = {}  # group -> the last problem logged (said once)
        scheduler.lookup.subscribe(self._changed)

    # -- feed -----------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._loop.running

    def touch(self, group: str) -> None:
        """GROUP's status may have changed (a decision was made about it)."""
        if self._loop.running:
            self._dirty.add(group)
            self._wake.set()

    def _changed(self, kind: str, key: object) -> None:
        if not self._loop.running:
            return
        if kind == "pod":
            self._dirty_pods.add(str(key))
        elif kind == "podgroup":
            self._dirty.add(str(key))
        elif kind in ("queue", "flavor"):  # may decide any gang's queue check or Topology
            self._dirty.update(self.phases)
        else:
            return
        self._wake.set()

    def phase_counts(self) -> dict[str, int]:
        counts = dict.fromkeys((PENDING, SCHEDULED, INVALID, FINISHED), 0)
        counts.update(Counter(self.phases.values()))
        return counts

    # -- running --------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        """Stop at once and forget everything (a later start learns it again from the objects)."""
        await self._loop.stop()
        for tick in self._ticks.values():
            tick.cancel()
        self._ticks.clear()
        self._incomplete.clear()
        self._warned.clear()
        self._written.clear()
        self._dirty.clear()
        self._dirty_pods.clear()
        self.phases.clear()

    async def _run(self) -> None:
        next_resync = 0.0  # at once: every gang when leadership starts
        while True:
            now = time.monotonic()
            if now >= next_resync:
                self._dirty.update(self._all_groups())
                next_resync = now + self.resync
            elif not self._dirty and not self._dirty_pods:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), next_resync - now)
                continue
            busy = await self.flush()
            # Debounce: a gang is written at most once per interval, and reading the statuses (a
            # 4,096-pod gang is built again each time one of its pods binds) takes at most a
            # fifth of the time, so a large gang's status does not crowd out its Bindings.
            await asyncio.sleep(max(self.interval, BUSY_SHARE * busy))

    def _all_groups(self) -> set[str]:
        groups = self.scheduler.lookup.known_groups()
        for gone in set(self._written) - groups:
            del self._written[gone]
        for gone in set(self.phases) - groups:
            del self.phases[gone]
        for gone in set(self._said) - groups:
            del self._said[gone]
        return groups

    async def flush(self) -> float:
        """Write what changed for every gang marked since the last flush; returns the seconds
        spent reading the statuses (the writes' waits left out)."""
        scheduler = self.scheduler
        for pod in self._dirty_pods:
            group = scheduler.lookup.group_of(pod)
            if group is not None:
                self._dirty.add(group)
        self._dirty_pods.clear()
        groups, self._dirty = sorted(self._dirty), set()
        work = []
        since = time.perf_counter()
        busy = 0.0
        for group in groups:
            if time.perf_counter() - since > SLICE:
                busy += time.perf_counter() - since
                await asyncio.sleep(0)  # many gangs: let kube-scheduler's calls in between
                since = time.perf_counter()
            if not scheduler.lookup.exists(group):
                self.phases.pop(group, None)  # neither pods nor an object: gone
                continue
            try:
                status = self.scheduler.status(group)
            except Exception:  # a bug in one gang's status must not stop every other gang's
                self.log.exception("podgroup status failed", group=group)
                self.writes["failed"] += 1
                continue
            self.phases[group] = status.phase
            work.append(self._write(group, status))
        busy += time.perf_counter() - since
        await asyncio.gather(*work)
        return busy

    # -- writing --------------------------------------------------------------------------------

    async def _write(self, group: str, status: GroupStatus) -> None:
        namespace, name = (key := GroupKey.parse(group)).namespace, key.name
        path = TOPOGANG_PODGROUPS.object_path(TOPOGANG_PODGROUPS.versions[0], name, namespace)
        late = None
        async with self._slots:
            try:
                written = await self._target(group, namespace, name, path)
                if written is None:
                    return
                body = status_body(status, written.status, _now(), self._generation(group, written))
                late = self._late_incomplete(group, status, written.status)
                if body == written.status:
                    if late is not None:
                        await self._event(group, written.uid, late)
                    return
                meta = {"name": name, "namespace": namespace}
                patch = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "status": body}
                await self.client.apply(f"{path}/status", patch, field_manager=FIELD_MANAGER)
            except ApiError as exc:
                if late is not None:
                    self._warned.discard(group)  # said with the write that succeeds
                self.writes["failed"] += 1
                if exc.status == 404:
                    self._written.pop(group, None)  # deleted meanwhile: learnt again next time
                self.log.warning("podgroup status write failed", group=group, status=exc.status, error=exc.message)
                return
            self.writes["ok"] += 1
            previous, written.status = written.status, body
            change = late or transition(previous, status)
        if change is not None:
            await self._event(group, written.uid, change)

    async def _event(self, group: str, uid: str, change: tuple[str, str, str]) -> None:
        kind, reason, message = change
        key = GroupKey.parse(group)
        involved = {"apiVersion": API_VERSION, "kind": KIND, "namespace": key.namespace, "name": key.name, "uid": uid}
        if reason == SPLIT_CONDITION:  # not a decision of topogang's: what it saw, one line
            self.log.warning("gang split", group=group, reason=reason, message=message)
            await self._split_upstream(group, message)
        try:
            await self.events.event(involved, reason, message, kind)
            owner = self.scheduler.lookup.view(group).owner
            if owner is not None and owner.kind in EVENTS_ON_WORKLOAD:
                on = {"apiVersion": owner.api_version, "kind": owner.kind, "namespace": key.namespace}
                await self.events.event({**on, "name": owner.name, "uid": owner.uid}, reason, message, kind)
        except Exception as exc:
            self.log.warning("podgroup event failed", group=group, error=str(exc))

    async def _split_upstream(self, group: str, message: str) -> None:
        """A split gang of Kubernetes' own groups: said on its root object too, the condition
        GangSplit in its status (server-side apply: kube-scheduler's conditions stay) and an Event."""
        owner = self.scheduler.lookup.view(group).owner
        resource = UPSTREAM_BY_KIND.get(owner.kind) if owner is not None else None
        if owner is None or resource is None or owner.api_version.rpartition("/")[0] != resource.group:
            return
        namespace = GroupKey.parse(group).namespace
        version = owner.api_version.rpartition("/")[2]
        path = resource.object_path(version, owner.name, namespace, "status")
        condition = {
            "type": SPLIT_CONDITION,
            "status": "True",
            "reason": SPLIT_REASON,
            "message": message,
            "lastTransitionTime": _now(),
        }
        meta = {"name": owner.name, "namespace": namespace}
        body = {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "metadata": meta,
            "status": {"conditions": [condition]},
        }
        involved = {"apiVersion": owner.api_version, "kind": owner.kind, "uid": owner.uid, **meta}
        try:
            await self.client.apply(path, body, field_manager=FIELD_MANAGER)
            await self.events.event(involved, SPLIT_CONDITION, message, "Warning")
        except Exception as exc:
            self.log.warning("podgroup split not said on its root", group=group, root=owner.name, error=str(exc))

    def _late_incomplete(
        self, group: str, status: GroupStatus, written: Mapping[str, Any]
    ) -> tuple[str, str, str] | None:
        """The one Warning for a gang incomplete longer than `incomplete_grace`: a gang whose pods
        are still being created is not a problem worth an Event per count. A new leader counts
        from when the written status became incomplete, and takes a gang incomplete for longer
        than the grace as warned already."""
        if status.reason != R_GANG_INCOMPLETE:
            self._incomplete.pop(group, None)
            self._warned.discard(group)
            return None
        if group not in self._incomplete:
            since = self._incomplete[group] = time.monotonic() - _incomplete_for(written)
            if since + self.incomplete_grace <= time.monotonic() and _incomplete_for(written) > 0:
                self._warned.add(group)
        since = self._incomplete[group]
        if group in self._warned:
            return None
        left = since + self.incomplete_grace - time.monotonic()
        if left > 0:
            if group not in self._ticks:
                self._ticks[group] = asyncio.get_running_loop().call_later(left, self._tick, group)
            return None
        self._warned.add(group)
        return ("Warning", "Unschedulable", status.message)

    def _tick(self, group: str) -> None:
        self._ticks.pop(group, None)
        self.touch(group)

    def _generation(self, group: str, written: _Written) -> int:
        spec = self.scheduler.lookup.podgroup(group)
        return spec.generation if spec is not None and spec.generation else written.generation

    async def _target(self, group: str, namespace: str, name: str, path: str) -> _Written | None:
        """What was last written to GROUP's object, creating or updating the object first for a
        gang derived from a workload; None when topogang does not write this gang."""
        scheduler = self.scheduler
        view = scheduler.lookup.view(group) if scheduler.lookup.has_pods(group) else None
        written = self._written.get(group)
        if view is not None and view.owner is not None:  # derived from a workload
            owner = view.owner
            seen = scheduler.lookup.watched_object(owner.api_version, owner.kind, namespace, owner.name)
            if seen is None or (seen.get("metadata") or {}).get("uid") != owner.uid:
                return None  # the workload is gone (its PodGroup goes with it) or not visible
            existing = scheduler.lookup.podgroup(group)
            if existing is not None and existing.labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
                self._say(group, "PodGroup of this name exists and is not managed by topogang; not writing it")
                return None
            desired = derived_object(view, namespace, name)
            if desired is None:
                self._say(group, "the gang's workload has no uid; no PodGroup object is written for it")
                return None
            if written is not None and written.applied == desired:
                return written
            obj = await self.client.apply(path, desired, field_manager=FIELD_MANAGER)
            written = self._remember(group, obj, written)
            written.applied = desired
            return written
        spec = scheduler.lookup.podgroup(group)
        if spec is not None and spec.api_version != API_VERSION:
            return None  # KAI-Scheduler's PodGroup: its status is KAI's
        if spec is None and not scheduler.lookup.podgroup_invalid(group):
            return None
        if written is None:
            written = self._remember(group, await self.client.get(path), None)
        return written

    def _remember(self, group: str, obj: Mapping[str, Any], written: _Written | None) -> _Written:
        meta = obj.get("metadata") or {}
        status = obj.get("status") if written is None else written.status
        fresh = _Written(str(meta.get("uid") or ""), int(meta.get("generation") or 0), dict(status or {}))
        if written is not None:
            fresh.applied = written.applied
        self._written[group] = fresh
        self._said.pop(group, None)
        return fresh

    def _say(self, group: str, problem: str) -> None:
        if self._said.get(group) != problem:
            self._said[group] = problem
            self.log.warning("podgroup not written", group=group, reason=problem)
