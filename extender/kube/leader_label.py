"""LeaderLabel: the leader marks its own pod, so the Service sends kube-scheduler to it.

Both replicas are Ready once their caches have synced (`/synced`, so rollouts and the PDB work);
what picks the replica that receives extender calls is the Service's selector, which adds
`scheduling.topogang.io/leader: "true"` to the app's labels. This keeps that label on the pod
named by POD_NAME in POD_NAMESPACE (the downward API) in step with leadership:

    want(True)    on becoming the leader: merge-patch the label onto the pod
    want(False)   on losing the Lease: merge-patch it to null (removed)
    close()       on shutdown, before the Lease is released: remove it within a few seconds

Patches run in a background task, never on the caller's path (planning does not wait for
them); a failed one is logged and retried with capped backoff until the pod shows what is
wanted. Until this process has written the label its state is unknown, so a follower reads its
pod first and removes a label left by an earlier process of the same pod (a leader that
crashed and was restarted in place). Without POD_NAME or POD_NAMESPACE (a laptop, the e2e
tests' single process) there is no pod to mark and every call does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from extender.kube.backoff import Backoff
from extender.kube.client import ApiError, JSONDict
from extender.kube.resources import PODS

LEADER_LABEL = "scheduling.topogang.io/leader"


class PodClient(Protocol):
    async def get(self, path: str) -> JSONDict: ...

    async def patch(self, path: str, body: Mapping[str, Any]) -> JSONDict: ...


class LeaderLabel:
    def __init__(
        self,
        client: PodClient,
        namespace: str | None,
        name: str | None,
        *,
        backoff: Backoff | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.client = client
        self.pod = f"{namespace}/{name}" if namespace and name else ""
        self.path = PODS.object_path("v1", name, namespace) if namespace and name else ""
        self.backoff = backoff or Backoff(initial=0.5, cap=30.0)
        self.log = log or structlog.get_logger("topogang.kube")
        self.wanted = False
        self.labelled: bool | None = None  # on the pod, as far as this process knows
        self.failures = 0
        self._changed = asyncio.Event()  # `wanted` changed: a pending retry goes at once
        self._settled = asyncio.Event()  # the pod shows what is wanted
        self._task: asyncio.Task[None] | None = None
        if not self.path:
            self.log.debug("POD_NAME or POD_NAMESPACE unset: no pod to mark with the leader label")

    def start(self) -> None:
        """Start the background task (at once, before the cache syncs: a stale label on this
        pod must be gone before /synced makes it Ready, or the Service would send calls here)."""
        if self.path and self._task is None:
            self._task = asyncio.create_task(self._run(), name="leader label")

    def want(self, leading: bool) -> None:
        """Say whether this replica leads; returns at once (the task patches the pod)."""
        if leading != self.wanted:
            self.wanted = leading
            self._settled.clear()
            self._changed.set()

    async def close(self, seconds: float = 5.0) -> None:
        """Remove the label if this process may have set it, waiting at most SECONDS; then stop."""
        self.want(False)
        task, self._task = self._task, None
        if task is None:
            return
        try:
            async with asyncio.timeout(seconds):
                await self._settled.wait()
        except TimeoutError:
            self.log.warning("leader label not removed before shutdown", pod=self.pod, label=LEADER_LABEL)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            self._changed.clear()  # a change from here on wakes the waits below
            if self.labelled == self.wanted:
                self._settled.set()
                await self._changed.wait()
                continue
            target = self.wanted
            error = await self._sync(target)
            if error is None:
                self.backoff.reset()
                continue
            self.failures += 1
            delay = self.backoff.next()
            self.log.warning(
                "leader label update failed",
                pod=self.pod,
                label=LEADER_LABEL,
                leader=target,
                error=error,
                retry_in=round(delay, 2),
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._changed.wait()

    async def _sync(self, target: bool) -> str | None:
        """One attempt to make the pod show TARGET; None when it does, else what went wrong."""
        stale = False
        try:
            if not target and self.labelled is None:
                labels = ((await self.client.get(self.path)).get("metadata") or {}).get("labels") or {}
                if LEADER_LABEL not in labels:
                    self.labelled = False
                    return None
                stale = True  # left by an earlier process of this pod
            self.labelled = None  # unknown until the API server answers
            body = {"metadata": {"labels": {LEADER_LABEL: "true" if target else None}}}
            await self.client.patch(self.path, body)
        except asyncio.CancelledError:
            raise
        except ApiError as exc:
            if exc.status == 404 and not target:
                self.labelled = False  # no pod, no label
                return None
            return str(exc)
        except Exception as exc:
            return str(exc) or type(exc).__name__
        self.labelled = target
        if target:
            self.log.info("leader label set", pod=self.pod, label=LEADER_LABEL)
        else:
            self.log.info("leader label removed", pod=self.pod, label=LEADER_LABEL, stale=stale)
        return None
