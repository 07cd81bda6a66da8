"""The extender over HTTP with the real core: steering, the bind gate, timeouts, bad bodies.

The API-server side (`Actions`) is recorded here; e2e/ runs the same server against a real
kube-apiserver and kube-scheduler.

Cluster: one zone, one block, rack r1 with 4 nodes of 8 GPUs (z1-b1-r1-n1..n4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.server.app import EXTENDER, create_app
from extender.server.extender import Extender
from tests.builders import TOPO, grid, pod, podgroup
from tests.kube_fakes import until

NODES = [n.name for n in grid(nodes=4)]


class Recorder:
    def __init__(self) -> None:
        self.bound: list[tuple[str, str]] = []
        self.woken: list[tuple[str, str]] = []
        self.nominated: list[tuple[str, str, str]] = []
        self.events: list[tuple[str, str]] = []  # (object, message)
        self.said: list[tuple[str, str, str, str]] = []  # (object, reason, message, type)

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.bound.append((f"{namespace}/{name}", node))

    async def wake(self, pods: Sequence[tuple[str, str]], generation: int) -> None:
        self.woken.extend(pods)

    async def nominate(
        self, pods: Sequence[tuple[str, str]], generation: int, node_of: Callable[[str, str], str | None]
    ) -> None:
        for ns, name in pods:
            node = node_of(ns, name)
            if node is not None:
                self.nominated.append((ns, name, node))

    async def event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Normal",
        related: Mapping[str, str] | None = None,
    ) -> None:
        self.events.append((involved["name"], message))
        self.said.append((involved["name"], reason, message, type))


def make(bind_timeout: float = 5.0) -> tuple[GangScheduler, Recorder, Extender]:
    state = ClusterState()
    for n in grid(nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup(
        "default/g",
        podgroup({"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name="g"),
    )
    scheduler = GangScheduler(state)
    recorder = Recorder()
    return scheduler, recorder, Extender(scheduler, recorder, bind_timeout=bind_timeout)


def member(i: int) -> Any:
    return pod(f"g-{i}", group="g")


def args(p: Any, names: list[str] = NODES) -> bytes:
    body = {"metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid}, "spec": {}}
    return orjson.dumps({"Pod": body, "Nodes": None, "NodeNames": names})


async def call(client: TestClient, verb: str, body: bytes) -> Any:
    resp = await client.post(f"/topogang/{verb}", data=body)
    assert resp.status == 200, await resp.text()
    return orjson.loads(await resp.read())


@pytest.fixture
def setup(aiohttp_client: Any) -> Any:
    async def make_client(bind_timeout: float = 5.0) -> tuple[TestClient, GangScheduler, Recorder]:
        scheduler, recorder, extender = make(bind_timeout)
        client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
        return client, scheduler, recorder

    return make_client


async def test_plain_pods_pass_through(setup: Any) -> None:
    client, scheduler, _ = await setup()
    solo = pod("solo")
    scheduler.observe_pod(solo)
    reply = await call(client, "filter", args(solo))
    assert reply["NodeNames"] == NODES
    assert await call(client, "prioritize", args(solo)) == []


async def test_an_incomplete_gang_is_refused_everywhere_with_its_count(setup: Any) -> None:
    client, scheduler, recorder = await setup()
    scheduler.observe_pod(member(0))
    reply = await call(client, "filter", args(member(0)))
    assert reply["NodeNames"] == []
    # kube-scheduler's condition gets a text that stays as the gang fills (it writes the pod's
    # status again whenever the text changes); topogang's Event has the count.
    steady = "topogang: PodGroup default/g: gang not all 4 pods present yet"
    assert set(reply["FailedAndUnresolvableNodes"].values()) == {steady}
    await asyncio.sleep(0)
    assert recorder.events == [("g-0", "topogang: PodGroup default/g: gang 1/4 pods present")]


async def test_members_parked_while_their_gang_was_incomplete_are_woken_once_to_see_why_it_does_not_fit(
    setup: Any,
) -> None:
    client, scheduler, recorder = await setup()
    scheduler.observe_pod(pod("other", node_name=NODES[3]))  # the rack keeps room for 3 of the 4
    members = [member(i) for i in range(4)]
    for p in members[:3]:  # kube-scheduler tries each as it comes and parks it
        scheduler.observe_pod(p)
        reply = await call(client, "filter", args(p))
        assert set(reply["FailedAndUnresolvableNodes"].values()) == {
            "topogang: PodGroup default/g: gang not all 4 pods present yet"
        }
    await asyncio.sleep(0)
    assert recorder.woken == []  # an arrival changes the count: waking the others would only refuse them again
    scheduler.observe_pod(members[3])
    reply = await call(client, "filter", args(members[3]))
    [why] = set(reply["FailedAndUnresolvableNodes"].values())
    assert "4 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; the best rack fits 3" in why
    await asyncio.sleep(0)
    # The three parked with a stale count are requeued once, to be refused with the gang's reason.
    assert sorted(recorder.woken) == [("default", f"g-{i}") for i in range(3)]
    for p in members[:3]:  # kube-scheduler retries them
        again = await call(client, "filter", args(p))
        assert set(again["FailedAndUnresolvableNodes"].values()) == {why}
    await asyncio.sleep(0)
    assert len(recorder.woken) == 3  # refused again for the same reason: no further wake-up
    assert {name for name, message in recorder.events if message == why} == {f"g-{i}" for i in range(4)}


async def test_a_complete_gang_is_planned_steered_woken_and_bound_together(setup: Any) -> None:
    client, scheduler, recorder = await setup()
    pods = [member(i) for i in range(4)]
    scheduler.observe_pod(pods[0])
    await call(client, "filter", args(pods[0]))  # refused: 1/4 present, parked by kube-scheduler
    for p in pods[1:]:
        scheduler.observe_pod(p)
    reply = await call(client, "filter", args(pods[3]))
    planned = reply["NodeNames"]
    assert len(planned) == 1
    assert reply["FailedNodes"] == {}  # the rest are unresolvable for this pod: left unlisted on purpose
    assert await call(client, "prioritize", args(pods[3])) == [{"Host": planned[0], "Score": 10}]
    await asyncio.sleep(0)
    assert recorder.woken == [("default", "g-0")]  # the parked member is requeued now
    nodes = {}
    for p in pods:
        nodes[p.key] = (await call(client, "filter", args(p)))["NodeNames"][0]
    assert sorted(nodes.values()) == NODES
    # Three binds wait at the gate; the fourth releases all four together.
    waiting = [
        asyncio.ensure_future(
            call(
                client,
                "bind",
                orjson.dumps({"PodName": p.name, "PodNamespace": "default", "PodUID": "", "Node": nodes[p.key]}),
            )
        )
        for p in pods[:3]
    ]
    await asyncio.sleep(0.05)
    assert recorder.bound == []
    assert not any(w.done() for w in waiting)
    last = pods[3]
    reply = await call(
        client,
        "bind",
        orjson.dumps({"PodName": last.name, "PodNamespace": "default", "PodUID": "", "Node": nodes[last.key]}),
    )
    assert reply == {"Error": ""}
    assert [await w for w in waiting] == [{"Error": ""}] * 3
    assert sorted(recorder.bound) == sorted(nodes.items())
    assert scheduler.status("default/g").phase == "Scheduled"
    assert not scheduler.state.reservations


async def test_a_gate_that_never_fills_times_out_and_releases_the_plan(setup: Any) -> None:
    client, scheduler, recorder = await setup(bind_timeout=0.2)
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    nodes = {p.key: (await call(client, "filter", args(p)))["NodeNames"][0] for p in pods}
    replies = await asyncio.gather(
        *(
            call(
                client,
                "bind",
                orjson.dumps({"PodName": p.name, "PodNamespace": "default", "PodUID": "", "Node": nodes[p.key]}),
            )
            for p in pods[:3]
        )
    )
    assert {r["Error"] for r in replies} == {
        "topogang: bind gate timed out: 3/4 pods of the minimum reached bind, and none more for 0.2s"
    }
    assert recorder.bound == []
    assert not scheduler.state.reservations
    assert scheduler.status("default/g").message.startswith("bind gate timed out")


async def test_bind_to_another_node_than_planned_is_refused(setup: Any) -> None:
    client, scheduler, _ = await setup()
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    node = (await call(client, "filter", args(pods[0])))["NodeNames"][0]
    other = next(n for n in NODES if n != node)
    reply = await call(
        client, "bind", orjson.dumps({"PodName": "g-0", "PodNamespace": "default", "PodUID": "", "Node": other})
    )
    assert reply == {"Error": f"topogang: the pod is planned on {node}, not {other}"}


async def test_malformed_bodies_are_400_naming_the_field(setup: Any) -> None:
    client, _, _ = await setup()
    resp = await client.post("/topogang/filter", data=b'{"Pod": {"metadata": {}}}')
    assert resp.status == 400
    assert orjson.loads(await resp.read()) == {"Error": "ExtenderArgs.Pod.metadata.name: expected the pod's name"}
    resp = await client.post("/topogang/bind", data=b"{}")
    assert resp.status == 400
    assert "ExtenderBindingArgs.PodName" in (await resp.text())


async def test_preempt_no_victims_for_gang_members_unchanged_for_plain_pods(setup: Any) -> None:
    client, scheduler, _ = await setup()
    scheduler.observe_pod(member(0))
    victims = {"n1": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0}}
    gang = orjson.dumps(
        {"Pod": {"metadata": {"name": "g-0", "namespace": "default"}}, "NodeNameToMetaVictims": victims}
    )
    plain = orjson.dumps(
        {"Pod": {"metadata": {"name": "solo", "namespace": "default"}}, "NodeNameToMetaVictims": victims}
    )
    assert await call(client, "preempt", gang) == {"NodeNameToMetaVictims": {}}
    assert await call(client, "preempt", plain) == {"NodeNameToMetaVictims": victims}


async def test_health_and_readiness(aiohttp_client: Any) -> None:
    _scheduler, _recorder, extender = make()
    ready = False
    client = await aiohttp_client(create_app(extender, lambda: ready))
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 503
    synced = await client.get("/synced")
    assert (synced.status, await synced.text()) == (503, "caches not synced")
    ready = True
    assert (await client.get("/readyz")).status == 200
    assert (await client.get("/synced")).status == 200


async def test_the_sweep_forgets_finished_plans_and_pods_that_are_gone(setup: Any) -> None:
    client, scheduler, _ = await setup()
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    nodes = {p.key: (await call(client, "filter", args(p)))["NodeNames"][0] for p in pods}
    await asyncio.gather(
        *(
            call(
                client,
                "bind",
                orjson.dumps({"PodName": p.name, "PodNamespace": "default", "PodUID": "", "Node": nodes[p.key]}),
            )
            for p in pods
        )
    )
    extender: Extender = client.app[EXTENDER]  # type: ignore[index]
    extender.expire()
    assert "default/g" not in scheduler.plans
    assert scheduler.status("default/g").phase == "Scheduled"  # from the bound pods alone
    scheduler.delete_pod("default/g-0")
    scheduler.observe_pod(pod("lonely", group="gone"))
    await call(client, "filter", args(pod("lonely", group="gone")))
    assert "default/lonely" in extender.wakeups.refused
    scheduler.delete_pod("default/lonely")
    extender.expire()
    assert "default/lonely" not in extender.wakeups.refused


async def test_a_pod_naming_a_podgroup_that_does_not_exist_yet_waits(setup: Any) -> None:
    client, scheduler, recorder = await setup()
    early = pod("early-0", group="later")
    scheduler.observe_pod(early)
    reply = await call(client, "filter", args(early))
    assert reply["NodeNames"] == []
    assert set(reply["FailedAndUnresolvableNodes"].values()) == {
        "topogang: PodGroup default/later (named by the pod) does not exist yet"
    }
    await asyncio.sleep(0)
    # No Event of topogang's: the PodGroup, not seen yet, may say markUnschedulable: false.
    assert recorder.events == []
    scheduler.state.set_podgroup("default/later", podgroup({"minMember": 1}, name="later"))
    assert len((await call(client, "filter", args(early)))["NodeNames"]) == 1


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"{status} refused")
        self.status = status


@pytest.mark.parametrize(("status", "held"), [(403, False), (404, False), (500, True)])
async def test_a_bind_no_retry_can_carry_out_gives_its_room_back(setup: Any, status: int, held: bool) -> None:
    """A pod whose namespace is being deleted (403) or that is gone (404) cannot be bound by any
    retry: its reservation goes at once. A transient error keeps it for kube-scheduler's retry."""
    client, scheduler, recorder = await setup()
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    nodes = {p.key: (await call(client, "filter", args(p)))["NodeNames"][0] for p in pods}

    async def refuse(namespace: str, name: str, uid: str, node: str) -> None:
        raise _Refused(status)

    recorder.bind = refuse  # type: ignore[method-assign]
    replies = await asyncio.gather(
        *(
            call(
                client,
                "bind",
                orjson.dumps({"PodName": p.name, "PodNamespace": "default", "PodUID": "", "Node": nodes[p.key]}),
            )
            for p in pods
        )
    )
    assert all(f"{status} refused" in r["Error"] for r in replies)
    assert bool(scheduler.state.reservations) is held


