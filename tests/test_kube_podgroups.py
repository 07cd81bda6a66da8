"""PodGroupWriter against a fake API server: derived objects, status writes only on change,
Events on transitions, what a new leader learns from the objects, and failures.

Cluster: rack r1 of 4 nodes (z1-b1-r1-n1..n4), 8 GPUs each.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from structlog.testing import capture_logs

from extender.core.apply import apply_object, delete_object
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.grouping import ObjectIndex, synthesize
from extender.kube.client import ApiError
from extender.kube.podgroups import PodGroupWriter
from tests.builders import TOPO, grid, pod, podgroup
from tests.grouping_builders import kubeflow
from tests.kube_fakes import until

NODES = [n.name for n in grid(nodes=4)]
BASE = "/apis/scheduling.topogang.io/v1alpha1/namespaces"
G_PATH = f"{BASE}/default/podgroups/g"


class FakeApi:
    """PodGroups by path; apply merges what it is given, as server-side apply would for one manager."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.fail_status = False

    def put_object(self, path: str, uid: str, generation: int = 1, labels: Mapping[str, str] | None = None) -> None:
        self.objects[path] = {"metadata": {"uid": uid, "generation": generation, "labels": dict(labels or {})}}

    async def get(self, path: str) -> dict[str, Any]:
        self.calls.append(f"get {path}")
        if path not in self.objects:
            raise ApiError(404, "not found", reason="NotFound")
        return copy.deepcopy(self.objects[path])

    async def apply(
        self, path: str, body: Mapping[str, Any], *, field_manager: str, force: bool = True
    ) -> dict[str, Any]:
        assert field_manager == "topogang"
        self.calls.append(f"apply {path}")
        await asyncio.sleep(0)
        if path.endswith("/status"):
            if self.fail_status:
                raise ApiError(500, "etcd is having a bad day", reason="InternalError")
            obj = self.objects.get(path.removesuffix("/status"))
            if obj is None:
                raise ApiError(404, "not found", reason="NotFound")
            obj["status"] = copy.deepcopy(body["status"])
            return copy.deepcopy(obj)
        obj = self.objects.setdefault(path, {"metadata": {"uid": f"uid-{len(self.objects)}", "generation": 1}})
        obj["metadata"].update(copy.deepcopy(body["metadata"]))
        if "spec" in body and obj.get("spec") != body["spec"]:
            obj["metadata"]["generation"] += "spec" in obj
            obj["spec"] = copy.deepcopy(body["spec"])
        return copy.deepcopy(obj)

    def status_writes(self, path: str) -> int:
        return self.calls.count(f"apply {path}/status")


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []  # (object, type, reason, message)

    async def event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Normal",
        related: Mapping[str, str] | None = None,
    ) -> None:
        self.events.append((f"{involved['name']}/{involved['uid']}", type, reason, message))


