"""Chaos soak: gangs arrive on the real control plane while topogang, kube-scheduler, nodes and
pods are broken on purpose; it counts what "no partial gang" promises.

Starts the local control plane (e2e/controlplane), NODES kwok GPU nodes (zones > blocks > racks
of 8 nodes of 8 GPUs), `topogang serve` and kube-scheduler from scheduler-config/extender.yaml.
For MINUTES it creates workloads of mixed shapes, each deleted again after a random lifetime:

  podgroup   a PodGroup of 2-4 rack segments of 2 or 4 pods, the whole gang in one block
  job        an Indexed Job of 8 pods in rack segments of 4 (the Job controller makes the pods)
  plain      one 1-GPU pod that belongs to no gang

while a seeded chaos loop, every few seconds, does one of: SIGKILL topogang (restarted at once),
SIGTERM topogang, restart kube-scheduler, cordon a node (uncordoned later), delete a node and
add it back, delete a random pending gang pod (its "controller" here, or the Job's, makes a new
one), roll topogang out while a gang runs degraded (a bound pod of a running PodGroup gang
deleted, its replacement held back for --replace-after seconds as a controller in backoff would,
then topogang restarted gracefully: the new leader meets a gang below its minimum that ran
whole), or makes trouble between topogang and the API server (`--faults`; topogang reaches the
API server only through the fault proxy of e2e/faultproxy.py):

  apiserver   kube-apiserver restarted (every client sees it go and come back)
  etcd        etcd restarted, down 2 s
  relist      topogang's pod watch ended with ERROR 410 Gone (it must list again)
  throttle    every request of topogang answered 429 with Retry-After for 3-6 s
  slow        every write of topogang held 2.5 s for 3-6 s

Every second it samples the API server and counts:

  partial_gang_seconds   time gangs spent with some but not all of their minimum bound, beyond
                         one sample (a bind in flight), outside the crash window below
  crash_bind_window_s    the longest such episode that began while topogang was down or within
                         --crash-grace seconds of its restart: binds sent before a crash land,
                         the rest follow once it is back
  broken_constraints     bound gangs with a required constraint broken (a segment over racks,
                         a gang over blocks)
  leaked_reservations    topogang_reservations after everything is deleted and drained
  stuck_pods             pods still pending after the chaos stopped and --settle seconds
                         passed, whose gang topogang's own engine could place right then outside
                         the room the leader holds for waiting gangs (their PodGroups'
                         status.reservation): a gang a reservation keeps waiting is not stuck
  gangs_completed        gangs that had their whole minimum bound at some point
  kept_evicted           gangs that ran whole which topogang then evicted as "found below its
                         minimum" (PartialGangEvicted), though their policy (Keep) keeps them:
                         the target is 0
  fault_bind_window_s    the longest partial episode that began during an API-server fault or
                         within --crash-grace seconds of its end (Bindings that failed while the
                         API server was away are retried by kube-scheduler once it is back)
  faults                 per kind of API-server fault: injected, noticed (topogang counted it in
                         topogang_api_trouble_total{kind}), and the longest partial episode after it

A gang is left out of partial_gang_seconds while it is being deleted and after chaos deleted one
of its bound pods or a node under it (it runs below its minimum because of the chaos, until its
controller replaces the pod; repairing that is a separate matter).

    python bench/soak.py                       # 10 minutes on 200 nodes
    python bench/soak.py --minutes 1 --json    # the short version make test runs
    python bench/soak.py --nodes 1000 --arrival 0.5 --json   # the 1,000-node size
    python bench/soak.py --minutes 5 --chaos rollout --faults ''   # rollouts while gangs run degraded

Needs the control-plane binaries (`make controlplane`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kwok_cluster import until_schedulable
from e2e.controlplane import Binaries, ControlPlane, FakeGpuNodes, FakeTopology, api_client
from e2e.faultproxy import FaultProxy
from e2e.scenario import apply_crds, create, gpu_pod
from e2e.topogang import CRDS, Topogang, scheduler_config
from extender import logs
from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube.client import ApiError, KubeClient

NS = "soak"
TOPOLOGY = "soak-dc"
LEVEL = "topology.topogang.io/{}"
SEGMENT = "kai.scheduler/segment-size"
TOPOGANG_CHAOS = ("kill", "term", "scheduler", "cordon", "node", "pod", "rollout")
API_FAULTS = ("apiserver", "etcd", "relist", "throttle", "slow")
# What topogang should count for each fault (topogang_api_trouble_total{kind}); an etcd restart
# shows as either, depending on whether the API server answers 5xx or holds the requests.
NOTICED_AS = {
    "apiserver": ("unavailable",),
    "etcd": ("unavailable", "slow"),
    "relist": ("relist",),
    "throttle": ("throttled",),
    "slow": ("slow",),
}
# The soak's own requests while kube-apiserver or etcd restarts: skipped, tried again later.
OUTAGE = (aiohttp.ClientError, OSError, TimeoutError)


@dataclass
class Gang:
    """A workload the soak created: its pods' names, its minimum and its required scopes."""

    name: str
    kind: str  # podgroup | job
    minimum: int
    scopes: dict[str, tuple[str, list[str]]]  # scope -> (level, its pods)
    ends: float  # when the soak deletes it
    completed: bool = False
    completed_at: float = 0.0  # wall clock: when its whole minimum was first seen bound
    ending: bool = False
    damaged: bool = False  # chaos removed a bound pod or its node
    held_until: float = 0.0  # its missing members are not made again before (monotonic)


