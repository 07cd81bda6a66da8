"""Preemption through the extender: kube-scheduler's preempt call for a gang member starts the
gang's own preemption (victims evicted by topogang, Events, metrics), answers no victims, and
wakes the members when the last victim is gone. The API server's side is recorded here;
e2e/test_preemption.py runs it against the real one.

Cluster: tests/test_core_preemption.py's (a zone of three racks of four 8-GPU nodes; `two` on
racks r1 and r2, `one` on rack r3, both priority 10; `urgent`, priority 1000, needs one rack).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import orjson
import pytest

from extender.core.apply import apply_object
from extender.core.scheduler import GangScheduler
from extender.server.app import create_app
from extender.server.extender import Extender
from tests.builders import pod
from tests.test_core_preemption import NODES, cluster, pdb, twin_racks
from tests.test_server_app import Recorder, args, call


class Evictions(Recorder):
    def __init__(self, blocked: set[str] | None = None) -> None:
        super().__init__()
        self.evicted: list[str] = []
        self.refused: list[str] = []
        self.blocked = blocked or set()

    async def evict(self, namespace: str, name: str, uid: str) -> str:
        key = f"{namespace}/{name}"
        if key in self.blocked:
            self.refused.append(key)
            return "blocked"
        self.evicted.append(key)
        return "evicted"

    async def event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Normal",
        related: Mapping[str, str] | None = None,
    ) -> None:
        self.events.append((involved["name"], f"{reason}: {message}"))


def preempt_args(name: str) -> bytes:
    body = {"metadata": {"name": name, "namespace": "default"}}
    return orjson.dumps({"Pod": body, "NodeNameToMetaVictims": {"z1-b1-r3-n1": {"Pods": [{"UID": "x"}]}}})


async def start(aiohttp_client: Any, actions: Evictions) -> tuple[Any, GangScheduler, Extender]:
    state, _ = cluster()
    scheduler = GangScheduler(state, preemption_timeout=30)
    for i in range(4):
        scheduler.observe_pod(pod(f"urgent-{i}", group="urgent"))
    extender = Extender(scheduler, actions, bind_timeout=5)
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
    return client, scheduler, extender


@pytest.mark.asyncio
async def test_a_gang_members_preempt_call_evicts_the_gangs_victims(aiohttp_client: Any) -> None:
    actions = Evictions()
    client, scheduler, extender = await start(aiohttp_client, actions)
    assert await call(client, "preempt", preempt_args("urgent-0")) == {"NodeNameToMetaVictims": {}}
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(actions.evicted) == [f"default/one-{i}" for i in range(4)]
    assert ("one-0", "Preempted: Preempted by default/urgent for rack z1/b1/r3") in actions.events
    assert any(
        name == "urgent-1" and text.startswith("Preempting: preempting in rack") for name, text in actions.events
    )
    assert extender.metrics.preemptions._value.get() == 1
    assert extender.metrics.preemption_victims._value.get() == 4
    # a plain pod keeps kube-scheduler's victims
    state = scheduler.state
    state.upsert_pod(pod("plain"))
    victims = {"z1-b1-r1-n1": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0}}
    body = orjson.dumps(
        {"Pod": {"metadata": {"name": "plain", "namespace": "default"}}, "NodeNameToMetaVictims": victims}
    )
    assert await call(client, "preempt", body) == {"NodeNameToMetaVictims": victims}
    # the victims go: the members are woken
    for i in range(4):
        scheduler.delete_pod(f"default/one-{i}")
    for _ in range(3):
        await asyncio.sleep(0)
    assert sorted(actions.woken) == [("default", f"urgent-{i}") for i in range(4)]


@pytest.mark.asyncio
async def test_a_victim_under_a_budget_is_tried_again_until_the_room_is_released(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("extender.server.evictions.EVICT_RETRY", 0.01)
    actions = Evictions(blocked={"default/one-2"})
    client, _, _ = await start(aiohttp_client, actions)
    await call(client, "preempt", preempt_args("urgent-0"))
    others = ["default/one-0", "default/one-1", "default/one-3"]
    await until(lambda: sorted(actions.evicted) == others, "the unblocked victims' evictions")
    assert "default/one-2" not in actions.evicted
    actions.blocked.clear()
    await until(lambda: "default/one-2" in actions.evicted, "the blocked victim's eviction, retried")


@pytest.mark.asyncio
async def test_a_member_unknown_to_the_cache_yet_gets_no_pod_by_pod_victims(aiohttp_client: Any) -> None:
    client, scheduler, _ = await start(aiohttp_client, Evictions())
    newcomer = {
        "metadata": {"name": "late-0", "namespace": "default", "annotations": {"pod-group-name": "urgent"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
    }
    victims = {"z1-b1-r1-n1": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0}}
    body = orjson.dumps({"Pod": newcomer, "NodeNameToMetaVictims": victims})
    assert await call(client, "preempt", body) == {"NodeNameToMetaVictims": {}}
    assert scheduler.membership.group_of("default/late-0") == "default/urgent"
    unknown_group = {
        **newcomer,
        "metadata": {**newcomer["metadata"], "name": "x", "annotations": {"pod-group-name": "nope"}},
    }
    body = orjson.dumps({"Pod": unknown_group, "NodeNameToMetaVictims": victims})
    assert await call(client, "preempt", body) == {"NodeNameToMetaVictims": {}}  # a gang-to-be


async def serve(aiohttp_client: Any, scheduler: GangScheduler, actions: Evictions) -> tuple[Any, Extender]:
    extender = Extender(scheduler, actions, bind_timeout=5)
    return await aiohttp_client(create_app(extender, lambda: True, "/topogang")), extender


async def until(check: Callable[[], bool], what: str, within: float = 10.0) -> None:
    """Wait until CHECK holds: evictions and retries run as tasks and timers of their own."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def blocked_by_budgets(aiohttp_client: Any, actions: Evictions) -> tuple[Any, GangScheduler, Extender]:
    """twin_racks with a budget on each of a and b that lets none go; kube-scheduler, its own
    filters failing on a full cluster, asks whom to preempt for urgent: nobody."""
    scheduler = twin_racks()
    apply_object(scheduler, pdb("keep-a", {"matchLabels": {"app": "a"}}))
    apply_object(scheduler, pdb("keep-b", {"matchLabels": {"app": "b"}}))
    client, extender = await serve(aiohttp_client, scheduler, actions)
    assert await call(client, "preempt", preempt_args("urgent-0")) == {"NodeNameToMetaVictims": {}}
    assert "PodDisruptionBudget default/keep-a by 4 pod(s)" in scheduler.reasons.text("default/urgent")
    assert scheduler.preempting.nomination("default/urgent") is None  # so nothing is evicted
    return client, scheduler, extender


