"""What the benchmarks on the local control plane share: kwok GPU nodes in zones > blocks > racks,
waiting until the scheduler may use them, the topogang Topology over their labels, a pod watch
that times pods from the first create to the last bind, clean-up between runs, and the CPU time
and memory of the processes involved (read from /proc).

Also the control plane itself, with kwok tuned for thousands of nodes (its node leases and
workers) and the flags that tune it, so that every benchmark at scale starts it the same way.

Used by bench/side_by_side.py, bench/failover_scale.py and bench/e2e_gang_latency.py; not a
benchmark itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from e2e.controlplane import Binaries, ControlPlane, FakeGpuNodes
from e2e.scenario import create
from extender.kube.client import ApiError, KubeClient

LEVELS = ("zone", "block", "rack")
LABEL = {level: f"topology.topogang.io/{level}" for level in LEVELS}
TOPOLOGY = "bench-dc"
GPUS_PER_NODE = 8
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Shape:
    """Nodes per rack, racks per block, blocks per zone; the last rack, block or zone may be short."""

    rack_nodes: int = 32
    block_racks: int = 4
    zone_blocks: int = 4

    def racks(self, nodes: int) -> list[tuple[int, int, int, int]]:
        """(zone, block, rack, node count) for NODES nodes, filled rack by rack."""
        out = []
        per_zone = self.block_racks * self.zone_blocks
        for r in range((nodes + self.rack_nodes - 1) // self.rack_nodes):
            count = min(self.rack_nodes, nodes - r * self.rack_nodes)
            out.append((r // per_zone, (r % per_zone) // self.block_racks, r % self.block_racks, count))
        return out

    def gpus(self, level: str) -> int:
        """GPUs in one full domain of LEVEL."""
        nodes = {"rack": 1, "block": self.block_racks, "zone": self.block_racks * self.zone_blocks}[level]
        return nodes * self.rack_nodes * GPUS_PER_NODE

    def smallest_level(self, gpus: int) -> str:
        """The finest level one full domain of which holds GPUS."""
        for level in reversed(LEVELS):
            if self.gpus(level) >= gpus:
                return level
        raise ValueError(f"{gpus} GPUs do not fit in one zone of {self.gpus('zone')}")


def add_plane_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `running_plane`: kwok's tuning for many nodes, how long they may take, --keep."""
    parser.add_argument("--lease-seconds", type=int, default=0,
                        help="kwok's node lease duration (renewed every quarter of it; default: the control "
                             "plane's 40 s), the node monitor's grace periods twice it")  # fmt: skip
    parser.add_argument("--nodes-timeout", type=float, default=600,
                        help="seconds for the nodes to be Ready, and again to be usable (default 600)")  # fmt: skip
    parser.add_argument("--kwok-parallelism", type=int, default=0,
                        help="kwok's workers for node and pod stages and node leases (default: kwok's 4)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the control plane's files and logs")


def kwok_tuning(lease_seconds: int, parallelism: int) -> dict[str, list[str]]:
    """Extra component flags for LEASE_SECONDS node leases and PARALLELISM kwok workers (0: as shipped)."""
    extra: dict[str, list[str]] = {}
    if lease_seconds:
        # kwok renews each node's lease every quarter of its duration: at 40 s and 10,000 nodes
        # that is 1,000 writes a second to the API server and etcd, before any pod. The node
        # lifecycle controller must then wait longer before it calls a node unreachable
        # (and a node kwok has not initialized yet is not called unreachable after the default minute).
        extra["kwok"] = [f"--node-lease-duration-seconds={lease_seconds}"]
        extra["kube-controller-manager"] = [
            f"--node-monitor-grace-period={2 * lease_seconds}s",
            f"--node-startup-grace-period={2 * lease_seconds}s",
        ]
    if parallelism:
        # kwok plays each node's stages (its Ready status) with 4 workers by default, each waiting
        # on the API server: on a loaded machine thousands of new nodes stay uninitialized for minutes.
        options = {f"{k}Parallelism": parallelism for k in ("nodePlayStage", "nodeLease", "podPlayStage")}
        doc = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration", "options": options}
        path = Path(tempfile.mkdtemp(prefix="bench-kwok-")) / "kwok-options.json"
        path.write_bytes(orjson.dumps(doc))
        extra.setdefault("kwok", []).append(f"--config={path}")  # loaded after the plane's stages
    return extra