@dataclass
class Episode:
    gang: str
    start: float
    last: float
    samples: int = 1


@dataclass
class Counts:
    partial_gang_seconds: float = 0.0
    crash_bind_window_s: float = 0.0
    broken_constraints: int = 0
    leaked_reservations: int = 0
    stuck_pods: int = 0
    gangs_completed: int = 0
    kept_evicted: int = 0
    degraded_rollouts: int = 0
    fault_bind_window_s: float = 0.0
    gangs_created: int = 0
    plain_pods: int = 0
    chaos: dict[str, int] = field(default_factory=dict)
    faults: dict[str, dict[str, float]] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)  # the kept_evicted gangs


class Soak:
    def __init__(
        self, args: argparse.Namespace, plane: ControlPlane, kube: KubeClient, nodes: FakeGpuNodes, proxy: FaultProxy
    ) -> None:
        self.args = args
        self.plane = plane
        self.proxy = proxy
        self.kube = kube
        self.nodes = nodes
        self.rng = random.Random(args.seed)
        # The chaos draws from its own generator, so its sequence of faults is the same in every
        # run of a seed, however the workloads' draws interleave with it.
        self.chaos_rng = random.Random(args.seed + 1)
        self.gangs: dict[str, Gang] = {}
        self.counts = Counts()
        self.episodes: dict[str, Episode] = {}
        self.down: list[tuple[float, float]] = []  # (killed, back) of topogang
        self.faulted: list[tuple[float, float, str]] = []  # (began, ended, kind) of API-server faults
        self.server: Topogang | None = None
        self.port = 0
        self.serial = 0
        self.node_labels: dict[str, Mapping[str, str]] = {}
        self.undoing: set[asyncio.Future[None]] = set()  # faults to be undone (uncordon, re-add)

    # -- topogang, restarted in place on the same port ----------------------------------------

    @contextlib.asynccontextmanager
    async def _topogang(self) -> Any:
        # Reservations on (the default): the stuck-pod judge (`stuck_pods`) leaves the room the
        # leader holds out of what it offers a gang that does not hold it.
        async with Topogang.start(
            self.proxy.kubeconfig,
            self.plane.logs_dir,
            bind_timeout=self.args.bind_timeout,
            ready_within=self.args.ready_within,
            port=self.port,
            # A short grace: a gang cut off mid-bind is finished or evicted within the soak.
            args=["--recovery-grace", str(self.args.recovery_grace)],
        ) as server:
            self.server = server
            yield server

    async def run_topogang(self, stop: asyncio.Event, restarted: asyncio.Queue[float]) -> None:
        """Keeps one topogang running until STOP; each time it dies it is started again."""
        while not stop.is_set():
            async with self._topogang() as server:
                if not self.port:
                    self.port = int(server.base.rsplit(":", 1)[1])
                await restarted.put(time.monotonic())
                waiter = asyncio.ensure_future(server.process.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if not waiter.done():
                    waiter.cancel()

    # -- workloads ----------------------------------------------------------------------------

    async def create_workload(self) -> None:
        self.serial += 1
        roll = self.rng.random()
        if roll < 0.2:
            self.counts.plain_pods += 1
            await self._create(gpu_pod(f"plain-{self.serial}", gpus=1))
            return
        lifetime = self.rng.uniform(*self.args.lifetime)
        gang = await (self._job if roll < 0.5 else self._podgroup)(f"g{self.serial}", lifetime)
        self.gangs[gang.name] = gang
        self.counts.gangs_created += 1

    async def _podgroup(self, name: str, lifetime: float) -> Gang:
        segments, size = self.rng.randint(2, 4), self.rng.choice([2, 4])
        subgroups = [{"name": f"s{k}", "minMember": size} for k in range(segments)]
        constraints = {
            "global": {"requiredTopologyLevel": "block"},
            "subGroups": {f"s{k}": {"requiredTopologyLevel": "rack"} for k in range(segments)},
        }
        body = {
            "apiVersion": "scheduling.topogang.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "annotations": {"kai.scheduler/topology": TOPOLOGY}},
            "spec": {"minMember": segments, "subGroups": subgroups, "topologyConstraints": constraints},
        }
        await self._create(body)
        pods = {f"s{k}": [f"{name}-{k}-{i}" for i in range(size)] for k in range(segments)}
        gang = Gang(name, "podgroup", segments * size, {}, time.monotonic() + lifetime)
        gang.scopes = {s: ("rack", names) for s, names in pods.items()}
        gang.scopes[name] = ("block", [p for names in pods.values() for p in names])
        await asyncio.gather(*(self._member(name, s, p) for s, names in pods.items() for p in names))
        return gang

    async def _member(self, group: str, subgroup: str, pod: str) -> None:
        labels = {"kai.scheduler/subgroup-name": subgroup, "soak/gang": group}
        await self._create(gpu_pod(pod, gpus=8, labels=labels, annotations={"pod-group-name": group}))

    async def _create(self, body: dict[str, Any]) -> None:
        """Create BODY in the soak's namespace, through an API-server restart; one that exists
        already (a replacement racing a sample, a create that landed before the connection
        dropped) is left as it is."""
        with contextlib.suppress(ApiError):
            await _through_outage(lambda: create(self.kube, body, NS))

    async def _job(self, name: str, lifetime: float) -> Gang:
        template = gpu_pod("x", gpus=8, labels={"soak/gang": name})
        template["metadata"] = {
            "labels": {"soak/gang": name},
            "annotations": {SEGMENT: "4", "kai.scheduler/segment-topology-required-placement": "rack"},
        }
        template["spec"]["restartPolicy"] = "Never"
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "annotations": {"kai.scheduler/topology": TOPOLOGY}},
            "spec": {"completions": 8, "parallelism": 8, "completionMode": "Indexed", "template": template},
        }
        await self._create(body)
        return Gang(name, "job", 8, {}, time.monotonic() + lifetime)

    async def retire(self, now: float) -> None:
        """Deletes the workloads whose lifetime is over (their pods go with them)."""
        for gang in [g for g in self.gangs.values() if not g.ending and g.ends <= now]:
            gang.ending = True
            if gang.kind == "job":
                await self._delete(
                    f"/apis/batch/v1/namespaces/{NS}/jobs/{gang.name}", {"propagationPolicy": "Background"}
                )
            else:
                await self._delete(f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{NS}/podgroups/{gang.name}")
            await self._delete(f"/api/v1/namespaces/{NS}/pods", {"labelSelector": f"soak/gang={gang.name}"})

    async def _delete(self, path: str, params: Mapping[str, str] | None = None) -> None:
        with contextlib.suppress(ApiError):
            await _through_outage(lambda: self.kube.delete(path, {"gracePeriodSeconds": "0", **(params or {})}))

    async def replace_missing(self, pods: list[dict[str, Any]]) -> None:
        """The PodGroup gangs' "controller": a member that is gone is created again."""
        present = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        for gang in self.gangs.values():
            if gang.kind != "podgroup" or gang.ending or gang.held_until > time.monotonic():
                continue
            for scope, (level, names) in gang.scopes.items():
                if level != "rack":
                    continue
                for pod in names:
                    if pod not in present:
                        await self._member(gang.name, scope, pod)

    # -- chaos --------------------------------------------------------------------------------

    async def chaos(self, stop: asyncio.Event, restarted: asyncio.Queue[float]) -> None:
        actions = [*self.args.chaos, *self.args.faults]
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.chaos_rng.uniform(*self.args.chaos_every))
            if stop.is_set():
                return
            action = self.chaos_rng.choice(actions)
            self.counts.chaos[action] = self.counts.chaos.get(action, 0) + 1
            if action in API_FAULTS:
                await self._api_fault(action)
            else:
                await getattr(self, f"_chaos_{action}")(restarted)

    # -- trouble between topogang and the API server -------------------------------------------

    async def _api_fault(self, kind: str) -> None:
        """One API-server fault, from start to end; whether topogang counted it (the trouble
        metric of its kind grew, read from the same topogang process before and after)."""
        server = self.server
        before = await self._trouble(server, kind)
        began = time.monotonic()
        await getattr(self, f"_fault_{kind}")()
        ended = time.monotonic()
        self.faulted.append((began, ended, kind))
        noticed = False
        deadline = ended + 15  # a relist or a retried request is counted a moment later
        while before is not None and server is self.server and time.monotonic() < deadline:
            after = await self._trouble(server, kind)
            if after is not None and after > before:
                noticed = True
                break
            await asyncio.sleep(0.5)
        row = self.counts.faults.setdefault(kind, {"injected": 0, "noticed": 0, "longest_partial_s": 0.0})
        row["injected"] += 1
        row["noticed"] += int(noticed)

    async def _trouble(self, server: Topogang | None, kind: str) -> float | None:
        """topogang_api_trouble_total of the kinds KIND shows as, summed; None: no server."""
        if server is None or server.process.returncode is not None:
            return None
        with contextlib.suppress(*OUTAGE):
            _, body = await server.request("GET", "/metrics")
            total = 0.0
            for line in body.decode().splitlines():
                for shown in NOTICED_AS[kind]:
                    if line.startswith(f'topogang_api_trouble_total{{kind="{shown}"}}'):
                        total += float(line.split()[-1])
            return total
        return None

    async def _fault_apiserver(self) -> None:
        await self.plane.restart_async("kube-apiserver")

    async def _fault_etcd(self) -> None:
        await self.plane.restart_async("etcd", down=2.0)

    async def _fault_relist(self) -> None:
        await self.proxy.expire_watches("pods")

    async def _fault_throttle(self) -> None:
        self.proxy.throttle(retry_after=1)
        try:
            await asyncio.sleep(self.chaos_rng.uniform(3, 6))
        finally:
            self.proxy.clear()

    async def _fault_slow(self) -> None:
        self.proxy.slow(2.5, lambda method, path, watch: method != "GET")
        try:
            await asyncio.sleep(self.chaos_rng.uniform(3, 6))
        finally:
            self.proxy.clear()

    async def _chaos_kill(self, restarted: asyncio.Queue[float], sig: int = signal.SIGKILL) -> None:
        if self.server is None or self.server.process.returncode is not None:
            return
        killed = time.monotonic()
        self.server.process.send_signal(sig)
        # A server that cannot restart ends the soak.
        back = await asyncio.wait_for(restarted.get(), self.args.ready_within * 2)
        self.down.append((killed, back))

    async def _chaos_term(self, restarted: asyncio.Queue[float]) -> None:
        await self._chaos_kill(restarted, signal.SIGTERM)

    async def _chaos_scheduler(self, restarted: asyncio.Queue[float]) -> None:
        assert self.server is not None
        await self.plane.restart_scheduler_async(scheduler_config(self.server.url, self.server.tls))

    async def _chaos_cordon(self, restarted: asyncio.Queue[float]) -> None:
        name = self.chaos_rng.choice(self.nodes.names)
        path = f"/api/v1/nodes/{name}"
        await self.kube.patch(path, {"spec": {"unschedulable": True}})
        self._later(self.chaos_rng.uniform(2, 8), lambda: self.kube.patch(path, {"spec": {"unschedulable": None}}))

    async def _chaos_node(self, restarted: asyncio.Queue[float]) -> None:
        name = self.chaos_rng.choice(self.nodes.names)
        body = await self.kube.get(f"/api/v1/nodes/{name}")
        for pod in await self._pods():
            if pod["spec"].get("nodeName") == name:
                self._damage(pod)
        await self._delete(f"/api/v1/nodes/{name}")
        self._later(self.chaos_rng.uniform(2, 8), lambda: self.kube.post("/api/v1/nodes", _again(body)))

    def _later(self, seconds: float, undo: Callable[[], Awaitable[Any]]) -> None:
        """Undo a fault after SECONDS, while the chaos goes on (the drain waits for it)."""

        async def run() -> None:
            await asyncio.sleep(seconds)
            with contextlib.suppress(ApiError):
                await _through_outage(undo)

        self.undoing.add(asyncio.ensure_future(run()))

    async def _chaos_pod(self, restarted: asyncio.Queue[float]) -> None:
        pods = [p for p in await self._pods() if "soak/gang" in p["metadata"].get("labels", {})]
        if not pods:
            return
        pod = self.chaos_rng.choice(pods)
        if pod["spec"].get("nodeName"):
            self._damage(pod)
        await self._delete(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}")

    async def _chaos_rollout(self, restarted: asyncio.Queue[float]) -> None:
        """A gang that ran whole loses a bound pod (its replacement held back), then topogang is
        restarted gracefully, as a rollout replaces it: the new leader must keep the gang."""
        running = sorted(g.name for g in self.gangs.values() if g.kind == "podgroup" and g.completed and not g.ending)
        bound = [p for p in await self._pods() if p["spec"].get("nodeName")]
        gang_of = {id(p): p["metadata"].get("labels", {}).get("soak/gang") for p in bound}  # (no labels: none)
        mine = {name: [p for p in bound if gang_of[id(p)] == name] for name in running}
        candidates = [name for name in running if mine[name]]
        if candidates:
            gang = self.gangs[self.chaos_rng.choice(candidates)]
            pod = self.chaos_rng.choice(mine[gang.name])
            self._damage(pod)
            gang.held_until = time.monotonic() + self.args.replace_after
            await self._delete(f"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}")
            self.counts.degraded_rollouts += 1
        await self._chaos_kill(restarted, signal.SIGTERM)

    async def count_kept_evicted(self) -> None:
        """Gangs that ran whole, evicted afterwards as found below their minimum (the Events
        topogang wrote on their PodGroups)."""
        listing = await self.kube.get(f"/apis/events.k8s.io/v1/namespaces/{NS}/events")
        for event in listing.get("items", []):
            gang = self.gangs.get(str((event.get("regarding") or {}).get("name", "")))
            if event.get("reason") != "PartialGangEvicted" or gang is None or not gang.completed:
                continue
            when = str((event.get("series") or {}).get("lastObservedTime") or event.get("eventTime") or "")
            if when and _wall(when) > gang.completed_at:
                self.counts.kept_evicted += 1
                self.counts.evicted.append(gang.name)

    def _damage(self, pod: Mapping[str, Any]) -> None:
        gang = self.gangs.get(pod["metadata"].get("labels", {}).get("soak/gang", ""))
        if gang is not None:
            gang.damaged = True

    def progress(self, elapsed: float) -> None:
        """A line on stderr every 30 s, so a long soak shows it is alive."""
        if int(elapsed) // 30 != int(elapsed - self.args.sample) // 30:
            c = self.counts
            print(
                f"soak {elapsed:.0f}s: {c.gangs_created} gangs created, {c.gangs_completed} completed, "
                f"{c.partial_gang_seconds:.0f} partial-gang s, {c.broken_constraints} broken, chaos {c.chaos}",
                file=sys.stderr,
            )

    # -- sampling -----------------------------------------------------------------------------

    async def _pods(self) -> list[dict[str, Any]]:
        listing = await self.kube.get(f"/api/v1/namespaces/{NS}/pods")
        return list(listing.get("items", []))

    async def sample(self, now: float) -> list[dict[str, Any]]:
        pods = await self._pods()
        by_gang: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            gang = pod["metadata"].get("labels", {}).get("soak/gang")
            if gang is not None and not pod["metadata"].get("deletionTimestamp"):
                by_gang.setdefault(gang, []).append(pod)
        for name, gang in self.gangs.items():
            bound = [p for p in by_gang.get(name, []) if p["spec"].get("nodeName")]
            if len(bound) >= gang.minimum and not gang.completed:
                gang.completed, gang.completed_at = True, time.time()
                self.counts.gangs_completed += 1
                await self._check_constraints(gang, bound)
            partial = 0 < len(bound) < gang.minimum and not gang.ending and not gang.damaged
            self._episode(name, partial, now)
        return pods

    def _episode(self, gang: str, partial: bool, now: float) -> None:
        episode = self.episodes.get(gang)
        if partial:
            if episode is None:
                self.episodes[gang] = Episode(gang, now, now)
            else:
                episode.last, episode.samples = now, episode.samples + 1
        elif episode is not None:
            self._close(self.episodes.pop(gang))

    def _close(self, episode: Episode) -> None:
        """One sample alone is a bind in flight; longer is partial, unless a crash explains it."""
        if episode.samples < 2:
            return
        seconds = episode.last - episode.start + self.args.sample
        grace = self.args.crash_grace
        if any(killed <= episode.start <= back + grace for killed, back in self.down):
            self.counts.crash_bind_window_s = max(self.counts.crash_bind_window_s, seconds)
            return
        faults = [kind for began, ended, kind in self.faulted if began <= episode.start <= ended + grace]
        if faults:
            self.counts.fault_bind_window_s = max(self.counts.fault_bind_window_s, seconds)
            for kind in faults:
                row = self.counts.faults[kind]
                row["longest_partial_s"] = max(row["longest_partial_s"], round(seconds, 1))
            return
        self.counts.partial_gang_seconds += seconds
        self.counts.partial.append(f"{episode.gang}: {seconds:.0f}s")

    async def _check_constraints(self, gang: Gang, bound: list[dict[str, Any]]) -> None:
        node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound}
        scopes = gang.scopes or _job_scopes(node_of)
        for scope, (level, names) in scopes.items():
            values = set()
            for pod in names:
                node = node_of.get(pod)
                if node is None:
                    continue
                labels = await self._labels(node)
                values.add(labels.get(LEVEL.format(level)))
            if len(values) > 1:
                self.counts.broken_constraints += 1
                self.counts.broken.append(f"{gang.name}/{scope}: {level}s {sorted(map(str, values))}")
                return

    async def _labels(self, node: str) -> Mapping[str, str]:
        if node not in self.node_labels:
            with contextlib.suppress(ApiError):
                body = await self.kube.get(f"/api/v1/nodes/{node}")
                self.node_labels[node] = body["metadata"].get("labels", {})
        return self.node_labels.get(node, {})