@pytest.mark.asyncio
async def test_a_gang_only_budgets_kept_from_preempting_preempts_when_a_budget_changes(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its members are parked in kube-scheduler's own resource filter, where an update of theirs
    does not requeue them: topogang searches again by itself when a budget changes."""
    monkeypatch.setattr("extender.server.extender.BUDGET_RETRY_DELAY", 0.01)
    actions = Evictions()
    client, scheduler, _ = await blocked_by_budgets(aiohttp_client, actions)
    member = scheduler.state.pods["default/urgent-1"]
    reply = await call(client, "filter", args(member, NODES))  # a member asked about says why
    assert scheduler.reasons.text("default/urgent") in str(reply["FailedAndUnresolvableNodes"])
    apply_object(scheduler, pdb("keep-b", {"matchLabels": {"app": "b"}}, allowed=4))
    await until(lambda: len(actions.evicted) == 4, "b's pods to be evicted")
    assert sorted(actions.evicted) == [f"default/b-{i}" for i in range(4)]
    assert scheduler.status("default/urgent").reason == "Preempting"


@pytest.mark.asyncio
async def test_a_replica_that_stopped_leading_never_preempts_when_a_budget_changes(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("extender.server.extender.BUDGET_RETRY_DELAY", 0.0)
    actions = Evictions()
    _, scheduler, extender = await blocked_by_budgets(aiohttp_client, actions)
    extender.demote()
    apply_object(scheduler, pdb("keep-b", {"matchLabels": {"app": "b"}}, allowed=4))
    extender.retry_blocked()  # what the timer would run
    assert scheduler.preempting.nomination("default/urgent") is None
    assert actions.evicted == []


@pytest.mark.asyncio
async def test_victims_a_budget_covers_are_evicted_before_the_others(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search read that the budget allows two of a's pods to go; another eviction spent one
    since, so the Eviction API refuses a-0 for now: a-2 and a-3 are not evicted until it goes."""
    monkeypatch.setattr("extender.server.evictions.EVICT_RETRY", 0.01)
    scheduler = twin_racks()
    for i in (0, 1):  # two of a's pods are under a budget that allows two to go
        a = scheduler.state.pods[f"default/a-{i}"]
        scheduler.observe_pod(replace(a, labels={**a.labels, "guard": "yes"}))
    apply_object(scheduler, pdb("keep-some", {"matchLabels": {"guard": "yes"}}, allowed=2))
    actions = Evictions(blocked={"default/a-0"})
    client, _ = await serve(aiohttp_client, scheduler, actions)
    await call(client, "preempt", preempt_args("urgent-0"))
    await until(lambda: actions.refused.count("default/a-0") >= 3, "a-0 to be refused and tried again")
    assert actions.evicted == ["default/a-1"]
    actions.blocked.clear()
    await until(lambda: len(actions.evicted) == 4, "every victim to be evicted")
    assert actions.evicted[:2] == ["default/a-1", "default/a-0"]
    assert sorted(actions.evicted[2:]) == ["default/a-2", "default/a-3"]
