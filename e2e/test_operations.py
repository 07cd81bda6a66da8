"""Operations on the real control plane: PodGroup objects and their status, Events, /metrics, and
two replicas electing a leader on a Lease.

Setup (once for the module): the CRDs of topogang and of the workload kinds, the Topology
`e2e-dc` over the fake nodes' labels, `topogang serve` (no leader election: one process) and
kube-scheduler restarted from scheduler-config/extender.yaml pointed at it. The leader-election
test starts two more servers of its own against the same API server, with short Lease timings,
each told (POD_NAME, POD_NAMESPACE) it runs in a gated Pod object that stands for its replica.
Each test has its own namespace and fake GPU nodes (8 GPUs each), drawn in the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from e2e.controlplane import ControlPlane, FakeGpuNodes, FakeTopology
from e2e.scenario import create, create_podgroup, eventually, gpu_pod, wait_all_bound
from e2e.test_extender import RACK, TOPOLOGY, create_tfjob
from e2e.topogang import Topogang, serving
from extender.kube.client import ApiError, KubeClient
from extender.kube.leader_label import LEADER_LABEL

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

PODGROUPS = "/apis/scheduling.topogang.io/v1alpha1/namespaces/{ns}/podgroups"
NOT_LEADER = "topogang: not the leader"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def topogang(kubeconfig: Path, control_plane: ControlPlane) -> AsyncIterator[Topogang]:
    async with serving(kubeconfig, control_plane, TOPOLOGY) as server:
        yield server


async def podgroup(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await kube.get(f"{PODGROUPS.format(ns=namespace)}/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def condition(pg: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in pg.get("status", {}).get("conditions", []) if c["type"] == kind), {})


async def podgroup_events(kube: KubeClient, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, note) of the events.k8s.io Events about PodGroup NAME."""
    listing = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [
        (e.get("type", ""), e.get("reason", ""), e.get("note", ""))
        for e in listing.get("items", [])
        if e.get("regarding", {}).get("kind") == "PodGroup" and e.get("regarding", {}).get("name") == name
    ]