async def test_members_parked_for_room_are_woken_when_a_node_comes(setup: Any, monkeypatch: Any) -> None:
    """kube-scheduler may retry a refused member on a node event before topogang's watch has
    seen the node; once topogang sees it, it requeues the members parked for want of room itself
    (and not those of a gang that is merely incomplete)."""
    monkeypatch.setattr("extender.server.wakeups.ROOM_WAKE_DELAY", 0.01)
    client, scheduler, recorder = await setup()
    for n in grid(nodes=4)[1:]:  # one node left: the gang of 4 cannot fit
        scheduler.state.delete_node(n.name)
    scheduler.state.set_podgroup("default/h", podgroup({"minMember": 2}, name="h"))
    scheduler.observe_pod(pod("h-0", group="h"))  # 1/2 present: incomplete, nothing to wake
    await call(client, "filter", args(pod("h-0", group="h")))
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    for p in pods:
        assert (await call(client, "filter", args(p)))["NodeNames"] == []
    scheduler.state.upsert_node(grid(nodes=4)[3])  # two nodes come back (a burst: one wake-up)
    scheduler.state.upsert_node(grid(nodes=4)[2])
    want = [("default", f"g-{i}") for i in range(4)]
    await until(lambda: len(recorder.woken) >= len(want), "the parked members' wake-ups")
    await asyncio.sleep(0.05)  # and no second round for the second node of the burst
    assert sorted(recorder.woken) == want


