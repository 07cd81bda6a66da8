"""LeaderElector against an in-memory Lease with resourceVersion preconditions: one leader at a
time, takeover after release or expiry, loss on a failed renewal, conflicts lose."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from extender.kube.client import ApiError
from extender.kube.lease import LeaderElector, LeaseConfig
from tests.kube_fakes import until

FAST = {"lease_duration": 0.5, "renew_deadline": 0.15, "retry_period": 0.02}


class Store:
    """One Lease object as the API server keeps it."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    def bump(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy.deepcopy(dict(body))
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)


class Client:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ApiError(503, "the API server is unreachable")

    async def get(self, path: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._check()
        if self.store.lease is None:
            raise ApiError(404, "not found", reason="NotFound")
        return copy.deepcopy(self.store.lease)

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._check()
        if self.store.lease is not None:
            raise ApiError(409, "already exists", reason="AlreadyExists")
        return self.store.bump(body)

    async def put(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._check()
        assert self.store.lease is not None
        if body["metadata"].get("resourceVersion") != self.store.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified", reason="Conflict")
        return self.store.bump(body)


class Candidate:
    def __init__(self, store: Store, identity: str, **timing: float) -> None:
        self.client = Client(store)
        self.log: list[str] = []
        config = LeaseConfig("topogang-system", "topogang", identity, **(timing or FAST))
        self.elector = LeaderElector(self.client, config, on_started=self.started, on_stopped=self.stopped)
        self.task: asyncio.Task[None] | None = None

    async def started(self) -> None:
        self.log.append("started")

    async def stopped(self) -> None:
        self.log.append("stopped")

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    async def stop(self, release: bool = True) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        if release:
            await self.elector.release()


@contextlib.asynccontextmanager
async def candidates(store: Store, *names: str) -> AsyncIterator[list[Candidate]]:
    group = [Candidate(store, n) for n in names]
    for c in group:
        c.start()
    try:
        yield group
    finally:
        for c in group:
            if c.task is not None and not c.task.done():
                await c.stop(release=False)


def leaders(group: list[Candidate]) -> list[str]:
    return [c.elector.config.identity for c in group if c.elector.leading]


async def test_one_leader_and_a_takeover_when_it_releases() -> None:
    store = Store()
    async with candidates(store, "a", "b") as group:
        await until(lambda: len(leaders(group)) == 1, "a leader")
        await asyncio.sleep(0.2)  # several renewals: still exactly one
        assert len(leaders(group)) == 1
        leader = next(c for c in group if c.elector.leading)
        other = next(c for c in group if c is not leader)
        assert store.lease is not None
        assert store.lease["spec"]["holderIdentity"] == leader.elector.config.identity
        await leader.stop()
        assert leader.log == ["started", "stopped"]
        assert store.lease["spec"]["holderIdentity"] is None
        await until(lambda: other.elector.leading, "the follower to take over", seconds=FAST["retry_period"] * 20)
        assert store.lease["spec"]["leaseTransitions"] == 1
        assert other.log == ["started"]


async def test_a_leader_that_cannot_renew_steps_down_before_the_lease_expires() -> None:
    store = Store()
    async with candidates(store, "a") as (a,):
        await until(lambda: a.elector.leading, "a to lead")
        b = Candidate(store, "b")
        b.start()
        try:
            a.client.down = True
            await until(lambda: not a.elector.leading, "a to step down")
            assert a.log == ["started", "stopped"]
            assert not b.elector.leading  # a's lease has not expired yet by b's clock
            await until(lambda: b.elector.leading, "b to take the expired Lease", seconds=2)
            a.client.down = False
            await asyncio.sleep(0.1)
            assert leaders([a, b]) == ["b"]  # a campaigns again, and waits
        finally:
            await b.stop(release=False)


async def test_a_lease_someone_keeps_renewing_is_never_taken() -> None:
    store = Store()
    async with candidates(store, "a") as (a,):
        await until(lambda: a.elector.leading, "a to lead")
        async with candidates(store, "b", "c") as others:
            await asyncio.sleep(FAST["lease_duration"] * 2)
            assert leaders(others) == []


async def test_a_conflicting_write_loses() -> None:
    store = Store()
    a = Candidate(store, "a")
    assert await a.elector.try_acquire_or_renew()  # creates the Lease
    b = Candidate(store, "b")
    store.lease["spec"]["holderIdentity"] = ""  # type: ignore[index]  # released, so b may take it...
    real_put = b.client.put

    async def racing_put(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        await a.elector.try_acquire_or_renew()  # ...but a writes first
        return await real_put(path, body)

    b.client.put = racing_put  # type: ignore[method-assign]
    assert not await b.elector.try_acquire_or_renew()
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "a"


@pytest.mark.parametrize(
    "timing",
    [
        {"lease_duration": 10, "renew_deadline": 10, "retry_period": 2},
        {"lease_duration": 15, "renew_deadline": 2, "retry_period": 2},
        {"lease_duration": 15, "renew_deadline": 10, "retry_period": 0},
    ],
    ids=["lease-not-longer-than-deadline", "deadline-too-short-for-retries", "no-retry-period"],
)
def test_timings_that_cannot_work_are_refused(timing: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        LeaseConfig("ns", "topogang", "me", **timing).check()


async def test_writes_are_fenced_once_a_stall_outlasts_the_renew_deadline_before_the_loss_is_noticed() -> None:
    store = Store()
    async with candidates(store, "a") as (a,):
        assert not a.elector.may_write()  # a candidate writes nothing
        await until(a.elector.may_write, "a to lead and write")
        # The event loop stalls longer than the renew deadline: no renewal could run, so the
        # Lease may be another's by now; `leading` has not been told yet, the fence has.
        time.sleep(FAST["renew_deadline"] * 1.5)  # noqa: ASYNC251 (the stall itself)
        assert a.elector.leading
        assert not a.elector.may_write()
        # Nobody else wanted it: the next renewal (or, past its deadline, a new term) lifts the fence.
        await until(a.elector.may_write, "a to renew and write again")
