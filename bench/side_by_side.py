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

Each variant also records CPU seconds per component (and of the rest of the machine), topogang's
peak RSS, the domains each gang landed in, kube-scheduler's own metrics (attempts, attempt and
algorithm durations, Filter and Score extension points) and topogang's request durations.

    python bench/side_by_side.py                                     # 1,000 nodes, 3 reps
    python bench/side_by_side.py --nodes 5000 --reps 1 --json
    python bench/side_by_side.py --variants C1,C2 --gangs 1 --gang-size 1024
    python bench/side_by_side.py --variants B,C2 --profile /tmp/prof   # py-spy + pprof

Needs the control-plane binaries (`make controlplane`); --profile needs py-spy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
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
    clean,
    create_topology,
    diff,
    domains_per_group,
    jsonable,
    make_nodes,
    memory_mb,
    namespace,
    prometheus_values,
    until_schedulable,
)
from e2e.controlplane import Binaries, ComponentError, ControlPlane, FakeGpuNodes, api_client
from e2e.gates_support import ENABLED, WEBHOOKS, bundled, gates_args, webhook_config
from e2e.scenario import apply_crds, create_podgroup, gpu_pod
from e2e.topogang import CRDS, ROOT, ExtenderPki, Topogang, _free_port, scheduler_config
from extender.kube.client import ApiError, KubeClient

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


async def create_plain(kube: KubeClient, ns: str, work: Workload) -> None:
    limit = asyncio.Semaphore(work.concurrency)

    async def one(i: int) -> None:
        async with limit:
            await kube.post(f"/api/v1/namespaces/{ns}/pods", gpu_pod(f"p-{i}", 1))

    await asyncio.gather(*(one(i) for i in range(work.pods)))


async def create_gangs(kube: KubeClient, ns: str, work: Workload, in_tree: bool) -> None:
    """Every gang's PodGroup first, then all pods, gang after gang."""
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
    limit = asyncio.Semaphore(work.concurrency)

    async def one(g: int, i: int) -> None:
        pod = gpu_pod(f"gang{g}-{i}", 1, annotations=None if in_tree else {"pod-group-name": f"gang{g}"})
        if in_tree:
            pod["spec"]["schedulingGroup"] = {"podGroupName": f"gang{g}"}
        async with limit:
            await kube.post(f"/api/v1/namespaces/{ns}/pods", pod)

    await asyncio.gather(*(one(g, i) for g in range(work.gangs) for i in range(work.gang_size)))


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
    """py-spy on topogang serve and a pprof CPU profile of kube-scheduler, for one run."""

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
        target = bench.profile / f"{tag}-kube-scheduler.pb.gz"

        async def pprof() -> None:
            body = await asyncio.to_thread(bench.plane.component_get, "kube-scheduler", path)
            target.write_bytes(body)

        self.pprof = asyncio.create_task(pprof())

    async def stop(self) -> None:
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(self.spy.wait, 30)
        if self.pprof is not None:
            with contextlib.suppress(Exception):
                await self.pprof


