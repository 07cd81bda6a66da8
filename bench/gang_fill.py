"""The core's cost per member while a large gang is created pod by pod, then the planning call.

In-process, no server: a PodGroup of --pods 1-GPU pods required in one zone, on 2 zones x 8 blocks
x 4 racks x 32 nodes of 8 GPUs; each pod is observed and filtered as kube-scheduler would ask
about it just after its creation. Every member but the last is refused (the gang is short of
pods); the last one's call plans the gang (and, with --bind-ahead, binds it ahead).

    python bench/gang_fill.py                  # 4,096 pods
    python bench/gang_fill.py --pods 1024 --json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from tests.builders import TOPO, grid, pod, podgroup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=4096)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    state = ClusterState()
    nodes = grid(zones=2, blocks=8, racks=4, nodes=32)
    for n in nodes:
        state.upsert_node(n)
    names = [n.name for n in nodes]
    state.set_topology("default", TOPO)
    spec = {"minMember": args.pods, "topologyConstraints": {"global": {"requiredTopologyLevel": "zone"}}}
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    try:
        scheduler = GangScheduler(state, bind_ahead=True)
    except TypeError:  # a checkout from before binding ahead (for a before/after figure)
        scheduler = GangScheduler(state)
    refusals = []
    start = time.perf_counter()
    for i in range(args.pods):
        p = pod(f"g-{i}", gpus=1, group="g")
        scheduler.observe_pod(p)
        t = time.perf_counter()
        result = scheduler.filter(state.pods[p.key], names, float(i))
        took = time.perf_counter() - t
        if i < args.pods - 1:
            refusals.append(took)
    total = time.perf_counter() - start
    outcome = result.event.outcome if result.event else None
    row = {
        "pods": args.pods,
        "total_s": round(total, 3),
        "refusal_ms_median": round(1000 * statistics.median(refusals), 3) if refusals else None,
        "refusal_ms_last": round(1000 * refusals[-1], 3) if refusals else None,
        "planning_call_ms": round(1000 * took, 1),
        "outcome": outcome,
        "bound_ahead": len(getattr(result, "bind", ())),
    }
    print(orjson.dumps(row).decode() if args.json else "  ".join(f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
