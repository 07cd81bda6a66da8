"""kube-scheduler alone, through topogang, and Kubernetes' own gang scheduling, side by side.

On the local control plane (e2e/controlplane) with --nodes kwok nodes of 8 GPUs in zones > blocks
> racks (32 nodes a rack, 4 racks a block, 4 blocks a zone), each variant runs with a fresh
kube-scheduler (and a fresh `topogang serve` where it is used), the variants interleaved, --reps
times; each is timed by a pod watch from the first create to the last pod bound.

  A   --pods plain 1-GPU pods, kube-scheduler alone (client qps/burst raised)
  A100  the same with percentageOfNodesToScore: 100 (what --nominate=false needs)
  B   the same pods through topogang, scheduler-config/extender.yaml as shipped
  Bh  B over plain HTTP (topogang --insecure-http), to measure what TLS costs
  C1  --gangs gangs of --gang-size 1-GPU pods, each required in one domain of --gang-level,
      with Kubernetes' scheduling.k8s.io/v1beta1 PodGroup (gang.minCount,
      schedulingConstraints.topology) and the GenericWorkload and
      TopologyAwareWorkloadScheduling feature gates (qps raised, as A)
  C2  the same gangs through topogang, as shipped
  G1, G2  one gang of --big-gang pods (required at --big-gang-level), as C1 and as C2
  C3  the same gangs in topogang's gates mode: stock kube-scheduler, `topogang serve --mode=gates`
      with its admission webhook registered (manifests/gates/webhook/webhook.yaml) and the
      namespace labelled for it; --gates-args adds flags

Three rates per run, pods bound over three windows, each with its ratios:
  pods/s   from just before the bench's first create call to the last pod bound (the headline
           figure): creation is inside it, and so is the time the first calls take;
  created  from the first pod the watch saw created to the last bound: the count a new user's
           harness makes ("from the first pod created to all bound");
  binds    from the first pod bound to the last: the scheduler's own rate, creation left out.
Who creates the pods (--creators) changes what competes with the scheduler: `bench` is this
process's asyncio client, 32 creates in flight, its CPU in the `bench` column; `kubectl` is one
`kubectl create -f` of a List, as a new user would (client-go in a process of its own, mTLS and
HTTP/2 to the API server, one create after the other). When the pods are created slower than
kube-scheduler binds them, every variant binds at the creation rate and the ratios go to 1;
when creation is faster (or ends early), the ratio is the schedulers' own.

Each variant also records CPU seconds per component (and of the rest of the machine), topogang's
peak RSS, the domains each gang landed in, kube-scheduler's own metrics (attempts, attempt and
algorithm durations, Filter and Score extension points) and topogang's request durations.

    python bench/side_by_side.py                                     # 1,000 nodes, 3 reps
    python bench/side_by_side.py --nodes 5000 --reps 1 --json
    python bench/side_by_side.py --variants C1,C2 --gangs 1 --gang-size 1024
    python bench/side_by_side.py --variants B,C2 --profile /tmp/prof   # py-spy + pprof
    python bench/side_by_side.py --nodes 5000 --reps 1 --variants A,B,C2 --creators bench,kubectl

Needs the control-plane binaries (`make controlplane`); --profile needs py-spy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kwok_cluster import (
    LABEL,
    TOPOLOGY,
    BindClock,
    CpuMeter,
    Shape,
    add_plane_arguments,
    clean,
    create_topology,
    diff,
    domains_per_group,
    jsonable,
    make_nodes,
    memory_mb,
    namespace,
    prometheus_values,
    running_plane,
    until_schedulable,
)
from e2e.controlplane import ComponentError, ControlPlane, FakeGpuNodes, api_client
from e2e.gates_support import ENABLED, WEBHOOKS, bundled, gates_args, webhook_config
from e2e.scenario import apply_crds, create_podgroup, gpu_pod
from e2e.topogang import CRDS, ROOT, ExtenderPki, Topogang, _free_port, scheduler_config
from extender.kube.client import ApiError, KubeClient

BENCH, KUBECTL = "bench", "kubectl"  # who creates the pods: this process's client, or `kubectl create -f`
RAISED_QPS = {"qps": 1000, "burst": 2000}  # so the API client is not what limits kube-scheduler
IN_TREE_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
IN_TREE_API = "scheduling.k8s.io/v1beta1"
IN_TREE_PODGROUPS = f"/apis/{IN_TREE_API}/namespaces/{{ns}}/podgroups"
TOPOGANG_PODGROUPS = "/apis/scheduling.topogang.io/v1alpha1/namespaces/{ns}/podgroups"
COMPONENTS = ("kube-scheduler", "kube-apiserver", "etcd", "kube-controller-manager", "kwok")
SCHEDULER_METRICS = (
    "scheduler_schedule_attempts_total",
    "scheduler_scheduling_attempt_duration_seconds_sum",
    "scheduler_scheduling_attempt_duration_seconds_count",
    "scheduler_scheduling_algorithm_duration_seconds_sum",
    "scheduler_scheduling_algorithm_duration_seconds_count",
    "scheduler_framework_extension_point_duration_seconds_sum",
    "scheduler_batch_attempts_total",
)
TOPOGANG_METRICS = (
    "topogang_extender_request_duration_seconds_sum",
    "topogang_extender_request_duration_seconds_count",
    "topogang_webhook_duration_seconds_sum",
    "topogang_webhook_duration_seconds_count",
    "topogang_binds_failed_total",
)


def raised(doc: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A KubeSchedulerConfiguration (DOC, else the stock one) with the client's qps raised."""
    out = dict(doc or {})
    out["clientConnection"] = {**(out.get("clientConnection") or {}), **RAISED_QPS}
    return out


