"""A ResourceInterface whose jq never ends, on the server's path: the extender groups pods on its
event loop (inside a filter call), so the loop is blocked at most the jq budget, once per
workload object (the verdict is remembered), and the other gangs keep being scheduled.

Cluster: one rack of 4 nodes of 8 GPUs (tests/test_server_app.py); a RayCluster grouped by a
ResourceInterface whose head componentName is `def f: f; f`, and the 4-pod PodGroup `g`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from extender.core.apply import apply_object
from extender.grouping import synthesize
from extender.model.limits import JQ_TIME_BUDGET_SECONDS
from extender.model.pod import parse_pod
from extender.server.app import create_app
from tests.test_server_app import args, call, make, member

RI = {
    "apiVersion": "scheduling.topogang.io/v1alpha1",
    "kind": "ResourceInterface",
    "metadata": {"name": "ray"},
    "spec": {
        "targetGVK": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
        "gangScheduling": {"podGroups": [{"subgroups": [{"componentName": "(def f: f; f)", "minReplicas": "1"}]}]},
    },
}
RAY = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "rc", "namespace": "default"},
    "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "c"}]}}}},
}


async def longest_stall(work: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    """Run `work` on the loop while a ticker measures the longest time the loop did not run it."""
    stalls: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            stalls.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.02)
    result = await work()
    stop.set()
    await ticker
    return result, max(stalls)


async def test_a_runaway_expression_blocks_the_loop_at_most_its_budget_once(aiohttp_client: Any) -> None:
    scheduler, _, extender = make()
    client = await aiohttp_client(create_app(extender, lambda: True, "/topogang"))
    apply_object(scheduler, RI)
    apply_object(scheduler, RAY)
    head = parse_pod(synthesize(RAY).pods[0])
    scheduler.observe_pod(head)

    reply, stall = await longest_stall(lambda: call(client, "filter", args(head)))
    why = (
        "ResourceInterface ray: spec.gangScheduling.podGroups[0].subgroups[0].componentName:"
        f" expression '(def f: f; f)' did not finish within the {JQ_TIME_BUDGET_SECONDS:g} s budget"
    )
    assert reply["NodeNames"] == []
    assert all(why in text for text in reply["FailedAndUnresolvableNodes"].values())
    # the budget, plus starting a worker process: far from forever
    assert stall < 2 * JQ_TIME_BUDGET_SECONDS

    # Another pod of the same RayCluster makes its family regroup: the verdict is remembered.
    second = parse_pod({**synthesize(RAY).pods[0], "metadata": {**synthesize(RAY).pods[0]["metadata"], "name": "x"}})
    scheduler.observe_pod(second)
    reply, stall = await longest_stall(lambda: call(client, "filter", args(second)))
    assert all(why in text for text in reply["FailedAndUnresolvableNodes"].values())
    assert stall < JQ_TIME_BUDGET_SECONDS / 2

    # The other gang is planned and steered meanwhile.
    pods = [member(i) for i in range(4)]
    for p in pods:
        scheduler.observe_pod(p)
    assert len((await call(client, "filter", args(pods[0])))["NodeNames"]) == 1
