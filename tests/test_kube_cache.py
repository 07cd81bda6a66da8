"""ClusterCache over scripted list+watch: readiness with absent APIs, and objects that do not
parse (a Node cannot be made invalid on a real API server, so it is tested here)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from extender.core.cluster import ClusterState
from extender.core.decisions import R_NOT_LEADER, Released
from extender.core.scheduler import GangScheduler
from extender.kube.cache import ClusterCache, CorePods
from extender.kube.resources import NODES, PODS, Resource
from extender.model.pod import parse_pod
from tests.builders import TOPO, grid, podgroup
from tests.kube_fakes import Routes, ScriptedApi, gone, line, until

WIDGETS = Resource("example.com", ("v1",), "Widget", "widgets", namespaced=True)


def node(name: str, rv: str, gpus: str = "8") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv, "managedFields": [{"manager": "x"}]},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": gpus}},
    }


async def test_a_node_that_does_not_parse_is_skipped_and_reported_once_per_problem() -> None:
    nodes = ScriptedApi(
        [([node("good", "1"), node("bad", "2", gpus="eight")], "2")],
        [
            [
                line("MODIFIED", node("bad", "3", gpus="eight")),  # same problem: not said again
                line("MODIFIED", node("good", "4", gpus="lots")),  # a good node goes bad: the last good one stays
                line("MODIFIED", node("bad", "5", gpus="nine")),  # another problem: said
                line("MODIFIED", node("bad", "6", gpus="4")),  # fixed
                line("MODIFIED", node("bad", "7", gpus="ten")),  # bad again: said again
            ]
        ],
    )
    scheduler = GangScheduler(ClusterState())
    state = scheduler.state
    with capture_logs() as logs:
        async with ClusterCache(Routes({"/api/v1/nodes": nodes}), scheduler, resources=[NODES]) as cache:
            await cache.wait_ready(5)
            await until(lambda: len(nodes.watch_calls) == 2, "the watch to be read")
    assert state.nodes["good"].allocatable["nvidia.com/gpu"] == 8000
    assert state.nodes["bad"].allocatable["nvidia.com/gpu"] == 4000  # from resourceVersion 6
    said = [(e["event"], e["object"], e["fields"], e["error"]) for e in logs if e["log_level"] == "warning"]
    assert said == [
        ("invalid Node skipped", "bad", ["status.allocatable.nvidia.com/gpu"], said[0][3]),
        ("invalid Node skipped", "good", ["status.allocatable.nvidia.com/gpu"], said[1][3]),
        ("invalid Node skipped", "bad", ["status.allocatable.nvidia.com/gpu"], said[2][3]),
        ("invalid Node skipped", "bad", ["status.allocatable.nvidia.com/gpu"], said[3][3]),
    ]
    assert ("'eight'" in said[0][3], "'nine'" in said[2][3]) == (True, True)


async def test_ready_when_every_resource_synced_or_is_absent_and_a_timeout_names_the_rest() -> None:
    nodes = ScriptedApi([([node("n1", "1")], "1")], [])
    scheduler = GangScheduler(ClusterState())
    async with ClusterCache(Routes({"/api/v1/nodes": nodes}), scheduler, resources=[NODES, WIDGETS]) as cache:
        await cache.wait_ready(5)
        assert cache.ready
        assert cache.status()["widgets.example.com"]["installed"] is False

    failing = ScriptedApi([], [])  # every list answers 500
    cache = ClusterCache(Routes({"/api/v1/pods": failing}), scheduler, resources=[PODS], backoff_cap=0.05)
    async with cache:
        with pytest.raises(TimeoutError, match="waiting for pods"):
            await cache.wait_ready(0.3)
        assert not cache.ready


def member(name: str, rv: str, uid: str = "") -> dict[str, Any]:
    """A pod of gang default/g (8 GPUs) as the API server lists it."""
    return {
        "metadata": {
            "namespace": "default",
            "name": name,
            "uid": uid or f"uid-{name}",
            "resourceVersion": rv,
            "annotations": {"pod-group-name": "g"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}}}]},
    }


def gang_scheduler() -> GangScheduler:
    """Rack r1 of 4 nodes of 8 GPUs, and PodGroup default/g of 2 pods."""
    state = ClusterState()
    for n in grid(nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": 2}, name="g"))
    return GangScheduler(state)


async def test_a_filter_call_between_two_slices_of_a_relist_never_plans_a_pod_that_is_gone() -> None:
    # While the watch was down the gang's two pods were deleted and replaced (a Job recreating
    # them). Deletions are applied first, so between slices the gang is short of pods or whole
    # with its new pods: never planned with a pod that no longer exists.
    old, new = {"default/old-0", "default/old-1"}, {"default/new-0", "default/new-1"}
    pods = ScriptedApi(
        [([member("old-0", "1"), member("old-1", "2")], "2"), ([member("new-0", "7"), member("new-1", "8")], "8")],
        [[gone("2")]],
    )
    scheduler = gang_scheduler()
    state = scheduler.state
    cache = ClusterCache(Routes({"/api/v1/pods": pods}), scheduler, resources=[PODS])
    cache.informers["pods"].slice_seconds = 0  # the loop runs between any two steps
    names = [n.name for n in grid(nodes=4)]
    seen: list[set[str]] = []  # the pods the core held at each filter call
    planned: list[set[str]] = []  # the pods of each plan made

    async def call_filter() -> None:
        while cache.informers["pods"].relists == 0:
            seen.append(set(state.pods))
            for key in sorted(state.pods):
                scheduler.filter(state.pods[key], names, 0.0)
            if "default/g" in scheduler.plans:
                planned.append(set(scheduler.plans["default/g"].reserved))
                scheduler.step_down(Released(R_NOT_LEADER))  # to plan afresh at the next call
            await asyncio.sleep(0)

    async with cache:
        await cache.wait_ready(5)
        await asyncio.wait_for(call_filter(), 5)
    assert {"default/new-0"} in seen  # filter calls ran with the relist half applied
    assert old in planned
    assert all(p in (old, new) for p in planned), planned


async def test_pods_learnt_from_kube_schedulers_calls_that_no_list_has_are_deleted() -> None:
    # kube-scheduler's calls can be ahead of the watch: the core learns of a pod from them. A pod
    # created and deleted while a relist was due is in no event the watch will ever send.
    pods = ScriptedApi([([member("a", "1")], "1"), ([member("a", "1")], "5")], [])
    scheduler = gang_scheduler()
    state = scheduler.state
    names = [n.name for n in grid(nodes=4)]
    scheduler.filter(parse_pod(member("ghost-0", "0")), names, 0.0)  # before the first list
    assert "default/ghost-0" in state.pods
    async with ClusterCache(Routes({"/api/v1/pods": pods}), scheduler, resources=[PODS]) as cache:
        await cache.wait_ready(5)
        assert set(state.pods) == {"default/a"}
        # Whole with the ghost: planned, with room reserved for a pod that is gone.
        scheduler.filter(parse_pod(member("ghost-1", "3")), names, 1.0)
        assert set(scheduler.reserved("default/g")) == {"default/a", "default/ghost-1"}
        pods.add_watch([gone("1")])
        await until(lambda: cache.informers["pods"].relists == 1, "the relist")
    assert set(state.pods) == {"default/a"}
    assert "default/g" not in scheduler.plans  # a member of its minimum went: the plan with it
    assert state.reservations == {}


def test_a_pod_the_core_learnt_after_a_list_was_requested_is_kept_for_the_watch_to_tell() -> None:
    scheduler = gang_scheduler()
    held = CorePods(scheduler.state, None)
    scheduler.observe_pod(parse_pod(member("before", "1")))
    mark = held.mark()
    scheduler.observe_pod(parse_pod(member("after", "2")))  # may be newer than the list
    assert list(held.held_before(mark)) == ["default/before"]
    assert list(CorePods(scheduler.state, "elsewhere").held_before(mark)) == []


async def test_events_without_apiversion_and_kind_are_applied_as_their_resources() -> None:
    # (list items come without them; some watch events too)
    pods = ScriptedApi(
        [([member("a", "1"), member("b", "2")], "2")],
        [[line("DELETED", member("a", "3")), line("MODIFIED", {**member("b", "4"), "status": {"phase": "Running"}})]],
    )
    scheduler = gang_scheduler()
    async with ClusterCache(Routes({"/api/v1/pods": pods}), scheduler, resources=[PODS]) as cache:
        await cache.wait_ready(5)
        await until(lambda: len(pods.watch_calls) == 2, "the watch to be read")
    assert list(scheduler.state.pods) == ["default/b"]
    assert scheduler.state.pods["default/b"].phase == "Running"