@dataclass(frozen=True)
class Variant:
    name: str
    what: str
    gangs: bool  # gangs (C*) or plain pods (A, B)
    # (topogang's URL or "", its mTLS files or None) -> KubeSchedulerConfiguration
    config: Callable[[str, ExtenderPki | None], dict[str, Any]]
    scheduler_args: tuple[str, ...] = ()
    topogang_args: tuple[str, ...] | None = None  # None: no topogang
    in_tree: bool = False  # pods and PodGroups of scheduling.k8s.io
    gates: bool = False  # topogang in gates mode, its webhook registered
    root: Path = ROOT  # the checkout whose topogang and scheduler-config/extender.yaml are used
    tls: bool = True  # kube-scheduler calls topogang over mTLS (False: --insecure-http)
    big: bool = False  # one gang of --big-gang pods instead of the --gangs workload


def variants(gates_args: Sequence[str], other: Path | None = None) -> dict[str, Variant]:
    """Every variant; with OTHER (another checkout), B@, C2@ and G2@ run B, C2 and G2 from it."""
    compared: tuple[Variant, ...] = ()
    if other is not None:
        compared = tuple(
            Variant(
                f"{name}@",
                f"{name} from {other}",
                gangs,
                lambda url, tls: scheduler_config(url, tls, other),
                topogang_args=(),
                root=other,
                big=big,
            )
            for name, gangs, big in (("B", False, False), ("C2", True, False), ("G2", True, True))
        )
    in_tree = Variant(
        "C1",
        "gangs, in-tree PodGroup + TAS (qps raised)",
        True,
        lambda *_: raised(),
        scheduler_args=(f"--feature-gates={IN_TREE_GATES}",),
        in_tree=True,
    )
    through_topogang = Variant("C2", "gangs through topogang (as shipped)", True, scheduler_config, topogang_args=())
    return {
        v.name: v
        for v in (
            *compared,
            Variant("A", "plain pods, kube-scheduler alone (qps raised)", False, lambda *_: raised()),
            Variant(
                "A100",
                "plain pods, kube-scheduler alone, percentageOfNodesToScore 100",
                False,
                lambda *_: raised({"percentageOfNodesToScore": 100}),
            ),
            Variant("B", "plain pods through topogang (as shipped)", False, scheduler_config, topogang_args=()),
            Variant(
                "Bh",
                "B over plain HTTP (--insecure-http): what TLS costs",
                False,
                scheduler_config,
                topogang_args=(),
                tls=False,
            ),
            in_tree,
            through_topogang,
            replace(in_tree, name="G1", what="one gang of --big-gang pods, in-tree PodGroup + TAS", big=True),
            replace(through_topogang, name="G2", what="one gang of --big-gang pods through topogang", big=True),
            Variant(
                "C3",
                "gangs, topogang gates mode, stock kube-scheduler (qps raised)",
                True,
                lambda *_: raised(),
                topogang_args=tuple(gates_args),
                gates=True,
            ),
        )
    }


def label(variant: str, creator: str) -> str:
    """A variant's name in the report: B for the bench's own creation, B+kubectl for kubectl's."""
    return variant if creator == BENCH else f"{variant}+{creator}"


# ---------------------------------------------------------------------------------------- workload
@dataclass(frozen=True)
class Workload:
    pods: int
    gangs: int
    gang_size: int
    gang_level: str
    concurrency: int = 32

    def expected(self, gangs: bool) -> int:
        return self.gangs * self.gang_size if gangs else self.pods


