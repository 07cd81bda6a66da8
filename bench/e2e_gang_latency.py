"""Time from the last member's creation to all bound and to all Running, for one gang on the real
control plane, in each scheduling mode, side by side.

Starts the local control plane (e2e/controlplane) and N kwok GPU nodes (zones of racks of 16),
then for each mode: `topogang serve` and kube-scheduler (extender mode: scheduler-config/
extender.yaml; gates mode: kube-scheduler's default configuration, topogang's webhook registered
from manifests/gates/webhook/webhook.yaml), creates a PodGroup of P pods of 8 GPUs (segments of 8 in one
rack each, the gang in one zone) and its pods, and measures from the moment the last pod was
created until every pod is bound, and Running (kwok), as the API server shows it.

    python bench/e2e_gang_latency.py                   # 256 pods on 1,000 nodes, both modes
    python bench/e2e_gang_latency.py --nodes 200 --pods 64 --runs 3 --modes gates --json

Each run of extender mode also prints where the time went, from topogang's log: last pod created ->
planned, -> every member's bind call at the gate (kube-scheduler's cycles), -> the Bindings posted.

Needs the control-plane binaries (`make controlplane`).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kwok_cluster import TOPOLOGY, BindClock, clean, create_topology, until_schedulable
from e2e.controlplane import Binaries, ControlPlane, FakeGpuNodes, FakeTopology, api_client
from e2e.gates_support import ENABLED, WEBHOOKS, bundled, gates_args, webhook_config
from e2e.scenario import apply_crds, create, gpu_pod
from e2e.topogang import CRDS, Topogang, _free_port, scheduler_config
from extender.kube.client import KubeClient

RACK = "topology.topogang.io/rack"


def phases(log_path: Path | None, group: str, last_created: float) -> dict[str, float]:
    """Where the time went, from topogang's log (extender mode): last pod created -> gang planned,
    -> every member's bind call at the gate (kube-scheduler's cycles), -> the Bindings posted."""
    if log_path is None:
        return {}
    planned = opened = bound = None
    for line in log_path.read_text(errors="replace").splitlines():
        if f'"group": "{group}"' not in line:
            continue
        entry = orjson.loads(line)
        at = datetime.datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
        if entry.get("event") == "gang placed" and planned is None:
            planned = at
        elif entry.get("event") == "bound" and entry.get("bind_ms") is not None:
            bound, opened = at, at - entry["bind_ms"] / 1000
    if planned is None or opened is None or bound is None:
        return {}
    return {
        "to_planned_s": round(planned - last_created, 2),
        "members_to_gate_s": round(opened - planned, 2),
        "bindings_s": round(bound - opened, 2),
    }


async def one_run(kube: KubeClient, pods_n: int, run: str, log_path: Path | None = None) -> tuple[float, float]:
    """(seconds to all bound, seconds to all Running) after the last pod was created."""
    ns = f"bench-{run}"
    await kube.post("/api/v1/namespaces", {"metadata": {"name": ns, "labels": ENABLED}})
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
        "metadata": {"name": "train", "annotations": {"kai.scheduler/topology": TOPOLOGY}},
        "spec": spec,
    }
    await create(kube, pg, ns)
    limit = asyncio.Semaphore(32)

    async def make(i: int) -> None:
        labels = {"kai.scheduler/subgroup-name": f"w-{i // 8}"}
        async with limit:
            await create(kube, gpu_pod(f"w-{i}", labels=labels, annotations={"pod-group-name": "train"}), ns)

    # A watch, not polling: a LIST of every pod each 50 ms loaded the API server being measured.
    async with BindClock(kube, ns, pods_n) as clock:
        clock.started()
        await asyncio.gather(*(make(i) for i in range(pods_n)))
        clock.created()
        last_created_at = time.time()
        print(f"run {run}: last pod created at {last_created_at:.3f}", file=sys.stderr)
        if not await clock.all_bound(120) or not await clock.all_running(120):
            raise TimeoutError(f"{len(clock.bound)}/{pods_n} bound, {len(clock.running)} Running after 120 s")
    await clean(kube, ns)
    if spent := phases(log_path, f"{ns}/train", last_created_at):
        print(f"run {run}: {orjson.dumps(spent).decode()}", file=sys.stderr)
    return clock.last_bound - clock.last_create, max(clock.running.values()) - clock.last_create


async def main_async(args: argparse.Namespace) -> None:
    plane = ControlPlane(binaries=Binaries.locate(), scheduler=False)
    plane.start()
    try:
        async with api_client(plane.kubeconfig) as api, await KubeClient.connect(plane.kubeconfig) as kube:
            await apply_crds(kube, CRDS)
            await create_topology(kube, TOPOLOGY)
            zones = max(1, args.nodes // 500)
            per_zone = args.nodes // zones
            racks = per_zone // 16
            nodes = FakeGpuNodes(api, name_prefix="bench")
            made = await nodes.create(FakeTopology(zones, 1, racks, 16), timeout_s=300)
            await until_schedulable(kube, len(made))
            rows = []
            for mode in args.modes.split(","):
                times = await one_mode(plane, kube, mode, args)
                bound, running = [t for t, _ in times], [t for _, t in times]
                rows.append({
                    "mode": mode, "nodes": len(made), "pods": args.pods, "runs": args.runs,
                    "bound_median_s": round(statistics.median(bound), 2), "bound_max_s": round(max(bound), 2),
                    "running_median_s": round(statistics.median(running), 2),
                    "running_max_s": round(max(running), 2),
                })  # fmt: skip
        for row in rows:
            print(orjson.dumps(row).decode() if args.json else
                  f"{row['mode']:>8}: {row['pods']} pods on {row['nodes']} nodes, last pod created -> all bound "
                  f"median {row['bound_median_s']} s (max {row['bound_max_s']}), all Running median "
                  f"{row['running_median_s']} s (max {row['running_max_s']}) over {row['runs']} run(s)")  # fmt: skip
        if len(rows) == 2 and not args.json:
            a, b = rows
            print(f"{b['mode']} / {a['mode']}: all Running {b['running_median_s'] / a['running_median_s']:.2f}x")
    finally:
        plane.stop(keep_workdir=args.keep)
        if args.keep:
            print(f"logs kept in {plane.logs_dir}", file=sys.stderr)


async def one_mode(
    plane: ControlPlane, kube: KubeClient, mode: str, args: argparse.Namespace
) -> list[tuple[float, float]]:
    """ARGS.runs gangs in MODE: its topogang and kube-scheduler, stopped afterwards."""
    extra: list[str] = []
    hook = None
    if mode == "gates":
        port, hook = _free_port(), f"topogang-bench-{mode}"
        await kube.post(WEBHOOKS, webhook_config(hook, f"https://127.0.0.1:{port}"))
        extra = gates_args(hook, port)
    try:
        async with Topogang.start(plane.kubeconfig, plane.logs_dir, args=extra) as server:
            await plane.start_scheduler_async(scheduler_config(server.url, server.tls) if mode == "extender" else None)
            try:
                if hook is not None:
                    await until_bundled(kube, hook)
                log = server.log_path if mode == "extender" else None
                return [await one_run(kube, args.pods, f"{mode}-{r}", log) for r in range(args.runs)]
            except TimeoutError:
                print(f"--- topogang log ---\n{server.tail(30)}", file=sys.stderr)
                print(f"--- kube-scheduler log ---\n{plane.components['kube-scheduler'].tail(20)}", file=sys.stderr)
                raise
            finally:
                await plane.stop_scheduler_async()
    finally:
        if hook is not None:
            await kube.delete(f"{WEBHOOKS}/{hook}")


async def until_bundled(kube: KubeClient, name: str) -> None:
    """The webhook's caBundle is set by topogang at start; until then pods would pass ungated."""
    deadline = time.perf_counter() + 60
    while not await bundled(kube, name):
        if time.perf_counter() > deadline:
            raise TimeoutError("topogang did not set the webhook's caBundle")
        await asyncio.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=256, help="a multiple of 8")
    parser.add_argument("--runs", type=int, default=3, help="gangs created one after another (default 3)")
    parser.add_argument("--modes", default="extender,gates", help="comma-separated: extender, gates (default both)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's files and logs")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
