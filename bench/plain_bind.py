"""What a plain pod costs the core on its way through topogang: its filter call, its bind call
(checked against topogang's own count, its room reserved while the Binding is posted) and the
Binding seen landing, with --inflight binds posted and not landed yet at any time (kube-scheduler
binds asynchronously, so many are in flight under load).

The synthetic cluster of bench/plan_scale.py (N nodes of 8 GPUs); --pods plain 1-GPU pods in
turn. Figure: microseconds per pod (the best of --runs), for each --inflight given.

    python bench/plain_bind.py                        # 1,024 nodes; 0, 8 and 32 in flight
    python bench/plain_bind.py --nodes 5000 --inflight 64 --json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_scale import TOPOLOGY, nodes_of
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.model.pod import PodInfo, parse_pod


def plain(i: int) -> PodInfo:
    requests = {"cpu": "1", "nvidia.com/gpu": "1"}
    spec = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    return parse_pod({"metadata": {"name": f"p-{i}", "namespace": "default"}, "spec": spec})


def run(nodes: int, pods: int, inflight: int) -> float:
    """Seconds for PODS plain pods: filter, bind, and the Binding of the pod INFLIGHT binds
    earlier seen landing."""
    state = ClusterState()
    for n in nodes_of(nodes, 7):
        state.upsert_node(n)
    state.set_topology("dc", TOPOLOGY)
    scheduler = GangScheduler(state, bind_ahead=True)
    names = [n.name for n in state.table.nodes]
    made = [plain(i) for i in range(pods)]
    for p in made:
        scheduler.observe_pod(p)
    posted: deque[tuple[str, str]] = deque()
    start = time.perf_counter()
    for i, p in enumerate(made):
        offered = scheduler.filter(p, names, float(i)).nodes
        node = offered[i % len(offered)]
        scheduler.bind(p.key, node, float(i))
        posted.append((p.key, node))
        if len(posted) > inflight:
            key, where = posted.popleft()
            scheduler.observe_pod(replace(state.pods[key], node_name=where))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--inflight", type=int, nargs="+", default=[0, 8, 32])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for inflight in args.inflight:
        best = min(run(args.nodes, args.pods, inflight) for _ in range(args.runs))
        per_pod_us = round(best * 1e6 / args.pods, 1)
        if args.json:
            figures = {"nodes": args.nodes, "pods": args.pods, "inflight": inflight, "per_pod_us": per_pod_us}
            print(orjson.dumps(figures).decode())
        else:
            print(f"{args.nodes} nodes, {inflight} binds in flight: {per_pod_us} us per plain pod")


if __name__ == "__main__":
    main()
