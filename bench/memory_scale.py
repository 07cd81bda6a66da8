"""topogang's memory at the size of a large cluster: 10,000 nodes and 100,000 pods.

Builds the in-memory view the server keeps (ClusterState, Membership, the GangScheduler) from
API-shaped objects through `apply_object`, the path the live cache takes: --nodes 16-GPU nodes in
zones > blocks > racks, --pods running pods of which 90% belong to gangs (PodGroups of
--gang-size pods, every member bound) and the rest are plain, each with the labels, owner
reference and container spec a controller would write. Then it asks what the server asks on
every call (the gang of each pod, each gang's status) and plans one 1,024-pod gang, so the
lazily built caches are counted too.

Prints the resident memory (VmRSS, and the peak VmHWM) after the build and after the queries,
the build time and the size of what is kept. What it leaves out: the aiohttp server and the
informers' buffers (a few MB), and the raw objects of workloads (ClusterState.objects), which
hold only owners here.

    python bench/memory_scale.py                     # 10,000 nodes, 100,000 pods
    python bench/memory_scale.py --nodes 5000 --pods 50000 --json
    python bench/memory_scale.py --dra slices        # and a ResourceSlice per node
    python bench/memory_scale.py --dra claims        # GPUs only from Dynamic Resource Allocation

--dra slices: each node also has a ResourceSlice of 16 devices, each with a model, an index and
a UUID attribute, as a GPU driver publishes them (a DeviceClass selects them; the pods are
unchanged). --dra claims: the nodes' GPUs are those devices only (no nvidia.com/gpu in
allocatable) and each pod's GPU is a ResourceClaim made from a template and allocated on its
node (100,000 claims), as kube-controller-manager and kube-scheduler leave them.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler

LEVELS = ("example.com/topology-zone", "example.com/topology-block", "example.com/topology-rack")
GPU = "nvidia.com/gpu"


def memory_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process, in MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def node(i: int) -> dict[str, Any]:
    rack, zone = i // 16, i // 2500
    name = f"gpu-{i:05d}"
    labels = {
        LEVELS[0]: f"z{zone}",
        LEVELS[1]: f"z{zone}-b{rack // 8}",
        LEVELS[2]: f"z{zone}-r{rack}",
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": "gpu-8x",
        "nvidia.com/gpu.product": "H100-SXM",
    }
    # 16 GPUs, so that 10 running 1-GPU pods a node leave room for the gang planned at the end
    capacity = {GPU: "16", "cpu": "192", "memory": "2Ti", "pods": "110", "ephemeral-storage": "7Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "uid": f"node-uid-{i}"},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(i: int, node_name: str, gang: str | None) -> dict[str, Any]:
    name = f"{gang or 'plain'}-{i}"
    annotations = {"pod-group-name": gang} if gang else {}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": gang or f"job-{i}", "uid": f"job-uid-{gang or i}"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"pod-uid-{i}",
            "labels": {"app": gang or "plain", "batch.kubernetes.io/job-completion-index": str(i % 1024)},
            "annotations": annotations,
            "ownerReferences": [{**owner, "controller": True}],
            "creationTimestamp": "2026-11-23T10:00:00Z",
        },
        "spec": {
            "nodeName": node_name,
            "schedulerName": "default-scheduler",
            "priorityClassName": "training",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example.com/trainer:1.0",
                    "resources": {"requests": {GPU: "1", "cpu": "8", "memory": "64Gi"}, "limits": {GPU: "1"}},
                }
            ],
        },
        "status": {"phase": "Running", "startTime": "2026-11-23T10:00:05Z"},
    }


DRIVER = "gpu.example.com"
RESOURCE_API = "resource.k8s.io/v1"


def resource_slice(i: int) -> dict[str, Any]:
    name = f"gpu-{i:05d}"
    devices = [
        {
            "name": f"gpu-{d}",
            "attributes": {
                "model": {"string": "H100-SXM"},
                "index": {"int": d},
                "uuid": {"string": f"GPU-{i:05d}-{d:02d}"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for d in range(16)
    ]
    spec = {"driver": DRIVER, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}}
    return {"apiVersion": RESOURCE_API, "kind": "ResourceSlice", "metadata": {"name": f"{name}-{DRIVER}"},
            "spec": {**spec, "devices": devices}}  # fmt: skip


def with_claim(body: dict[str, Any], device: int | None) -> list[dict[str, Any]]:
    """BODY's GPU as a claim from the template `gpu` (DEVICE: allocated on its node); the
    objects to apply, the pod last."""
    container = body["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "8", "memory": "64Gi"}, "claims": [{"name": "gpu"}]}
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    if device is None:
        return [body]
    meta = body["metadata"]
    claim_name = f"{meta['name']}-gpu"
    body["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    result = {"request": "gpu", "driver": DRIVER, "pool": body["spec"]["nodeName"], "device": f"gpu-{device}"}
    claim = {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {"name": claim_name, "namespace": meta["namespace"], "uid": f"claim-{meta['uid']}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 1}}]}},
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
        },
    }
    return [claim, body]


def dra_setup(scheduler: GangScheduler) -> None:
    selectors = [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
    apply_object(scheduler, {"apiVersion": RESOURCE_API, "kind": "DeviceClass", "metadata": {"name": DRIVER},
                             "spec": {"selectors": selectors}})  # fmt: skip
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": 1}}
    apply_object(scheduler, {"apiVersion": RESOURCE_API, "kind": "ResourceClaimTemplate",
                             "metadata": {"name": "gpu", "namespace": "team"},
                             "spec": {"spec": {"devices": {"requests": [request]}}}})  # fmt: skip


def build(nodes: int, pods: int, gang_size: int, dra: str = "") -> GangScheduler:
    scheduler = GangScheduler(ClusterState())
    levels = [{"nodeLabel": lv} for lv in LEVELS]
    apply_object(scheduler, {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "Topology",
                             "metadata": {"name": "default"}, "spec": {"levels": levels}})  # fmt: skip
    if dra:
        dra_setup(scheduler)
    for i in range(nodes):
        body = node(i)
        if dra:
            apply_object(scheduler, orjson.loads(orjson.dumps(resource_slice(i))))
        if dra == "claims":
            without = {k: v for k, v in body["status"]["capacity"].items() if k != GPU}
            body["status"]["capacity"] = body["status"]["allocatable"] = without
        apply_object(scheduler, orjson.loads(orjson.dumps(body)))  # as decoded from the wire
    in_gangs = pods * 9 // 10
    for g in range(in_gangs // gang_size):
        spec = {"minMember": gang_size, "topologyConstraint": {"requiredTopologyLevel": LEVELS[1]}}
        body = {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": f"gang-{g}", "namespace": "team"}, "spec": spec}  # fmt: skip
        apply_object(scheduler, body)
    for i in range(pods):
        gang = f"gang-{i // gang_size}" if i < in_gangs - in_gangs % gang_size else None
        spread = max(1, pods // nodes)  # pods a node
        body = pod(i, f"gpu-{(i // spread) % nodes:05d}", gang)
        for obj in with_claim(body, i % spread) if dra == "claims" else [body]:
            apply_object(scheduler, orjson.loads(orjson.dumps(obj)))
    return scheduler


def query(scheduler: GangScheduler) -> int:
    """What the server asks: each pod's gang (the filter path), each gang's status (the writer)."""
    groups = {g for key in list(scheduler.state.pods) if (g := scheduler.lookup.group_of(key)) is not None}
    for group in groups:
        scheduler.status(group)
    return len(groups)


def plan_one(scheduler: GangScheduler, dra: str = "") -> str:
    """A 1,024-pod gang of 1-GPU pods planned on the full cluster (builds the node table)."""
    body = {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "new", "namespace": "team"}, "spec": {"minMember": 1024}}  # fmt: skip
    apply_object(scheduler, body)
    for i in range(1024):
        member = pod(10_000_000 + i, "", "new")
        del member["spec"]["nodeName"]
        member["status"] = {"phase": "Pending"}
        if dra == "claims":
            with_claim(member, None)
        apply_object(scheduler, member)
    first = scheduler.state.pods["team/new-10000000"]
    result = scheduler.filter(first, sorted(scheduler.state.nodes), 0.0)
    return result.event.outcome if result.event else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--gang-size", type=int, default=256)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dra", choices=["slices", "claims"], default="", help="add ResourceSlices; or claims too")
    args = parser.parse_args()
    gc.collect()
    base, _ = memory_mb()
    start = time.perf_counter()
    scheduler = build(args.nodes, args.pods, args.gang_size, args.dra)
    built_s = time.perf_counter() - start
    gc.collect()
    after_build, _ = memory_mb()
    start = time.perf_counter()
    groups = query(scheduler)
    outcome = plan_one(scheduler, args.dra)
    query_s = time.perf_counter() - start
    gc.collect()
    rss, peak = memory_mb()
    out = {
        "dra": args.dra or "none",
        "nodes": len(scheduler.state.nodes),
        "pods": len(scheduler.state.pods),
        "gangs": groups,
        "plan": outcome,
        "rss_start_mb": round(base, 1),
        "rss_after_build_mb": round(after_build, 1),
        "rss_mb": round(rss, 1),
        "peak_rss_mb": round(peak, 1),
        "build_s": round(built_s, 2),
        "query_and_plan_s": round(query_s, 2),
    }
    if args.json:
        print(orjson.dumps(out).decode())
        return
    for key, value in out.items():
        print(f"{key:>20}  {value}")


if __name__ == "__main__":
    main()
