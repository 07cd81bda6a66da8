"""Leader failover while a gang binds, on the real control plane: two `topogang serve` replicas
with leader election (the shipped Lease timings: 15 s duration, 10 s renew deadline, 2 s retry)
behind one address that, like the Service of the Deployment, reaches the leader with each new
connection (e2e/failover.py). kube-scheduler calls that address, with a test-side extender after
topogang pacing the members (0.2 s per pod, from test_reliability) so the gang is in flight for
seconds.

When the tenth member of a 24-pod gang is steered, the leader is lost, two ways:
- killed (SIGKILL: no Lease released, no label removed): kube-scheduler's connection breaks;
- demoted alive: the Lease is given to the standby. kube-scheduler keeps its HTTP/2 connection
  to the old leader, which must close it (GOAWAY) so that the next call reaches the new one.
Either way the standby, whose cache is warm from its own watch, must lead and serve within 10 s
of the Lease being free, the gang must end whole with nothing left reserved, and the old leader
must write nothing after losing the Lease. bench/failover_scale.py does the same at scale.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.failover import Loss, Replicas, log_entries
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, install, wait_all_bound
from e2e.test_extender import TOPOLOGY
from e2e.test_operations import metrics, podgroup
from e2e.test_reliability import Slow, serving_slow
from e2e.topogang import CRDS, scheduler_config
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

GANG = 24
LOSE_AT = 10
TAKEOVER_WITHIN = 10.0  # seconds after the Lease was free: the new leader has served a call
WRITES = ("bound", "evicted", "gang preempting", "gang repairing", "room held")  # log lines of writes


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def slow() -> AsyncIterator[Slow]:
    async with serving_slow() as extender:
        yield extender


@contextlib.asynccontextmanager
async def failover(
    kubeconfig: Path,
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    slow: Slow,
    lose: Callable[[Replicas], Awaitable[Loss]],
) -> AsyncIterator[tuple[Replicas, Loss, dict[str, object]]]:
    """The gang in flight, the leader lost by LOSE at member LOSE_AT; yields once the gang is
    whole, nothing is reserved and the PodGroup says so (with the takeover's figures), while
    both replicas still run."""
    await install(kube, CRDS, TOPOLOGY)
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=GANG)
    lease = (namespace, f"topogang-{uuid.uuid4().hex[:6]}")
    # Binding ahead off: the second extender that paces the gang must see every member (docs/cli.md, --bind-ahead).
    async with Replicas.start(kubeconfig, control_plane.logs_dir, lease=lease, args=["--bind-ahead=false"]) as pair:
        await pair.synced()
        config = scheduler_config(pair.url, pair.tls)
        config["extenders"].append(
            {"urlPrefix": slow.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "30s"}
        )
        await control_plane.restart_scheduler_async(config)
        try:
            losses: list[asyncio.Task[Loss]] = []

            async def lose_the_leader() -> None:
                losses.append(asyncio.create_task(lose(pair)))

            slow.delay[namespace] = 0.2
            slow.hold[namespace] = (LOSE_AT, 0.0, lose_the_leader)
            await create_podgroup(kube, namespace, "g", {"minMember": GANG})
            for i in range(GANG):
                await create(kube, gpu_pod(f"g-{i}", annotations={"pod-group-name": "g"}), namespace)

            async def lost() -> bool:
                return bool(losses)

            await eventually(lost, within=60, what=f"the leader to be lost at member {LOSE_AT}")
            loss = await losses[0]
            placed = await wait_all_bound(kube, namespace, GANG, within=120)
            assert len(set(placed.values())) == GANG
            figures = pair.takeover(loss)
            print(f"failover: {figures}")
            assert figures["new_leader"] is not None, figures
            assert figures["served_after_free_s"] is not None, figures
            assert figures["served_after_free_s"] <= TAKEOVER_WITHIN, figures
            leader = pair.replicas[str(figures["new_leader"])]

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
            yield pair, loss, figures
        finally:
            await control_plane.restart_scheduler_async(None)


async def test_the_standby_takes_over_a_gang_in_flight_when_the_leader_is_killed(
    kubeconfig: Path,
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    slow: Slow,
) -> None:
    async with failover(kubeconfig, control_plane, kube, namespace, fake_gpu_nodes, slow, Replicas.kill_leader):
        pass


async def test_a_leader_demoted_alive_hands_kube_schedulers_calls_to_the_new_leader(
    kubeconfig: Path,
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    fake_gpu_nodes: FakeGpuNodes,
    slow: Slow,
) -> None:
    scene = failover(kubeconfig, control_plane, kube, namespace, fake_gpu_nodes, slow, Replicas.hand_over)
    async with scene as (pair, loss, figures):
        old = pair.replicas[loss.name]
        assert old.process.returncode is None  # it stayed up all along
        entries = log_entries(old.log_path)
        events = [e.get("event") for e in entries]
        lost_at = events.index("lost leadership")
        assert "connections closed" in events[lost_at:], events[lost_at:]
        wrote = [e for e in entries[lost_at:] if e.get("event") in WRITES]
        assert wrote == [], wrote  # a follower binds, evicts and holds nothing
        assert pair.service.routed[str(figures["new_leader"])] >= 1  # kube-scheduler reconnected there