async def _through_outage(call: Any, within: float = 120.0) -> Any:
    """CALL(), tried again while the API server restarts (refused, dropped, timed out, 5xx)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except (*OUTAGE, ApiError) as exc:
            if (isinstance(exc, ApiError) and exc.status < 500) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


def _wall(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _job_scopes(node_of: Mapping[str, str]) -> dict[str, tuple[str, list[str]]]:
    """A soak Job's segments: pods by completion index, 4 to a rack (the index is the pod name's
    second-to-last part: <job>-<index>-<suffix>)."""
    segments: dict[str, list[str]] = {}
    for pod in node_of:
        index = int(pod.rsplit("-", 2)[-2])
        segments.setdefault(f"seg-{index // 4}", []).append(pod)
    return {s: ("rack", names) for s, names in segments.items()}


def _again(node: Mapping[str, Any]) -> dict[str, Any]:
    """A deleted node's body to create it again: same name, labels, annotations and capacity."""
    meta = node["metadata"]
    status = node.get("status", {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {k: meta[k] for k in ("name", "labels", "annotations") if k in meta},
        "spec": {},
        "status": {k: status[k] for k in ("capacity", "allocatable") if k in status},
    }


# -- after the chaos: stuck pods and leaked reservations ----------------------------------------


async def stuck_pods(kube: KubeClient, pods: list[dict[str, Any]]) -> list[str]:
    """Pending pods that topogang's own engine, given what the API server shows now, would place:
    nodes, Topology, PodGroups, Jobs and pods go into an offline GangScheduler (as `simulate` and
    `explain` build theirs), and each pending pod is filtered there; a plan reserves its room, so
    gangs compete for it as they would live."""
    scheduler = GangScheduler(ClusterState())
    listings = [
        ("v1", "Node", "/api/v1/nodes"),
        ("scheduling.topogang.io/v1alpha1", "Topology", "/apis/scheduling.topogang.io/v1alpha1/topologies"),
        (
            "scheduling.topogang.io/v1alpha1",
            "PodGroup",
            f"/apis/scheduling.topogang.io/v1alpha1/namespaces/{NS}/podgroups",
        ),
        ("batch/v1", "Job", f"/apis/batch/v1/namespaces/{NS}/jobs"),
    ]
    held: dict[str, str] = {}  # gang -> the domain the leader holds for it (status.reservation)
    for api_version, kind, path in listings:
        for item in (await kube.get(path)).get("items", []):
            apply_object(scheduler, {**item, "apiVersion": api_version, "kind": kind})
            room = (item.get("status") or {}).get("reservation") if kind == "PodGroup" else None
            if isinstance(room, Mapping) and isinstance(room.get("domain"), str):
                held[f"{NS}/{item['metadata']['name']}"] = room["domain"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    for pod in live:
        apply_object(scheduler, {**pod, "apiVersion": "v1", "kind": "Pod"})
    names = sorted(scheduler.state.nodes)
    free = _outside(scheduler, set(held.values()))
    stuck = []
    for body in live:
        if body["spec"].get("nodeName"):
            continue
        info = scheduler.lookup.pod(f"{NS}/{body['metadata']['name']}")
        offered = names if info is not None and scheduler.lookup.group_of(info.key) in held else free
        if info is not None and scheduler.filter(info, offered, 0.0).nodes:
            stuck.append(info.key)
    return stuck


def _outside(scheduler: GangScheduler, domains: set[str]) -> list[str]:
    """The nodes in none of DOMAINS (as a PodGroup's status.reservation names them) of any
    Topology: what a gang that holds no room may be offered."""
    table, out = scheduler.state.table, []
    trees = [table.tree(t) for t in scheduler.state.topologies.values()]
    for i, node in enumerate(table.nodes):
        inside = any(
            str(tree.ref(tree.node_domain(i, level))) in domains for tree in trees for level in range(tree.depth)
        )
        if not inside:
            out.append(node.name)
    return sorted(out)


async def reservations(server: Topogang) -> int:
    status, body = await server.request("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("topogang_reservations "):
            return int(float(line.split()[1]))
    raise RuntimeError(f"/metrics ({status}) has no topogang_reservations")


# -- the run ----------------------------------------------------------------------------------


async def soak(
    args: argparse.Namespace, plane: ControlPlane, kube: KubeClient, nodes: FakeGpuNodes, proxy: FaultProxy
) -> Counts:
    run = Soak(args, plane, kube, nodes, proxy)
    stop_chaos, stop_server = asyncio.Event(), asyncio.Event()
    restarted: asyncio.Queue[float] = asyncio.Queue()
    server_task = asyncio.ensure_future(run.run_topogang(stop_server, restarted))
    first = asyncio.ensure_future(restarted.get())
    await asyncio.wait({first, server_task}, return_when=asyncio.FIRST_COMPLETED)
    if server_task.done():  # topogang could not start: say why rather than wait for it
        first.cancel()
        server_task.result()
    assert run.server is not None
    await plane.start_scheduler_async(scheduler_config(run.server.url, run.server.tls))
    chaos_task = asyncio.ensure_future(run.chaos(stop_chaos, restarted))
    start = time.monotonic()
    end = start + args.minutes * 60
    next_arrival = start
    while (now := time.monotonic()) < end:
        try:
            if now >= next_arrival:
                await run.create_workload()
                next_arrival = now + run.rng.expovariate(1 / args.arrival)
            pods = await run.sample(now)
            await run.replace_missing(pods)
            await run.retire(now)
        except OUTAGE:
            pass  # kube-apiserver or etcd is restarting: sample again in a second
        if chaos_task.done():
            chaos_task.result()  # a fault the soak could not carry out (or topogang not restarting)
        run.progress(now - start)
        await asyncio.sleep(args.sample)
    stop_chaos.set()
    await chaos_task
    await asyncio.gather(*run.undoing)
    # Settle: no more chaos or arrivals; everything that can run should now be placed.
    settle_end = time.monotonic() + args.settle
    while (now := time.monotonic()) < settle_end:
        pods = await _through_outage(lambda: run.sample(now))
        await run.replace_missing(pods)
        await asyncio.sleep(args.sample)
    for episode in list(run.episodes.values()):
        run._close(episode)
    run.counts.stuck_pods = len(await stuck_pods(kube, await run._pods()))
    await run.count_kept_evicted()
    # Drain: delete everything, then topogang must hold nothing.
    for gang in run.gangs.values():
        gang.ends = 0
    await run.retire(time.monotonic())
    await run._delete(f"/api/v1/namespaces/{NS}/pods")
    drain_end = time.monotonic() + 60
    while await run._pods() and time.monotonic() < drain_end:  # noqa: ASYNC110 (polling the API server)
        await asyncio.sleep(1)
    # The watch delivers the last deletions a little later: a leak is what is still held then.
    held_until = time.monotonic() + 30
    while (held := await reservations(run.server)) and time.monotonic() < held_until:  # noqa: ASYNC110
        await asyncio.sleep(1)
    run.counts.leaked_reservations = held
    stop_server.set()
    await server_task
    return run.counts


async def main_async(args: argparse.Namespace) -> Counts:
    # A restarted kube-apiserver may take over a minute to be ready again at 1,000 nodes on a
    # loaded machine (its post-start hooks); the plane's timeout bounds that wait.
    plane = ControlPlane(binaries=Binaries.locate(), scheduler=False, timeout=180)
    plane.start()
    try:
        async with api_client(plane.kubeconfig) as api, await KubeClient.connect(plane.kubeconfig) as kube:
            await apply_crds(kube, CRDS)
            levels = [{"nodeLabel": LEVEL.format(lv)} for lv in ("zone", "block", "rack")]
            topology = {"metadata": {"name": TOPOLOGY}, "spec": {"levels": levels}}
            await create(kube, {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "Topology", **topology})
            await kube.post("/api/v1/namespaces", {"metadata": {"name": NS}})
            racks = max(1, args.nodes // 8)
            blocks = max(1, racks // 4)
            nodes = FakeGpuNodes(api, name_prefix="soak")
            await nodes.create(FakeTopology(1, blocks, max(1, racks // blocks), 8), timeout_s=300)
            await until_schedulable(kube, len(nodes.names))
            await asyncio.sleep(1)  # the namespace's default ServiceAccount
            async with await FaultProxy.start(plane) as proxy:
                return await soak(args, plane, kube, nodes, proxy)
    finally:
        plane.stop(keep_workdir=args.keep)
        if args.keep:
            print(f"logs kept in {plane.logs_dir}", file=sys.stderr)


def report(counts: Counts, as_json: bool) -> str:
    keys = [
        "partial_gang_seconds",
        "broken_constraints",
        "leaked_reservations",
        "stuck_pods",
        "gangs_completed",
        "kept_evicted",
        "crash_bind_window_s",
        "fault_bind_window_s",
    ]
    row = {k: round(v, 1) if isinstance(v, float) else v for k, v in vars(counts).items()}
    if as_json:
        return orjson.dumps(row).decode()
    lines = [f"{k:>22}  {row[k]}" for k in keys]
    lines += [f"{k:>22}  {row[k]}" for k in row if k not in keys and row[k]]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--nodes", type=int, default=200, help="fake 8-GPU nodes, 8 to a rack, 4 racks to a block")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--arrival", type=float, default=2.0, help="mean seconds between workloads (Poisson)")
    p.add_argument("--lifetime", type=float, nargs=2, default=(20.0, 90.0), help="min and max seconds a workload runs")
    p.add_argument("--chaos-every", type=float, nargs=2, default=(5.0, 15.0), help="seconds between faults")
    p.add_argument("--sample", type=float, default=1.0, help="seconds between samples of the API server")
    p.add_argument("--settle", type=float, default=60.0, help="seconds without chaos before counting stuck pods")
    p.add_argument("--crash-grace", type=float, default=30.0, help="seconds after a restart that a crash explains")
    p.add_argument("--bind-timeout", type=float, default=25.0)
    p.add_argument("--recovery-grace", type=float, default=5.0, help="topogang's --recovery-grace (seconds; default 5)")
    p.add_argument(
        "--replace-after",
        type=float,
        default=45.0,
        help="seconds a degraded gang's missing pod is held back before it is made again (default 45:"
        " past the bind timeout plus the recovery grace, when a gang cut off mid-bind is evicted)",
    )
    p.add_argument("--ready-within", type=float, default=120.0, help="seconds topogang may take to start and sync")
    p.add_argument(
        "--chaos",
        type=lambda text: [c for c in text.split(",") if c],
        default=list(TOPOGANG_CHAOS),
        help=f"chaos besides the API-server faults, comma-separated (default {','.join(TOPOGANG_CHAOS)})",
    )
    p.add_argument(
        "--faults",
        type=lambda text: [f for f in text.split(",") if f],
        default=list(API_FAULTS),
        help=f"API-server faults among the chaos, comma-separated (default {','.join(API_FAULTS)}; '' for none)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the control plane's files and logs")
    return p


def main() -> None:
    args = parser().parse_args()
    logs.configure("info", "console")  # the soak's own client says its API trouble on stderr, not in the JSON
    print(report(asyncio.run(main_async(args)), args.json))


if __name__ == "__main__":
    main()
