"""What reservations cost the running scheduler: one sweep's pass, and a filter call beside them.

The synthetic cluster of bench/plan_scale.py (N nodes of 8 GPUs in racks of 8-16), every node
running one 8-GPU pod of a finished-soon gang and PODS_PER_NODE small CPU pods (the kube-system
and sidecar crowd a real node carries), some with a runtime bound; WAITING gangs of 64 pods of 8
GPUs required in one block queue for room. Figures (medians of --runs, and the longest):

  pass_ms       GangScheduler.refresh_reservations: the sweep's call (every 5 s in the server),
                with the first --estimates waiting gangs given an estimated start (the default
                100; 0: the pass without estimates), each pass walking --estimates-per-pass of
                them (the rest at the next passes); `pass_max_ms` the longest pass, what the
                event loop waits for at worst
  discover_ms   the first pass, which also tries each waiting gang once (kube-scheduler never
                asks about them: the cluster is full)
  filter_ms     a plain pod's filter call with room held, and `filter_free_ms` the same call
                with reservations off: what holding adds to the hot path

    python bench/reserve_scale.py                     # 5,000 nodes
    python bench/reserve_scale.py --nodes 10000 --waiting 8 --json
    python bench/reserve_scale.py --nodes 2000 --waiting 100 --estimates 0     # what the estimates cost
    python bench/reserve_scale.py --nodes 2000 --waiting 100 --estimates 100 --runs 30
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_scale import LEVELS, TOPOLOGY, nodes_of
from extender.core.cluster import ClusterState
from extender.core.reservations import Settings
from extender.core.scheduler import GangScheduler
from extender.model.pod import parse_pod
from extender.model.podgroup import parse_podgroup

GPU = "nvidia.com/gpu"
WALL = 1_800_000_000.0


def _pod(name: str, gpus: int, node: str | None = None, group: str | None = None, bound: int | None = None) -> object:
    spec: dict[str, object] = {
        "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "100m", GPU: str(gpus)} if gpus else {"cpu": "100m"}}}
        ]
    }
    if node:
        spec["nodeName"] = node
    if bound:
        spec["activeDeadlineSeconds"] = bound
    meta: dict[str, object] = {"name": name, "namespace": "bench", "creationTimestamp": "2027-01-15T08:00:00Z"}
    if group:
        meta["annotations"] = {"pod-group-name": group}
    status = {"phase": "Running", "startTime": "2027-01-15T08:00:00Z"} if node else {}
    return parse_pod({"metadata": meta, "spec": spec, "status": status})


def scheduler(
    nodes: int, per_node: int, waiting: int, on: bool, estimates: int = 100, per_pass: int | None = None
) -> GangScheduler:
    state = ClusterState()
    for n in nodes_of(nodes, 7):
        state.upsert_node(n)
    state.set_topology("dc", TOPOLOGY)
    settings = Settings(estimates=estimates)
    if per_pass is not None:
        settings = replace(settings, estimates_per_pass=per_pass)
    s = GangScheduler(state, reservations=settings if on else None)
    for i, n in enumerate(state.table.nodes):
        s.observe_pod(_pod(f"run-{i}", 8, n.name, bound=3600 if i % 2 else None))  # type: ignore[arg-type]
        for k in range(per_node):
            s.observe_pod(_pod(f"side-{i}-{k}", 0, n.name))  # type: ignore[arg-type]
    block = {"requiredTopologyLevel": LEVELS[1], "topology": "dc"}
    for g in range(waiting):
        spec = {"minMember": 64, "topologyConstraints": {"global": block}}
        state.set_podgroup(
            f"bench/w{g}", parse_podgroup({"metadata": {"name": f"w{g}", "namespace": "bench"}, "spec": spec})
        )
        for i in range(64):
            s.observe_pod(_pod(f"w{g}-{i}", 8, group=f"w{g}"))  # type: ignore[arg-type]
    return s


def times(fn: object, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1000)
    return out


def timed(fn: object, runs: int) -> float:
    return statistics.median(times(fn, runs))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods-per-node", type=int, default=8)
    p.add_argument("--waiting", type=int, default=4)
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--estimates", type=int, default=Settings().estimates, help="waiting gangs given an estimate")
    p.add_argument(
        "--estimates-per-pass", type=int, default=Settings().estimates_per_pass, help="gangs walked per pass (0: all)"
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    on = scheduler(args.nodes, args.pods_per_node, args.waiting, True, args.estimates, args.estimates_per_pass)
    off = scheduler(args.nodes, args.pods_per_node, args.waiting, on=False)
    t0 = time.perf_counter()
    made, _ = on.refresh_reservations(0.0, WALL)
    discover_ms = (time.perf_counter() - t0) * 1000
    gc.collect()  # the build's garbage, not a pass's
    passes = times(lambda: on.refresh_reservations(0.0, WALL), args.runs)
    names = [n.name for n in on.state.table.nodes]
    probe = _pod("probe", 0)
    filter_ms = timed(lambda: on.filter(probe, names, 1.0), args.runs)  # type: ignore[arg-type]
    free_ms = timed(lambda: off.filter(probe, names, 1.0), args.runs)  # type: ignore[arg-type]
    out = {
        "nodes": args.nodes,
        "pods": len(on.state.pods),
        "waiting": args.waiting,
        "estimated": len(on.reserving.waits.estimates),
        "reserved": made,
        "discover_ms": round(discover_ms, 1),
        "pass_ms": round(statistics.median(passes), 1),
        "pass_max_ms": round(max(passes), 1),
        "filter_ms": round(filter_ms, 2),
        "filter_free_ms": round(free_ms, 2),
        "filter_ratio": round(filter_ms / free_ms, 2),
    }
    if args.json:
        print(orjson.dumps(out).decode())
    else:
        for k, v in out.items():
            print(f"{k:>15}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