async def run_once(bench: Bench, v: Variant, rep: int) -> dict[str, Any]:
    ns = f"{v.name.lower().replace('@', 'x')}-{rep}"
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
        row = await measure(bench, v, ns, pids, server)
    await clean(bench.kube, ns, [IN_TREE_PODGROUPS if v.in_tree else TOPOGANG_PODGROUPS] if v.gangs else [])
    return {"variant": v.name, "rep": rep, **row}


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
    bench: Bench, v: Variant, ns: str, pids: Mapping[str, int], server: Topogang | None
) -> dict[str, Any]:
    work = bench.work_for(v)
    expected = work.expected(v.gangs)
    meter = CpuMeter(pids)
    load_before = os.getloadavg()[0]
    profilers = Profilers(bench, f"{v.name}-{ns}", server.process.pid if server else None)
    requests_before = await api_requests(bench.plane)
    async with BindClock(bench.kube, ns, expected) as clock:
        clock.started()
        if v.gangs:
            await create_gangs(bench.kube, ns, work, v.in_tree)
        else:
            await create_plain(bench.kube, ns, work)
        clock.created()
        complete = await clock.all_bound(bench.timeout_s)
        end = clock.last_bound if complete else time.perf_counter()
    await profilers.stop()
    cpu = meter.read()
    requests = diff(await api_requests(bench.plane), requests_before)
    rss, peak = memory_mb(server.process.pid) if server else (0.0, 0.0)
    took = max(end - clock.first_create, 1e-9)
    row: dict[str, Any] = {
        "nodes": len(bench.node_labels),
        "pods": expected,
        "bound": len(clock.bound),
        "complete": complete,
        "pods_per_s": len(clock.bound) / took,
        "first_create_to_bound_s": took,
        "create_s": clock.last_create - clock.first_create,
        "last_created_to_bound_s": (end - clock.last_create) if complete else None,
        "cpu_s": cpu,
        "rss_mb": peak,
        "rss_now_mb": rss,
        "load_1m": [load_before, os.getloadavg()[0]],
        "scheduler": scheduler_summary(bench.plane),
        "api_requests": dict(sorted(requests.items(), key=lambda kv: -kv[1])),
    }
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
    """topogang's requests per verb: count and mean ms."""
    status, body = await server.request("GET", "/metrics")
    if status != 200:
        return {"error": f"/metrics answered {status}"}
    values = prometheus_values(body.decode(), TOPOGANG_METRICS)
    out: dict[str, Any] = {}
    failed = {k.split('reason="')[1].split('"')[0]: int(v) for k, v in values.items() if "binds_failed" in k and v}
    out["binds_failed"] = failed  # bind calls answered with an error (kube-scheduler retries them), by reason
    for key, count in values.items():
        if not key.startswith("topogang_extender_request_duration_seconds_count") or not count:
            continue
        labels = key.split("{", 1)[1]
        verb = labels.split('verb="')[1].split('"')[0] if 'verb="' in labels else labels
        seconds = values.get(key.replace("_count{", "_sum{"), 0.0)
        entry = out.setdefault(verb, {"calls": 0, "ms": 0.0})
        entry["ms"] = (entry["ms"] * entry["calls"] + 1000 * seconds) / (entry["calls"] + count)
        entry["calls"] += int(count)
    return out


# ---------------------------------------------------------------------------------------- report
def summarize(rows: list[dict[str, Any]], order: Sequence[str]) -> list[dict[str, Any]]:
    """One object per variant (medians over its repetitions) and one per ratio."""
    out: list[dict[str, Any]] = []
    medians: dict[str, float] = {}
    for name in order:
        runs = [r for r in rows if r["variant"] == name]
        if not runs:
            continue
        medians[name] = statistics.median(r["pods_per_s"] for r in runs)
        done = [r["last_created_to_bound_s"] for r in runs if r["last_created_to_bound_s"] is not None]
        out.append(
            {
                "variant": name,
                "nodes": runs[0]["nodes"],
                "pods": runs[0]["pods"],
                "pods_per_s": medians[name],
                "pods_per_s_runs": [r["pods_per_s"] for r in runs],
                "complete_runs": sum(1 for r in runs if r["complete"]),
                "last_created_to_bound_s": statistics.median(done) if done else None,
                "create_s": statistics.median(r["create_s"] for r in runs),
                "rss_mb": statistics.median(r["rss_mb"] for r in runs),
                "cpu_s": {k: statistics.median(r["cpu_s"][k] for r in runs) for k in runs[0]["cpu_s"]},
            }
        )
    pairs = [("B", "A"), ("A100", "A"), ("B", "A100"), ("C2", "A"), ("C2", "C1"), ("C3", "A"), ("C3", "C2")]
    pairs += [("G2", "G1"), ("G2", "A")]
    pairs += [("B@", "A"), ("B@", "B"), ("C2@", "A"), ("C2@", "C1"), ("C2@", "C2"), ("G2@", "G2")]
    for top, bottom in pairs:
        if top in medians and bottom in medians and medians[bottom]:
            out.append({"ratio": f"{top}/{bottom}", "value": medians[top] / medians[bottom]})
    return out


def print_table(summary: list[dict[str, Any]], rows: list[dict[str, Any]], names: Mapping[str, Variant]) -> None:
    print(f"{'variant':<6} {'pods/s':>7} {'runs':<22} {'create s':>8} {'last→bound s':>12} "
          f"{'CPU s sched/topogang/apiserver/etcd':>36}"
          f" {'RSS MB':>7}  what")  # fmt: skip
    for s in summary:
        if "ratio" in s:
            print(f"ratio {s['ratio']}: {s['value']:.2f}")
            continue
        cpu = s["cpu_s"]
        cpus = "/".join(f"{cpu.get(k, 0):.1f}" for k in ("kube-scheduler", "topogang", "kube-apiserver", "etcd"))
        runs = ",".join(f"{p:.0f}" for p in s["pods_per_s_runs"])
        late = "-" if s["last_created_to_bound_s"] is None else f"{s['last_created_to_bound_s']:.2f}"
        print(f"{s['variant']:<6} {s['pods_per_s']:>7.1f} {runs:<22} {s['create_s']:>8.1f} {late:>12} {cpus:>36} "
              f"{s['rss_mb']:>7.0f}  "
              f"{names[s['variant']].what}")  # fmt: skip
    for r in rows:
        keys = ("racks_per_gang", "part_bound_s", "pod_status_writes_per_pod", "scheduler", "topogang", "api_requests")
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


