"""The moves of the last hour survive a change of leader: a `Moved` Event written by KubeActions
(the leader's own write path) is read back by a new leader's `read_back` on the real API server,
with the moved pod's controller as the related object; other Events are not taken for moves."""

from __future__ import annotations

import datetime
import time

import pytest

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube import KubeActions, KubeClient
from extender.kube.moved import MOVED, past_moves, read_back

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only, pytest.mark.asyncio(loop_scope="session")]

OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7f9", "uid": "rs-uid-1"}


def pod(namespace: str, name: str) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": f"uid-{name}"}


async def test_a_new_leader_reads_the_hours_moves_back_from_the_events_the_last_one_wrote(
    kube: KubeClient, namespace: str
) -> None:
    actions = KubeActions(kube)
    await actions.event(
        pod(namespace, "web-a"), MOVED, "Moved out of rack r0", related={**OWNER, "namespace": namespace}
    )
    await actions.event(
        pod(namespace, "web-b"), MOVED, "Moved out of rack r1", related={**OWNER, "namespace": namespace}
    )
    await actions.event(pod(namespace, "web-c"), "Preempted", "Preempted by ml/big")  # not a move
    await kube.post(  # a Moved Event by someone else: not topogang's move
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        {
            "metadata": {"name": "other.1"},
            "eventTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": "example.com/mover",
            "reportingInstance": "x",
            "action": "Move",
            "reason": MOVED,
            "type": "Normal",
            "regarding": pod(namespace, "web-d"),
        },
    )

    wall, now = time.time(), time.monotonic()
    moves = [m for m in await past_moves(kube, wall, now, 3600.0) if m.pod.startswith(f"{namespace}/")]
    assert sorted(m.pod for m in moves) == [f"{namespace}/web-a", f"{namespace}/web-b"]
    assert {m.owner for m in moves} == {"rs-uid-1"}
    for m in moves:  # written a moment ago, on either clock
        assert now - 120 < m.at <= now + 1
        assert wall - 120 < m.created_after <= wall + 1

    scheduler = GangScheduler(ClusterState())
    defrag = scheduler.defragmenting
    defrag.moves.known = False
    await read_back(kube, defrag)
    assert defrag.moves.known
    # every move of the hour counts, this test's two among them (other tests may have moved pods)
    assert defrag.moves.room_left(time.monotonic()) <= defrag.settings.per_hour - 2
