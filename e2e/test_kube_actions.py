"""KubeActions and KubeClient on the real control plane: bind (and its failures, with the API's
message), wake, Events and their aggregation, pages and errors of the raw client."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from e2e.controlplane import FakeGpuNodes, FakeTopology, create_pod, gpu_pod, wait_pod_running
from e2e.controlplane.kube import wait_for
from e2e.kube_support import NO_SCHEDULER
from extender.kube import PLAN_GENERATION_ANNOTATION, ApiError, KubeActions, KubeClient
from extender.kube.actions import BLOCKED, EVICTED
from extender.kube.client import NotLeading
from extender.kube.resources import PODS

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only, pytest.mark.asyncio(loop_scope="session")]


async def pending_pod(kube: KubeClient, kube_api: client.ApiClient, namespace: str, name: str) -> str:
    """A pod no scheduler will take; returns its uid."""
    await create_pod(kube_api, namespace, gpu_pod(name, 1, scheduler_name=NO_SCHEDULER))
    body = await kube.get(PODS.object_path("v1", name, namespace))
    return str(body["metadata"]["uid"])


async def test_bind_binds_a_pending_pod_and_a_second_bind_fails_with_the_api_message(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    first, second = await fake_gpu_nodes.create(FakeTopology(nodes_per_rack=2))
    actions = KubeActions(kube)
    uid = await pending_pod(kube, kube_api, namespace, "solo")
    await actions.bind(namespace, "solo", uid, first)
    pod = await wait_pod_running(kube_api, namespace, "solo")  # kwok runs it
    assert pod.spec.node_name == first

    with pytest.raises(ApiError) as again:
        await actions.bind(namespace, "solo", uid, second)
    assert again.value.status == 409
    assert again.value.message == (
        f'Operation cannot be fulfilled on pods/binding "solo": pod solo is already assigned to node "{first}"'
    )

    await pending_pod(kube, kube_api, namespace, "recreated")
    with pytest.raises(ApiError) as stale:  # the uid of a pod that no longer exists under this name
        await actions.bind(namespace, "recreated", uid, first)
    assert stale.value.status == 409
    assert "Precondition failed: UID in precondition" in stale.value.message

    with pytest.raises(ApiError) as missing:
        await actions.bind(namespace, "nobody", uid, first)
    assert (missing.value.status, missing.value.message) == (404, 'pods "nobody" not found')


async def test_wake_sets_the_plan_generation_on_each_pod_and_skips_pods_that_are_gone(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str
) -> None:
    for name in ("a", "b"):
        await pending_pod(kube, kube_api, namespace, name)
    actions = KubeActions(kube, concurrency=1)
    await actions.wake([(namespace, "a"), (namespace, "b"), (namespace, "never-was")], 7)
    for name in ("a", "b"):
        pod = await kube.get(PODS.object_path("v1", name, namespace))
        assert pod["metadata"]["annotations"][PLAN_GENERATION_ANNOTATION] == "7"
    await actions.wake([(namespace, "a")], 8)
    pod = await kube.get(PODS.object_path("v1", "a", namespace))
    assert pod["metadata"]["annotations"][PLAN_GENERATION_ANNOTATION] == "8"


async def test_nominate_sets_the_nominated_node_and_the_plan_generation_in_one_status_write(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str
) -> None:
    # The pods/status endpoint takes metadata changes too: one write steers the pod and requeues it.
    # Each pod's node is asked as its write goes out; None writes nothing.
    await pending_pod(kube, kube_api, namespace, "a")
    await pending_pod(kube, kube_api, namespace, "b")
    actions = KubeActions(kube, concurrency=1)
    nodes = {"a": "some-node", "never-was": "n", "b": None}
    asked: list[str] = []

    def node_of(ns: str, name: str) -> str | None:
        asked.append(name)
        return nodes[name]

    await actions.nominate([(namespace, "a"), (namespace, "never-was"), (namespace, "b")], 3, node_of)
    assert asked == ["a", "never-was", "b"]  # in the order given
    pod = await kube.get(PODS.object_path("v1", "a", namespace))
    assert pod["status"]["nominatedNodeName"] == "some-node"
    assert pod["metadata"]["annotations"][PLAN_GENERATION_ANNOTATION] == "3"
    untouched = await kube.get(PODS.object_path("v1", "b", namespace))
    assert not untouched["status"].get("nominatedNodeName")
    assert PLAN_GENERATION_ANNOTATION not in (untouched["metadata"].get("annotations") or {})


async def test_a_nomination_that_reaches_a_pod_already_bound_is_moot_not_a_warning(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    (node, _) = await fake_gpu_nodes.create(FakeTopology(nodes_per_rack=2))
    actions = KubeActions(kube)
    uid = await pending_pod(kube, kube_api, namespace, "early")
    await actions.bind(namespace, "early", uid, node)  # bound before the nomination went out
    with capture_logs() as logs:
        await actions.nominate([(namespace, "early")], 4, lambda *_: node)
    assert [e for e in logs if e["log_level"] != "debug"] == []
    pod = await kube.get(PODS.object_path("v1", "early", namespace))
    assert not pod["status"].get("nominatedNodeName")  # the API server refused it, as it should


async def test_events_are_visible_through_the_api_and_repeats_bump_one_series(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str
) -> None:
    uid = await pending_pod(kube, kube_api, namespace, "member")
    involved = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "member", "uid": uid}
    actions = KubeActions(kube, series_interval=0, instance="e2e")
    await actions.event(involved, "GangPending", "gang 3/16 pods present", "Warning")

    # as kubectl describe finds them: core/v1 Events about the pod
    core = await kube.get(f"/api/v1/namespaces/{namespace}/events", {"fieldSelector": "involvedObject.name=member"})
    (event,) = core["items"]
    assert (event["reason"], event["message"], event["type"]) == ("GangPending", "gang 3/16 pods present", "Warning")
    assert event["involvedObject"]["uid"] == uid
    assert (event["reportingComponent"], event["reportingInstance"]) == ("topogang", "e2e")

    for _ in range(3):
        await actions.event(involved, "GangPending", "gang 3/16 pods present", "Warning")
    listed = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    (series,) = listed["items"]
    assert series["series"]["count"] == 4

    await actions.event(involved, "GangPending", "gang 15/16 pods present", "Warning")
    await actions.event({**involved, "name": "member"}, "GangPlaced", "placed in rack r1")
    listed = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    assert sorted((e["reason"], e["note"]) for e in listed["items"]) == [
        ("GangPending", "gang 15/16 pods present"),
        ("GangPending", "gang 3/16 pods present"),
        ("GangPlaced", "placed in rack r1"),
    ]


async def test_the_raw_client_pages_lists_and_patches_with_either_merge(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str
) -> None:
    for i in range(5):
        await pending_pod(kube, kube_api, namespace, f"p{i}")
    collection = PODS.collection_path("v1", namespace)
    items, version = await kube.list(collection, page_size=2)
    assert sorted(i["metadata"]["name"] for i in items) == [f"p{i}" for i in range(5)]
    assert int(version) > 0
    assert [i["metadata"]["name"] for i in (await kube.list(collection, {"labelSelector": "none=here"}))[0]] == []

    path = PODS.object_path("v1", "p0", namespace)
    merged = await kube.patch(path, {"metadata": {"labels": {"a": "1"}}})
    assert merged["metadata"]["labels"] == {"a": "1"}
    # strategic merge: the container list is merged by name, not replaced
    image = "registry.k8s.io/pause:3.9"
    strategic = await kube.patch(path, {"spec": {"containers": [{"name": "main", "image": image}]}}, strategic=True)
    (container,) = strategic["spec"]["containers"]
    assert (container["image"], container["resources"]["limits"]) == (image, {"nvidia.com/gpu": "1"})

    with pytest.raises(ApiError) as caught:
        await kube.get(PODS.object_path("v1", "p9", namespace))
    assert (caught.value.status, caught.value.reason, caught.value.message) == (404, "NotFound", 'pods "p9" not found')


async def test_evict_removes_a_running_pod_and_a_budget_blocks_it(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    (node,) = await fake_gpu_nodes.create(FakeTopology(nodes_per_rack=1))
    actions = KubeActions(kube)
    uids = {}
    for name in ("free", "guarded"):
        uid = await pending_pod(kube, kube_api, namespace, name)
        await kube.patch(PODS.object_path("v1", name, namespace), {"metadata": {"labels": {"app": name}}})
        await actions.bind(namespace, name, uid, node)
        await wait_pod_running(kube_api, namespace, name)
        uids[name] = uid
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    await kube.post(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", pdb)

    assert await actions.evict(namespace, "free", uids["free"]) == EVICTED

    async def gone() -> bool:
        try:
            await kube.get(PODS.object_path("v1", "free", namespace))
        except ApiError as exc:
            return exc.status == 404
        return False

    await wait_for(gone, timeout_s=30, what="the evicted pod to be deleted")
    assert await actions.evict(namespace, "free", uids["free"]) == EVICTED  # already gone
    assert await actions.evict(namespace, "guarded", uids["guarded"]) == BLOCKED
    assert (await kube.get(PODS.object_path("v1", "guarded", namespace)))["metadata"].get("deletionTimestamp") is None


async def test_a_fenced_client_sends_no_write_while_its_fence_is_down_and_reads_pass(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    (node,) = await fake_gpu_nodes.create(FakeTopology(nodes_per_rack=1))
    uid = await pending_pod(kube, kube_api, namespace, "held")
    leader = True
    fenced = kube.fenced(lambda: leader)
    actions = KubeActions(fenced)
    try:
        await actions.wake([(namespace, "held")], 1)  # the fence is up: sent
        leader = False
        with pytest.raises(NotLeading) as refused:
            await actions.bind(namespace, "held", uid, node)
        assert "not the leader" in str(refused.value)
        await actions.wake([(namespace, "held")], 2)  # best effort: dropped without a word
        await actions.event({"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "held"}, "R", "m")
        with pytest.raises(NotLeading):
            await actions.evict(namespace, "held", uid)
        body = await fenced.get(PODS.object_path("v1", "held", namespace))  # reads pass
        assert body["spec"].get("nodeName") is None  # no Binding reached the API server
        assert body["metadata"]["annotations"][PLAN_GENERATION_ANNOTATION] == "1"  # nor the second wake
        events = await kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        assert [e for e in events["items"] if e.get("reason") == "R"] == []
        leader = True
        await actions.bind(namespace, "held", uid, node)  # leading again: sent
        pod = await wait_pod_running(kube_api, namespace, "held")
        assert pod.spec.node_name == node
    finally:
        await fenced.close()
