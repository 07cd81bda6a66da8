"""Time to plan a defragmentation at scale: the fewest movable pods whose move lets a block gang
fit, and a new node for each outside its block.

Clusters of N nodes with 8 GPUs each, in zones > blocks > racks of 8 to 16 nodes (plan_scale.py's
cluster). 80% of the nodes are full of work that stays (one 8-GPU pod each, not movable); 1,000
movable 1-GPU pods (a share of long-running services) sit one per node on random free nodes, so
no block has as many whole free nodes as it has free nodes. The waiting gang asks for one block
and as many 8-GPU pods as the roomiest block has free nodes: it fits only once the movable pods
there have moved, each to a free node of another block.

    python bench/defrag_scale.py                        # 10,000 nodes, 1,000 movable pods
    python bench/defrag_scale.py --nodes 5000 --movable 500 --json

Each case prints the median, p95 and p99 of one search (`find_victims` over the movable pods,
then `relocate` for those it chose) over repeated runs on a node table already built (as in the
server), and what it found: the pods moved and the plans it took.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_scale import GPU, LEVELS, TOPOLOGY, nodes_of

from extender.model.node import NodeInfo
from extender.model.pod import Placement, parse_pod
from extender.model.podgroup import parse_podgroup
from extender.placement import (
    ClusterSnapshot,
    MovedPod,
    NodeTable,
    Plan,
    Preemption,
    Stranded,
    build_gang,
    closed_domain,
    plan,
    relocate,
)
from extender.placement.gang import Gang
from extender.placement.snapshot import DictUsage
from extender.placement.victim_search import find_victims
from extender.placement.victims import RunningPod, Workload

FULL = 0.8  # share of the nodes full of work that stays


def cluster(n: int, movable: int, seed: int) -> tuple[list[NodeInfo], dict[str, dict[str, int]], list[Workload]]:
    """The nodes, the room used on each, and the movable pods as workloads of their own."""
    rng = random.Random(seed)
    nodes = nodes_of(n, 7)
    used: dict[str, dict[str, int]] = {}
    free = []
    for node in nodes:
        if rng.random() < FULL:
            used[node.name] = {GPU: 8000, "cpu": 8000, "pods": 1000}
        else:
            free.append(node.name)
    out = []
    for i, name in enumerate(rng.sample(free, min(movable, len(free)))):
        requests = {GPU: 1000, "cpu": 1000, "pods": 1000}
        used[name] = requests
        pod = RunningPod(f"svc/web-{i}", name, requests, float(rng.randint(0, 10_000)))
        out.append(Workload(pod.key, 0, (pod,), gang=False))
    return nodes, used, out


def block_gang(pods: int) -> Gang:
    pg = parse_podgroup(
        {
            "metadata": {"name": "big", "namespace": "bench"},
            "spec": {"minMember": pods, "topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}},
        }
    )
    members = [
        parse_pod(
            {
                "metadata": {"name": f"big-{i}", "namespace": "bench", "annotations": {"pod-group-name": "big"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: "8", "cpu": "8"}}}]},
            }
        )
        for i in range(pods)
    ]
    built = build_gang(pg, members, {"dc": TOPOLOGY})  # type: ignore[arg-type]
    assert built.gang is not None, built.errors
    return built.gang


def roomiest(nodes: list[NodeInfo], used: dict[str, dict[str, int]]) -> int:
    """The most nodes a block has with no work that stays (movable pods ignored)."""
    per_block: Counter[str] = Counter()
    for node in nodes:
        if used.get(node.name, {}).get(GPU, 0) < 8000:
            per_block[node.labels[LEVELS[0]] + "/" + node.labels[LEVELS[1]]] += 1
    return max(per_block.values())


def search(snapshot: ClusterSnapshot, gang: Gang, movable: list[Workload]) -> Preemption | str:
    found = find_victims(snapshot, gang, 1, movable)
    if not isinstance(found, Preemption):
        return found.reason
    closed = closed_domain(snapshot, gang, found.domain, found.plan)
    by_key = {w.key: w.pods[0] for w in movable}
    moved = [MovedPod(k, by_key[k].node, by_key[k].requests, Placement()) for k in found.pods]
    where = relocate(snapshot, gang, found.plan, closed, moved)
    return where.why if isinstance(where, Stranded) else found


def run_case(nodes_n: int, movable_n: int, repeat: int) -> dict[str, object]:
    nodes, used, movable = cluster(nodes_n, movable_n, 11)
    table = NodeTable(nodes)
    snapshot = ClusterSnapshot(table, DictUsage(table, used))
    gang = block_gang(roomiest(nodes, used))
    assert not isinstance(plan(snapshot, gang), Plan), "the gang fits without moving anyone"
    times, result = [], None
    for _ in range(repeat + 1):
        start = time.perf_counter()
        result = search(snapshot, gang, movable)
        times.append((time.perf_counter() - start) * 1000)
    assert isinstance(result, Preemption), result
    warm = sorted(times[1:])

    def pct(q: float) -> float:
        return round(warm[min(len(warm) - 1, round(q * (len(warm) - 1)))], 1)

    return {
        "nodes": nodes_n,
        "movable": len(movable),
        "gang_pods": len(list(gang.members())),
        "median_ms": round(statistics.median(warm), 1),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "cold_ms": round(times[0], 1),
        "moved": len(result.pods),
        "domain": str(result.domain),
        "plans": result.plans,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000, help="cluster size (default 10,000)")
    parser.add_argument("--movable", type=int, default=1_000, help="movable pods (default 1,000)")
    parser.add_argument("--repeat", type=int, default=100, help="timed runs (default 100)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    row = run_case(args.nodes, args.movable, args.repeat)
    if args.json:
        sys.stdout.write(orjson.dumps(row).decode() + "\n")
    else:
        print(
            f"{row['nodes']:>6} nodes, {row['movable']} movable pods, a {row['gang_pods']}-pod block gang: "
            f"median {row['median_ms']} ms, p95 {row['p95_ms']} ms, p99 {row['p99_ms']} ms (cold {row['cold_ms']}); "
            f"{row['moved']} pods moved out of {row['domain']}, {row['plans']} engine calls"
        )


if __name__ == "__main__":
    main()
