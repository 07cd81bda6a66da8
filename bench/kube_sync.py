"""How fast the live cache fills from a real API server, and how fast it follows the watch.

Creates N pending pods (a schedulerName nothing serves, so nothing else touches them) in a fresh
namespace, then measures:

    sync_s        ClusterCache (pods only) from start to ready: the paginated list, orjson,
                  parse_pod and observe_pod for every pod
    list_s        the paginated list alone (KubeClient.list), for comparison
    watch_s       after a label is patched onto every pod (concurrently), the time from the last
                  patch's answer until the cache holds every change
    create_per_s  how fast the pods were created (the API server's pace, for context)

    python bench/kube_sync.py                   # starts the local control plane (make controlplane)
    python bench/kube_sync.py --pods 5000 --json
    python bench/kube_sync.py --kubeconfig ~/.kube/config   # any cluster; the namespace is deleted after
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.controlplane import Binaries, ControlPlane
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube import ClusterCache, KubeClient, Selector
from extender.kube.resources import PODS

CONCURRENCY = 64


def pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}, "annotations": {"pod-group-name": "g"}},
        "spec": {
            "schedulerName": "topogang-bench-nobody",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


async def bounded(calls: list[Callable[[], Awaitable[object]]]) -> None:
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[object]]) -> None:
        async with limit:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


async def measure(kubeconfig: Path, pods: int, page_size: int) -> dict[str, float | int]:
    async with await KubeClient.connect(kubeconfig) as kube:
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        await kube.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
        try:
            collection = PODS.collection_path("v1", namespace)
            started = time.perf_counter()
            await bounded([functools.partial(kube.post, collection, pod(f"p{i}")) for i in range(pods)])
            create_s = time.perf_counter() - started

            started = time.perf_counter()
            items, _ = await kube.list(collection, page_size=page_size)
            list_s = time.perf_counter() - started
            assert len(items) == pods

            scheduler = GangScheduler(ClusterState())
            cache = ClusterCache(
                kube, scheduler, resources=[PODS], selectors={PODS.name: Selector(namespace)}, page_size=page_size
            )
            started = time.perf_counter()
            async with cache:
                await cache.wait_ready(600)
                sync_s = time.perf_counter() - started
                assert len(scheduler.state.pods) == pods

                patch = {"metadata": {"labels": {"round": "2"}}}
                paths = [PODS.object_path("v1", f"p{i}", namespace) for i in range(pods)]
                await bounded([functools.partial(kube.patch, path, patch) for path in paths])
                patched = time.perf_counter()
                deadline = patched + 120
                while sum(1 for p in scheduler.state.pods.values() if p.labels.get("round") == "2") < pods:
                    if time.perf_counter() > deadline:
                        raise TimeoutError("the watch did not deliver every patch within 120 s")
                    await asyncio.sleep(0.01)
                watch_s = time.perf_counter() - patched
        finally:
            with contextlib.suppress(Exception):
                await kube.delete(f"/api/v1/namespaces/{namespace}")
    return {
        "pods": pods,
        "page_size": page_size,
        "sync_s": round(sync_s, 3),
        "list_s": round(list_s, 3),
        "watch_s": round(watch_s, 3),
        "create_per_s": round(pods / create_s),
    }


@contextlib.contextmanager
def cluster(kubeconfig: str | None) -> Iterator[Path]:
    if kubeconfig:
        yield Path(kubeconfig).expanduser()
        return
    with ControlPlane(binaries=Binaries.locate(), scheduler=False) as plane:
        yield plane.kubeconfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, action="append", help="pods to create (repeatable; default 1000 and 5000)")
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting the local control plane")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()
    with cluster(args.kubeconfig) as kubeconfig:
        for count in args.pods or [1000, 5000]:
            result = asyncio.run(measure(kubeconfig, count, args.page_size))
            if args.json:
                print(orjson.dumps(result).decode())
            else:
                print(
                    f"{result['pods']:>6} pods: sync {result['sync_s']:.2f}s (list alone {result['list_s']:.2f}s), "
                    f"every pod patched -> all seen {result['watch_s']:.2f}s later; "
                    f"created at {result['create_per_s']}/s"
                )


if __name__ == "__main__":
    main()
