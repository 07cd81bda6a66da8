"""Seed 001's PodGroup fields that steer how a gang that cannot run is reported:
markUnschedulable (Events on the pods) and schedulingBackoff (the UnschedulableOnNodePool
condition).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube.podgroup_status import status_body
from extender.server import wire
from extender.server.extender import Extender
from tests.builders import TOPO, grid, pod, podgroup
from tests.test_server_app import NODES, Recorder

T0 = "2026-01-01T00:00:00Z"
TOO_BIG = {"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "node"}}}


def scheduler_with(spec: dict[str, Any]) -> GangScheduler:
    state = ClusterState()
    for n in grid(nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    scheduler = GangScheduler(state)
    for i in range(2):
        scheduler.observe_pod(pod(f"g-{i}", group="g"))  # 2 pods x 8 GPUs never share a node
    return scheduler


@pytest.mark.parametrize(("backoff", "marked"), [(1, True), (-1, False), (None, False)])
def test_scheduling_backoff_1_marks_the_gang_unschedulable_on_the_node_pool_after_a_failed_attempt(
    backoff: int | None, marked: bool
) -> None:
    spec = dict(TOO_BIG) if backoff is None else {**TOO_BIG, "schedulingBackoff": backoff}
    scheduler = scheduler_with(spec)
    assert not scheduler.status("default/g").node_pool_unschedulable  # no attempt yet
    scheduler.filter(scheduler.state.pods["default/g-0"], NODES, 0.0)
    status = scheduler.status("default/g")
    assert status.reason == "NoDomain"
    assert status.node_pool_unschedulable is marked
    conditions = {c["type"]: c for c in status_body(status, None, T0)["conditions"]}
    if marked:
        assert conditions["UnschedulableOnNodePool"]["status"] == "True"
        assert conditions["UnschedulableOnNodePool"]["reason"] == "NoDomain"
        assert "in one node" in conditions["UnschedulableOnNodePool"]["message"]
    else:
        assert "UnschedulableOnNodePool" not in conditions


@pytest.mark.parametrize(("mark", "events"), [(False, 0), (True, 1), (None, 1)])
async def test_mark_unschedulable_false_sends_no_unschedulable_events_to_the_pods(
    mark: bool | None, events: int
) -> None:
    spec = dict(TOO_BIG) if mark is None else {**TOO_BIG, "markUnschedulable": mark}
    scheduler = scheduler_with(spec)
    recorder = Recorder()
    extender = Extender(scheduler, recorder, bind_timeout=5.0)
    refused = scheduler.state.pods["default/g-0"]
    body = {"metadata": {"name": refused.name, "namespace": refused.namespace, "uid": refused.uid}, "spec": {}}
    extender.filter(wire.decode_args(orjson.dumps({"Pod": body, "Nodes": None, "NodeNames": NODES})))
    await asyncio.sleep(0)
    assert len(recorder.events) == events
