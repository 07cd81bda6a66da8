"""ClusterCache and its informers on the real control plane: the first list, then adds, updates
and deletes from the watch, a relist after a real 410, CRDs that are absent and appear later,
and PodGroups that do not parse."""

from __future__ import annotations

import uuid

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from e2e.controlplane import FakeGpuNodes, FakeTopology, create_pod, gpu_pod
from e2e.kube_support import NO_SCHEDULER, crd_manifest, crd_present, installed_crd, until
from extender.core.cluster import ClusterState
from extender.core.decisions import INVALID
from extender.core.scheduler import GangScheduler
from extender.kube import ClusterCache, KubeClient, Resource, Selector
from extender.kube.resources import PODS, WATCHED
from extender.model.labels import POD_GROUP_ANNOTATION
from extender.model.pod import parse_pod

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only, pytest.mark.asyncio(loop_scope="session")]

GPU = "nvidia.com/gpu"


def new_scheduler() -> GangScheduler:
    return GangScheduler(ClusterState())


async def test_the_cache_lists_what_exists_then_follows_adds_updates_and_deletes(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    nodes = await fake_gpu_nodes.create(FakeTopology(nodes_per_rack=2))
    await create_pod(kube_api, namespace, gpu_pod("early", 1, scheduler_name=NO_SCHEDULER))
    scheduler = new_scheduler()
    state = scheduler.state
    async with ClusterCache(kube, scheduler, recheck_seconds=1) as cache:
        await cache.wait_ready(60)
        # the first list
        assert set(nodes) <= set(state.nodes)
        assert state.nodes[nodes[0]].allocatable[GPU] == 8000
        assert state.pods[f"{namespace}/early"].node_name is None
        assert cache.informers["pods"].synced

        # added: kube-scheduler binds it and kwok runs it; both updates arrive
        await create_pod(kube_api, namespace, gpu_pod("late", 8))
        late = await until(
            lambda: (p := state.pods.get(f"{namespace}/late")) is not None and p.phase == "Running" and p,
            "pod late to run in the cache",
        )
        assert late.node_name in nodes
        assert state.bound.at(late.node_name, GPU) == 8000

        # updated
        early_path = PODS.object_path("v1", "early", namespace)
        await kube.patch(early_path, {"metadata": {"labels": {"tier": "gold"}}})
        await until(lambda: state.pods[f"{namespace}/early"].labels.get("tier") == "gold", "the label")

        # deleted
        await kube.delete(early_path)
        await until(lambda: f"{namespace}/early" not in state.pods, "pod early to go")
        await fake_gpu_nodes.delete([nodes[1]])
        await until(lambda: nodes[1] not in state.nodes, "the node to go")

        # a PriorityClass and a workload owner
        priority = f"e2e-{uuid.uuid4().hex[:6]}"
        await kube.post("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": priority}, "value": 4242})
        await until(lambda: state.priority_classes.get(priority) == 4242, "the PriorityClass")
        await kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{priority}")
        await until(lambda: priority not in state.priority_classes, "the PriorityClass to go")
        job = {
            "metadata": {"name": "train"},
            "spec": {
                "suspend": True,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}},
            },
        }
        await kube.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
        body = await until(lambda: state.objects.get(("batch", "Job", namespace, "train")), "the Job")
        assert (body["apiVersion"], body["kind"], body["spec"]["suspend"]) == ("batch/v1", "Job", True)
        assert "managedFields" not in body["metadata"]
    assert cache.status()["pods"]["relists"] == 0


