"""Gates mode end to end: the stock kube-scheduler with its DEFAULT configuration (no extender),
the API server calling topogang's admission webhook, topogang ungating whole gangs.

Setup (once for the module): the CRDs and Topology of test_extender.py; the kube-scheduler the
session started (stock); `topogang serve --mode=gates` with its webhook on 127.0.0.1:<port> and a
self-signed certificate; manifests/gates/webhook/webhook.yaml registered with the API server, its
clientConfig pointed at that URL (no caBundle: topogang sets it, as it does in a cluster).
Each test labels its namespace scheduling.topogang.io/gates=enabled.

The last test stops topogang (nothing is ungated any more, plain pods still schedule); tests
added after it would run without topogang.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from e2e.controlplane import ControlPlane, FakeGpuNodes, FakeTopology
from e2e.gates_support import ENABLED, gates_serving
from e2e.scenario import (
    create,
    create_podgroup,
    eventually,
    gpu_pod,
    pods,
    says,
    wait_all_bound,
)
from e2e.test_extender import (
    RACK,
    TOPOLOGY,
    both_minimums_run,
    create_tfjob,
    deployed,
    deployment,
    node_racks,
    racks_of,
    running,
    submit_two_elastic_gangs,
)
from e2e.topogang import ROOT, Topogang
from extender.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane_only, pytest.mark.controlplane]

GATE = "scheduling.topogang.io/gang"


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def gates(kubeconfig: Path, control_plane: ControlPlane) -> AsyncIterator[Topogang]:
    async with gates_serving(kubeconfig, control_plane, TOPOLOGY) as server:
        yield server


@pytest.fixture(autouse=True)
def show_topogang_log(request: pytest.FixtureRequest, gates: Topogang) -> Any:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"--- last lines of {gates.log_path} ---\n{gates.tail()}")


async def enable(kube: KubeClient, namespace: str) -> None:
    await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": ENABLED}})


async def pod_map(kube: KubeClient, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in await pods(kube, namespace)}


def pinned_node(pod: dict[str, Any]) -> str | None:
    """The node the ungater pinned POD to (its metadata.name matchFields), if any."""
    affinity = pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    for term in terms:
        for field in term.get("matchFields", []):
            if field["key"] == "metadata.name":
                return str(field["values"][0])
    return None


def gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates", []))


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


# -- KAI's segment design's story 2 and KAI's hierarchical PodGroup design's example 2 land as in extender mode ---


async def test_tfjob_story_2_lands_in_four_racks_of_one_zone_with_its_segment_env(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0..r3 (4 nodes each)   z1-b0-r0..r2 (4 nodes each): the job fits only in zone z0
    nodes = await fake_gpu_nodes.create(FakeTopology(zones=2, blocks_per_zone=1, racks_per_block=3, nodes_per_rack=4))
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=3, count=4)
    await enable(kube, namespace)
    names = await create_tfjob(kube, namespace, zone_required=True)
    placed = await wait_all_bound(kube, namespace, len(names))
    rack_of = racks_of(placed, await node_racks(kube, nodes))
    for s in range(4):
        segment = {rack_of[f"train-worker-{i}"] for i in range(4 * s, 4 * s + 4)}
        assert len(segment) == 1, f"segment {s} spans racks {segment}"
    assert {r.split("-")[0] for r in rack_of.values()} == {"z0"}
    created = await pod_map(kube, namespace)
    for name, pod in created.items():
        assert not gated(pod)
        assert pinned_node(pod) == pod["spec"]["nodeName"], name  # bound where topogang planned it
    # Part 3: the segment index, read back from the created pods.
    for i in range(16):
        pod = created[f"train-worker-{i}"]
        assert env(pod) == {
            "TOPOGANG_SEGMENT_INDEX": str(i // 4),
            "TOPOGANG_SEGMENT_SIZE": "4",
            "TOPOGANG_INDEX_IN_SEGMENT": str(i % 4),
            "KAI_SEGMENT_INDEX": str(i // 4),
        }
        assert pod["metadata"]["labels"]["scheduling.topogang.io/segment-index"] == str(i // 4)
    assert "scheduling.topogang.io/segment-index" not in created["train-chief-0"]["metadata"]["labels"]
    assert env(created["train-chief-0"]) == {}


async def test_podgroup_example_2_leaders_and_workers_per_block(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0, z0-b0-r1, z0-b1-r0, z0-b1-r1: 4 nodes each
    nodes = await fake_gpu_nodes.create(FakeTopology(zones=1, blocks_per_zone=2, racks_per_block=2, nodes_per_rack=4))
    await enable(kube, namespace)
    subgroups, constraints, sets, members = [], {}, [], []
    for part in ("decode", "prefill"):
        subgroups += [
            {"name": part, "minMember": 2},
            {"name": f"{part}-workers", "parent": part, "minMember": 4},
            {"name": f"{part}-leaders", "parent": part, "minMember": 1},
        ]
        constraints[f"{part}-workers"] = {"requiredTopologyLevel": "rack"}
        constraints[f"{part}-leaders"] = {"requiredTopologyLevel": "rack"}
        sets.append(
            {"subGroups": [f"{part}-workers", f"{part}-leaders"], "constraint": {"requiredTopologyLevel": "block"}}
        )
        members += [(f"{part}-worker-{i}", f"{part}-workers") for i in range(4)] + [
            (f"{part}-leader", f"{part}-leaders")
        ]
    spec = {
        "minMember": 2,
        "subGroups": subgroups,
        "topologyConstraints": {"subGroups": constraints, "subGroupSets": sets},
    }
    await create_podgroup(kube, namespace, "serving", spec)
    for name, sg in members:
        labels = {"kai.scheduler/subgroup-name": sg, "scheduling.x-k8s.io/pod-group": "serving"}
        await create(kube, gpu_pod(name, labels=labels), namespace)
    placed = await wait_all_bound(kube, namespace, len(members))
    rack_of = racks_of(placed, await node_racks(kube, nodes))
    for part in ("decode", "prefill"):
        workers = {rack_of[f"{part}-worker-{i}"] for i in range(4)}
        assert len(workers) == 1
        blocks = {r.rsplit("-", 1)[0] for r in (*workers, rack_of[f"{part}-leader"])}
        assert len(blocks) == 1, f"{part} spans blocks {blocks}"


async def test_an_indexed_job_made_by_the_job_controller_gets_gated_placed_and_its_segments(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # The Job controller names its pods with generateName: the webhook sees them without a name.
    #   z0-b0-r0 (3 nodes)  z0-b0-r1 (4 nodes)  z0-b0-r2 (4 nodes): segments of 4 skip rack r0
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=4)
    nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=2, count=4)
    await enable(kube, namespace)
    gpu = {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
    segments = {"kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": "rack"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed", "annotations": {"kai.scheduler/topology": "e2e-dc"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": 8,
            "parallelism": 8,
            "template": {
                "metadata": {"annotations": segments},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": gpu}],
                },
            },
        },
    }
    await create(kube, job, namespace)
    placed = await wait_all_bound(kube, namespace, 8)
    rack_of = racks_of(placed, await node_racks(kube, nodes))
    by_segment: dict[str, set[str]] = {}
    for name, pod in (await pod_map(kube, namespace)).items():
        index = int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        assert env(pod)["TOPOGANG_SEGMENT_INDEX"] == str(index // 4)
        assert env(pod)["TOPOGANG_INDEX_IN_SEGMENT"] == str(index % 4)
        assert pinned_node(pod) == pod["spec"]["nodeName"]
        by_segment.setdefault(env(pod)["KAI_SEGMENT_INDEX"], set()).add(rack_of[name])
    assert all(len(r) == 1 for r in by_segment.values()), by_segment
    assert {r for rs in by_segment.values() for r in rs} == {"z0-b0-r1", "z0-b0-r2"}


# -- a Deployment is gated only when it asks to be a gang, as the grouper makes it one in extender mode ---


async def test_a_deployment_is_gated_and_placed_whole_only_when_it_asks_to_be_a_gang(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # Both made into pods by the real Deployment and ReplicaSet controllers (generateName).
    #   z0-b0-r0 (2 nodes, then 4): the 3 replicas of the Deployment that asks stay gated while
    #   they do not fit; the plain Deployment's replica is never gated and runs at once; once two
    #   nodes come, the 3 are ungated together, each pinned to its planned node.
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    await enable(kube, namespace)
    asks = {"kai.scheduler/topology": "e2e-dc", "kai.scheduler/topology-required-placement": RACK}

    def of(app: str, items: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for p in items.values() if p["metadata"].get("labels", {}).get("app") == app]

    async with deployed(kube, namespace, deployment("train", 3, asks)), deployed(kube, namespace, deployment("web", 1)):
        await running(kube, namespace, 1)  # the train replicas are gated: this is web's
        (web,) = of("web", await pod_map(kube, namespace))
        assert web["spec"].get("nodeName")
        assert not gated(web)
        assert pinned_node(web) is None

        async def train_gated() -> bool:
            train = of("train", await pod_map(kube, namespace))
            return len(train) == 3 and all(gated(p) and not p["spec"].get("nodeName") for p in train)

        await eventually(train_gated, within=60, what="the 3 replicas of train, gated")
        await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
        await running(kube, namespace, 4)
        train = of("train", await pod_map(kube, namespace))
        assert len({p["spec"]["nodeName"] for p in train}) == 3
        for pod in train:
            assert not gated(pod)
            assert pinned_node(pod) == pod["spec"]["nodeName"]


# -- the install artefacts --------------------------------------------------------------------------------


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(plane.kubectl), "--kubeconfig", str(plane.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stderr}"
    return done.stdout


def render(plane: ControlPlane, path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(kubectl(plane, "kustomize", str(path))) if d]


async def test_the_gates_overlays_render_and_their_cluster_objects_are_accepted(control_plane: ControlPlane) -> None:
    docs = render(control_plane, ROOT / "manifests" / "gates")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("MutatingWebhookConfiguration", "topogang"), ("Service", "topogang-webhook")} <= kinds
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"--mode=gates", "--webhook-listen=0.0.0.0:9443", "--webhook-config=topogang"} <= set(container["args"])
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    (service,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "topogang-webhook"]
    assert service["spec"]["selector"]["scheduling.topogang.io/leader"] == "true"
    cluster_scoped = [
        d for d in docs if d["kind"] in ("MutatingWebhookConfiguration", "ClusterRole", "ClusterRoleBinding")
    ]
    kubectl(
        control_plane, "apply", "--server-side", "--dry-run=server", "--field-manager=e2e-gates", "-f", "-",
        stdin="\n---\n".join(json.dumps(d) for d in cluster_scoped),
    )  # fmt: skip
    with_cm = render(control_plane, ROOT / "manifests" / "gates" / "cert-manager")
    names = {(d["kind"], d["metadata"]["name"]) for d in with_cm}
    assert ("Certificate", "topogang-webhook") in names
    assert ("ClusterRole", "topogang-webhook") not in names  # cert-manager sets the caBundle
    (hook,) = [d for d in with_cm if d["kind"] == "MutatingWebhookConfiguration"]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "topogang-system/topogang-webhook"
    (cm_deployment,) = [d for d in with_cm if d["kind"] == "Deployment"]
    assert (
        "--webhook-cert=/etc/topogang/webhook/tls.crt"
        in cm_deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )


async def test_the_service_account_may_patch_only_its_own_webhook_configuration(
    control_plane: ControlPlane, kube: KubeClient
) -> None:
    docs = [
        d
        for d in render(control_plane, ROOT / "manifests" / "gates")
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding")
    ]
    docs = [d for d in docs if d["metadata"]["name"] == "topogang-webhook"]
    assert len(docs) == 2
    body = "\n---\n".join(json.dumps(d) for d in docs)
    kubectl(control_plane, "apply", "--server-side", "--field-manager=e2e-gates", "-f", "-", stdin=body)
    sa = "system:serviceaccount:topogang-system:topogang"

    async def allowed(verb: str, name: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": sa,
                "groups": ["system:serviceaccounts", "system:serviceaccounts:topogang-system"],
                "resourceAttributes": {
                    "group": "admissionregistration.k8s.io", "resource": "mutatingwebhookconfigurations",
                    "verb": verb, "name": name,
                },
            },
        }  # fmt: skip
        answer = await kube.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(answer["status"].get("allowed"))

    try:
        assert await allowed("get", "topogang")
        assert await allowed("patch", "topogang")
        assert not await allowed("patch", "someone-else")
        assert not await allowed("delete", "topogang")
        assert not await allowed("create", "")
    finally:
        kubectl(control_plane, "delete", "--ignore-not-found", "-f", "-", stdin=body)


# -- what is never ungated, and what is never gated ----------------------------------------------------------


async def test_two_elastic_gangs_that_arrive_together_both_start_their_minimum(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (4 nodes)   z0-b0-r1 (4 nodes): room for both minimums (4 + 4), not both gangs whole (6 + 6)
    await fake_gpu_nodes.create(FakeTopology(zones=1, blocks_per_zone=1, racks_per_block=2, nodes_per_rack=4))
    await enable(kube, namespace)
    await submit_two_elastic_gangs(kube, namespace, podgroups_last=True)
    await both_minimums_run(kube, namespace)


async def test_an_infeasible_gang_stays_gated_with_its_reason_in_status_and_an_event(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0 (3 nodes), z0-b0-r1 (3 nodes): 4 pods that need one rack never fit
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=3)
    await fake_gpu_nodes.add(zone=0, block=0, rack=1, count=3)
    await enable(kube, namespace)
    spec = {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    await create_podgroup(kube, namespace, "big", spec)
    for i in range(4):
        await create(kube, gpu_pod(f"big-{i}", annotations={"pod-group-name": "big"}), namespace)
    want = "4 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; the best rack fits 3"

    async def status_says() -> dict[str, Any] | None:
        pg = await kube.get(f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{namespace}/podgroups/big")
        conditions = {c["type"]: c for c in pg.get("status", {}).get("conditions", [])}
        unschedulable = conditions.get("Unschedulable", {})
        return pg if unschedulable.get("status") == "True" and want in unschedulable.get("message", "") else None

    pg = await eventually(status_says, within=60, what=f"PodGroup big's status to say {want!r}")
    assert pg["status"]["phase"] == "Pending"
    await eventually(
        lambda: says(kube, namespace, "big", want), within=30, what="an Event on PodGroup big with the reason"
    )
    for pod in (await pod_map(kube, namespace)).values():
        assert gated(pod)
        assert not pod["spec"].get("nodeName")
        assert pinned_node(pod) is None


async def test_plain_pods_are_untouched_and_schedule(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=1)
    await enable(kube, namespace)
    body = gpu_pod("plain", gpus=2)
    sent = await create(kube, body, namespace)
    assert "schedulingGates" not in sent["spec"]
    assert "affinity" not in sent["spec"]
    assert sent["spec"]["containers"][0].get("env") is None
    assert "scheduling.topogang.io/segment-index" not in sent["metadata"].get("labels", {})
    await wait_all_bound(kube, namespace, 1)


async def test_topogang_down_gang_pods_stay_gated_plain_pods_schedule(
    gates: Topogang, kube: KubeClient, namespace: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # Runs last: it stops the module's topogang.
    #   z0-b0-r0 (4 nodes): room for the gang, were its fourth pod there
    await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=4)
    await enable(kube, namespace)
    await create_podgroup(kube, namespace, "late", {"minMember": 4})
    label = {"scheduling.x-k8s.io/pod-group": "late"}
    for i in range(3):
        await create(kube, gpu_pod(f"late-{i}", labels=label), namespace)
    assert all(gated(p) for p in (await pod_map(kube, namespace)).values())
    gates.process.terminate()
    await asyncio.wait_for(gates.process.wait(), 30)
    # A pod that says by label it belongs to a gang is refused while topogang is down (strict:
    # failurePolicy Fail), so it is never created without the gate...
    with pytest.raises(ApiError) as refused:
        await create(kube, gpu_pod("late-3", labels=label), namespace)
    assert refused.value.status in (500, 503), refused.value
    assert "strict.gang.scheduling.topogang.io" in str(refused.value)
    # ...while plain pods are created and scheduled as usual (lenient: failurePolicy Ignore).
    await create(kube, gpu_pod("plain", gpus=2), namespace)
    placed = await wait_all_bound(kube, namespace, 1)
    assert set(placed) == {"plain"}
    await asyncio.sleep(3)  # nothing ungates the gang's pods
    after = await pod_map(kube, namespace)
    assert sorted(n for n, p in after.items() if gated(p)) == ["late-0", "late-1", "late-2"]
    assert not any(p["spec"].get("nodeName") for n, p in after.items() if n != "plain")
