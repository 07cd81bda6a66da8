"""The bind gate over HTTP: silence, not age, closes it; a call waits at most its budget.

Same cluster and gang as test_server_app.py: rack r1 with 4 nodes, a gang of 4 pods of 8 GPUs.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import orjson
from aiohttp.test_utils import TestClient

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.server.app import create_app
from extender.server.extender import Extender
from extender.server.metrics import BIND_CALL_BUDGET, BIND_REJECTED
from tests.builders import TOPO, grid, pod, podgroup
from tests.test_server_app import NODES, Recorder, args, call, member
from tests.test_server_metrics import sample


async def start(
    aiohttp_client: Any, bind_timeout: float, call_budget: float, bind_ahead: bool = False
) -> tuple[TestClient, Extender, Recorder]:
    state = ClusterState()
    for n in grid(nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    spec = {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    recorder = Recorder()
    scheduler = GangScheduler(state, bind_ahead=bind_ahead)
    extender = Extender(scheduler, recorder, bind_timeout=bind_timeout, call_budget=call_budget)
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
    return client, extender, recorder


def bind_body(p: Any, node: str) -> bytes:
    return orjson.dumps({"PodName": p.name, "PodNamespace": p.namespace, "PodUID": p.uid, "Node": node})


async def planned_nodes(client: TestClient, extender: Extender) -> tuple[list[Any], dict[str, str]]:
    pods = [member(i) for i in range(4)]
    for p in pods:
        extender.scheduler.observe_pod(p)
    return pods, {p.key: (await call(client, "filter", args(p)))["NodeNames"][0] for p in pods}


async def test_members_arriving_steadily_for_longer_than_the_bind_timeout_bind_whole(aiohttp_client: Any) -> None:
    client, extender, recorder = await start(aiohttp_client, bind_timeout=0.4, call_budget=5.0)
    pods, nodes = await planned_nodes(client, extender)
    calls = []
    for p in pods:  # one every 0.25 s: 0.75 s from the first to the last, the timeout is 0.4 s
        calls.append(asyncio.create_task(call(client, "bind", bind_body(p, nodes[p.key]))))
        await asyncio.sleep(0.25)
    assert [await c for c in calls] == [{"Error": ""}] * 4
    assert sorted(recorder.bound) == sorted(nodes.items())
    assert extender.scheduler.status("default/g").phase == "Scheduled"


async def test_a_call_past_its_budget_is_retryable_and_its_pod_binds_with_the_gang(aiohttp_client: Any) -> None:
    client, extender, recorder = await start(aiohttp_client, bind_timeout=5.0, call_budget=0.1)
    pods, nodes = await planned_nodes(client, extender)
    early = await asyncio.gather(*(call(client, "bind", bind_body(p, nodes[p.key])) for p in pods[:3]))
    assert [r["Error"] for r in early] == [
        f"topogang: waiting at gang default/g's bind gate (3/4 of the minimum arrived);"
        f" the pod keeps its place on {nodes[p.key]} and binds with the gang"
        for p in pods[:3]
    ]
    assert recorder.bound == []
    assert set(extender.scheduler.reserved("default/g")) == {p.key for p in pods}  # nothing let go
    assert sample(extender.metrics, "topogang_binds_failed_total", reason=BIND_CALL_BUDGET) == 3
    # The last member arrives: all four are bound, those whose calls returned included.
    assert await call(client, "bind", bind_body(pods[3], nodes[pods[3].key])) == {"Error": ""}
    assert sorted(recorder.bound) == sorted(nodes.items())
    # kube-scheduler's retry of a pod bound meanwhile: success, no second Binding.
    assert await call(client, "bind", bind_body(pods[0], nodes[pods[0].key])) == {"Error": ""}
    assert len(recorder.bound) == 4


async def test_retries_of_arrived_members_do_not_keep_a_silent_gate_open(aiohttp_client: Any) -> None:
    client, extender, recorder = await start(aiohttp_client, bind_timeout=0.5, call_budget=0.2)
    pods, nodes = await planned_nodes(client, extender)
    first = await call(client, "bind", bind_body(pods[0], nodes[pods[0].key]))
    assert "waiting at gang default/g's bind gate" in first["Error"]
    replies = [(await call(client, "bind", bind_body(pods[0], nodes[pods[0].key])))["Error"] for _ in range(4)]
    # Retries every 0.2 s keep coming, yet no new member does: the gate closes 0.5 s after the first.
    timed_out = "topogang: bind gate timed out: 1/4 pods of the minimum reached bind, and none more for 0.5s"
    assert timed_out in replies[:3]
    assert not extender.scheduler.state.reservations
    assert recorder.bound == []


async def test_a_node_cordoned_while_the_gate_fills_binds_none_and_says_so(aiohttp_client: Any) -> None:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    spec = {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    recorder = Recorder()
    extender = Extender(GangScheduler(state), recorder, bind_timeout=5.0, call_budget=5.0)
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
    pods, nodes = await planned_nodes(client, extender)
    waiting = [asyncio.create_task(call(client, "bind", bind_body(p, nodes[p.key]))) for p in pods[:3]]
    await asyncio.sleep(0.1)
    cordoned = nodes[pods[0].key]
    state.upsert_node(replace(state.nodes[cordoned], unschedulable=True))
    last = await call(client, "bind", bind_body(pods[3], nodes[pods[3].key]))
    assert "no longer fit" in last["Error"]
    answers = [(await w)["Error"] for w in waiting]
    assert all("no longer fit" in a for a in answers)
    assert recorder.bound == []
    moved = extender.scheduler.reserved("default/g")
    assert set(moved) == {p.key for p in pods}
    assert cordoned not in moved.values()
    await asyncio.sleep(0)  # the Event is written in the background
    assert [name for name, message in recorder.events if "no longer fit" in message] == ["g"]
    assert cordoned in recorder.events[0][1]


class SlowBinder(Recorder):
    """Binding POSTs that take a while, as they do on a busy API server."""

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        await asyncio.sleep(0.2)
        await super().bind(namespace, name, uid, node)


async def test_a_retry_that_comes_while_its_pods_binding_is_in_flight_shares_it(aiohttp_client: Any) -> None:
    # pods 0-2 ran out of budget; pod 3 opens the gate and the four Bindings are posted; pod 0's
    # retry comes meanwhile. It must not post a second Binding (the API server would answer 409
    # "already assigned", failing the call of a pod that is bound).
    client, extender, _ = await start(aiohttp_client, bind_timeout=5.0, call_budget=0.05)
    slow = SlowBinder()
    extender.binds.actions = slow
    pods, nodes = await planned_nodes(client, extender)
    await asyncio.gather(*(call(client, "bind", bind_body(p, nodes[p.key])) for p in pods[:3]))
    last = asyncio.create_task(call(client, "bind", bind_body(pods[3], nodes[pods[3].key])))
    await asyncio.sleep(0.05)
    retry = await call(client, "bind", bind_body(pods[0], nodes[pods[0].key]))
    assert retry == {"Error": ""}
    assert await last == {"Error": ""}
    assert sorted(slow.bound) == sorted(nodes.items())  # four Bindings, not five


class FailingBinder(Recorder):
    """The API server refuses one Binding (a conflict, a throttle): that pod's call must bind it."""

    def __init__(self, failing: str) -> None:
        super().__init__()
        self.failing = failing

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        if name == self.failing:
            self.failing = ""
            raise RuntimeError("the API server said no")
        await super().bind(namespace, name, uid, node)


