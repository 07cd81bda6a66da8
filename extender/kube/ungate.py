"""Gates mode: plan a gang whose pods carry topogang's scheduling gate, pin each planned pod to its
node and remove the gate, the whole minimum in one burst.

The webhook (server/webhook.py) gates every gang pod at creation; the stock kube-scheduler
ignores gated pods. Watching the cache, the ungater looks at the gangs of gated pods and, for
each, asks the same `GangScheduler.filter` that kube-scheduler's calls reach in extender mode,
against every node: the first member plans and reserves the whole gang (or says why it cannot:
the reason lands in the PodGroup's status and an Event, through the status writer), the others
read their planned node, and a node that no longer fits makes the core plan the unbound pods
again. Gated pods count as present: topogang put the gates there.

When every pod of the minimum has a node, each gets one strategic merge patch that adds a
required node affinity `metadata.name In [node]` (appended to each of its own terms: narrowing
a gated pod's affinity is allowed) and deletes the gate; the patches go out together. Pods
beyond the minimum go the same way whenever their room is planned (later, when nodes are added
or room is freed). kube-scheduler then binds each pod to the one node it may use; nothing waits
for the others, so gates mode relies on the plan's reservation instead of a bind gate.

A plain pod the webhook gated because it replaces a moved pod (defragmentation) claims the
move's held room as `filter` has it claimed in extender mode (`Moves.claim`): it gets the same pin to
that node and loses the gate; if no move is left for it (its room was given back, another
replacement took it, a new leader holds no moves), it only loses the gate: a plain pod never
stays gated for want of a move.

Work is triggered by gated pods appearing or changing, by pods going away, by a changed node
set, and every `resync` seconds for gangs that stay gated.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, overload

import structlog

from extender.core.decisions import PlanEvent
from extender.core.scheduler import GangScheduler
from extender.kube.background import Background
from extender.kube.client import ApiError
from extender.kube.resources import PODS
from extender.model.pod import PINNED_NODE_ANNOTATION, TOPOGANG_GATE, PodInfo

GATE = TOPOGANG_GATE
NAME_FIELD = "metadata.name"


class Client(Protocol):
    async def get(self, path: str) -> dict[str, Any]: ...

    async def patch(self, path: str, body: Mapping[str, Any], *, strategic: bool = False) -> dict[str, Any]: ...


class NodeNames(Sequence[str]):
    """Every node, with a set for the membership test `filter` makes once per pod."""

    def __init__(self, names: Sequence[str]) -> None:
        self._list = list(names)
        self._set = frozenset(self._list)

    def __contains__(self, name: object) -> bool:
        return name in self._set

    def __len__(self) -> int:
        return len(self._list)

    def __iter__(self) -> Iterator[str]:
        return iter(self._list)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._list[index]


def gated(pod: PodInfo) -> bool:
    return GATE in pod.scheduling_gates and pod.node_name is None and not pod.deleting and not pod.terminal


def pin_patch(pod: PodInfo, node: str, terms: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The patch that pins POD to NODE and removes the gate; TERMS are its own required terms."""
    requirement = {"key": NAME_FIELD, "operator": "In", "values": [node]}
    if terms:
        pinned = [{**t, "matchFields": [*(t.get("matchFields") or []), requirement]} for t in terms]
    else:
        pinned = [{"matchFields": [requirement]}]
    required = {"nodeSelectorTerms": pinned}
    return {
        # (the uid: a pod recreated under the same name is not this one; the annotation: the pin is
        # topogang's, which a move of the pod may drop, not the user's)
        "metadata": {"uid": pod.uid, "annotations": {PINNED_NODE_ANNOTATION: node}},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
            "schedulingGates": [{"$patch": "delete", "name": GATE}],
        },
    }


def ungate_patch(pod: PodInfo) -> dict[str, Any]:
    """The patch that removes the gate alone (a plain pod no move's room is held for)."""
    return {"metadata": {"uid": pod.uid}, "spec": {"schedulingGates": [{"$patch": "delete", "name": GATE}]}}


