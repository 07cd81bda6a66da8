"""How long the live cache holds the event loop while it applies a list of many pods.

Filter calls and the Lease's renewal share topogang's one event loop with the informers, so the
longest stretch the loop runs nothing else is what matters. A probe task sleeps 1 ms over and
over and records how late it wakes (loop lag) while a ClusterCache (pods only) applies:

    sync     the first list of N pending pods, from start to ready
    relist   a list after every pod changed while the cache was stopped (a label patched onto each
             one; the informer's resourceVersion is dropped, as after a 410), until applied

For each: seconds, the longest loop lag (while it runs and for 3 s after), its 99th percentile, and
the longest full (generation 2) collection of Python's cyclic garbage collector, which holds the
loop too (gc.callbacks), with the longest lag left once the collections inside each lag are taken
out, and the most CPU time this process used within one lag (a lag far longer than that is the
process waiting for a core, which a busy machine adds). Then how long one full collection of the
heap left takes (gc.collect()): the stall any full collection costs with that many pods cached,
list or not.

    python bench/relist_stall.py                        # the local control plane, 100,000 pods
    python bench/relist_stall.py --pods 20000 --json
    python bench/relist_stall.py --fake                 # an in-process list, no API server
    python bench/relist_stall.py --kubeconfig ~/.kube/config   # any cluster; the namespace is deleted after

It reads only ClusterCache and Informer.resource_version, so the same file measures older code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import sys
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kube_sync import bounded, cluster, pod
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube import ClusterCache, KubeClient, Selector
from extender.kube.resources import PODS

PROBE_SECONDS = 0.001
AFTER_SECONDS = 3.0
PAGE = 500


@dataclass
class Probe:
    """Loop lag samples ((start, end, lag, this process's CPU seconds meanwhile)) and full
    collections ((start, end))."""

    lags: list[tuple[float, float, float, float]] = field(default_factory=list)
    collections: list[tuple[float, float]] = field(default_factory=list)
    _started: float = 0.0

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.collections.append((self._started, time.perf_counter()))

    async def run(self) -> None:
        while True:
            start, cpu = time.perf_counter(), time.process_time()
            await asyncio.sleep(PROBE_SECONDS)
            end = time.perf_counter()
            self.lags.append((start, end, end - start - PROBE_SECONDS, time.process_time() - cpu))

    def figures(self) -> dict[str, float]:
        lags = sorted(lag for _, _, lag, _ in self.lags) or [0.0]

        def in_gc(start: float, end: float) -> float:
            return sum(max(0.0, min(end, e) - max(start, s)) for s, e in self.collections)

        outside = max((lag - in_gc(s, e) for s, e, lag, _ in self.lags), default=0.0)
        running = max((cpu for _, _, _, cpu in self.lags), default=0.0)
        return {
            "max_lag_ms": round(lags[-1] * 1000, 1),
            "p99_lag_ms": round(lags[int(0.99 * (len(lags) - 1))] * 1000, 1),
            "max_gc2_ms": round(max((e - s for s, e in self.collections), default=0.0) * 1000, 1),
            "gc2_count": len(self.collections),
            "max_lag_outside_gc_ms": round(max(outside, 0.0) * 1000, 1),
            "max_lag_cpu_ms": round(running * 1000, 1),
        }


@contextlib.asynccontextmanager
async def probing() -> AsyncIterator[Probe]:
    probe = Probe()
    gc.callbacks.append(probe.gc_callback)
    task = asyncio.create_task(probe.run())
    try:
        yield probe
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gc.callbacks.remove(probe.gc_callback)


async def timed(work: Callable[[], Any]) -> dict[str, float]:
    """WORK's seconds and the loop's lag while it runs and for AFTER_SECONDS after it (what it
    left the collector to do shows there)."""
    async with probing() as probe:
        started = time.perf_counter()
        await work()
        seconds = time.perf_counter() - started
        for _ in range(100):  # a server allocates as it goes on (collections start on allocations)
            _ = [[] for _ in range(1000)]
            await asyncio.sleep(AFTER_SECONDS / 100)
    return {"seconds": round(seconds, 2), **probe.figures()}


async def relist(cache: ClusterCache) -> None:
    """Start CACHE with its pods informer due to list again; until that list is applied."""
    informer = cache.informers[PODS.name]
    relists = informer.relists
    informer.resource_version = ""
    cache.start()
    deadline = time.monotonic() + 1800
    while informer.relists == relists:
        if time.monotonic() > deadline:
            raise TimeoutError("the relist was not applied within 1800 s")
        await asyncio.sleep(0.01)


def full_collection_ms() -> float:
    """What one full collection of the heap left (the cache holding every pod) takes: the loop
    stalls this long whenever the collector runs one, list or not."""
    started = time.perf_counter()
    gc.collect()
    return round((time.perf_counter() - started) * 1000, 1)


def check(scheduler: GangScheduler, count: int, label: str) -> None:
    pods = scheduler.state.pods
    assert len(pods) == count
    assert all(p.labels.get("round") == label for p in pods.values())


async def measure_real(kubeconfig: Path, count: int) -> dict[str, Any]:
    async with await KubeClient.connect(kubeconfig) as kube:
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        await kube.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
        try:
            collection = PODS.collection_path("v1", namespace)
            started = time.perf_counter()
            await bounded([functools.partial(kube.post, collection, pod(f"p{i}")) for i in range(count)])
            print(f"created {count} pods in {time.perf_counter() - started:.0f}s", file=sys.stderr)
            scheduler = GangScheduler(ClusterState())
            cache = ClusterCache(kube, scheduler, resources=[PODS], selectors={PODS.name: Selector(namespace)})

            async def sync() -> None:
                cache.start()
                await cache.wait_ready(1800)

            first = await timed(sync)
            await cache.stop()
            patch = {"metadata": {"labels": {"round": "2"}}}
            paths = [PODS.object_path("v1", f"p{i}", namespace) for i in range(count)]
            await bounded([functools.partial(kube.patch, path, patch) for path in paths])
            again = await timed(functools.partial(relist, cache))
            await cache.stop()
            check(scheduler, count, "2")
            floor = full_collection_ms()
        finally:
            with contextlib.suppress(Exception):
                await kube.delete(f"/api/v1/namespaces/{namespace}")
    return {"pods": count, "api_server": True, "sync": first, "relist": again, "full_collection_ms": floor}


# A pending pod as the API server lists it (bench/kube_sync.pod after admission): what a list
# holds per pod, managedFields included, matters to the garbage collector.
LISTED_POD = orjson.loads(
    b"""{"metadata": {"name": "p0", "namespace": "bench", "uid": "u0", "resourceVersion": "1",
    "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "bench"},
    "annotations": {"pod-group-name": "g"}, "managedFields": [{"manager": "topogang",
    "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
    "f:pod-group-name": {}}, "f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:containers":
    {"k:{\\"name\\":\\"main\\"}": {".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
    "f:resources": {".": {}, "f:limits": {".": {}, "f:nvidia.com/gpu": {}}, "f:requests": {".": {},
    "f:cpu": {}, "f:memory": {}, "f:nvidia.com/gpu": {}}}, "f:terminationMessagePath": {},
    "f:terminationMessagePolicy": {}}}, "f:dnsPolicy": {}, "f:enableServiceLinks": {},
    "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
    "f:terminationGracePeriodSeconds": {}}}}]}, "spec": {"volumes": [{"name": "kube-api-access",
    "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
    "fieldPath": "metadata.namespace"}}]}}], "defaultMode": 420}}], "containers": [{"name": "main",
    "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"nvidia.com/gpu": "1"},
    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}, "volumeMounts": [{"name":
    "kube-api-access", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    "imagePullPolicy": "IfNotPresent"}], "restartPolicy": "Always", "terminationGracePeriodSeconds": 0,
    "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
    "securityContext": {}, "schedulerName": "topogang-bench-nobody", "tolerations": [{"key":
    "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds":
    300}, {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
    "tolerationSeconds": 300}], "priority": 0, "enableServiceLinks": true, "preemptionPolicy":
    "PreemptLowerPriority"}, "status": {"phase": "Pending", "qosClass": "Burstable"}}"""
)


class FakeList:
    """A ListWatch whose list is COUNT pods (LISTED_POD's), its pages encoded beforehand and
    decoded one by one as KubeClient does (`next_round` changes every pod); watches stay open
    with nothing in them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.round = 0
        self.pages: list[bytes] = []
        self.next_round()

    def next_round(self) -> None:
        self.round += 1
        template = orjson.dumps(LISTED_POD)
        self.pages = []
        for first in range(0, self.count, PAGE):
            page = []
            for i in range(first, min(first + PAGE, self.count)):
                body = orjson.loads(template)
                meta = body["metadata"]
                meta.update(name=f"p{i}", uid=f"uid-{i}", resourceVersion=f"{i}-{self.round}")
                meta["labels"]["round"] = str(self.round)
                page.append(body)
            self.pages.append(orjson.dumps(page))

    async def list(
        self,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        page_size: int = PAGE,
        each: Callable[[dict[str, Any]], object] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        items: list[dict[str, Any]] = []
        for page in self.pages:
            got = orjson.loads(page)
            for item in got if each is not None else ():
                each(item)
            items.extend(got)
            await asyncio.sleep(0)  # (the next page is a request: the loop runs meanwhile)
        return items, str(self.count * 10 + self.round)

    async def watch(
        self, path: str, params: dict[str, Any] | None = None, *, timeout_seconds: int = 300
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        await asyncio.Event().wait()
        yield "", {}


async def measure_fake(count: int) -> dict[str, Any]:
    api = FakeList(count)
    scheduler = GangScheduler(ClusterState())
    cache = ClusterCache(api, scheduler, resources=[PODS])

    async def sync() -> None:
        cache.start()
        await cache.wait_ready(1800)

    first = await timed(sync)
    await cache.stop()
    api.next_round()
    again = await timed(functools.partial(relist, cache))
    await cache.stop()
    check(scheduler, count, "2")
    floor = full_collection_ms()
    return {"pods": count, "api_server": False, "sync": first, "relist": again, "full_collection_ms": floor}


def show(result: dict[str, Any]) -> str:
    source = "API server" if result["api_server"] else "in-process list"
    lines = [f"{result['pods']} pods ({source}):"]
    for step in ("sync", "relist"):
        f = result[step]
        lines.append(
            f"  {step:<7}{f['seconds']:>7.2f}s  longest loop lag {f['max_lag_ms']:>7.1f} ms (p99 {f['p99_lag_ms']} ms);"
            f" longest full gc {f['max_gc2_ms']} ms ({f['gc2_count']}); longest lag outside gc"
            f" {f['max_lag_outside_gc_ms']} ms; longest lag in this process's CPU time {f['max_lag_cpu_ms']} ms"
        )
    lines.append(f"  a full collection of the heap left: {result['full_collection_ms']} ms")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--fake", action="store_true", help="an in-process list instead of an API server")
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting the local control plane")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    if args.fake:
        result = asyncio.run(measure_fake(args.pods))
    else:
        with cluster(args.kubeconfig) as kubeconfig:
            result = asyncio.run(measure_real(kubeconfig, args.pods))
    print(orjson.dumps(result).decode() if args.json else show(result))


if __name__ == "__main__":
    main()
