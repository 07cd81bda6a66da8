"""The local control plane schedules and "runs" a GPU pod on fake GPU nodes with the stock
kube-scheduler (no extender)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import client

from e2e.controlplane import (
    ComponentError,
    ControlPlane,
    FakeGpuNodes,
    FakeTopology,
    SchedulerSwitch,
    create_pod,
    gpu_pod,
    read_pod,
    wait_for,
    wait_pod_running,
    wait_pod_unschedulable,
)

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only, pytest.mark.asyncio(loop_scope="session")]


async def test_a_pod_asking_for_8_gpus_is_bound_to_a_fake_gpu_node_and_runs(
    control_plane: ControlPlane,
    kube_api: client.ApiClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
) -> None:
    names = await fake_gpu_nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=2, nodes_per_rack=4))
    assert len(names) == 8
    core = client.CoreV1Api(kube_api)
    node = await core.read_node(names[0])
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.metadata.labels["topology.topogang.io/rack"] == "z0-b0-r0"

    await create_pod(kube_api, namespace, gpu_pod("eight-gpus", 8))
    pod = await wait_pod_running(kube_api, namespace, "eight-gpus")
    assert pod.spec.node_name in names
    assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)

    # GPUs are really accounted for: no node has 9, so this one stays Pending.
    await create_pod(kube_api, namespace, gpu_pod("nine-gpus", 9))
    message = await wait_pod_unschedulable(kube_api, namespace, "nine-gpus")
    assert "nvidia.com/gpu" in message

    control_plane.check()  # every component is still alive


async def test_nodes_added_later_take_pods(
    kube_api: client.ApiClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    (first,) = await fake_gpu_nodes.create(FakeTopology(nodes_per_rack=1))
    await create_pod(kube_api, namespace, gpu_pod("full-node-a", 8))
    await create_pod(kube_api, namespace, gpu_pod("full-node-b", 8))

    # One of them gets the only node (which one is the scheduler's business), the other waits.
    async def one_bound() -> tuple[str, str] | None:
        a = await read_pod(kube_api, namespace, "full-node-a")
        b = await read_pod(kube_api, namespace, "full-node-b")
        if bool(a.spec.node_name) == bool(b.spec.node_name):
            return None
        return ("full-node-a", "full-node-b") if a.spec.node_name else ("full-node-b", "full-node-a")

    bound, waiting = await wait_for(one_bound, timeout_s=60, what="exactly one of the two pods to be bound")
    assert (await wait_pod_running(kube_api, namespace, bound)).spec.node_name == first
    await wait_pod_unschedulable(kube_api, namespace, waiting)

    (added,) = await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=1)
    pod = await wait_pod_running(kube_api, namespace, waiting)
    assert pod.spec.node_name == added


async def test_kube_scheduler_restarts_with_an_extender_config(
    kube_api: client.ApiClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    scheduler: SchedulerSwitch,
) -> None:
    """The way extender tests use the plane: a server in the test's event loop, and
    kube-scheduler restarted with an `extenders:` section pointing at it."""
    names = await fake_gpu_nodes.create(FakeTopology(nodes_per_rack=4))
    chosen = names[2]
    calls: list[dict[str, Any]] = []

    async def filter_verb(request: web.Request) -> web.Response:
        args = await request.json()
        calls.append(args)
        offered = args.get("NodeNames") or []
        return web.json_response(
            {
                "NodeNames": [n for n in offered if n == chosen],
                "FailedNodes": {n: "not the chosen node" for n in offered if n != chosen},
                "Error": "",
            }
        )

    app = web.Application()
    app.router.add_post("/filter", filter_verb)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    try:
        config_path = await scheduler.use(
            {
                "extenders": [
                    {
                        "urlPrefix": f"http://127.0.0.1:{port}",
                        "filterVerb": "filter",
                        "nodeCacheCapable": True,
                        "managedResources": [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}],
                    }
                ]
            }
        )
        written = yaml.safe_load(config_path.read_text())
        assert written["leaderElection"] == {"leaderElect": False}
        assert written["extenders"][0]["urlPrefix"] == f"http://127.0.0.1:{port}"

        await create_pod(kube_api, namespace, gpu_pod("via-extender", 8))
        pod = await wait_pod_running(kube_api, namespace, "via-extender")
        assert pod.spec.node_name == chosen
        assert calls
        assert calls[0]["Pod"]["metadata"]["name"] == "via-extender"
    finally:
        await runner.cleanup()


async def test_scheduler_flags_per_start_reach_kube_scheduler_and_its_metrics_are_readable(
    control_plane: ControlPlane, scheduler: SchedulerSwitch
) -> None:
    """The side-by-side benchmark starts kube-scheduler with feature gates for one variant and
    reads its /metrics: a gate it does not know makes it refuse to start, so the flag got there."""
    await scheduler.stop()
    with pytest.raises(ComponentError, match="NoSuchGate"):
        await control_plane.start_scheduler_async(None, ["--feature-gates=NoSuchGate=true"])
    # (GenericWorkload would not do here: kube-scheduler then waits for the scheduling.k8s.io
    # v1beta1 informers, which an API server without that group never syncs.)
    await control_plane.start_scheduler_async(None, ["--feature-gates=OpportunisticBatching=false"])
    metrics = control_plane.component_get("kube-scheduler", "/metrics").decode()
    assert "\nscheduler_" in metrics  # kube-scheduler's own families, not only the process's
