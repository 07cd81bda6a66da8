"""PodGroup fields of KAI-Scheduler's hierarchical PodGroup design that steer how a gang that
cannot run is reported: markUnschedulable (Events on the pods) and schedulingBackoff (the
UnschedulableOnNodePool condition).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from extender.core.apply import apply_object
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


KAI_QUEUE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "queues.scheduling.run.ai"},
}


def queued(installed: list[str], queues: list[tuple[str, str, str]]) -> GangScheduler:
    scheduler = scheduler_with({"minMember": 2, "queue": "team-a"})
    for kind in installed:
        scheduler.state.set_queue_api(kind, True)
    for key in queues:
        scheduler.state.set_queue(key, True)
    return scheduler


def test_a_queue_that_does_not_exist_keeps_the_gang_pending_with_that_reason() -> None:
    scheduler = queued(["scheduling.run.ai/Queue"], [("scheduling.run.ai/Queue", "", "team-b")])
    result = scheduler.filter(scheduler.state.pods["default/g-0"], NODES, 0.0)
    assert result.nodes == []
    status = scheduler.status("default/g")
    assert (status.phase, status.reason) == ("Pending", "QueueNotFound")
    assert status.message == (
        "PodGroup default/g: spec.queue 'team-a' does not exist: no Queue (scheduling.run.ai) has that name"
    )
    assert status.unschedulable


@pytest.mark.parametrize(
    "queue",
    [("scheduling.run.ai/Queue", "", "team-a"), ("kueue.x-k8s.io/LocalQueue", "default", "team-a")],
    ids=["kai-queue", "kueue-local-queue"],
)
def test_an_existing_queue_lets_the_gang_be_planned(queue: tuple[str, str, str]) -> None:
    scheduler = queued([], [queue])
    assert scheduler.filter(scheduler.state.pods["default/g-0"], NODES, 0.0).nodes
    assert "queue" not in scheduler.status("default/g").message


def test_a_local_queue_of_another_namespace_does_not_count() -> None:
    scheduler = queued([], [("kueue.x-k8s.io/LocalQueue", "other", "team-a")])
    assert scheduler.filter(scheduler.state.pods["default/g-0"], NODES, 0.0).nodes == []
    assert "no LocalQueue in namespace default has that name" in scheduler.status("default/g").message


def test_without_any_queue_api_the_field_is_ignored_with_a_warning() -> None:
    scheduler = queued([], [])
    assert scheduler.filter(scheduler.state.pods["default/g-0"], NODES, 0.0).nodes
    assert scheduler.status("default/g").message.endswith(
        "spec.queue 'team-a' ignored: neither KAI's Queue nor Kueue's LocalQueue API is installed"
    )


def test_a_queue_crd_in_the_input_installs_its_api() -> None:
    scheduler = scheduler_with({"minMember": 2, "queue": "team-a"})
    apply_object(scheduler, KAI_QUEUE_CRD)
    assert scheduler.state.queue_apis == {"scheduling.run.ai/Queue"}
    assert scheduler.status("default/g").reason == "QueueNotFound"
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team-a"}}
    apply_object(scheduler, queue)
    assert scheduler.filter(scheduler.state.pods["default/g-0"], NODES, 0.0).nodes


def test_a_gang_missing_pods_is_not_a_failed_attempt_for_the_backoff() -> None:
    state = ClusterState()
    for n in grid(nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({**TOO_BIG, "schedulingBackoff": 1}, name="g"))
    scheduler = GangScheduler(state)
    scheduler.observe_pod(pod("g-0", group="g"))
    scheduler.filter(state.pods["default/g-0"], NODES, 0.0)
    status = scheduler.status("default/g")
    assert status.reason == "GangIncomplete"
    assert not status.node_pool_unschedulable