def plain_pods(work: Workload) -> list[dict[str, Any]]:
    return [gpu_pod(f"p-{i}", 1) for i in range(work.pods)]


async def create_podgroups(kube: KubeClient, ns: str, work: Workload, in_tree: bool) -> None:
    for g in range(work.gangs):
        if in_tree:
            body = {
                "apiVersion": IN_TREE_API,
                "kind": "PodGroup",
                "metadata": {"name": f"gang{g}"},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": work.gang_size}},
                    "schedulingConstraints": {"topology": [{"key": LABEL[work.gang_level]}]},
                },
            }
            await kube.post(IN_TREE_PODGROUPS.format(ns=ns), body)
        else:
            spec = {
                "minMember": work.gang_size,
                "topologyConstraints": {"global": {"requiredTopologyLevel": work.gang_level}},
            }
            await create_podgroup(kube, ns, f"gang{g}", spec, TOPOLOGY)


def gang_pods(work: Workload, in_tree: bool) -> list[dict[str, Any]]:
    """All pods, gang after gang (their PodGroups are created first: create_podgroups)."""
    out = []
    for g in range(work.gangs):
        for i in range(work.gang_size):
            pod = gpu_pod(f"gang{g}-{i}", 1, annotations=None if in_tree else {"pod-group-name": f"gang{g}"})
            if in_tree:
                pod["spec"]["schedulingGroup"] = {"podGroupName": f"gang{g}"}
            out.append(pod)
    return out


async def post_pods(kube: KubeClient, ns: str, pods: Sequence[dict[str, Any]], concurrency: int) -> None:
    """The bench's own way: this process's API client, CONCURRENCY creates in flight."""
    limit = asyncio.Semaphore(concurrency)

    async def one(pod: dict[str, Any]) -> None:
        async with limit:
            await kube.post(f"/api/v1/namespaces/{ns}/pods", pod)

    await asyncio.gather(*(one(pod) for pod in pods))


