"""Metrics and leadership at the HTTP edge: what a placed gang, a closed gate and a follower record.

Cluster and gang as in test_server_app: rack r1 of 4 nodes with 8 GPUs, PodGroup default/g of
4 pods x 8 GPUs required in one rack.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from extender.server.app import NOT_LEADER, create_app
from extender.server.metrics import BIND_FAILURES, Metrics
from tests.test_server_app import args, call, make, member


def bind_body(p: Any, node: str) -> bytes:
    return orjson.dumps({"PodName": p.name, "PodNamespace": "default", "PodUID": "", "Node": node})


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_a_placed_gang_records_requests_plan_wait_and_no_failed_binds(aiohttp_client: Any) -> None:
    scheduler, _, extender = make()
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    nodes = {p.key: (await call(client, "filter", args(p)))["NodeNames"][0] for p in pods}
    await asyncio.gather(*(call(client, "bind", bind_body(p, nodes[p.key])) for p in pods))
    m = extender.metrics
    assert sample(m, "topogang_extender_request_duration_seconds_count", verb="filter", code="200") == 4
    assert sample(m, "topogang_extender_request_duration_seconds_count", verb="bind", code="200") == 4
    assert sample(m, "topogang_plan_duration_seconds_count", outcome="planned") == 1
    assert sample(m, "topogang_gang_wait_seconds_count") == 1
    assert all(sample(m, "topogang_binds_failed_total", reason=r) == 0 for r in BIND_FAILURES)

    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in text_string_to_metric_families(await resp.text())}
    assert {
        "topogang_extender_request_duration_seconds",
        "topogang_plan_duration_seconds",
        "topogang_gang_wait_seconds",
        "topogang_binds_failed",
        "topogang_bind_gate_timeouts",
    } <= names


async def test_a_gate_that_times_out_counts_the_gang_and_each_failed_bind(aiohttp_client: Any) -> None:
    scheduler, _, extender = make(bind_timeout=0.1)
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    nodes = {p.key: (await call(client, "filter", args(p)))["NodeNames"][0] for p in pods}
    await asyncio.gather(*(call(client, "bind", bind_body(p, nodes[p.key])) for p in pods[:3]))
    m = extender.metrics
    assert sample(m, "topogang_bind_gate_timeouts_total") == 1
    assert sample(m, "topogang_binds_failed_total", reason="gate_timeout") == 3
    assert sample(m, "topogang_gang_wait_seconds_count") == 0
    await call(client, "bind", bind_body(pods[3], nodes[pods[3].key]))  # no plan any more
    assert sample(m, "topogang_binds_failed_total", reason="rejected") == 1


async def test_a_follower_is_synced_not_readyz_and_refuses_every_extender_call(aiohttp_client: Any) -> None:
    scheduler, recorder, extender = make()
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang", leading=lambda: False))
    p = member(0)
    scheduler.observe_pod(p)
    ready = await client.get("/readyz")
    assert (ready.status, await ready.text()) == (503, "not the leader")
    synced = await client.get("/synced")  # the Deployment's readiness: a synced follower is Ready
    assert (synced.status, await synced.text()) == (200, "ok")
    assert (await client.get("/healthz")).status == 200
    assert await call(client, "filter", args(p)) == {"Error": NOT_LEADER}
    assert await call(client, "bind", bind_body(p, "z1-b1-r1-n1")) == {"Error": NOT_LEADER}
    for verb in ("prioritize", "preempt"):
        resp = await client.post(f"/topogang/{verb}", data=args(p))
        assert resp.status == 503
        assert orjson.loads(await resp.read()) == {"Error": NOT_LEADER}
    assert not scheduler.plans
    assert recorder.bound == []
    m = extender.metrics
    assert sample(m, "topogang_binds_failed_total", reason="not_leader") == 1
    assert sample(m, "topogang_extender_request_duration_seconds_count", verb="prioritize", code="503") == 1


async def test_demotion_releases_every_plan_and_fails_the_binds_waiting(aiohttp_client: Any) -> None:
    scheduler, recorder, extender = make()
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    nodes = {p.key: (await call(client, "filter", args(p)))["NodeNames"][0] for p in pods}
    waiting = asyncio.ensure_future(call(client, "bind", bind_body(pods[0], nodes[pods[0].key])))
    await asyncio.sleep(0.05)
    extender.demote()
    assert (await waiting)["Error"] == "topogang: this replica is no longer the leader"
    assert not scheduler.plans
    assert not scheduler.state.reservations
    assert recorder.bound == []
    assert sample(extender.metrics, "topogang_binds_failed_total", reason="not_leader") == 1


def test_values_read_at_scrape_time_and_one_registry_per_app() -> None:
    held = {"Pending": 2, "Scheduled": 1}
    first, second = Metrics(), Metrics()  # two servers in one process do not collide
    first.gauge("topogang_podgroups", "Gangs by phase.", lambda: held, label="phase")
    first.counter("topogang_leader_transitions", "Times this replica became the leader.", lambda: 3)
    second.gauge("topogang_podgroups", "Gangs by phase.", dict, label="phase")
    assert sample(first, "topogang_podgroups", phase="Pending") == 2
    held["Pending"] = 0
    assert sample(first, "topogang_podgroups", phase="Pending") == 0
    assert sample(first, "topogang_leader_transitions_total") == 3
    assert sample(second, "topogang_podgroups", phase="Pending") == 0


def test_only_the_fixed_bind_failure_reasons_are_accepted() -> None:
    with pytest.raises(AssertionError):
        Metrics().bind_failed("some pod name")