async def test_a_watch_from_a_too_old_resource_version_gets_410_and_the_relist_reconciles(
    kube: KubeClient, namespace: str
) -> None:
    # A CRD made now has a watch cache that starts now: resourceVersion 1 is older than anything
    # it holds, so the API server answers a watch from it with a real 410 Expired. (A built-in
    # resource's cache may reach back to the start of this young cluster.)
    group = f"e2e-{uuid.uuid4().hex[:8]}.topogang.io"
    widgets = Resource(group, ("v1alpha1",), "Widget", "widgets", namespaced=True)
    scheduler = new_scheduler()
    objects = scheduler.state.objects

    def names() -> list[str]:
        return sorted(name for (g, _, ns, name) in objects if (g, ns) == (group, namespace))

    async with installed_crd(kube, crd_manifest(group, "Widget", "widgets")):
        collection = widgets.collection_path("v1alpha1", namespace)
        for name in ("gone", "kept"):
            await kube.post(
                collection, {"apiVersion": f"{group}/v1alpha1", "kind": "Widget", "metadata": {"name": name}}
            )
        with capture_logs() as logs:
            cache = ClusterCache(kube, scheduler, resources=[widgets], selectors={widgets.name: Selector(namespace)})
            async with cache:
                await cache.wait_ready(30)
            assert names() == ["gone", "kept"]

            # While the cache is stopped: one object goes, one changes, one comes.
            await kube.delete(f"{collection}/gone")
            await kube.patch(f"{collection}/kept", {"spec": {"changed": True}})
            await kube.post(
                collection, {"apiVersion": f"{group}/v1alpha1", "kind": "Widget", "metadata": {"name": "new"}}
            )

            # Resume from a resourceVersion the API server no longer has.
            informer = cache.informers[widgets.name]
            informer.resource_version = "1"
            async with cache:
                await until(lambda: informer.relists == 1, "the relist")
                assert names() == ["kept", "new"]
                assert objects[(group, "Widget", namespace, "kept")]["spec"] == {"changed": True}
                assert int(informer.resource_version) > 1  # watching on from the relist
    (relisted,) = [e for e in logs if e["event"] == "relisted"]
    assert relisted["reason"].startswith("410 Expired: too old resource version: 1"), relisted
    assert (relisted["added"], relisted["modified"], relisted["deleted"], relisted["objects"]) == (1, 1, 1, 2)


async def test_a_pod_the_core_learnt_of_ahead_of_the_watch_and_gone_before_a_relist_does_not_stay(
    kube: KubeClient, namespace: str
) -> None:
    # kube-scheduler's calls can be ahead of topogang's watch, so the core learns of pods from
    # them; one created and deleted while a relist was due is in no event the API server will
    # send (the relist's list does not have it, and the watch resumes after it).
    scheduler = new_scheduler()
    state = scheduler.state
    cache = ClusterCache(kube, scheduler, resources=[PODS], selectors={PODS.name: Selector(namespace)})
    collection = PODS.collection_path("v1", namespace)
    await kube.post(collection, gpu_pod("kept", 1, scheduler_name=NO_SCHEDULER))
    async with cache:
        await cache.wait_ready(60)
        assert set(state.pods) == {f"{namespace}/kept"}
    body = await kube.post(collection, gpu_pod("ghost", 1, scheduler_name=NO_SCHEDULER))
    scheduler.filter(parse_pod(body), [], 0.0)  # a filter call for it, ahead of the watch
    assert f"{namespace}/ghost" in state.pods
    await kube.delete(f"{collection}/ghost")
    pods = cache.informers[PODS.name]
    pods.resource_version = ""  # a relist is due (as after a 410: the watch fell too far behind)
    async with cache:
        await until(lambda: pods.relists == 1, "the relist")
        assert set(state.pods) == {f"{namespace}/kept"}


