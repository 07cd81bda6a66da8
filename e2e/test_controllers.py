"""The real workload controllers create the pods, topogang places them (e2e/controllers.py).

Setup (once for the module): topogang serve with kube-scheduler calling it (e2e/topogang.py
`serving`), and the JobSet controller, the LeaderWorkerSet controller and the Kubeflow training
operator as processes, built from their Go modules (versions in e2e/controlplane/versions.env),
with their own CRDs and, for JobSet and LWS, their own webhooks. No test here makes a pod by
hand: the controllers do, and when a node is lost the training operator recreates its pod.

Each test gets its own namespace (labelled so the controllers' webhooks see it) and its own fake
GPU nodes (8 GPUs each), labelled topology.topogang.io/zone > block > rack. The controllers' logs
are in the control plane's logs/ directory, kept when a test fails.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from e2e.controllers import Controllers, controlled_namespace_label, delete_workloads
from e2e.controlplane import ControlPlane, FakeGpuNodes
from e2e.scenario import create, eventually, pods, wait_all_bound
from e2e.test_extender import RACK, TOPOLOGY, ZONE
from e2e.topogang import Topogang, serving
from extender.kube.client import KubeClient

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.controlplane, pytest.mark.controlplane_only]

LWS = "leaderworkerset.sigs.k8s.io"
PAUSE = "registry.k8s.io/pause:3.10"
GPU8 = {"requests": {"nvidia.com/gpu": "8", "cpu": "1"}, "limits": {"nvidia.com/gpu": "8"}}


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def running(control_plane: ControlPlane, kubeconfig: Path) -> AsyncIterator[tuple[Topogang, Controllers]]:
    async with (
        await KubeClient.connect(kubeconfig) as kube,
        Controllers.start(control_plane, kube, ("jobset", "lws", "training-operator")) as controllers,
        serving(kubeconfig, control_plane, TOPOLOGY) as server,
    ):
        yield server, controllers


@pytest_asyncio.fixture(loop_scope="session")
async def ns(running: tuple[Topogang, Controllers], kube: KubeClient, namespace: str) -> AsyncIterator[str]:
    await kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": controlled_namespace_label()}})
    yield namespace
    await delete_workloads(kube, namespace)


async def node_racks(kube: KubeClient, names: list[str]) -> dict[str, str]:
    return {n: (await kube.get(f"/api/v1/nodes/{n}"))["metadata"]["labels"][RACK] for n in names}


async def labelled(kube: KubeClient, namespace: str) -> dict[str, dict[str, str]]:
    return {p["metadata"]["name"]: p["metadata"].get("labels", {}) for p in await pods(kube, namespace)}


def container(name: str, resources: dict[str, Any] = GPU8) -> dict[str, Any]:
    return {"name": name, "image": PAUSE, "resources": resources}


# -- KAI's segment design's story 2 with the real training operator --------------------------------------------


def story2_tfjob(zone_required: bool = True) -> dict[str, Any]:
    """A TFJob whose 16 workers form 4 segments of 4, each required in one rack, the whole job
    required in one zone (story 1: without the zone); a chief without GPUs."""
    annotations = {"kai.scheduler/topology": "e2e-dc"}
    if zone_required:
        annotations["kai.scheduler/topology-required-placement"] = ZONE
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "train", "annotations": annotations},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "Chief": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "terminationGracePeriodSeconds": 0,
                            "containers": [container("tensorflow", {"requests": {"cpu": "1"}})],
                        }
                    },
                },
                "Worker": {
                    "replicas": 16,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {
                            "annotations": {
                                "kai.scheduler/segment-size": "4",
                                "kai.scheduler/segment-topology-required-placement": RACK,
                            }
                        },
                        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container("tensorflow")]},
                    },
                },
            },
        },
    }


def story2_pytorchjob() -> dict[str, Any]:
    """Story 2's shape as a PyTorchJob (a master without GPUs, 16 workers in 4 rack segments, one
    zone), restartPolicy OnFailure: the operator restarts the job when a worker is lost. The
    TFJob of story2_tfjob fails instead (the operator counts a deleted running worker as failed
    and fails a TFJob on any failed worker unless spec.enableDynamicWorker)."""
    tfjob = story2_tfjob()
    specs = tfjob["spec"].pop("tfReplicaSpecs")
    for spec_ in specs.values():
        spec_["template"]["spec"]["containers"][0]["name"] = "pytorch"
    tfjob["spec"]["pytorchReplicaSpecs"] = {"Master": specs["Chief"], "Worker": specs["Worker"]}
    return {**tfjob, "kind": "PyTorchJob"}


def segments_of(placed: dict[str, str], rack_of_node: dict[str, str], prefix: str, size: int) -> list[set[str]]:
    count = sum(1 for p in placed if p.startswith(prefix))
    return [
        {rack_of_node[placed[f"{prefix}{i}"]] for i in range(s * size, s * size + size)} for s in range(count // size)
    ]


@pytest.mark.parametrize("zone_required", [False, True], ids=["story-1-racks", "story-2-racks-in-one-zone"])
async def test_kai_segment_stories_as_tfjobs_with_the_real_training_operator(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes, zone_required: bool
) -> None:
    #   z0-b0-r0..r3 (4 nodes each): one zone holds the job  z1-b0-r0..r2 (4 nodes each)
    nodes = []
    for zone, racks in ((0, 4), (1, 3)):
        for rack in range(racks):
            nodes += await fake_gpu_nodes.add(zone=zone, block=0, rack=rack, count=4)
    await create(kube, story2_tfjob(zone_required), ns)
    placed = await wait_all_bound(kube, ns, 17, within=120)
    rack_of = await node_racks(kube, nodes)
    assert set(placed) == {"train-chief-0", *(f"train-worker-{i}" for i in range(16))}
    for s, racks in enumerate(segments_of(placed, rack_of, "train-worker-", 4)):
        assert len(racks) == 1, f"segment {s} spans racks {racks}"
    workers = [rack_of[placed[f"train-worker-{i}"]] for i in range(16)]
    if zone_required:
        assert {r.split("-")[0] for r in workers} == {"z0"}
    # The operator's own labels are what the grouper read.
    labels = await labelled(kube, ns)
    assert labels["train-worker-5"]["training.kubeflow.org/replica-index"] == "5"
    assert labels["train-worker-5"]["training.kubeflow.org/job-name"] == "train"


async def test_a_pytorchjob_with_elastic_segments(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # An elastic PyTorchJob: 8 workers wanted, 4 the minimum (elasticPolicy.minReplicas), in
    # segments of 2 per rack. Only 3 racks of 2 nodes: the minimum starts, 6 of the 8 run, and
    # every running segment is whole in one rack.
    #   z0-b0-r0..r2 (2 nodes each)
    nodes = []
    for rack in range(3):
        nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=rack, count=2)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "elastic", "annotations": {"kai.scheduler/topology": "e2e-dc"}},
        "spec": {
            "elasticPolicy": {"minReplicas": 4, "maxReplicas": 8, "rdzvBackend": "c10d"},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 8,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {
                            "annotations": {
                                "kai.scheduler/segment-size": "2",
                                "kai.scheduler/segment-topology-required-placement": RACK,
                            }
                        },
                        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container("pytorch")]},
                    },
                }
            },
        },
    }
    await create(kube, job, ns)
    placed = await wait_all_bound(kube, ns, 6, within=120)
    rack_of = await node_racks(kube, nodes)
    by_index = {int(name.rsplit("-", 1)[1]): rack_of[node] for name, node in placed.items()}
    segments: dict[int, set[str]] = {}
    for index, rack in by_index.items():
        segments.setdefault(index // 2, set()).add(rack)
    assert all(len(r) == 1 for r in segments.values()), segments
    assert len({r for rs in segments.values() for r in rs}) == 3

    async def two_wait() -> bool:
        items = await pods(kube, ns)
        return len(items) == 8 and sum(1 for p in items if not p["spec"].get("nodeName")) == 2

    await eventually(two_wait, within=30, what="the two workers beyond the room to be created and wait")


async def test_an_elastic_pytorchjob_in_one_zone_goes_whole_to_the_zone_that_holds_every_segment(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # 8 workers, 4 the minimum, in segments of 4 per rack, the job in one zone. Zone z0 has 9
    # nodes (racks of 3 and 6) and zone z1 10 (racks of 5 and 5): by free nodes z0 is the tighter
    # zone, but only z1 holds both segments whole. The elastic segment runs whole in z1, never
    # 3 of its 4 workers in z0's small rack.
    #   z0-b0-r0 (3 nodes), z0-b0-r1 (6)    z1-b0-r0 (5), z1-b0-r1 (5)
    nodes = []
    for zone, sizes in ((0, (3, 6)), (1, (5, 5))):
        for rack, count in enumerate(sizes):
            nodes += await fake_gpu_nodes.add(zone=zone, block=0, rack=rack, count=count)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "zoned",
            "annotations": {"kai.scheduler/topology": "e2e-dc", "kai.scheduler/topology-required-placement": ZONE},
        },
        "spec": {
            "elasticPolicy": {"minReplicas": 4, "maxReplicas": 8, "rdzvBackend": "c10d"},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 8,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {
                            "annotations": {
                                "kai.scheduler/segment-size": "4",
                                "kai.scheduler/segment-topology-required-placement": RACK,
                            }
                        },
                        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container("pytorch")]},
                    },
                }
            },
        },
    }
    await create(kube, job, ns)
    placed = await wait_all_bound(kube, ns, 8, within=120)
    rack_of = await node_racks(kube, nodes)
    racks = segments_of(placed, rack_of, "zoned-worker-", 4)
    assert len(racks) == 2
    assert all(len(r) == 1 for r in racks), racks
    assert {r.split("-")[0] for rs in racks for r in rs} == {"z1"}


# -- LeaderWorkerSet with subgroups (the LWS subgroup KEP), its own webhook's labels --------------------------


async def test_a_leaderworkerset_with_subgroups_gets_one_rack_per_subgroup(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # 2 groups of size 4 (a leader and 3 workers), subgroups of 2 pods each required and exclusive
    # in a rack: 4 subgroups, 4 racks of 2 nodes.
    #   z0-b0-r0..r3 (2 nodes each)
    nodes = []
    for rack in range(4):
        nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=rack, count=2)
    template = {
        "metadata": {"annotations": {"kai.scheduler/topology": "e2e-dc"}},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container("main")]},
    }
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "serve",
            "annotations": {
                "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": RACK,
                "kai.scheduler/topology": "e2e-dc",
            },
        },
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 4,
                "subGroupPolicy": {"subGroupSize": 2},
                "workerTemplate": template,
            },
        },
    }
    await create(kube, lws, ns)
    placed = await wait_all_bound(kube, ns, 8, within=120)
    rack_of = await node_racks(kube, nodes)
    labels = await labelled(kube, ns)
    # The labels the LWS pod webhook sets, which topogang's grouper reads.
    subgroups: dict[tuple[str, str], set[str]] = {}
    for name, node in placed.items():
        pod_labels = labels[name]
        assert f"{LWS}/worker-index" in pod_labels, pod_labels
        key = (
            pod_labels["leaderworkerset.sigs.k8s.io/group-index"],
            pod_labels["leaderworkerset.sigs.k8s.io/subgroup-index"],
        )
        subgroups.setdefault(key, set()).add(rack_of[node])
    assert len(subgroups) == 4, subgroups
    assert all(len(r) == 1 for r in subgroups.values()), subgroups
    assert len({next(iter(r)) for r in subgroups.values()}) == 4, "subgroups are exclusive in their racks"


# -- JobSet: each replicated Job on its own rack -----------------------------------------------------------------


async def test_a_jobset_places_each_job_in_its_own_rack(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # Per-Job assignment with Kueue's podset annotation on the Job template (each Job required in
    # one rack); JobSet's own exclusive-topology is the next test.
    #   z0-b0-r0 (2 nodes)  z0-b0-r1..r3 (4 nodes each): the 3 Jobs of 4 pods cannot use r0
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    for rack in range(1, 4):
        nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=rack, count=4)
    pod_annotations = {"kai.scheduler/topology": "e2e-dc", "kueue.x-k8s.io/podset-required-topology": RACK}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "annotations": {"kai.scheduler/topology": "e2e-dc"}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 3,
                    "template": {
                        "spec": {
                            "parallelism": 4,
                            "completions": 4,
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"annotations": pod_annotations},
                                "spec": {
                                    "restartPolicy": "Never",
                                    "terminationGracePeriodSeconds": 0,
                                    "containers": [container("main")],
                                },
                            },
                        }
                    },
                }
            ]
        },
    }
    await create(kube, jobset, ns)
    placed = await wait_all_bound(kube, ns, 12, within=120)
    rack_of = await node_racks(kube, nodes)
    labels = await labelled(kube, ns)
    per_job: dict[str, set[str]] = {}
    for name, node in placed.items():
        per_job.setdefault(labels[name]["jobset.sigs.k8s.io/job-index"], set()).add(rack_of[node])
    assert sorted(per_job) == ["0", "1", "2"]
    assert all(len(r) == 1 for r in per_job.values()), per_job
    assert {next(iter(r)) for r in per_job.values()} == {"z0-b0-r1", "z0-b0-r2", "z0-b0-r3"}


EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"


def exclusive_jobset() -> dict[str, Any]:
    """A JobSet of 3 Jobs of 4 pods of 8 GPUs (a node each) with JobSet's own exclusive placement
    on the rack: each Job alone in a rack."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "annotations": {"kai.scheduler/topology": "e2e-dc", EXCLUSIVE: RACK}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 3,
                    "template": {
                        "spec": {
                            "parallelism": 4,
                            "completions": 4,
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "terminationGracePeriodSeconds": 0,
                                    "containers": [container("main")],
                                }
                            },
                        }
                    },
                }
            ]
        },
    }