@contextlib.contextmanager
def running_plane(args: argparse.Namespace, extra: Mapping[str, list[str]] | None = None) -> Iterator[ControlPlane]:
    """The local control plane without kube-scheduler (each run starts its own), tuned by ARGS
    (`add_plane_arguments`) and EXTRA flags; stopped at the end, its files kept with --keep."""
    flags = {k: list(v) for k, v in (extra or {}).items()}
    for component, more in kwok_tuning(args.lease_seconds, args.kwok_parallelism).items():
        flags.setdefault(component, []).extend(more)
    plane = ControlPlane(binaries=Binaries.locate(), scheduler=False, extra_args=flags, timeout=120)
    plane.start()
    print(f"load average at start {os.getloadavg()}, {os.cpu_count()} cores", file=sys.stderr)
    try:
        yield plane
    finally:
        plane.stop(keep_workdir=args.keep)
        if args.keep:
            print(f"logs kept in {plane.logs_dir}", file=sys.stderr)


async def make_nodes(nodes: FakeGpuNodes, count: int, shape: Shape, *, timeout_s: float = 600) -> list[str]:
    """COUNT kwok GPU nodes in SHAPE, Ready; their names."""
    made = await asyncio.gather(
        *(nodes.add(zone=z, block=b, rack=r, count=n, wait_ready=False) for z, b, r, n in shape.racks(count))
    )
    names = [name for rack in made for name in rack]
    await nodes.wait_ready(names, timeout_s)
    return names


async def until_schedulable(kube: KubeClient, count: int, timeout_s: float = 600, share: float = 1.0) -> int:
    """Ready is not enough: the node lifecycle controller lifts each new node's not-ready taint a
    little later, and until then neither kube-scheduler nor topogang may use the node. Waits
    until SHARE of COUNT nodes are usable (on a loaded machine kwok can fall behind with
    thousands of node leases, and a few nodes flap); returns how many are."""
    deadline = time.perf_counter() + timeout_s
    while True:
        listing, _ = await kube.list("/api/v1/nodes")
        usable = sum(
            1
            for n in listing
            if not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints", []))
        )
        if usable >= count * share:
            return usable
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {usable}/{count} nodes lost their not-ready taints")
        await asyncio.sleep(1)


async def create_topology(kube: KubeClient, name: str = TOPOLOGY) -> None:
    """topogang's Topology over the fake nodes' zone, block and rack labels."""
    body = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": LABEL[level]} for level in LEVELS]},
    }
    try:
        await create(kube, body)
    except ApiError as exc:
        if exc.status != 409:
            raise


async def namespace(kube: KubeClient, name: str, timeout_s: float = 60) -> None:
    """Creates NAME and waits for its default ServiceAccount (pods cannot be created before)."""
    with contextlib.suppress(ApiError):
        await kube.post("/api/v1/namespaces", {"metadata": {"name": name}})
    deadline = time.perf_counter() + timeout_s
    while True:
        try:
            await kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return
        except ApiError as exc:
            if exc.status != 404 or time.perf_counter() > deadline:
                raise
        await asyncio.sleep(0.2)


async def clean(kube: KubeClient, ns: str, collections: Iterable[str] = (), timeout_s: float = 300) -> None:
    """Deletes every pod of NS (no grace) and the objects of COLLECTIONS (API paths with {ns}),
    and waits until the pods are gone, so the next run finds the same room. Pods are deleted
    one by one, many at a time: kube-apiserver deletes a collection one object after another."""
    deadline = time.perf_counter() + timeout_s
    limit = asyncio.Semaphore(32)

    async def one(name: str) -> None:
        async with limit:
            with contextlib.suppress(ApiError, TimeoutError):
                await kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})

    while True:
        items, _ = await kube.list(f"/api/v1/namespaces/{ns}/pods")
        if not items:
            break
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{len(items)} pods of {ns} still there after {timeout_s:.0f} s")
        await asyncio.gather(*(one(p["metadata"]["name"]) for p in items))
    for path in collections:
        with contextlib.suppress(ApiError, TimeoutError):
            await kube.delete(path.format(ns=ns))