async def test_with_nomination_a_plan_nominates_every_member_and_steers_one_left_out(setup: Any) -> None:
    client, scheduler, recorder = await setup()
    scheduler.steering.enabled = True
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    first = await call(client, "filter", args(pods[0], ["z1-b1-r1-n1"]))
    plan = dict(scheduler.reserved("default/g"))
    assert sorted(recorder.nominated) == sorted(
        ("default", k.split("/")[1], n) for k, n in plan.items() if k != pods[0].key
    ) + ([] if first["NodeNames"] else [("default", "g-0", plan[pods[0].key])])


async def test_room_freed_wakes_only_the_gangs_parked_for_room_that_it_could_serve(
    setup: Any, monkeypatch: Any
) -> None:
    """The gang of 4 x 8 GPUs needs the whole rack; n3 holds two plain pods of 4 GPUs and n4
    one of 8. A pod that ends where no member of the gang would fit frees nothing for it: its
    parked members are not woken (each wake-up is a pods write and a new plan in kube-scheduler)."""
    monkeypatch.setattr("extender.server.wakeups.ROOM_WAKE_DELAY", 0.01)
    client, scheduler, recorder = await setup()
    wakeups = client.app[EXTENDER].wakeups
    for name, gpus, node in (("a", 4, "z1-b1-r1-n3"), ("b", 4, "z1-b1-r1-n3"), ("big", 8, "z1-b1-r1-n4")):
        scheduler.observe_pod(pod(name, gpus=gpus, node_name=node))
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    for p in pods:
        assert (await call(client, "filter", args(p)))["NodeNames"] == []
    scheduler.delete_pod("default/a")  # n3 has 4 GPUs free: no member fits there
    scheduler.observe_pod(pod("c", gpus=4))  # a plain pod that never bound, deleted: frees nothing
    scheduler.delete_pod("default/c")
    assert wakeups.room_wake_pending
    await until(lambda: not wakeups.room_wake_pending, "the room wake-up pass")
    assert recorder.woken == []
    scheduler.observe_pod(replace(scheduler.state.pods["default/big"], phase="Succeeded"))  # n4 is free
    await until(lambda: bool(recorder.woken), "the members to be woken for n4")
    assert sorted(recorder.woken) == [("default", f"g-{i}") for i in range(4)]


async def test_members_parked_for_room_another_pod_was_nominated_to_are_woken_when_it_stops_waiting(
    setup: Any, monkeypatch: Any
) -> None:
    """kube-scheduler preempted for a plain pod and nominated it to a node of the rack: the gang
    leaves that room and is refused. When the nomination is cleared, kube-scheduler has no event
    for the parked members: topogang requeues them, and the gang is planned into the rack."""
    monkeypatch.setattr("extender.server.wakeups.ROOM_WAKE_DELAY", 0.01)
    client, scheduler, recorder = await setup()
    waiting = replace(pod("pre"), nominated_node=NODES[0])
    scheduler.observe_pod(waiting)
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    for p in pods:
        assert (await call(client, "filter", args(p)))["NodeNames"] == []
    assert "the best rack fits 3" in scheduler.reasons.text("default/g")
    scheduler.observe_pod(replace(waiting, nominated_node=None))  # kube-scheduler cleared it
    await until(lambda: len(recorder.woken) == 4, "the parked members to be woken")
    assert sorted(recorder.woken) == [("default", f"g-{i}") for i in range(4)]
    assert (await call(client, "filter", args(pods[0])))["NodeNames"] != []
