"""What the server accepts, over HTTP with the real core: only planned binds for gang members,
plain pods as the default binder would, bodies within the size limit (413 beyond), pod and node
names Kubernetes would accept (400 otherwise)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import orjson
import pytest

from extender.server.app import create_app
from tests.builders import pod
from tests.test_server_app import NODES, args, call, make, member


def binding(name: str, node: str, uid: str = "", namespace: str = "default") -> bytes:
    return orjson.dumps({"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node})


@pytest.fixture
async def server(aiohttp_client: Any) -> Any:
    scheduler, recorder, extender = make()
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang", max_body=64 * 1024))
    return client, scheduler, recorder


async def test_a_member_without_a_plan_is_refused_and_nothing_is_bound(server: Any) -> None:
    client, scheduler, recorder = server
    scheduler.observe_pod(member(0))  # 1/4 present: never planned
    reply = await call(client, "bind", binding("g-0", NODES[0]))
    assert reply == {"Error": "topogang: gang default/g has no plan for this pod; it will be retried"}
    assert recorder.bound == []


async def test_a_plain_pod_binds_where_kube_scheduler_says(server: Any) -> None:
    client, scheduler, recorder = server
    scheduler.observe_pod(pod("solo"))
    assert await call(client, "bind", binding("solo", NODES[2])) == {"Error": ""}
    assert recorder.bound == [("default/solo", NODES[2])]


async def test_a_call_for_a_replaced_pod_binds_nothing(server: Any) -> None:
    client, scheduler, recorder = server
    scheduler.observe_pod(replace(pod("solo"), uid="uid-new"))
    reply = await call(client, "bind", binding("solo", NODES[0], uid="uid-old"))
    assert reply == {"Error": "topogang: pod default/solo is now another pod (uid uid-new, not uid-old)"}
    assert recorder.bound == []
    assert await call(client, "bind", binding("solo", NODES[0], uid="uid-new")) == {"Error": ""}


async def test_a_body_over_the_limit_is_413_with_a_message(server: Any) -> None:
    client, _, _ = server
    names = [f"node-{i:06d}" for i in range(10_000)]  # about 150 KB, over this app's 64 KiB
    body = args(pod("solo"), names)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it is read
        for i in range(0, len(body), 8192):
            yield body[i : i + 8192]

    for data in (body, chunks()):
        resp = await client.post("/topogang/filter", data=data)
        assert resp.status == 413
        error = orjson.loads(await resp.read())["Error"]
        assert error == (
            "topogang: filter request body larger than the limit of 0.0625 MiB (--max-body, TOPOGANG_MAX_BODY; "
            "kube-scheduler sends full Nodes without nodeCacheCapable: true)"
        )
    assert (await client.post("/topogang/filter", data=args(pod("solo")))).status == 200


@pytest.mark.parametrize(
    ("verb", "body", "field"),
    [
        ("filter", args(pod("Bad_Name")), "ExtenderArgs.Pod.metadata.name: 'Bad_Name' is not a valid pod name"),
        ("prioritize", args(pod("ok", namespace="a.b")), "ExtenderArgs.Pod.metadata.namespace: 'a.b' is not a valid"),
        ("filter", args(pod("x" * 254)), "ExtenderArgs.Pod.metadata.name: 'xxxx"),
        ("bind", binding("../etc", NODES[0]), "ExtenderBindingArgs.PodName: '../etc' is not a valid pod name"),
        ("bind", binding("ok", NODES[0], namespace="-ns"), "ExtenderBindingArgs.PodNamespace: '-ns' is not"),
        ("bind", binding("ok", "Node 1"), "ExtenderBindingArgs.Node: 'Node 1' is not a valid node name"),
        (
            "preempt",
            orjson.dumps({"Pod": {"metadata": {"name": "a b", "namespace": "default"}}, "NodeNameToMetaVictims": {}}),
            "ExtenderPreemptionArgs.Pod.metadata.name: 'a b' is not a valid pod name",
        ),
    ],
    ids=["underscore", "dotted-namespace", "too-long", "path", "leading-dash", "space-in-node", "preempt"],
)
async def test_names_kubernetes_would_refuse_are_400(server: Any, verb: str, body: bytes, field: str) -> None:
    client, _, recorder = server
    resp = await client.post(f"/topogang/{verb}", data=body)
    assert resp.status == 400
    assert orjson.loads(await resp.read())["Error"].startswith(field)
    assert recorder.bound == []
