"""Time from the last member's creation to all bound, for one gang on the real control plane.

Starts the local control plane (e2e/controlplane), N kwok GPU nodes (zones of racks of 16),
`topogang serve` and kube-scheduler from scheduler-config/extender.yaml, then creates a PodGroup
of P pods of 8 GPUs (segments of 8 in one rack each, the gang in one zone) and its pods, and
measures from the moment the last pod was created until every pod is bound, as the API server
shows it.

    python bench/e2e_gang_latency.py                   # 256 pods on 1,000 nodes
    python bench/e2e_gang_latency.py --nodes 200 --pods 64 --runs 3 --json

Needs the control-plane binaries (`make controlplane`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.controlplane import Binaries, ControlPlane, FakeGpuNodes, FakeTopology, api_client
from e2e.scenario import apply_crds, create, gpu_pod, pods
from e2e.topogang import CRDS, Topogang, scheduler_config
from extender.kube.client import KubeClient

RACK = "topology.topogang.io/rack"


async def one_run(plane: ControlPlane, kube: KubeClient, pods_n: int, run: int) -> float:
    ns = f"bench-{run}"
    await kube.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    await asyncio.sleep(1)  # the namespace's default ServiceAccount
    segments = pods_n // 8
    subgroups = [{"name": "w", "minSubGroup": segments}] + [
        {"name": f"w-{s}", "parent": "w", "minMember": 8} for s in range(segments)
    ]
    spec = {
        "subGroups": subgroups,
        "topologyConstraints": {
            "global": {"requiredTopologyLevel": "zone"},
            "subGroups": {f"w-{s}": {"requiredTopologyLevel": "rack"} for s in range(segments)},
        },
    }
    pg = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "annotations": {"kai.scheduler/topology": "bench-dc"}},
        "spec": spec,
    }
    await create(kube, pg, ns)
    limit = asyncio.Semaphore(32)

    async def make(i: int) -> None:
        labels = {"kai.scheduler/subgroup-name": f"w-{i // 8}"}
        async with limit:
            await create(kube, gpu_pod(f"w-{i}", labels=labels, annotations={"pod-group-name": "train"}), ns)

    await asyncio.gather(*(make(i) for i in range(pods_n)))
    last_created = time.perf_counter()
    print(f"run {run}: last pod created at {time.time():.3f}", file=sys.stderr)
    deadline = last_created + 120
    while True:
        bound = sum(1 for p in await pods(kube, ns) if p["spec"].get("nodeName"))
        if bound == pods_n:
            took = time.perf_counter() - last_created
            await clean(kube, ns)
            return took
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{bound}/{pods_n} bound after 120 s")
        await asyncio.sleep(0.05)


async def clean(kube: KubeClient, ns: str) -> None:
    """Delete the gang's pods and wait until they are gone, so the next run has the same room."""
    await kube.delete(f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0})
    deadline = time.perf_counter() + 120
    while await pods(kube, ns):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"pods of {ns} still there after 120 s")
        await asyncio.sleep(0.5)


async def until_schedulable(kube: KubeClient, count: int) -> None:
    """Ready is not enough: the node lifecycle controller lifts each new node's not-ready taint a
    little later, and until then neither kube-scheduler nor topogang may use the node."""
    deadline = time.perf_counter() + 600
    while True:
        listing = await kube.get("/api/v1/nodes")
        usable = sum(
            1
            for n in listing["items"]
            if not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints", []))
        )
        if usable >= count:
            return
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {usable}/{count} nodes lost their not-ready taints")
        await asyncio.sleep(1)


async def main_async(args: argparse.Namespace) -> None:
    plane = ControlPlane(binaries=Binaries.locate(), scheduler=False)
    plane.start()
    try:
        async with api_client(plane.kubeconfig) as api, await KubeClient.connect(plane.kubeconfig) as kube:
            await apply_crds(kube, CRDS)
            topo = {
                "apiVersion": "scheduling.topogang.io/v1alpha1",
                "kind": "Topology",
                "metadata": {"name": "bench-dc"},
                "spec": {"levels": [{"nodeLabel": f"topology.topogang.io/{lv}"} for lv in ("zone", "block", "rack")]},
            }
            await create(kube, topo)
            zones = max(1, args.nodes // 500)
            per_zone = args.nodes // zones
            racks = per_zone // 16
            nodes = FakeGpuNodes(api, name_prefix="bench")
            made = await nodes.create(FakeTopology(zones, 1, racks, 16), timeout_s=300)
            await until_schedulable(kube, len(made))
            async with Topogang.start(plane.kubeconfig, plane.logs_dir) as server:
                await plane.start_scheduler_async(scheduler_config(server.url, server.tls))
                try:
                    times = [await one_run(plane, kube, args.pods, r) for r in range(args.runs)]
                except TimeoutError:
                    print(f"--- topogang log ---\n{server.tail(30)}", file=sys.stderr)
                    print(f"--- kube-scheduler log ---\n{plane.components['kube-scheduler'].tail(20)}", file=sys.stderr)
                    raise
        row = {
            "nodes": len(made),
            "pods": args.pods,
            "median_s": round(statistics.median(times), 2),
            "max_s": round(max(times), 2),
            "runs": args.runs,
        }
        print(orjson.dumps(row).decode() if args.json else
              f"{row['pods']} pods on {row['nodes']} nodes: last pod created -> all bound "
              f"median {row['median_s']} s, max {row['max_s']} s over {row['runs']} run(s)")  # fmt: skip
    finally:
        plane.stop(keep_workdir=args.keep)
        if args.keep:
            print(f"logs kept in {plane.logs_dir}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=256, help="a multiple of 8")
    parser.add_argument("--runs", type=int, default=3, help="gangs created one after another (default 3)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's files and logs")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