async def settled(extender: Extender) -> None:
    """Wait until the extender's background work (the Bindings posted ahead) is done."""
    while extender.tasks._tasks:
        await asyncio.wait(list(extender.tasks._tasks))


async def test_a_gang_bound_ahead_is_bound_whole_by_the_plan_and_its_members_calls_find_it_done(
    aiohttp_client: Any,
) -> None:
    client, extender, _ = await start(aiohttp_client, bind_timeout=5.0, call_budget=0.05, bind_ahead=True)
    slow = SlowBinder()
    extender.binds.actions = slow
    pods = [member(i) for i in range(4)]
    for p in pods:
        extender.scheduler.observe_pod(p)
    first = await call(client, "filter", args(pods[0]))  # plans the gang, and binds all of it
    nodes = dict(extender.scheduler.reserved("default/g"))
    assert first["NodeNames"] == [nodes[pods[0].key]]
    # A member's call while its Binding is in flight shares it: no second Binding, no error.
    assert await call(client, "bind", bind_body(pods[0], nodes[pods[0].key])) == {"Error": ""}
    await settled(extender)
    assert sorted(slow.bound) == sorted(nodes.items())
    assert (slow.woken, slow.nominated) == ([], [])  # nobody is sent back to kube-scheduler's queue
    # A call that comes after its pod was bound: done, nothing posted.
    assert await call(client, "bind", bind_body(pods[1], nodes[pods[1].key])) == {"Error": ""}
    assert len(slow.bound) == 4
    assert sample(extender.metrics, "topogang_binds_failed_total", reason=BIND_CALL_BUDGET) == 0
    assert extender.scheduler.status("default/g").phase == "Scheduled"