async def kubectl_create(plane: ControlPlane, ns: str, pods: Sequence[dict[str, Any]]) -> float:
    """A new user's way: one `kubectl create -f` of a List of the pods, a process of its own
    (client-go: mTLS and HTTP/2 to the API server, its own rate limit, one create after the
    other). Returns the CPU seconds kubectl used."""
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods)}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = await asyncio.create_subprocess_exec(
            str(plane.kubectl), "--kubeconfig", str(plane.kubeconfig), "-n", ns, "create", "-f", f.name,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
    finally:
        os.unlink(f.name)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl create failed ({proc.returncode}): {err.decode()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# ---------------------------------------------------------------------------------------- one run
@dataclass
class Bench:
    plane: ControlPlane
    kube: KubeClient
    work: Workload
    big: Workload | None  # --big-gang, for the G variants
    node_labels: dict[str, dict[str, str]]
    timeout_s: float
    bind_timeout: float
    profile: Path | None
    profile_seconds: float

    def work_for(self, v: Variant) -> Workload:
        if not v.big:
            return self.work
        if self.big is None:
            raise RuntimeError(f"variant {v.name} needs --big-gang")
        return self.big


class Profilers:
    """py-spy on topogang serve and pprof CPU profiles of kube-scheduler and kube-apiserver, for one run."""

    def __init__(self, bench: Bench, tag: str, topogang_pid: int | None) -> None:
        self.spy: subprocess.Popen[bytes] | None = None
        self.pprof: asyncio.Task[None] | None = None
        if bench.profile is None:
            return
        bench.profile.mkdir(parents=True, exist_ok=True)
        if topogang_pid is not None:
            out = bench.profile / f"{tag}-topogang.txt"
            spy = Path(sys.executable).with_name("py-spy")
            spy = spy if spy.exists() else Path(shutil.which("py-spy") or spy)  # or on PATH
            argv = [str(spy), "record", "--pid", str(topogang_pid), "--rate", "100", "--format", "raw", "-o", str(out)]
            self.spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        path = f"/debug/pprof/profile?seconds={int(bench.profile_seconds)}"
        profile = bench.profile

        async def pprof() -> None:
            taken = await asyncio.gather(
                asyncio.to_thread(bench.plane.component_get, "kube-scheduler", path),
                asyncio.to_thread(bench.plane.api_get_bytes, path),  # the API server is often what bounds a run
                return_exceptions=True,
            )
            for component, body in zip(("kube-scheduler", "kube-apiserver"), taken, strict=True):
                if isinstance(body, bytes):
                    (profile / f"{tag}-{component}.pb.gz").write_bytes(body)
                else:
                    print(f"{tag}: no {component} profile: {body!r}", file=sys.stderr)

        self.pprof = asyncio.create_task(pprof())

    async def stop(self) -> None:
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(self.spy.wait, 30)
        if self.pprof is not None:
            with contextlib.suppress(Exception):
                await self.pprof


async def run_once(bench: Bench, v: Variant, rep: int, creator: str = BENCH) -> dict[str, Any]:
    ns = f"{v.name.lower().replace('@', 'x')}-{rep}{'-k' if creator == KUBECTL else ''}"
    await namespace(bench.kube, ns)
    plane = bench.plane
    async with contextlib.AsyncExitStack() as stack:
        server: Topogang | None = None
        args = v.topogang_args
        if v.gates:
            args = (*await register_webhook(bench.kube, ns, stack), *(args or ()))
        if args is not None:
            server = await stack.enter_async_context(
                Topogang.start(
                    plane.kubeconfig,
                    plane.logs_dir,
                    bind_timeout=bench.bind_timeout,
                    ready_within=600,
                    args=args,
                    root=v.root,
                    tls=v.tls,
                )
            )
        if v.gates:
            await until_bundled(bench.kube, f"topogang-bench-{ns}")
        config = v.config(server.url, server.tls) if server else v.config("", None)
        await plane.start_scheduler_async(config, v.scheduler_args)
        stack.push_async_callback(plane.stop_scheduler_async)
        pids = {name: plane.components[name].pid or 0 for name in COMPONENTS}
        pids["bench"] = os.getpid()
        if server is not None:
            pids["topogang"] = server.process.pid
        row = await measure(bench, v, ns, pids, server, creator)
    await clean(bench.kube, ns, [IN_TREE_PODGROUPS if v.in_tree else TOPOGANG_PODGROUPS] if v.gangs else [])
    return {"variant": label(v.name, creator), "rep": rep, **row}


async def register_webhook(kube: KubeClient, ns: str, stack: contextlib.AsyncExitStack) -> list[str]:
    """Gates mode for NS: its webhook registered (deleted when STACK closes) and NS labelled for
    it; the flags that make `topogang serve` serve it."""
    port, hook = _free_port(), f"topogang-bench-{ns}"
    await kube.post(WEBHOOKS, webhook_config(hook, f"https://127.0.0.1:{port}"))
    stack.push_async_callback(kube.delete, f"{WEBHOOKS}/{hook}")
    await kube.patch(f"/api/v1/namespaces/{ns}", {"metadata": {"labels": ENABLED}})
    return gates_args(hook, port)


async def until_bundled(kube: KubeClient, name: str) -> None:
    """topogang sets the webhook's caBundle at start; until then pods would pass ungated."""
    deadline = time.perf_counter() + 60
    while not await bundled(kube, name):
        if time.perf_counter() > deadline:
            raise TimeoutError("topogang did not set the webhook's caBundle")
        await asyncio.sleep(0.2)


async def measure(
    bench: Bench, v: Variant, ns: str, pids: Mapping[str, int], server: Topogang | None, creator: str
) -> dict[str, Any]:
    work = bench.work_for(v)
    expected = work.expected(v.gangs)
    meter = CpuMeter(pids)
    load_before = os.getloadavg()[0]
    profilers = Profilers(bench, f"{v.name}-{ns}", server.process.pid if server else None)
    requests_before = await api_requests(bench.plane)
    webhook_before = await webhook_calls(bench.plane)
    pods = gang_pods(work, v.in_tree) if v.gangs else plain_pods(work)
    creator_cpu = None
    async with BindClock(bench.kube, ns, expected) as clock:
        clock.started()
        if v.gangs:
            await create_podgroups(bench.kube, ns, work, v.in_tree)
        if creator == KUBECTL:
            creator_cpu = await kubectl_create(bench.plane, ns, pods)
        else:
            await post_pods(bench.kube, ns, pods, work.concurrency)
        clock.created()
        complete = await clock.all_bound(bench.timeout_s)
        end = clock.last_bound if complete else time.perf_counter()
    await profilers.stop()
    cpu = meter.read()
    requests = diff(await api_requests(bench.plane), requests_before)
    webhook = diff(await webhook_calls(bench.plane), webhook_before)
    rss, peak = memory_mb(server.process.pid) if server else (0.0, 0.0)
    took = max(end - clock.first_create, 1e-9)
    from_created = max(end - (clock.first_added or clock.first_create), 1e-9)
    row: dict[str, Any] = {
        "creator": creator,
        "nodes": len(bench.node_labels),
        "pods": expected,
        "bound": len(clock.bound),
        "complete": complete,
        "pods_per_s": len(clock.bound) / took,
        "first_create_to_bound_s": took,
        # the new-user counts: from the first pod seen created, and the binds alone
        "created_pods_per_s": len(clock.bound) / from_created,
        "bound_window_pods_per_s": len(clock.bound) / max(clock.last_bound - clock.first_bound, 1e-9),
        "creator_cpu_s": creator_cpu,
        "create_s": clock.last_create - clock.first_create,
        "last_created_to_bound_s": (end - clock.last_create) if complete else None,
        "cpu_s": cpu,
        "rss_mb": peak,
        "rss_now_mb": rss,
        "load_1m": [load_before, os.getloadavg()[0]],
        "scheduler": scheduler_summary(bench.plane),
        "api_requests": dict(sorted(requests.items(), key=lambda kv: -kv[1])),
    }
    if webhook.get("count"):
        # what each pod create waited for topogang's admission webhook (gates mode), as the API server timed it
        row["webhook_calls"] = webhook["count"]
        row["webhook_mean_ms"] = 1000 * webhook["sum"] / webhook["count"]
    if v.gangs:
        row[f"{work.gang_level}s_per_gang"] = list(
            domains_per_group(clock.bound, bench.node_labels, LABEL[work.gang_level]).values()
        )
        row["racks_per_gang"] = list(domains_per_group(clock.bound, bench.node_labels, LABEL["rack"]).values())
        row["part_bound_s"] = part_bound(clock.bound)
    status_writes = sum(v for k, v in requests.items() if k.endswith(" pods/status"))
    row["pod_status_writes_per_pod"] = status_writes / expected if expected else 0.0
    if server is not None:
        row["topogang"] = await topogang_summary(server)
        if not complete:
            print(f"--- {v.name}: topogang log ---\n{server.tail(15)}", file=sys.stderr)
    return row


def part_bound(bound: Mapping[str, tuple[float, str]]) -> list[float]:
    """Per gang (pods named gang<g>-<i>), seconds from its first pod seen bound to its last: how
    long it was part-bound, as the pod watch saw it."""
    times: dict[str, list[float]] = {}
    for pod, (t, _) in bound.items():
        times.setdefault(pod.rsplit("-", 1)[0], []).append(t)
    return [round(max(ts) - min(ts), 3) for _, ts in sorted(times.items())]


async def api_requests(plane: ControlPlane) -> dict[str, float]:
    """The API server's requests so far by "VERB resource[/subresource]" (apiserver_request_total),
    the watches left out: what each variant costs the API server, write by write."""
    text = (await asyncio.to_thread(plane.api_get_bytes, "/metrics")).decode()
    out: dict[str, float] = {}
    for head, value in prometheus_values(text, ("apiserver_request_total{",)).items():
        labels = dict(part.split("=", 1) for part in head.split("{", 1)[1].rstrip("}").split(",") if "=" in part)
        verb, resource = labels.get("verb", '""').strip('"'), labels.get("resource", '""').strip('"')
        if verb == "WATCH" or not resource:
            continue
        sub = labels.get("subresource", '""').strip('"')
        key = f"{verb} {resource}{'/' + sub if sub else ''}"
        out[key] = out.get(key, 0.0) + value
    return out


async def webhook_calls(plane: ControlPlane) -> dict[str, float]:
    """The API server's mutating admission webhook calls so far: count and seconds (sum)."""
    text = (await asyncio.to_thread(plane.api_get_bytes, "/metrics")).decode()
    out = {"count": 0.0, "sum": 0.0}
    prefixes = tuple(f"apiserver_admission_webhook_admission_duration_seconds_{k}{{" for k in out)
    for head, value in prometheus_values(text, prefixes).items():
        if 'type="admit"' in head:
            out["count" if "_count{" in head else "sum"] += value
    return out


def scheduler_summary(plane: ControlPlane) -> dict[str, Any]:
    """kube-scheduler's own view: attempts by result and mean durations (ms) of an attempt, of the
    algorithm (filter + score, extenders included) and of the Filter and Score plugins. v1.37 has
    no scheduler_extender_* metrics: the extender's share is the algorithm minus the plugins."""
    try:
        values = prometheus_values(plane.component_get("kube-scheduler", "/metrics").decode(), SCHEDULER_METRICS)
    except (OSError, ComponentError) as exc:
        return {"error": str(exc)}

    def total(name: str, *labels: str) -> float:
        return sum(v for k, v in values.items() if k.split("{")[0] == name and all(x in k for x in labels))

    def mean_ms(name: str, *labels: str) -> float:
        count = total(f"{name}_count", *labels) or total("scheduler_scheduling_attempt_duration_seconds_count")
        return 1000 * total(f"{name}_sum", *labels) / count if count else 0.0

    attempts = {
        k.split('result="')[1].split('"')[0]: int(v)
        for k, v in values.items()
        if k.startswith("scheduler_schedule_attempts_total") and 'result="' in k
    }
    ext = "scheduler_framework_extension_point_duration_seconds"
    points = {p: mean_ms(ext, f'extension_point="{p}"') for p in ("PreFilter", "Filter", "PreScore", "Score")}
    algorithm = mean_ms("scheduler_scheduling_algorithm_duration_seconds")
    return {
        "attempts": attempts,
        "attempt_ms": mean_ms("scheduler_scheduling_attempt_duration_seconds"),
        "algorithm_ms": algorithm,
        "plugins_ms": points,
        "extender_share_ms": max(0.0, algorithm - sum(points.values())),
        "batch": {k.split("{", 1)[1]: int(v) for k, v in values.items() if k.startswith("scheduler_batch_attempts")},
    }


async def topogang_summary(server: Topogang) -> dict[str, Any]:
    """topogang's requests per verb (and its webhook's reviews): count and mean ms."""
    status, body = await server.request("GET", "/metrics")
    if status != 200:
        return {"error": f"/metrics answered {status}"}
    values = prometheus_values(body.decode(), TOPOGANG_METRICS)
    out: dict[str, Any] = {}
    failed = {k.split('reason="')[1].split('"')[0]: int(v) for k, v in values.items() if "binds_failed" in k and v}
    out["binds_failed"] = failed  # bind calls answered with an error (kube-scheduler retries them), by reason
    for key, count in values.items():
        if key.startswith("topogang_webhook_duration_seconds_count") and count:
            verb = "webhook"  # its own time for each admission review (gates mode)
        elif key.startswith("topogang_extender_request_duration_seconds_count") and count:
            labels = key.split("{", 1)[1]
            verb = labels.split('verb="')[1].split('"')[0] if 'verb="' in labels else labels
        else:
            continue
        seconds = values.get(key.replace("_count{", "_sum{"), 0.0)
        entry = out.setdefault(verb, {"calls": 0, "ms": 0.0})
        entry["ms"] = (entry["ms"] * entry["calls"] + 1000 * seconds) / (entry["calls"] + count)
        entry["calls"] += int(count)
    return out


# ---------------------------------------------------------------------------------------- report
COUNTS = {  # the rate a ratio compares: pods bound over which window
    "pods_per_s": "from the bench's first create call",
    "created_pods_per_s": "from the first pod created (seen by the watch)",
    "bound_window_pods_per_s": "from the first pod bound",
}


def summarize(rows: list[dict[str, Any]], order: Sequence[str]) -> list[dict[str, Any]]:
    """One object per variant (medians over its repetitions) and one per ratio and count."""
    out: list[dict[str, Any]] = []
    medians: dict[str, dict[str, float]] = {}
    for name in order:
        runs = [r for r in rows if r["variant"] == name]
        if not runs:
            continue
        medians[name] = {count: statistics.median(r[count] for r in runs) for count in COUNTS}
        done = [r["last_created_to_bound_s"] for r in runs if r["last_created_to_bound_s"] is not None]
        creator_cpu = [r["creator_cpu_s"] for r in runs if r.get("creator_cpu_s") is not None]
        out.append(
            {
                "variant": name,
                "nodes": runs[0]["nodes"],
                "pods": runs[0]["pods"],
                **medians[name],
                "pods_per_s_runs": [r["pods_per_s"] for r in runs],
                "complete_runs": sum(1 for r in runs if r["complete"]),
                "last_created_to_bound_s": statistics.median(done) if done else None,
                "create_s": statistics.median(r["create_s"] for r in runs),
                "creator_cpu_s": statistics.median(creator_cpu) if creator_cpu else None,
                "rss_mb": statistics.median(r["rss_mb"] for r in runs),
                "cpu_s": {k: statistics.median(r["cpu_s"][k] for r in runs) for k in runs[0]["cpu_s"]},
            }
        )
    pairs = [("B", "A"), ("A100", "A"), ("B", "A100"), ("C2", "A"), ("C2", "C1"), ("C3", "A"), ("C3", "C2")]
    pairs += [("G2", "G1"), ("G2", "A")]
    pairs += [("B@", "A"), ("B@", "B"), ("C2@", "A"), ("C2@", "C1"), ("C2@", "C2"), ("G2@", "G2")]
    for suffix in ("", f"+{KUBECTL}"):
        for top, bottom in ((t + suffix, b + suffix) for t, b in pairs):
            if top in medians and bottom in medians:
                values = {c: medians[top][c] / medians[bottom][c] for c in COUNTS if medians[bottom][c]}
                out.append({"ratio": f"{top}/{bottom}", "value": values.get("pods_per_s", 0.0), "counts": values})
    return out


def print_table(summary: list[dict[str, Any]], rows: list[dict[str, Any]], names: Mapping[str, Variant]) -> None:
    print(f"{'variant':<10} {'pods/s':>7} {'created':>7} {'binds':>7} {'runs':<16} {'create s':>8} "
          f"{'last→bound s':>12} {'CPU s sched/topogang/apiserver/etcd/creator':>44} {'RSS MB':>7}  what")  # fmt: skip
    for s in summary:
        if "ratio" in s:
            c = s["counts"]
            print(f"ratio {s['ratio']}: {c.get('pods_per_s', 0):.2f} from the first create call, "
                  f"{c.get('created_pods_per_s', 0):.2f} from the first pod created, "
                  f"{c.get('bound_window_pods_per_s', 0):.2f} from the first pod bound")  # fmt: skip
            continue
        cpu = s["cpu_s"]
        creator = cpu.get("bench", 0) if s["creator_cpu_s"] is None else s["creator_cpu_s"]
        cpus = "/".join(f"{cpu.get(k, 0):.1f}" for k in ("kube-scheduler", "topogang", "kube-apiserver", "etcd"))
        cpus += f"/{creator:.1f}"
        runs = ",".join(f"{p:.0f}" for p in s["pods_per_s_runs"])
        late = "-" if s["last_created_to_bound_s"] is None else f"{s['last_created_to_bound_s']:.2f}"
        what = names[s["variant"].split("+")[0]].what
        print(f"{s['variant']:<10} {s['pods_per_s']:>7.1f} {s['created_pods_per_s']:>7.1f} "
              f"{s['bound_window_pods_per_s']:>7.1f} {runs:<16} {s['create_s']:>8.1f} {late:>12} {cpus:>44} "
              f"{s['rss_mb']:>7.0f}  {what}")  # fmt: skip
    for r in rows:
        keys: tuple[str, ...] = ("racks_per_gang", "part_bound_s", "pod_status_writes_per_pod", "scheduler", "topogang")
        keys += ("api_requests", "webhook_mean_ms")
        extra = {k: r[k] for k in keys if k in r}
        print(f"  {r['variant']} rep {r['rep']}: {r['bound']}/{r['pods']} bound, load {r['load_1m']}, "
              f"others {r['cpu_s']['others']} CPU s in {r['cpu_s']['wall']} s; "
              f"{orjson.dumps(jsonable(extra)).decode()}")  # fmt: skip


# ---------------------------------------------------------------------------------------- main
async def in_tree_unavailable(kube: KubeClient) -> str | None:
    """Why C1 cannot run on this plane, or None."""
    try:
        resources = await kube.get(f"/apis/{IN_TREE_API}")
    except ApiError as exc:
        return f"the API server does not serve {IN_TREE_API} ({exc.status})"
    names = {r.get("name") for r in resources.get("resources", [])}
    return None if "podgroups" in names else f"{IN_TREE_API} has no podgroups (serves {sorted(names)})"


async def run_all(bench: Bench, chosen: Sequence[Variant], reps: int, creators: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for rep in range(reps):
        for creator in creators:
            for v in chosen:
                t = time.perf_counter()
                name = label(v.name, creator)
                try:
                    row = await run_once(bench, v, rep, creator)
                except (ApiError, TimeoutError, ComponentError, RuntimeError) as exc:  # the next may still run
                    print(f"rep {rep} {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                rows.append(row)
                print(f"rep {rep} {name}: {row['bound']}/{row['pods']} bound, {row['pods_per_s']:.1f} pods/s, "
                      f"{row['created_pods_per_s']:.1f} from the first pod created "
                      f"(run and clean-up {time.perf_counter() - t:.0f} s)", file=sys.stderr)  # fmt: skip
    return rows


async def main_async(args: argparse.Namespace) -> None:
    names = variants(shlex.split(args.gates_args), args.compare)
    chosen = [names[n] for n in args.variants.split(",")]
    creators = args.creators.split(",")
    shape = Shape(args.rack_nodes, args.block_racks, args.zone_blocks)
    level = args.gang_level if args.gang_level != "auto" else shape.smallest_level(args.gang_size)
    work = Workload(args.pods, args.gangs, args.gang_size, level)
    big = None
    if args.big_gang:
        big_level = args.big_gang_level if args.big_gang_level != "auto" else shape.smallest_level(args.big_gang)
        big = Workload(0, 1, args.big_gang, big_level)
    extra: dict[str, list[str]] = {}
    if any(v.in_tree for v in chosen):
        gates = f"--feature-gates={IN_TREE_GATES}"
        extra = {"kube-apiserver": [gates, f"--runtime-config={IN_TREE_API}=true"], "kube-controller-manager": [gates]}
    if args.profile:
        extra.setdefault("kube-apiserver", []).append("--profiling=true")  # the plane turns it off; the last flag wins
    with running_plane(args, extra) as plane:
        async with api_client(plane.kubeconfig) as api, await KubeClient.connect(plane.kubeconfig) as kube:
            kube.timeout = 120  # a loaded 2-core API server can take long over large lists and deletes
            if any(v.in_tree for v in chosen) and (why := await in_tree_unavailable(kube)):
                print(f"C1 skipped: {why}", file=sys.stderr)
                chosen = [v for v in chosen if not v.in_tree]
            await apply_crds(kube, CRDS)
            await create_topology(kube)
            t = time.perf_counter()
            fake = FakeGpuNodes(api, name_prefix="bench", concurrency=32)
            made = await make_nodes(fake, args.nodes, shape, timeout_s=args.nodes_timeout)
            usable = await until_schedulable(kube, len(made), timeout_s=args.nodes_timeout, share=0.97)
            listing, _ = await kube.list("/api/v1/nodes")
            labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in listing}
            print(f"{len(made)} nodes ready ({usable} usable) in {time.perf_counter() - t:.0f} s; gangs per {level}",
                  file=sys.stderr)  # fmt: skip
            bench = Bench(
                plane, kube, work, big, labels, args.timeout, args.bind_timeout, args.profile, args.profile_seconds
            )
            rows = await run_all(bench, chosen, args.reps, creators)
        summary = summarize(rows, [label(v.name, c) for c in creators for v in chosen])
        if args.json:
            for obj in summary:
                print(orjson.dumps(jsonable(obj)).decode())
            for row in rows:
                print(orjson.dumps(jsonable({"run": row})).decode())
        else:
            print_table(summary, rows, names)
        print(f"load average at the end {os.getloadavg()}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=1_000, help="plain pods of A and B (default 1,000)")
    parser.add_argument("--gangs", type=int, default=4, help="gangs of C1-C3 (default 4)")
    parser.add_argument("--gang-size", type=int, default=256, help="pods per gang, 1 GPU each (default 256)")
    parser.add_argument("--gang-level", choices=("auto", "rack", "block", "zone"), default="auto",
                        help="where each gang is required (auto: the smallest level that holds it)")  # fmt: skip
    parser.add_argument("--big-gang", type=int, default=0, help="pods of the one gang of variants G1 and G2")
    parser.add_argument("--big-gang-level", choices=("auto", "rack", "block", "zone"), default="auto",
                        help="where the big gang is required (auto: the smallest level that holds it)")  # fmt: skip
    parser.add_argument("--variants", default="A,B,C1,C2,C3", help="comma-separated, run in this order each rep")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--creators", default=BENCH,
                        help=f"who creates the pods, each a run of every variant: {BENCH} (this process, "
                             f"{Workload.concurrency} creates in flight), {KUBECTL} (one `kubectl create -f`, as a "
                             f"new user would); comma-separated (default {BENCH})")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=300, help="seconds a run may take (default 300)")
    parser.add_argument("--bind-timeout", type=float, default=25.0, help="topogang serve --bind-timeout")
    parser.add_argument("--gates-args", default="", help="more flags for `topogang serve` in gates mode (C3)")
    parser.add_argument("--compare", type=Path, help="another checkout: adds variants B@, C2@ and G2@ run from it")
    add_plane_arguments(parser)
    parser.add_argument("--rack-nodes", type=int, default=32)
    parser.add_argument("--block-racks", type=int, default=4)
    parser.add_argument("--zone-blocks", type=int, default=4)
    parser.add_argument("--profile", type=Path, help="write py-spy (topogang) and pprof (kube-scheduler) profiles here")
    parser.add_argument("--profile-seconds", type=float, default=15, help="length of the kube-scheduler profile")
    parser.add_argument("--json", action="store_true", help="one JSON object per variant, per ratio and per run")
    args = parser.parse_args()
    known = variants((), args.compare)
    unknown = set(args.variants.split(",")) - set(known)
    if set(args.creators.split(",")) - {BENCH, KUBECTL}:
        parser.error(f"--creators: expected {BENCH} and/or {KUBECTL}, got {args.creators!r}")
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)}; expected some of {sorted(known)}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