async def metrics(server: Topogang) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = await server.request("GET", "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# -- a TFJob's PodGroup: owner, spec, status, Events, garbage collection, metrics ----------------------


async def test_a_tfjob_gets_a_podgroup_that_shows_where_it_landed_and_goes_with_it(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 .. z0-b0-r3, 4 nodes each: the 16 workers take one rack per segment of 4
    await fake_gpu_nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=4, nodes_per_rack=4))
    names = await create_tfjob(kube, namespace, zone_required=False)
    await wait_all_bound(kube, namespace, len(names))
    tfjob = await kube.get(f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/train")

    async def scheduled() -> dict[str, Any] | None:
        pg = await podgroup(kube, namespace, "tfjob-train")
        status = (pg or {}).get("status", {})
        return pg if status.get("phase") == "Scheduled" and status.get("bound") == len(names) else None

    pg = await eventually(scheduled, within=60, what="PodGroup tfjob-train to be Scheduled with every pod bound")
    assert pg["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "name": "train",
            "uid": tfjob["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    assert pg["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "topogang"
    managers = {f["manager"] for f in pg["metadata"].get("managedFields", [])}
    assert "topogang" in managers
    spec = pg["spec"]
    segments = [f"worker-seg-{k}" for k in range(4)]
    assert {sg["name"]: sg.get("minMember") for sg in spec["subGroups"] if sg["name"] in segments} == dict.fromkeys(
        segments, 4
    )
    assert {
        k: v["requiredTopologyLevel"] for k, v in spec["topologyConstraints"]["subGroups"].items()
    } == dict.fromkeys(segments, RACK)

    status = pg["status"]
    assert (status["pods"], status["planned"], status["bound"]) == (17, 17, 17)
    per_subgroup = {sg["name"]: sg for sg in status["subGroups"]}
    racks = set()
    for seg in segments:
        assert (per_subgroup[seg]["minMember"], per_subgroup[seg]["bound"]) == (4, 4)
        assert per_subgroup[seg]["domain"].startswith("rack z0/")
        assert status["domains"][seg] == per_subgroup[seg]["domain"]
        racks.add(per_subgroup[seg]["domain"])
    assert len(racks) == 4  # one rack per segment
    assert (condition(pg, "Scheduled")["status"], condition(pg, "Scheduled")["reason"]) == ("True", "Scheduled")
    assert condition(pg, "Unschedulable")["status"] == "False"
    assert condition(pg, "Scheduled")["observedGeneration"] == pg["metadata"]["generation"]

    async def scheduled_event() -> bool:
        return any(e[:2] == ("Normal", "Scheduled") for e in await podgroup_events(kube, namespace, "tfjob-train"))

    await eventually(scheduled_event, within=30, what="a Normal Scheduled Event on PodGroup tfjob-train")

    seen = await metrics(topogang)
    # (the gang is bound ahead as it is planned: members kube-scheduler had not reached yet are
    # bound before it asks about them, so there are fewer calls than pods)
    assert seen[("topogang_extender_request_duration_seconds_count", (("code", "200"), ("verb", "filter")))] >= 1
    assert seen[("topogang_extender_request_duration_seconds_count", (("code", "200"), ("verb", "bind")))] >= 1
    assert seen[("topogang_plan_duration_seconds_count", (("outcome", "planned"),))] >= 1
    assert seen[("topogang_gang_wait_seconds_count", ())] >= 1
    assert ("topogang_binds_failed_total", (("reason", "api_error"),)) in seen
    assert seen[("topogang_podgroups", (("phase", "Scheduled"),))] >= 1
    assert seen[("topogang_podgroup_status_writes_total", (("result", "ok"),))] >= 1
    assert seen[("topogang_cache_ready", ())] == 1
    assert seen[("topogang_leader", ())] == 1
    # kube-scheduler's Go client negotiated HTTP/2: its calls share a connection (server/http2.py)
    assert seen.get(("topogang_connections_total", (("protocol", "h2"),)), 0) >= 1

    # The workload goes: kube-controller-manager's garbage collector takes its PodGroup with it.
    await kube.delete(f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/train", {"propagationPolicy": "Background"})

    async def collected() -> bool:
        return await podgroup(kube, namespace, "tfjob-train") is None

    await eventually(collected, within=90, what="PodGroup tfjob-train to be garbage-collected with its TFJob")


# -- a gang that cannot fit ---------------------------------------------------------------------------


async def test_an_infeasible_gang_shows_unschedulable_with_its_reason_and_an_event(
    topogang: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (4 nodes): 5 pods of 8 GPUs required in one rack never fit
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    await create_podgroup(
        kube, namespace, "big", {"minMember": 5, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    )
    for i in range(5):
        await create(kube, gpu_pod(f"big-{i}", annotations={"pod-group-name": "big"}), namespace)

    async def unschedulable() -> dict[str, Any] | None:
        pg = await podgroup(kube, namespace, "big")
        return pg if pg is not None and condition(pg, "Unschedulable").get("reason") == "NoDomain" else None

    pg = await eventually(unschedulable, within=60, what="PodGroup big to be Unschedulable for want of a rack")
    assert pg["status"]["phase"] == "Pending"
    assert condition(pg, "Unschedulable")["status"] == "True"
    assert condition(pg, "Scheduled")["status"] == "False"
    assert "in one rack" in pg["status"]["message"]
    assert (pg["status"]["pods"], pg["status"]["bound"]) == (5, 0)

    async def warned() -> list[tuple[str, str, str]] | None:
        events = [e for e in await podgroup_events(kube, namespace, "big") if e[:2] == ("Warning", "Unschedulable")]
        return events if any("in one rack" in e[2] for e in events) else None

    await eventually(warned, within=30, what="a Warning Unschedulable Event on PodGroup big naming the rack")


# -- two replicas, one leader ---------------------------------------------------------------------------


def replica_pod(name: str) -> dict[str, Any]:
    """A Pod object standing for one replica (its POD_NAME): gated, so nothing ever schedules it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "topogang"}},
        "spec": {
            "schedulingGates": [{"name": "e2e.topogang.io/stands-for-a-replica"}],
            "containers": [{"name": "topogang", "image": "topogang"}],
        },
    }


def log_events(server: Topogang) -> list[str]:
    """The `event` of each JSON line of SERVER's log, in order."""
    out = []
    for raw in server.log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            line = orjson.loads(raw)
            if isinstance(line, dict):
                out.append(str(line.get("event", "")))
    return out


async def test_two_replicas_elect_one_leader_that_labels_its_pod_and_the_follower_takes_over(
    kubeconfig: Path, control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    lease = f"topogang-{uuid.uuid4().hex[:6]}"
    timing = ["--lease-duration=4", "--lease-renew-deadline=3", "--lease-retry-period=0.5"]
    args = ["--leader-elect=true", f"--lease-namespace={namespace}", f"--lease-name={lease}", *timing]
    names = ("replica-a", "replica-b")
    for name in names:
        await create(kube, replica_pod(name), namespace)

    async def status(server: Topogang, path: str) -> int:
        return (await server.request("GET", path))[0]

    async def ready(server: Topogang) -> bool:
        return await status(server, "/readyz") == 200

    async def holder() -> str:
        return str(
            (await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}"))["spec"].get(
                "holderIdentity"
            )
            or ""
        )

    async def labelled() -> set[str]:
        """The replicas' pods that carry the leader label."""
        listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"{LEADER_LABEL}=true"})
        return {p["metadata"]["name"] for p in listing.get("items", [])}

    logs = control_plane.logs_dir
    async with contextlib.AsyncExitStack() as stack:

        async def start(name: str) -> Topogang:
            env = {"POD_NAME": name, "POD_NAMESPACE": namespace}
            return await stack.enter_async_context(Topogang.start(kubeconfig, logs, args=args, env=env, wait="healthy"))

        replicas = {name: await start(name) for name in names}

        async def one_leader() -> str | None:
            states = [await ready(s) for s in replicas.values()]
            leader = await holder() if states.count(True) == 1 else ""
            return leader if leader and await labelled() == {leader} else None

        leader_name = await eventually(one_leader, within=60, what="exactly one ready replica, its pod labelled")
        leader = replicas[leader_name]
        follower_name, follower = next((n, s) for n, s in replicas.items() if s is not leader)

        async def both_synced() -> bool:
            return all([await status(s, "/synced") == 200 for s in replicas.values()])

        await eventually(both_synced, within=60, what="/synced 200 on both replicas")
        assert await ready(leader)
        status_code, text = await follower.request("GET", "/readyz")
        assert (status_code, text) == (503, b"not the leader")
        assert await labelled() == {leader_name}  # the follower's pod is not labelled

        # A call that reaches the follower anyway is refused, saying why.
        pod = {"metadata": {"name": "p", "namespace": namespace}, "spec": {}}
        status_code, reply = await follower.request(
            "POST", "/topogang/filter", orjson.dumps({"Pod": pod, "NodeNames": ["n1"]})
        )
        assert status_code == 200
        assert orjson.loads(reply)["Error"].startswith(NOT_LEADER)
        status_code, reply = await follower.request(
            "POST", "/topogang/prioritize", orjson.dumps({"Pod": pod, "NodeNames": []})
        )
        assert status_code == 503
        assert orjson.loads(reply)["Error"].startswith(NOT_LEADER)
        assert (await metrics(follower))[("topogang_leader", ())] == 0

        # The leader dies without releasing its Lease or removing its label: the follower takes
        # over once the Lease expires and labels its own pod. The dead leader's label stays (the
        # transient state: in a cluster its pod is not Ready, and is replaced by the Deployment).
        leader.process.kill()
        await leader.process.wait()

        async def took_over() -> bool:
            return (
                await ready(follower)
                and await holder() == follower_name
                and await labelled() == {leader_name, follower_name}
            )

        await eventually(took_over, within=30, what=f"{follower_name} to take the Lease, be ready and labelled")
        seen = await metrics(follower)
        assert seen[("topogang_leader", ())] == 1
        assert seen[("topogang_leader_transitions_total", ())] == 1

        # The dead leader comes back on the same pod, as a follower: it removes its stale label.
        restarted = replicas[leader_name] = await start(leader_name)

        async def stale_label_removed() -> bool:
            return await labelled() == {follower_name} and await status(restarted, "/synced") == 200

        await eventually(stale_label_removed, within=60, what=f"{leader_name}, restarted, to remove its stale label")
        assert await status(restarted, "/readyz") == 503
        assert "leader label removed" in log_events(restarted)

        # SIGTERM to the leader: it removes its label before it releases the Lease, and the
        # restarted replica takes over (at its next retry, not after the lease duration).
        follower.process.terminate()
        assert await asyncio.wait_for(follower.process.wait(), 30) == 0
        events = log_events(follower)
        assert events.index("leader label removed") < events.index("released the Lease"), events
        assert follower_name not in await labelled()

        async def back() -> bool:
            return await ready(restarted) and await labelled() == {leader_name}

        await eventually(back, within=15, what=f"{leader_name} to take the released Lease and label its pod")