async def test_a_pod_whose_binding_ahead_failed_is_woken_and_binds_through_its_own_call(aiohttp_client: Any) -> None:
    client, extender, _ = await start(aiohttp_client, bind_timeout=5.0, call_budget=1.0, bind_ahead=True)
    binder = FailingBinder("g-2")
    extender.binds.actions = binder
    pods = [member(i) for i in range(4)]
    for p in pods:
        extender.scheduler.observe_pod(p)
    await call(client, "filter", args(pods[0]))
    nodes = dict(extender.scheduler.plans["default/g"].plan.assignments)
    await settled(extender)
    assert sorted(binder.bound) == sorted((k, n) for k, n in nodes.items() if k != "default/g-2")
    assert binder.woken == [("default", "g-2")]  # kube-scheduler takes it again
    assert (await call(client, "filter", args(pods[2])))["NodeNames"] == [nodes["default/g-2"]]
    assert await call(client, "bind", bind_body(pods[2], nodes["default/g-2"])) == {"Error": ""}
    assert sorted(binder.bound) == sorted(nodes.items())


async def test_a_plain_pod_is_kept_off_the_gang_bound_ahead_until_the_watch_shows_its_pods(aiohttp_client: Any) -> None:
    client, extender, recorder = await start(aiohttp_client, bind_timeout=5.0, call_budget=1.0, bind_ahead=True)
    pods = [member(i) for i in range(4)]
    for p in pods:
        extender.scheduler.observe_pod(p)
    await call(client, "filter", args(pods[0]))  # planned and bound ahead: every node of the rack is full
    await settled(extender)
    assert len(recorder.bound) == 4
    web = pod("web")
    extender.scheduler.observe_pod(web)
    # kube-scheduler never assumed the gang's pods: its own filters find the rack empty and offer it.
    reply = await call(client, "filter", args(web))
    assert reply["NodeNames"] == []
    assert reply["FailedNodes"] == {}  # evicting anyone there would not seat it: no preemption
    assert set(reply["FailedAndUnresolvableNodes"]) == set(NODES)
    # The watch shows the pods bound: kube-scheduler's informer can too, and its filters take over.
    for key, node in recorder.bound:
        extender.scheduler.observe_pod(replace(extender.scheduler.state.pods[key], node_name=node))
    assert (await call(client, "filter", args(web)))["NodeNames"] == NODES
    # Its informer may yet show them later than our watch did: a bind onto a full node is refused.
    reply = await call(client, "bind", bind_body(web, NODES[0]))
    assert reply["Error"].startswith(f"topogang: node {NODES[0]} has 0 nvidia.com/gpu free, the pod asks 8")
    assert ("default/web", NODES[0]) not in recorder.bound
    assert sample(extender.metrics, "topogang_binds_failed_total", reason=BIND_REJECTED) == 1


async def test_a_plain_pods_room_is_reserved_while_its_binding_is_posted_and_given_back_if_it_fails(
    aiohttp_client: Any,
) -> None:
    client, extender, _ = await start(aiohttp_client, bind_timeout=5.0, call_budget=1.0)
    binder = FailingBinder("web")
    extender.binds.actions = binder
    web = pod("web")
    extender.scheduler.observe_pod(web)
    assert (await call(client, "bind", bind_body(web, NODES[0])))["Error"].endswith("the API server said no")
    assert extender.scheduler.state.reservations == {}  # its room is free again
    assert await call(client, "bind", bind_body(web, NODES[0])) == {"Error": ""}  # kube-scheduler's retry
    assert binder.bound == [("default/web", NODES[0])]
    assert extender.scheduler.state.reservations == {}  # bound: its pod counts the room now
    assert extender.scheduler.state.free_on(NODES[0], "nvidia.com/gpu") == 0


async def test_only_pods_kube_scheduler_is_not_holding_are_checked_until_the_watch_shows_them(
    aiohttp_client: Any,
) -> None:
    """kube-scheduler holds a pod assumed while its bind call waits; the members whose calls were
    answered past their budget were forgotten by it, and a plain pod bound through its own call
    never leaves its cache."""
    client, extender, _ = await start(aiohttp_client, bind_timeout=5.0, call_budget=0.1)
    posted = extender.scheduler.state.posted
    web = pod("web", gpus=0)  # (beside the gang's room)
    extender.scheduler.observe_pod(web)
    assert await call(client, "bind", bind_body(web, NODES[0])) == {"Error": ""}
    assert posted.pods == {}
    pods, nodes = await planned_nodes(client, extender)
    early = await asyncio.gather(*(call(client, "bind", bind_body(p, nodes[p.key])) for p in pods[:3]))
    assert all(r["Error"] for r in early)  # past their budget: kube-scheduler forgets them
    assert await call(client, "bind", bind_body(pods[3], nodes[pods[3].key])) == {"Error": ""}
    assert sorted(posted.pods) == sorted(p.key for p in pods[:3])