def cluster(members: int = 2) -> GangScheduler:
    state = ClusterState()
    for n in grid(nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    rack = {"topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    state.set_podgroup("default/g", podgroup({"minMember": 3, **rack}, name="g", generation=2))
    scheduler = GangScheduler(state)
    for i in range(members):
        scheduler.observe_pod(pod(f"g-{i}", group="g"))
    return scheduler


def place(scheduler: GangScheduler, keys: list[str]) -> None:
    planned = {k: scheduler.filter(scheduler.state.pods[k], NODES, 0.0).nodes[0] for k in keys}
    for k, node in planned.items():
        for p, n in scheduler.bind(k, node, 1.0).bind:
            scheduler.observe_pod(replace(scheduler.state.pods[p], node_name=n))


def phase(api: FakeApi, path: str) -> tuple[str, str] | None:
    status = api.objects.get(path, {}).get("status")
    if not status:
        return None
    unschedulable = next(c for c in status["conditions"] if c["type"] == "Unschedulable")
    return status["phase"], unschedulable["reason"]


async def test_a_podgroup_object_gets_its_status_and_an_event_per_transition() -> None:
    scheduler, api, events = cluster(), FakeApi(), Events()
    api.put_object(G_PATH, "uid-g", generation=2)
    writer = PodGroupWriter(api, scheduler, events, interval=0.01, incomplete_grace=0.3)
    writer.start()
    try:
        await until(lambda: phase(api, G_PATH) == ("Pending", "GangIncomplete"), "a pending status")
        assert api.objects[G_PATH]["status"]["observedGeneration"] == 2
        assert events.events == []  # incomplete for less than the grace: pods may still be coming
        await until(lambda: bool(events.events), "the one Warning once the grace has passed")
        assert events.events == [("g/uid-g", "Warning", "Unschedulable", "PodGroup default/g: gang 2/3 pods present")]
        writer.touch("default/g")
        await asyncio.sleep(0.05)
        assert len(events.events) == 1
        scheduler.observe_pod(pod("g-2", group="g"))  # the feed: a pod changed
        place(scheduler, ["default/g-0", "default/g-1", "default/g-2"])
        writer.touch("default/g")  # the feed: a decision
        await until(lambda: phase(api, G_PATH) == ("Scheduled", "Scheduled"), "a scheduled status")
        status = api.objects[G_PATH]["status"]
        assert (status["pods"], status["planned"], status["bound"]) == (3, 3, 3)
        assert status["domains"] == {"PodGroup": "rack z1/b1/r1"}
        assert events.events[-1] == ("g/uid-g", "Normal", "Scheduled", "3 pod(s) bound")
        writes = api.status_writes(G_PATH)
        writer.touch("default/g")
        await asyncio.sleep(0.1)
        assert api.status_writes(G_PATH) == writes  # nothing changed: nothing written
        assert writer.phase_counts() == {"Pending": 0, "Scheduled": 1, "Invalid": 0, "Finished": 0}
        assert writer.writes["ok"] == writes
    finally:
        await writer.stop()


async def test_a_new_leader_learns_what_was_written_and_repeats_nothing() -> None:
    scheduler, api, events = cluster(), FakeApi(), Events()
    api.put_object(G_PATH, "uid-g")
    first = PodGroupWriter(api, scheduler, events, interval=0.01, incomplete_grace=0)
    first.start()
    await until(lambda: phase(api, G_PATH) is not None, "the first status")
    await first.stop()
    await asyncio.sleep(1.1)  # the written condition's time has a resolution of a second
    second = PodGroupWriter(api, scheduler, events, interval=0.01, incomplete_grace=0)
    second.start()
    try:
        await until(lambda: f"get {G_PATH}" in api.calls[1:], "the new leader to read the object")
        await asyncio.sleep(0.05)
        assert api.status_writes(G_PATH) == 1
        assert len(events.events) == 1
    finally:
        await second.stop()


def tfjob_cluster(workers: int = 4) -> GangScheduler:
    scheduler = GangScheduler(ClusterState())
    for n in grid(nodes=4):
        scheduler.state.upsert_node(n)
    workload = kubeflow("TFJob", {"Worker": workers})
    workload["metadata"]["uid"] = "uid-tfjob"
    made = synthesize(workload)
    for obj in (workload, *made.owners, *made.pods):
        apply_object(scheduler, obj)
    return scheduler


async def test_a_derived_gang_is_written_as_a_podgroup_owned_by_its_workload() -> None:
    scheduler, api, events = tfjob_cluster(), FakeApi(), Events()
    path = f"{BASE}/ml/podgroups/tfjob-train"
    writer = PodGroupWriter(api, scheduler, events, interval=0.01)
    writer.start()
    try:
        await until(lambda: phase(api, path) == ("Pending", "Waiting"), "the derived PodGroup's status")
        meta = api.objects[path]["metadata"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": "train",
                "uid": "uid-tfjob",
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ]
        assert meta["labels"] == {"app.kubernetes.io/managed-by": "topogang"}
        assert api.objects[path]["spec"] == {"minSubGroup": 1, "subGroups": [{"name": "worker", "minMember": 4}]}
        assert [s["name"] for s in api.objects[path]["status"]["subGroups"]] == ["worker"]
        assert events.events == []  # waiting to be planned is not worth an Event
        applies = api.calls.count(f"apply {path}")
        writer.touch("ml/tfjob-train")
        await asyncio.sleep(0.05)
        assert api.calls.count(f"apply {path}") == applies  # the same spec: not applied again
    finally:
        await writer.stop()


async def test_a_podgroup_of_that_name_that_topogang_does_not_manage_is_left_alone() -> None:
    scheduler, api, events = tfjob_cluster(), FakeApi(), Events()
    scheduler.state.set_podgroup("ml/tfjob-train", podgroup({"minMember": 1}, name="tfjob-train", namespace="ml"))
    writer = PodGroupWriter(api, scheduler, events, interval=0.01)
    with capture_logs() as logs:
        writer.start()
        try:
            await until(lambda: any(e["event"] == "podgroup not written" for e in logs), "a log line")
            writer.touch("ml/tfjob-train")
            await asyncio.sleep(0.05)
        finally:
            await writer.stop()
    assert not [c for c in api.calls if "tfjob-train" in c]
    assert sum(1 for e in logs if e["event"] == "podgroup not written") == 1


async def test_a_failed_write_is_one_log_line_and_is_tried_again() -> None:
    scheduler, api, events = cluster(), FakeApi(), Events()
    api.put_object(G_PATH, "uid-g")
    api.fail_status = True
    writer = PodGroupWriter(api, scheduler, events, interval=0.01, incomplete_grace=0)
    with capture_logs() as logs:
        writer.start()
        try:
            await until(lambda: writer.writes["failed"] == 1, "a failed write")
            failures = [e for e in logs if e["event"] == "podgroup status write failed"]
            assert failures[0]["group"] == "default/g"
            assert failures[0]["status"] == 500
            api.fail_status = False
            writer.touch("default/g")
            await until(lambda: phase(api, G_PATH) is not None, "the write to succeed later")
        finally:
            await writer.stop()
    assert events.events[0][2] == "Unschedulable"


async def test_a_gang_whose_status_cannot_be_read_is_logged_and_the_writer_goes_on() -> None:
    scheduler, api, events = cluster(), FakeApi(), Events()
    api.put_object(G_PATH, "uid-g")
    status, broken = scheduler.status, [True]

    def failing(group: str) -> Any:
        if broken[0]:
            raise IndexError("a bug reading this gang's status")
        return status(group)

    scheduler.status = failing  # type: ignore[method-assign]
    writer = PodGroupWriter(api, scheduler, events, interval=0.01, incomplete_grace=0)
    with capture_logs() as logs:
        writer.start()
        try:
            await until(lambda: any(e["event"] == "podgroup status failed" for e in logs), "the failure logged")
            failed = next(e for e in logs if e["event"] == "podgroup status failed")
            assert (failed["group"], failed["log_level"]) == ("default/g", "error")
            broken[0] = False
            writer.touch("default/g")
            await until(lambda: phase(api, G_PATH) is not None, "the writer to go on and write it")
        finally:
            await writer.stop()


@pytest.mark.parametrize("running", [False, True])
async def test_only_a_running_writer_listens(running: bool) -> None:
    scheduler, api, events = cluster(), FakeApi(), Events()
    api.put_object(G_PATH, "uid-g")
    writer = PodGroupWriter(api, scheduler, events, interval=0.01, resync=3600)
    if running:
        writer.start()
        await until(lambda: phase(api, G_PATH) is not None, "the first status")
    scheduler.observe_pod(pod("g-2", group="g"))

    def pods_written() -> int | None:
        status = api.objects[G_PATH].get("status")
        return status["pods"] if status else None

    if running:  # it writes the new count, however long a loaded machine takes
        await until(lambda: pods_written() == 3, "the new pod count")
    else:  # no writer runs: nothing can write, however long one waits
        await asyncio.sleep(0.05)
        assert pods_written() is None
    await writer.stop()


async def test_the_podgroup_of_a_deleted_workload_is_not_written_again() -> None:
    scheduler, api, events = tfjob_cluster(), FakeApi(), Events()
    path = f"{BASE}/ml/podgroups/tfjob-train"
    writer = PodGroupWriter(api, scheduler, events, interval=0.01)
    writer.start()
    try:
        await until(lambda: phase(api, path) is not None, "the derived PodGroup")
        delete_object(
            scheduler,
            {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "train", "namespace": "ml"}},
        )
        del api.objects[path]  # the garbage collector took it; the pods are still terminating
        calls = len(api.calls)
        writer.touch("ml/tfjob-train")
        await asyncio.sleep(0.05)
        assert api.calls[calls:] == []
        assert path not in api.objects
    finally:
        await writer.stop()


async def test_a_split_of_kubernetes_own_gang_is_said_on_its_root_object_too() -> None:
    from tests.test_upstream_gangs import RACK, group
    from tests.test_upstream_gangs import pod as upstream_pod

    state = ClusterState()
    for n in grid(nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    scheduler = GangScheduler(state)
    root = group("train", 2, [RACK])
    root["metadata"]["uid"] = "uid-train"
    apply_object(scheduler, root)
    for i in range(2):
        apply_object(scheduler, upstream_pod(f"w-{i}", group="train"))
    planned = scheduler.filter(state.pods["ml/w-0"], NODES, 0.0)
    assert planned.nodes
    elsewhere = next(n for n in NODES if n not in scheduler.plans["ml/podgroup-train"].reserved.values())
    scheduler.observe_pod(replace(state.pods["ml/w-1"], node_name=elsewhere))
    api, events = FakeApi(), Events()
    upstream = "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train"
    api.put_object(upstream, "uid-train")
    writer = PodGroupWriter(api, scheduler, events, interval=0.01)
    writer.start()
    try:
        await until(lambda: "status" in api.objects[upstream], "the condition on Kubernetes' PodGroup")
        (condition,) = api.objects[upstream]["status"]["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "GangSplit",
            "True",
            "SplitBetweenDeciders",
        )
        assert f"pod ml/w-1 was bound to node {elsewhere} by another scheduler" in condition["message"]
        await until(lambda: len(events.events) >= 2, "the Events")
        assert sorted((e[0], e[2]) for e in events.events) == [
            ("podgroup-train/uid-1", "GangSplit"),
            ("train/uid-train", "GangSplit"),
        ]
    finally:
        await writer.stop()


async def test_a_trainjobs_gang_tells_its_events_on_the_trainjob_too() -> None:
    from tests.test_grouping_trainjob import runtime, trainjob

    scheduler = GangScheduler(ClusterState())
    for n in grid(nodes=4):
        scheduler.state.upsert_node(n)
    tj = trainjob(annotations={"kai.scheduler/topology-required-placment": "rack"})  # a typo: Invalid
    tj["metadata"]["uid"] = "uid-tj"
    made = synthesize(tj, objects=ObjectIndex([runtime()]))
    for obj in (tj, *made.owners, *made.pods):
        apply_object(scheduler, obj)
    api, events = FakeApi(), Events()
    writer = PodGroupWriter(api, scheduler, events, interval=0.01, incomplete_grace=0)
    writer.start()
    try:
        await until(lambda: any(o == "tj/uid-tj" for o, *_ in events.events), "an Event on the TrainJob")
    finally:
        await writer.stop()
    on_podgroup = [e[1:] for e in events.events if e[0].startswith("trainjob-tj/")]
    on_trainjob = [e[1:] for e in events.events if e[0] == "tj/uid-tj"]
    assert on_trainjob == on_podgroup
    assert on_trainjob[0][0] == "Warning"
    assert "did you mean kai.scheduler/topology-required-placement" in on_trainjob[0][2]