@dataclass
class BindClock:
    """Watches the pods of one namespace and notes when each was first seen bound, and Running.

    async with BindClock(kube, ns, expected) as clock:
        clock.started()               # just before the first create
        ... create ...
        clock.created()               # after the last create
        await clock.all_bound(timeout_s)
    """

    kube: KubeClient
    namespace: str
    expected: int
    first_create: float = 0.0
    last_create: float = 0.0
    first_added: float = 0.0  # the first pod seen created (by the watch)
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod -> (time, node)
    running: dict[str, float] = field(default_factory=dict)  # pod -> time
    _done: asyncio.Event = field(default_factory=asyncio.Event)
    _all_running: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> BindClock:
        _, version = await self.kube.list(f"/api/v1/namespaces/{self.namespace}/pods")
        self._task = asyncio.create_task(self._watch(version))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def started(self) -> None:
        self.first_create = time.perf_counter()

    def created(self) -> None:
        self.last_create = time.perf_counter()

    async def all_bound(self, timeout_s: float) -> bool:
        """True when every expected pod was bound within TIMEOUT_S of the first create."""
        left = self.first_create + timeout_s - time.perf_counter()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), max(left, 0.01))
        return self._done.is_set()

    async def all_running(self, timeout_s: float) -> bool:
        """True when every expected pod was Running within TIMEOUT_S of the first create."""
        left = self.first_create + timeout_s - time.perf_counter()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_running.wait(), max(left, 0.01))
        return self._all_running.is_set()

    @property
    def last_bound(self) -> float:
        return max((t for t, _ in self.bound.values()), default=self.first_create)

    @property
    def first_bound(self) -> float:
        return min((t for t, _ in self.bound.values()), default=self.first_create)

    async def _watch(self, version: str) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        while True:
            async for kind, pod in self.kube.watch(path, {"resourceVersion": version}, timeout_seconds=600):
                meta = pod.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                node = (pod.get("spec") or {}).get("nodeName")
                name = str(meta.get("name"))
                if kind == "ADDED" and not self.first_added:
                    self.first_added = time.perf_counter()
                if kind in ("ADDED", "MODIFIED") and node and name not in self.bound:
                    self.bound[name] = (time.perf_counter(), str(node))
                    if len(self.bound) >= self.expected:
                        self._done.set()
                phase = (pod.get("status") or {}).get("phase")
                if kind in ("ADDED", "MODIFIED") and phase == "Running" and name not in self.running:
                    self.running[name] = time.perf_counter()
                    if len(self.running) >= self.expected:
                        self._all_running.set()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_cpu_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot (all processes)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # minus idle and iowait
    return busy / CLOCK_TICKS


def memory_mb(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of the process, in MB."""
    values = {"VmRSS": 0.0, "VmHWM": 0.0}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in values:
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


class CpuMeter:
    """CPU seconds per named process, and of the whole machine, over a window."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine = machine_cpu_seconds()
        self._wall = time.perf_counter()

    def read(self) -> dict[str, float]:
        """Seconds used since the meter was made: per process, `others` (every other process of
        the machine, e.g. other work sharing it) and `wall`."""
        used = {name: cpu_seconds(pid) - self._start[name] for name, pid in self.pids.items()}
        used["others"] = max(0.0, machine_cpu_seconds() - self._machine - sum(used.values()))
        used["wall"] = time.perf_counter() - self._wall
        return {k: round(v, 2) for k, v in used.items()}


def prometheus_values(text: str, prefixes: Iterable[str]) -> dict[str, float]:
    """Samples whose name starts with one of PREFIXES, keyed by their full line head
    (name{labels}); no parsing beyond that, enough to subtract one scrape from the next."""
    wanted = tuple(prefixes)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(wanted):
            head, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[head] = float(value)
    return out


def diff(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def domains_per_group(
    bound: Mapping[str, tuple[float, str]], node_labels: Mapping[str, Mapping[str, str]], key: str
) -> dict[str, int]:
    """For pods named GROUP-INDEX: how many distinct values of the node label KEY each group's
    bound pods are on (1 = the whole group in one rack, for KEY a rack label)."""
    seen: dict[str, set[str]] = {}
    for pod, (_, node) in bound.items():
        seen.setdefault(pod.rsplit("-", 1)[0], set()).add(node_labels.get(node, {}).get(key, "?"))
    return {group: len(values) for group, values in sorted(seen.items())}


def jsonable(value: Any) -> Any:
    """Round floats for printing."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value
