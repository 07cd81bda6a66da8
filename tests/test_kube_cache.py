"""ClusterCache over scripted list+watch: readiness with absent APIs, and objects that do not
parse (a Node cannot be made invalid on a real API server, so it is tested here)."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube.cache import ClusterCache
from extender.kube.resources import NODES, PODS, Resource
from tests.kube_fakes import Routes, ScriptedApi, line, until

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