async def racks_for_three_jobs(fake_gpu_nodes: FakeGpuNodes) -> list[str]:
    """z0-b0-r0 (2 nodes), z0-b0-r1..r3 (4 nodes each): the 3 Jobs of 4 pods cannot use r0."""
    nodes = await fake_gpu_nodes.add(zone=0, block=0, rack=0, count=2)
    for rack in range(1, 4):
        nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=rack, count=4)
    return nodes


async def assert_one_job_per_rack(kube: KubeClient, ns: str, nodes: list[str], placed: dict[str, str]) -> None:
    """Every Job of exclusive_jobset() in a rack of its own, placed as JobSet's webhook means it:
    each leader (completion index 0) carries its pod affinity, each follower a nodeSelector to its
    leader's rack, which it runs in."""
    rack_of = await node_racks(kube, nodes)
    bodies = {p["metadata"]["name"]: p for p in await pods(kube, ns)}
    per_job: dict[str, set[str]] = {}
    leader_rack: dict[str, str] = {}
    for name, node in placed.items():
        meta, spec = bodies[name]["metadata"], bodies[name]["spec"]
        job = meta["labels"]["jobset.sigs.k8s.io/job-index"]
        per_job.setdefault(job, set()).add(rack_of[node])
        if meta["annotations"]["batch.kubernetes.io/job-completion-index"] == "0":
            assert spec["affinity"]["podAffinity"], name  # JobSet's webhook admitted it as a leader
            leader_rack[job] = rack_of[node]
    assert sorted(per_job) == ["0", "1", "2"]
    assert all(len(r) == 1 for r in per_job.values()), per_job
    assert {next(iter(r)) for r in per_job.values()} == {"z0-b0-r1", "z0-b0-r2", "z0-b0-r3"}  # no two share
    for name, body in bodies.items():
        if body["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] != "0":
            job = body["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]
            assert body["spec"]["nodeSelector"][RACK] == leader_rack[job], name


async def test_a_jobset_with_exclusive_topology_runs_one_job_per_rack(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    # JobSet's webhook admits a Job's followers only once its leader is scheduled: topogang plans
    # the whole JobSet when the three leaders are there, holds the followers' room, binds the
    # leaders, and binds each follower into its room when JobSet lets it be created.
    nodes = await racks_for_three_jobs(fake_gpu_nodes)
    await create(kube, exclusive_jobset(), ns)
    placed = await wait_all_bound(kube, ns, 12, within=120)
    await assert_one_job_per_rack(kube, ns, nodes, placed)


# -- a node lost under a running segment (a PyTorchJob): the operator recreates, topogang repairs -----------------


async def test_a_lost_node_the_operator_recreates_the_pod_and_topogang_puts_it_in_its_segments_rack(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0..r3 (5 nodes each): every segment's rack has a spare node
    nodes = []
    for rack in range(4):
        nodes += await fake_gpu_nodes.add(zone=0, block=0, rack=rack, count=5)
    await create(kube, story2_pytorchjob(), ns)
    before = await wait_all_bound(kube, ns, 17, within=120)
    rack_of = await node_racks(kube, nodes)
    lost = "train-worker-9"
    old = await kube.get(f"/api/v1/namespaces/{ns}/pods/{lost}")
    # The node goes; its pod is deleted as the pod garbage collector would (it waits 40 s for
    # orphaned pods); the training operator then creates it again under the same name.
    await fake_gpu_nodes.delete([before[lost]])
    await kube.delete(f"/api/v1/namespaces/{ns}/pods/{lost}", {"gracePeriodSeconds": "0"})

    async def recreated_and_bound() -> str | None:
        pod = (await kube.get(f"/api/v1/namespaces/{ns}/pods", {"fieldSelector": f"metadata.name={lost}"}))["items"]
        if pod and pod[0]["metadata"]["uid"] != old["metadata"]["uid"]:
            return pod[0]["spec"].get("nodeName") or None
        return None

    node = await eventually(recreated_and_bound, within=120, what=f"{lost} recreated by the operator and bound")
    assert rack_of[node] == rack_of[before[lost]], "the replacement stays in its segment's rack"
    after = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in await pods(kube, ns)}
    assert {k: v for k, v in after.items() if k != lost} == {k: v for k, v in before.items() if k != lost}


async def test_a_lost_node_whose_rack_has_no_spare_moves_its_segment_whole_and_the_others_stay(
    running: tuple[Topogang, Controllers], kube: KubeClient, ns: str, fake_gpu_nodes: FakeGpuNodes
) -> None:
    #   z0-b0-r0..r4 (4 nodes each): four racks hold the segments, one is free
    #   z1-b0-r0 (4 nodes): a free rack in another zone, which the job's zone rules out
    nodes = []
    for zone, rack in [(0, r) for r in range(5)] + [(1, 0)]:
        nodes += await fake_gpu_nodes.add(zone=zone, block=0, rack=rack, count=4)
    await create(kube, story2_pytorchjob(), ns)
    before = await wait_all_bound(kube, ns, 17, within=120)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await pods(kube, ns)}
    rack_of = await node_racks(kube, nodes)
    used = {rack_of[before[f"train-worker-{i}"]] for i in range(16)}
    [free] = {r for r in rack_of.values() if r.startswith("z0")} - used
    segment = [f"train-worker-{i}" for i in range(8, 12)]
    await fake_gpu_nodes.delete([before["train-worker-9"]])
    await kube.delete(f"/api/v1/namespaces/{ns}/pods/train-worker-9", {"gracePeriodSeconds": "0"})

    async def segment_moved() -> dict[str, str] | None:
        items = await pods(kube, ns)
        now = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName")) for p in items}
        moved = all(n in now and now[n][0] != uids[n] and now[n][1] for n in segment)
        return {n: node for n, (_, node) in now.items() if node} if moved and len(now) == 17 else None

    # topogang evicts the segment's other three pods, the operator recreates all four, and
    # topogang places them together in the free rack of the job's zone.
    after = await eventually(segment_moved, within=180, what="segment 2 recreated by the operator and bound")
    assert {rack_of[after[n]] for n in segment} == {free}
    others = [n for n in before if n not in segment]
    assert {n: after[n] for n in others} == {n: before[n] for n in others}
