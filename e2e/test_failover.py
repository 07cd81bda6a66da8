"""Leader failover while a gang binds, on the real control plane: two `topogang serve` replicas
with leader election (the shipped Lease timings: 15 s duration, 10 s renew deadline, 2 s retry)
behind one address that, like the Service of the Deployment, reaches the leader
(e2e/failover.py). kube-scheduler calls that address, with a test-side extender after topogang
pacing the members (0.2 s per pod, from test_reliability) so the gang is in flight for seconds.

The leader is killed (SIGKILL: no Lease released, no label removed) when the tenth member of a
24-pod gang is steered. The standby, whose cache is warm from its own watch, must lead and serve
within 10 s of the Lease expiring, and the gang must end whole with nothing left reserved.
bench/failover_scale.py does the same at scale.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.failover import Kill, Replicas
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, install, wait_all_bound
from e2e.test_extender import TOPOLOGY
from e2e.test_operations import metrics, podgroup
from e2e.test_reliability import Slow, serving_slow
from e2e.topogang import CRDS, scheduler_config
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

GANG = 24
KILL_AT = 10
TAKEOVER_WITHIN = 10.0  # seconds after the Lease expired: the new leader has served a call


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def slow() -> AsyncIterator[Slow]:
    async with serving_slow() as extender:
        yield extender


async def test_the_standby_takes_over_a_gang_in_flight_and_binds_it_whole(
    kubeconfig: Path,
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    slow: Slow,
) -> None:
    await install(kube, CRDS, TOPOLOGY)
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=GANG)
    lease = (namespace, f"topogang-{uuid.uuid4().hex[:6]}")
    # Binding ahead off: the second extender that paces the gang must see every member (README).
    async with Replicas.start(kubeconfig, control_plane.logs_dir, lease=lease, args=["--bind-ahead=false"]) as pair:
        await pair.synced()
        config = scheduler_config(pair.url, pair.tls)
        config["extenders"].append(
            {"urlPrefix": slow.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "30s"}
        )
        await control_plane.restart_scheduler_async(config)
        try:
            kills: list[asyncio.Task[Kill]] = []

            async def kill_the_leader() -> None:
                kills.append(asyncio.create_task(pair.kill_leader()))

            slow.delay[namespace] = 0.2
            slow.hold[namespace] = (KILL_AT, 0.0, kill_the_leader)
            await create_podgroup(kube, namespace, "g", {"minMember": GANG})
            for i in range(GANG):
                await create(kube, gpu_pod(f"g-{i}", annotations={"pod-group-name": "g"}), namespace)

            async def killed() -> bool:
                return bool(kills)

            await eventually(killed, within=60, what=f"the leader to be killed at member {KILL_AT}")
            kill = await kills[0]
            placed = await wait_all_bound(kube, namespace, GANG, within=120)
            assert len(set(placed.values())) == GANG
            figures = pair.takeover(kill)
            print(f"failover: {figures}")
            assert figures["new_leader"] is not None, figures
            assert figures["served_after_expiry_s"] is not None, figures
            assert figures["served_after_expiry_s"] <= TAKEOVER_WITHIN, figures
            leader = pair.replicas[figures["new_leader"]]

            async def nothing_reserved() -> bool:
                pg = await podgroup(kube, namespace, "g")
                seen = await metrics(leader)
                return (
                    seen[("topogang_reservations", ())] == 0
                    and pg is not None
                    and "reservation" not in pg.get("status", {})
                    and pg["status"].get("bound") == GANG
                )

            await eventually(nothing_reserved, within=30, what="nothing reserved, PodGroup g showing all bound")
            assert (await metrics(leader))[("topogang_leader_transitions_total", ())] == 1
        finally:
            await control_plane.restart_scheduler_async(None)