async def run_all(bench: Bench, chosen: Sequence[Variant], reps: int) -> list[dict[str, Any]]:
    rows = []
    for rep in range(reps):
        for v in chosen:
            t = time.perf_counter()
            try:
                row = await run_once(bench, v, rep)
            except (ApiError, TimeoutError, ComponentError, RuntimeError) as exc:  # the next variant may still run
                print(f"rep {rep} {v.name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            rows.append(row)
            print(f"rep {rep} {v.name}: {row['bound']}/{row['pods']} bound, {row['pods_per_s']:.1f} pods/s "
                  f"(run and clean-up {time.perf_counter() - t:.0f} s)", file=sys.stderr)  # fmt: skip
    return rows


async def main_async(args: argparse.Namespace) -> None:
    names = variants(shlex.split(args.gates_args), args.compare)
    chosen = [names[n] for n in args.variants.split(",")]
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
    plane = ControlPlane(binaries=Binaries.locate(), scheduler=False, extra_args=extra, timeout=120)
    plane.start()
    print(f"load average at start {os.getloadavg()}, {os.cpu_count()} cores", file=sys.stderr)
    try:
        async with api_client(plane.kubeconfig) as api, await KubeClient.connect(plane.kubeconfig) as kube:
            kube.timeout = 120  # a loaded 2-core API server can take long over large lists and deletes
            if any(v.in_tree for v in chosen) and (why := await in_tree_unavailable(kube)):
                print(f"C1 skipped: {why}", file=sys.stderr)
                chosen = [v for v in chosen if not v.in_tree]
            await apply_crds(kube, CRDS)
            await create_topology(kube)
            t = time.perf_counter()
            fake = FakeGpuNodes(api, name_prefix="bench", concurrency=32)
            made = await make_nodes(fake, args.nodes, shape, timeout_s=args.ready_timeout)
            usable = await until_schedulable(kube, len(made), timeout_s=args.ready_timeout, share=0.97)
            listing, _ = await kube.list("/api/v1/nodes")
            labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in listing}
            print(f"{len(made)} nodes ready ({usable} usable) in {time.perf_counter() - t:.0f} s; gangs per {level}",
                  file=sys.stderr)  # fmt: skip
            bench = Bench(
                plane, kube, work, big, labels, args.timeout, args.bind_timeout, args.profile, args.profile_seconds
            )
            rows = await run_all(bench, chosen, args.reps)
        summary = summarize(rows, [v.name for v in chosen])
        if args.json:
            for obj in summary:
                print(orjson.dumps(jsonable(obj)).decode())
            for row in rows:
                print(orjson.dumps(jsonable({"run": row})).decode())
        else:
            print_table(summary, rows, names)
        print(f"load average at the end {os.getloadavg()}", file=sys.stderr)
    finally:
        plane.stop(keep_workdir=args.keep)
        if args.keep:
            print(f"logs kept in {plane.logs_dir}", file=sys.stderr)


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
    parser.add_argument("--timeout", type=float, default=300, help="seconds a run may take (default 300)")
    parser.add_argument("--bind-timeout", type=float, default=25.0, help="topogang serve --bind-timeout")
    parser.add_argument("--gates-args", default="", help="more flags for `topogang serve` in gates mode (C3)")
    parser.add_argument("--compare", type=Path, help="another checkout: adds variants B@, C2@ and G2@ run from it")
    parser.add_argument("--ready-timeout", type=float, default=600,
                        help="seconds the nodes may take to be Ready and schedulable (default 600)")  # fmt: skip
    parser.add_argument("--rack-nodes", type=int, default=32)
    parser.add_argument("--block-racks", type=int, default=4)
    parser.add_argument("--zone-blocks", type=int, default=4)
    parser.add_argument("--profile", type=Path, help="write py-spy (topogang) and pprof (kube-scheduler) profiles here")
    parser.add_argument("--profile-seconds", type=float, default=15, help="length of the kube-scheduler profile")
    parser.add_argument("--json", action="store_true", help="one JSON object per variant, per ratio and per run")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's files and logs")
    args = parser.parse_args()
    known = variants((), args.compare)
    unknown = set(args.variants.split(",")) - set(known)
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)}; expected some of {sorted(known)}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
