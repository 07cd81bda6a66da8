"""LeaderElector: leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

    candidate   every `retry_period` (jittered): GET the Lease; absent -> create it holding it;
                held by another and renewed within `lease_duration` (by our own clock: the time
                we last saw its record change) -> wait; else take it with a PUT that carries the
                resourceVersion we read, so two candidates cannot both win (409 for the loser).
    leader      every `retry_period`: renew (the same conditional PUT). When no renewal has
                succeeded for `renew_deadline`, or the Lease names someone else, leadership is
                lost at once, before any other replica can take it (`lease_duration` is longer).
    shutdown    a leader releases the Lease (holder cleared), so a follower takes over at its
                next retry instead of after the lease duration.

`leading` is flipped before the callbacks run, so callers that check it stop planning in the
same step of the event loop. `may_write` is the fence every write of the leader checks as it is
sent: leading, and the last successful renewal started less than the renew deadline ago. No
other replica can take the Lease before `lease_duration` has passed since it saw that renewal,
so a write queued before the event loop stalled is not sent once the Lease may have moved, even
before this loop has noticed the loss. kubernetes-asyncio's `leaderelection` is not used: it goes through
the generated models, uses the wall clock and local time for the renew deadline, cannot release
on shutdown and runs only one term; this is the loop we need on our own client, in ~150 lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from extender.kube.client import ApiError, JSONDict
from extender.kube.resources import Resource

LEASES = Resource("coordination.k8s.io", ("v1",), "Lease", "leases", True)
JITTER = 1.2  # client-go's JitterFactor for a candidate's retries


class LeaseClient(Protocol):
    async def get(self, path: str) -> JSONDict: ...

    async def post(self, path: str, body: Mapping[str, Any]) -> JSONDict: ...

    async def put(self, path: str, body: Mapping[str, Any]) -> JSONDict: ...


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0  # kube-scheduler's defaults
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def check(self) -> None:
        if not self.retry_period > 0:
            raise ValueError("the retry period must be positive")
        if not self.renew_deadline > JITTER * self.retry_period:
            raise ValueError(f"the renew deadline must be more than {JITTER} x the retry period")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError("the lease duration must be more than the renew deadline")


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


Callback = Callable[[], Awaitable[None]]


class LeaderElector:
    def __init__(
        self,
        client: LeaseClient,
        config: LeaseConfig,
        *,
        on_started: Callback,
        on_stopped: Callback,
        clock: Callable[[], float] = time.monotonic,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        config.check()
        self.client = client
        self.config = config
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.clock = clock
        self.log = log or structlog.get_logger("topogang.kube")
        self.leading = False
        self.transitions = 0  # terms this replica has won
        self.holder = ""  # the holder last seen
        self._record: tuple[object, ...] | None = None  # the Lease spec last seen
        self._seen_at = 0.0  # when it last changed, by our clock
        self._said = ""
        self._valid_until = -math.inf  # by our clock: writes are fenced after this (may_write)
        self.path = LEASES.object_path("v1", config.name, config.namespace)

    def may_write(self) -> bool:
        """Whether this replica may write now, as the leader (see the module's docstring)."""
        return self.leading and self.clock() < self._valid_until

    # -- one attempt ----------------------------------------------------------------------------

    def _spec(self, old: Mapping[str, Any] | None) -> JSONDict:
        now = _micro_time()
        mine = old is not None and old.get("holderIdentity") == self.config.identity
        transitions = int((old or {}).get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": math.ceil(self.config.lease_duration),
            "acquireTime": (old or {}).get("acquireTime") if mine else now,
            "renewTime": now,
            "leaseTransitions": transitions if mine or old is None else transitions + 1,
        }

    def _observe(self, spec: Mapping[str, Any]) -> None:
        record = tuple(spec.get(k) for k in ("holderIdentity", "renewTime", "leaseTransitions"))
        if record != self._record:
            self._record, self._seen_at = record, self.clock()
        holder = str(spec.get("holderIdentity") or "")
        if holder != self.holder:
            self.holder = holder
            if holder and holder != self.config.identity:
                self.log.info("leader observed", lease=self._lease(), leader=holder)

    async def try_acquire_or_renew(self) -> bool:
        """One round: True when this replica holds the Lease after it."""
        try:
            lease = await self.client.get(self.path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.config.name, "namespace": self.config.namespace},
                "spec": self._spec(None),
            }
            try:
                created = await self.client.post(LEASES.collection_path("v1", self.config.namespace), body)
            except ApiError as err:
                if err.status == 409:
                    return False  # another candidate created it first
                raise
            self._observe(created.get("spec") or {})
            return True
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = str(spec.get("holderIdentity") or "")
        if holder and holder != self.config.identity and self.clock() < self._seen_at + self.config.lease_duration:
            return False  # held by another, and renewed recently enough
        lease["spec"] = self._spec(spec)  # metadata keeps the resourceVersion: a conditional update
        try:
            updated = await self.client.put(self.path, lease)
        except ApiError as exc:
            if exc.status == 409:
                return False  # someone else wrote it since we read it
            raise
        self._observe(updated.get("spec") or {})
        return True

    async def _attempt(self, seconds: float) -> bool:
        """A round bounded by SECONDS; a failed request is False (said once per distinct error).
        A round won moves the write fence to its start plus the renew deadline."""
        started = self.clock()
        try:
            async with asyncio.timeout(max(seconds, 0.001)):
                won = await self.try_acquire_or_renew()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            problem = str(exc) or type(exc).__name__
            if problem != self._said:
                self._said = problem
                self.log.warning("lease request failed", lease=self._lease(), error=problem)
            return False
        self._said = ""
        if won:
            self._valid_until = started + self.config.renew_deadline
        return won

    # -- terms ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead, and campaign again after losing, until cancelled."""
        try:
            while True:
                await self._campaign()
                self.leading = True
                self.transitions += 1
                self.log.info("became the leader", lease=self._lease(), identity=self.config.identity)
                await self.on_started()
                reason = await self._lead()
                self.leading = False
                self.log.warning("lost leadership", lease=self._lease(), identity=self.config.identity, reason=reason)
                await self.on_stopped()
        finally:
            if self.leading:  # cancelled while leading: stop before anything else happens
                self.leading = False
                await self.on_stopped()

    async def _campaign(self) -> None:
        while True:
            if await self._attempt(self.config.renew_deadline):
                return
            await asyncio.sleep(self.config.retry_period * (1 + random.random() * JITTER))

    async def _lead(self) -> str:
        """Renew until a renewal fails for the renew deadline; returns why leadership ended."""
        renewed = self.clock()
        while True:
            await asyncio.sleep(self.config.retry_period)
            while True:
                left = renewed + self.config.renew_deadline - self.clock()
                if left <= 0:
                    return f"not renewed for {self.config.renew_deadline:g}s"
                if await self._attempt(left):
                    renewed = self.clock()
                    break
                if self.holder and self.holder != self.config.identity:
                    return f"the Lease is held by {self.holder}"
                await asyncio.sleep(min(self.config.retry_period, max(left, 0)))

    async def release(self, seconds: float = 5.0) -> None:
        """Give the Lease up (holder cleared) if this replica holds it; best effort."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(seconds):
                lease = await self.client.get(self.path)
                spec = lease.get("spec") or {}
                if spec.get("holderIdentity") != self.config.identity:
                    return
                now = _micro_time()
                lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now}
                await self.client.put(self.path, lease)
                self.log.info("released the Lease", lease=self._lease(), identity=self.config.identity)

    def _lease(self) -> str:
        return f"{self.config.namespace}/{self.config.name}"