async def test_absent_crds_do_not_hold_up_readiness_and_one_created_later_is_picked_up(
    kube: KubeClient, namespace: str
) -> None:
    group = f"e2e-{uuid.uuid4().hex[:8]}.topogang.io"
    widgets = Resource(group, ("v1alpha1",), "Widget", "widgets", namespaced=True)
    scheduler = new_scheduler()
    with capture_logs() as logs:
        cache = ClusterCache(kube, scheduler, resources=(*WATCHED, widgets), recheck_seconds=0.5)
        async with cache:
            await cache.wait_ready(60)
            status = cache.status()
            assert status[widgets.name] == {**status[widgets.name], "installed": False, "synced": False}
            assert status["pods"]["synced"] is True
            # whichever operators' CRDs earlier tests installed: each is synced or known absent
            assert all(s["synced"] or s["installed"] is False for s in status.values()), status

            async with installed_crd(kube, crd_manifest(group, "Widget", "widgets")):
                body = {
                    "apiVersion": f"{group}/v1alpha1",
                    "kind": "Widget",
                    "metadata": {"name": "w1"},
                    "spec": {"size": 1},
                }
                await kube.post(f"/apis/{group}/v1alpha1/namespaces/{namespace}/widgets", body)
                key = (group, "Widget", namespace, "w1")
                await until(lambda: key in scheduler.state.objects, "the Widget in the cache", timeout_s=60)
                assert cache.informers[widgets.name].installed is True
            # the CRD and its objects are gone again
            await until(lambda: key not in scheduler.state.objects, "the Widget to leave the cache", timeout_s=60)
    said = [e for e in logs if e.get("resource") == widgets.name and e["event"].startswith("resource ")]
    assert [e["event"] for e in said][:2] == ["resource not installed", "resource installed"]


async def test_a_podgroup_that_does_not_parse_shows_invalid_while_the_others_are_applied(
    kube: KubeClient, kube_api: client.ApiClient, namespace: str
) -> None:
    # The bad PodGroup is well-formed for the API server (two SubGroups that are each other's
    # parent: the CRD's CEL rules catch a missing parent, not a cycle), so it is stored whether
    # this CRD takes anything or is topogang's own with a schema (which an earlier test may have
    # installed).
    group = "scheduling.topogang.io"
    podgroups = f"/apis/{group}/v1alpha1/namespaces/{namespace}/podgroups"
    scheduler = new_scheduler()
    state = scheduler.state
    bad_spec = {
        "subGroups": [{"name": "a", "parent": "b", "minMember": 1}, {"name": "b", "parent": "a", "minMember": 1}]
    }
    async with crd_present(kube, crd_manifest(group, "PodGroup", "podgroups")):
        with capture_logs() as logs:
            async with ClusterCache(kube, scheduler, recheck_seconds=0.5) as cache:
                await cache.wait_ready(60)
                for name, spec in [("good", {"minMember": 2}), ("bad", bad_spec), ("also-good", {})]:
                    body = {
                        "apiVersion": f"{group}/v1alpha1",
                        "kind": "PodGroup",
                        "metadata": {"name": name},
                        "spec": spec,
                    }
                    await kube.post(podgroups, body)
                pod = gpu_pod("member", 1, scheduler_name=NO_SCHEDULER, annotations={POD_GROUP_ANNOTATION: "bad"})
                await create_pod(kube_api, namespace, pod)
                await until(
                    lambda: (
                        {f"{namespace}/good", f"{namespace}/also-good"} <= set(state.podgroups)
                        and f"{namespace}/member" in state.pods
                    ),
                    "the good PodGroups",
                )
                (errors,) = await until(lambda: list(state.invalid_podgroups.values()), "the bad PodGroup")
                assert [(e.obj, e.field) for e in errors] == [(f"PodGroup {namespace}/bad", "spec.subGroups[0].parent")]
                status = scheduler.status(f"{namespace}/bad")
                assert status.phase == INVALID
                assert "SubGroups form a cycle: a -> b -> a" in status.message

                await kube.patch(f"{podgroups}/bad", {"spec": {"subGroups": [{"name": "a", "minMember": 1}]}})
                await until(lambda: f"{namespace}/bad" in state.podgroups, "the fixed PodGroup")
                assert state.invalid_podgroups == {}
    (warning,) = [
        e for e in logs if e["log_level"] == "warning" and e.get("resource") == "podgroups.scheduling.topogang.io"
    ]
    assert warning["event"] == "invalid PodGroup stored as invalid"
    assert (warning["object"], warning["fields"]) == (f"{namespace}/bad", ["spec.subGroups[0].parent"])