def _ignore(event: PlanEvent, seconds: float) -> None:
    pass


class Ungater:
    def __init__(
        self,
        client: Client,
        scheduler: GangScheduler,
        *,
        decided: Callable[[PlanEvent, float], None] = _ignore,
        resync: float = 10.0,
        concurrency: int = 32,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.client = client
        self.scheduler = scheduler
        self.decided = decided  # one call per planning decision (log line, metrics, status)
        self.resync = resync
        self.log = log or structlog.get_logger("topogang.kube")
        self.ungated = 0  # pods whose gate this process removed
        self._slots = asyncio.Semaphore(concurrency)
        self._dirty: set[str] = set()  # gated pods to look at
        self._everything = True  # look at every gated pod (room may have been freed)
        self._sent: dict[str, str] = {}  # pod -> node: patched, the cache does not show it yet
        self._wake = asyncio.Event()
        self._loop = Background("ungater", self._run)
        self._generation = -1
        scheduler.state.subscribe(self._changed)

    # -- feed -----------------------------------------------------------------------------------

    def _changed(self, kind: str, key: object) -> None:
        if not self._loop.running:
            return
        if kind == "pod":
            pod = self.scheduler.state.pods.get(str(key))
            if pod is not None and gated(pod):
                self._dirty.add(pod.key)
            else:
                self._sent.pop(str(key), None)
                if pod is None or pod.terminal or pod.deleting:
                    self._everything = True  # its room is free
                else:
                    return
        elif kind in ("podgroup", "object", "topology", "resource_interface", "priority_class", "devices"):
            self._everything = True
        else:
            return
        self._wake.set()

    # -- running --------------------------------------------------------------------------------

    def start(self) -> None:
        if not self._loop.running:
            self._everything = True
            self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        self._dirty.clear()
        self._sent.clear()

    async def _run(self) -> None:
        next_resync = time.monotonic() + self.resync
        while True:
            now = time.monotonic()
            if now >= next_resync or self.scheduler.state.generation != self._generation:
                self._generation = self.scheduler.state.generation
                self._everything = True
                next_resync = now + self.resync
            if self._dirty or self._everything:
                try:
                    await self.flush()
                except Exception:  # a bug must not stop gangs forever: logged, tried again
                    self.log.exception("ungating failed")
                    await asyncio.sleep(1.0)
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0)  # also checks the node set every second

    async def flush(self) -> None:
        """Look at the gangs of the gated pods marked dirty (or of every gated pod)."""
        pods = self.scheduler.state.pods
        if self._everything:
            self._everything = False
            self._dirty.update(k for k, p in pods.items() if gated(p))
        dirty, self._dirty = self._dirty, set()
        lookup = self.scheduler.lookup
        # A gang still short of pods stays gated: told from its count (its reason recorded with
        # it), not grouped and built again for each pod that arrives (O(pods^2) a gang).
        dirty = {k for k in dirty if self.scheduler.still_short(k) is None}
        groups = sorted({g for k in dirty if k in pods and (g := lookup.group_of(k)) is not None})
        for group in groups:
            await self.release(group)
        # gated and in no gang (nor waiting for one): a replacement of a moved pod
        plain = sorted(k for k in dirty if k in pods and lookup.group_of(k) is None and lookup.waiting(k) is None)
        if plain:
            await self.release_plain(plain)

    # -- one gang -------------------------------------------------------------------------------

    def plan(self, group: str) -> dict[str, str]:
        """Plan GROUP through the core; its gated pods that have a node now (pod -> node)."""
        state, scheduler = self.scheduler.state, self.scheduler
        view = scheduler.lookup.view(group)
        waiting = [state.pods[k] for k in view.pods if k in state.pods and gated(state.pods[k]) and k not in self._sent]
        if not waiting:
            return {}
        nodes = NodeNames(sorted(state.nodes))
        now = time.monotonic()
        planned: dict[str, str] = {}
        for pod in waiting:
            start = time.perf_counter()
            result = scheduler.filter(pod, nodes, now)
            if result.event is not None:
                self.decided(result.event, time.perf_counter() - start)
            if result.nodes:
                planned[pod.key] = result.nodes[0]
            elif group not in scheduler.plans:
                return {}  # the gang has no plan (its reason is recorded): the others would say the same
        gp = scheduler.plans.get(group)
        if gp is None:
            return {}
        unsent = [p for p in gp.gate.minimum if p in gp.reserved and p not in planned and p not in self._sent]
        if not gp.gate.opened and unsent:
            return {}  # part of the minimum is not gated by us (another gate, already released...): not yet
        return planned

    async def release(self, group: str) -> None:
        planned = self.plan(group)
        if not planned:
            return
        self.scheduler.gates.opened_elsewhere(group, time.monotonic(), planned)  # from here kube-scheduler binds them
        self._sent.update(planned)
        start = time.perf_counter()
        results = await asyncio.gather(*(self._ungate(pod, node) for pod, node in sorted(planned.items())))
        failed = {pod: err for (pod, _), err in zip(sorted(planned.items()), results, strict=True) if err}
        for pod in failed:
            self._sent.pop(pod, None)
        self.ungated += len(planned) - len(failed)
        self.log.info(
            "ungated",
            group=group,
            pods=len(planned),
            failed=len(failed),
            nodes=sorted(set(planned.values())),
            patch_ms=round((time.perf_counter() - start) * 1000, 1),
            **({"errors": dict(list(failed.items())[:5])} if failed else {}),
        )

    # -- plain pods (moved pods' replacements) --------------------------------------------------

    def place_plain(self, keys: Sequence[str]) -> dict[str, str]:
        """Each gated plain pod of KEYS -> the node held for it by a move it claims ("": none)."""
        state, moves = self.scheduler.state, self.scheduler.defragmenting.moves
        now = time.monotonic()
        out: dict[str, str] = {}
        for key in keys:
            pod = state.pods.get(key)
            if pod is None or not gated(pod) or key in self._sent:
                continue
            held = moves.claim(pod, now)  # what `filter` answers such a pod in extender mode
            out[key] = held if held is not None and held in state.nodes else ""
        return out

    async def release_plain(self, keys: Sequence[str]) -> None:
        placed = self.place_plain(keys)
        if not placed:
            return
        moves = self.scheduler.defragmenting.moves
        replaced = {m.claimed: m for m in moves.by_pod.values() if m.claimed in placed}
        self._sent.update(placed)
        results = await asyncio.gather(*(self._ungate(pod, node) for pod, node in sorted(placed.items())))
        for (key, node), err in zip(sorted(placed.items()), results, strict=True):
            if err:
                self._sent.pop(key, None)
            else:
                self.ungated += 1
            failed = {"error": err} if err else {}
            move = replaced.get(key)
            if move is not None:
                self.log.info(
                    "moved pod's replacement ungated", pod=key, node=node, moved=move.pod, group=move.group, **failed
                )
            else:
                why = "no moved pod's room is held for it (given back, or taken by another replacement)"
                self.log.info("plain pod ungated", pod=key, node=None, reason=why, **failed)

    async def _ungate(self, key: str, node: str) -> str:
        """Remove the gate of pod KEY, pinning it to NODE ("": no pin). An error's text, or ""."""
        pod = self.scheduler.state.pods.get(key)
        if pod is None:
            return "the pod is gone"
        path = PODS.object_path("v1", pod.name, pod.namespace)
        try:
            async with self._slots:
                if not node:
                    await self.client.patch(path, ungate_patch(pod), strategic=True)
                    return ""
                terms: Sequence[Mapping[str, Any]] = ()
                if pod.placement.affinity:  # its own terms are needed to narrow them
                    raw = await self.client.get(path)
                    required = (((raw.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
                        "requiredDuringSchedulingIgnoredDuringExecution"
                    ) or {}
                    terms = required.get("nodeSelectorTerms") or ()
                await self.client.patch(path, pin_patch(pod, node, terms), strategic=True)
        except ApiError as exc:
            return str(exc)
        return ""
