"""Time to find a preemption plan for a large rack-segmented gang on a nearly full cluster.

Clusters of N nodes with 8 GPUs each, in zones > blocks > racks of 8 to 16 nodes (as in
plan_scale.py). 90% of the GPUs are held by 1,000 running gangs placed rack by rack, of mixed
priorities (10, 20, 50, 100, and 2,000 above the preemptor), pods of 8, 4 or 2 GPUs, a quarter
of them with a quarter of their pods beyond their minimum; the free 10% is scattered. The
preemptor, priority 1,000, is 256 pods of 8 GPUs in segments of 8 pods, each segment in one rack
and the whole gang in one zone: it needs 256 whole nodes that only evictions can give it.

    python bench/preempt_scale.py                      # 5,000 and 10,000 nodes
    python bench/preempt_scale.py --nodes 10000 --json
    python bench/preempt_scale.py --nodes 10000 --protect 0.3   # 30% of the gangs under a budget

With --protect F, each running gang is under a PodDisruptionBudget that allows no disruption
with the chance F: the search leaves their units out, and the victims it finds must overrun no
budget (`over_budget` is 0).

Each case prints the median and p95 of `find_victims` over repeated runs on a node table that is
already built (as in the server); the victim units are sorted on every run. `plan_ms` is one
engine plan of the same gang with every lower-priority pod gone, and `plans_worth` the search's
median in those plans: a figure that a busy machine does not move much.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_scale import GPU, TOPOLOGY, gang_objects, nodes_of

from extender.model.node import NodeInfo
from extender.placement import ClusterSnapshot, NodeTable, Plan, build_gang, plan
from extender.placement.snapshot import DictUsage
from extender.placement.victim_search import find_victims
from extender.placement.victims import Budget, Preemption, RunningPod, Workload

GANGS = 1_000
FULL = 0.9
PRIORITIES = (10, 20, 50, 100, 2_000)
PREEMPTOR = 1_000


def workloads_of(nodes: list[NodeInfo], seed: int) -> list[Workload]:
    """1,000 gangs placed node by node; an empty node is skipped (left free) with the chance that
    keeps the rest of the gangs just fitting, so the free 10% is scattered over every rack."""
    rng = random.Random(seed)
    per_gang = 1.012 * FULL * 8 * len(nodes) / GANGS  # GPUs (rounding the pod counts loses ~1%)
    shapes = [rng.choice((8, 8, 4, 2)) for _ in range(GANGS)]
    counts = [max(1, round(per_gang * rng.uniform(0.5, 1.5) / g)) for g in shapes]
    demand = sum(g * c for g, c in zip(shapes, counts, strict=True))
    free = [8] * len(nodes)
    cursor = 0
    out = []
    for g, (gpus, count) in enumerate(zip(shapes, counts, strict=True)):
        pods = []
        for i in range(count):
            while cursor < len(nodes) and (free[cursor] < gpus or _skip(rng, demand, free, cursor)):
                cursor += 1
            if cursor >= len(nodes):
                break
            free[cursor] -= gpus
            demand -= gpus
            requests = {GPU: gpus * 1000, "cpu": 4000, "pods": 1000}
            pods.append(RunningPod(f"run/g{g}-{i}", nodes[cursor].name, requests, float(rng.randint(0, 10_000))))
        if pods:
            elastic = frozenset(p.key for p in pods[len(pods) - len(pods) // 4 :]) if g % 4 == 0 else frozenset()
            out.append(Workload(f"run/g{g}", rng.choice(PRIORITIES), tuple(pods), elastic))
    return out


def budgets_of(workloads: list[Workload], fraction: float, seed: int) -> list[Budget]:
    """Each gang under a budget that lets none of its pods go, with the chance FRACTION."""
    rng = random.Random(seed)
    return [
        Budget(f"run/pdb-{w.key[4:]}", 0, frozenset(p.key for p in w.pods))
        for w in workloads
        if rng.random() < fraction
    ]


def _skip(rng: random.Random, demand: int, free: list[int], cursor: int) -> bool:
    """Leave this empty node free?"""
    room = 8 * (len(free) - cursor)
    return free[cursor] == 8 and rng.random() < max(0.0, 1 - demand / room)


def run_case(nodes_n: int, repeat: int, protect: float = 0.0) -> dict[str, object]:
    nodes = nodes_of(nodes_n, 7)
    workloads = workloads_of(nodes, 11)
    budgets = budgets_of(workloads, protect, 13) if protect else []
    table = NodeTable(nodes)
    usage = DictUsage(table)
    for w in workloads:
        for p in w.pods:
            usage.add(p.node, p.requests)
    snapshot = ClusterSnapshot(table, usage)
    pg, members = gang_objects(256)
    built = build_gang(pg, members, {"dc": TOPOLOGY})  # type: ignore[arg-type]
    assert built.gang is not None, built.errors
    assert not isinstance(plan(snapshot, built.gang), Plan), "the gang fits without preemption"
    times, result = [], None
    for _ in range(repeat + 1):
        start = time.perf_counter()
        result = find_victims(snapshot, built.gang, PREEMPTOR, workloads, budgets)
        times.append((time.perf_counter() - start) * 1000)
    assert isinstance(result, Preemption), result
    assert len(result.plan.assignments) == 256
    warm = sorted(times[1:])
    # One engine plan on the same cluster with every lower-priority pod gone: the unit of work
    # the search repeats, so `plans_worth` reads the same on a busy or an idle machine.
    empty = DictUsage(table)
    for w in workloads:
        if w.priority >= PREEMPTOR:
            for p in w.pods:
                empty.add(p.node, p.requests)
    plan_times = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan(ClusterSnapshot(table, empty), built.gang)
        plan_times.append((time.perf_counter() - start) * 1000)
    plan_ms = statistics.median(plan_times)
    held = sum(p.requests[GPU] for w in workloads for p in w.pods) / (8000 * nodes_n)
    return {
        "nodes": nodes_n,
        "median_ms": round(statistics.median(warm), 1),
        "p95_ms": round(warm[min(len(warm) - 1, round(0.95 * (len(warm) - 1)))], 1),
        "cold_ms": round(times[0], 1),
        "plan_ms": round(plan_ms, 1),
        "plans_worth": round(statistics.median(warm) / plan_ms, 1),
        "victim_pods": len(result.pods),
        "victim_gangs": len(result.victims),
        "elastic_pods": sum(len(v) for v in result.elastic.values()),
        "top_priority": result.cost.top_priority,
        "domain": str(result.domain),
        "plans": result.plans,
        "gangs": len(workloads),
        "held": round(held, 3),
        "budgets": len(budgets),
        "over_budget": _over(result, budgets),
    }


def _over(result: Preemption, budgets: list[Budget]) -> int:
    """Victim pods beyond what the budgets allow (counted here, whatever the search says)."""
    gone = set(result.pods)
    return sum(max(0, len(b.pods & gone) - b.allowed) for b in budgets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, help="run only this cluster size")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per case (default 10)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line per case")
    parser.add_argument("--protect", type=float, default=0.0, help="share of the gangs under a budget (default 0)")
    args = parser.parse_args()
    if not 0.0 <= args.protect <= 1.0:
        parser.error(f"--protect: expected a share between 0 and 1, got {args.protect}")
    for n in [args.nodes] if args.nodes else [5_000, 10_000]:
        row = run_case(n, args.repeat, args.protect)
        if args.json:
            sys.stdout.write(orjson.dumps(row).decode() + "\n")
        else:
            print(
                f"{n:>6} nodes: median {row['median_ms']} ms, p95 {row['p95_ms']} ms (cold {row['cold_ms']}; "
                f"one plan {row['plan_ms']} ms: the search is worth {row['plans_worth']} plans); "
                f"{row['victim_pods']} victim pods in {row['victim_gangs']} gangs + {row['elastic_pods']} elastic, "
                f"priority <= {row['top_priority']}, {row['domain']}, {row['plans']} engine calls "
                f"({row['gangs']} running gangs hold {row['held']:.0%})"
                + (
                    f"; {row['budgets']} budgets, {row['over_budget']} victim pods beyond them"
                    if row["budgets"]
                    else ""
                )
            )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
