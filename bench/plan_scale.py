"""Planning time of whole gangs on synthetic GPU clusters.

Clusters of N nodes with 8 GPUs each, in zones > blocks > racks of 8 to 16 nodes (2,500 nodes
a zone, 8 racks a block), a quarter of the nodes partly used by other work. Gangs of P pods of
8 GPUs in segments of 8 pods: each segment in one rack, the whole gang in one zone.

    python bench/plan_scale.py                       # 9 cases: 1,000/5,000/10,000 nodes x 64/256/1,024 pods
    python bench/plan_scale.py --nodes 10000 --pods 1024 --json
    python bench/plan_scale.py --nodes 10000 --pods 1024 --dra

--dra plans the same gang twice through ClusterState, alternating, the server's view: once with GPUs as an
extended resource (nvidia.com/gpu in allocatable; the used quarter as bound pods), once with
GPUs from Dynamic Resource Allocation (one ResourceSlice of 8 devices per node, as GPU drivers
publish them; the used quarter as allocated ResourceClaims; each pod's 8 devices a claim from a
template), and prints both and their ratio. `setup_ms` is the first snapshot after the slices
came (counting devices per node) and the pods' demand.

Each case prints the median and p95 of `build_gang + plan` over repeated runs on a node table
that is already built (as in the server, where it lives as long as the node set); `cold_ms` is
the first run, which also builds the topology tree and the eligibility cache. A gang that
cannot fit (1,024 pods of 8 GPUs on 1,000 nodes) measures how fast "pending" is concluded.
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

from extender.model.node import HOSTNAME_LABEL, NodeInfo
from extender.model.pod import parse_pod
from extender.model.podgroup import parse_podgroup
from extender.model.topology import parse_topology
from extender.placement import ClusterSnapshot, DictUsage, NodeTable, Plan, build_gang, plan

GPU = "nvidia.com/gpu"
LEVELS = ("example.com/topology-zone", "example.com/topology-block", "example.com/topology-rack")
TOPOLOGY = parse_topology({"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": lv} for lv in LEVELS]}})


def cluster(n: int, seed: int = 7) -> tuple[list[NodeInfo], dict[str, dict[str, int]]]:
    """N GPU nodes and what is used on a quarter of them."""
    used: dict[str, dict[str, int]] = {}
    return nodes_of(n, seed, used), used


def nodes_of(n: int, seed: int, used: dict[str, dict[str, int]] | None = None) -> list[NodeInfo]:
    """N GPU nodes in racks of 8-16, 8 racks a block, 2,500 nodes a zone (the one synthetic
    cluster of the benchmarks). With USED, a quarter of the nodes get some of their room used
    there (the same seed gives the same racks either way)."""
    rng = random.Random(seed)
    nodes: list[NodeInfo] = []
    block, rack = 0, 0
    while len(nodes) < n:
        size = min(rng.randint(8, 16), n - len(nodes))
        rack += 1
        if rack % 8 == 1:
            block += 1
        zone = 1 + len(nodes) // 2500
        for i in range(size):
            name = f"gpu-z{zone}-b{block}-r{rack}-{i}"
            labels = {LEVELS[0]: f"z{zone}", LEVELS[1]: f"b{block}", LEVELS[2]: f"r{rack}", HOSTNAME_LABEL: name}
            alloc = {GPU: 8000, "cpu": 96_000, "memory": 1_024 * 2**30 * 1000, "pods": 110_000}
            nodes.append(NodeInfo(name, labels, alloc))
            if used is not None and rng.random() < 0.25:
                used[name] = {GPU: rng.randint(1, 8) * 1000, "cpu": 8000, "pods": 1000}
    return nodes


def gang_objects(pods: int) -> tuple[object, list[object]]:
    segments = pods // 8
    pg = parse_podgroup(
        {
            "metadata": {"name": "train", "namespace": "bench"},
            "spec": {
                "subGroups": [
                    {"name": "worker", "minSubGroup": segments},
                    *({"name": f"worker-{s}", "parent": "worker", "minMember": 8} for s in range(segments)),
                ],
                "topologyConstraints": {
                    "global": {"requiredTopologyLevel": "zone"},
                    "subGroups": {f"worker-{s}": {"requiredTopologyLevel": "rack"} for s in range(segments)},
                },
            },
        }
    )
    members = [
        parse_pod(
            {
                "metadata": {
                    "name": f"train-worker-{i}",
                    "namespace": "bench",
                    "labels": {"kai.scheduler/subgroup-name": f"worker-{i // 8}"},
                },
                "spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: "8", "cpu": "8"}}}]},
            }
        )
        for i in range(pods)
    ]
    return pg, members


def run_case(nodes_n: int, pods_n: int, repeat: int) -> dict[str, object]:
    nodes, used = cluster(nodes_n)
    table = NodeTable(nodes)
    usage = DictUsage(table, used)
    pg, members = gang_objects(pods_n)
    times = []
    result = None
    for _ in range(repeat + 1):
        start = time.perf_counter()
        built = build_gang(pg, members, {"dc": TOPOLOGY})  # type: ignore[arg-type]
        assert built.gang is not None, built.errors
        result = plan(ClusterSnapshot(table, usage), built.gang)
        times.append((time.perf_counter() - start) * 1000)
    placed = isinstance(result, Plan)
    if placed:
        assert len(result.assignments) == pods_n  # type: ignore[union-attr]
    cold, warm = times[0], sorted(times[1:])
    p95 = warm[min(len(warm) - 1, round(0.95 * (len(warm) - 1)))]
    return {
        "nodes": nodes_n,
        "pods": pods_n,
        "median_ms": round(statistics.median(warm), 2),
        "p95_ms": round(p95, 2),
        "cold_ms": round(cold, 2),
        "runs": len(warm),
        "outcome": "placed" if placed else "pending",
        "attempts": result.attempts,  # type: ignore[union-attr]
    }


def dra_state(nodes_n: int, pods_n: int, dra: bool) -> tuple[object, list[object], object]:
    """(ClusterState, members, PodGroup) of the same cluster and gang, GPUs through DRA or not."""
    from extender.core.cluster import ClusterState
    from extender.core.dra.objects import apply_dra

    nodes, used = cluster(nodes_n)
    state = ClusterState()
    state.set_topology("dc", TOPOLOGY)
    driver = "gpu.example.com"
    if dra:
        cls = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
        apply_dra(state, "resource.k8s.io/v1", "DeviceClass", {"metadata": {"name": driver}, "spec": cls})
        template = {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": driver, "count": 8}}]}}
        body = {"metadata": {"name": "gpus", "namespace": "bench"}, "spec": {"spec": template}}
        apply_dra(state, "resource.k8s.io/v1", "ResourceClaimTemplate", body)
    for n in nodes:
        alloc = dict(n.allocatable)
        if dra:
            del alloc[GPU]
            devices = [{"name": f"gpu-{i}"} for i in range(8)]
            spec = {"driver": driver, "nodeName": n.name, "pool": {"name": n.name, "generation": 1}, "devices": devices}
            apply_dra(state, "resource.k8s.io/v1", "ResourceSlice", {"metadata": {"name": n.name}, "spec": spec})
        state.upsert_node(NodeInfo(n.name, n.labels, alloc))
    for i, (name, taken) in enumerate(sorted(used.items())):
        gpus = taken[GPU] // 1000
        requests = {"cpu": "8"} if dra else {"cpu": "8", GPU: str(gpus)}
        running = {"containers": [{"name": "c", "resources": {"requests": requests}}], "nodeName": name}
        state.upsert_pod(parse_pod({"metadata": {"name": f"used-{i}", "namespace": "bench"}, "spec": running}))
        if dra:
            results = [{"request": "g", "driver": driver, "pool": name, "device": f"gpu-{d}"} for d in range(gpus)]
            claim = {
                "metadata": {"name": f"used-{i}", "namespace": "bench"},
                "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": driver}}]}},
                "status": {"allocation": {"devices": {"results": results}}},
            }
            apply_dra(state, "resource.k8s.io/v1", "ResourceClaim", claim)
    pg, members = gang_objects(pods_n)
    if dra:
        members = [_with_claims(m) for m in members]
    return state, members, pg


def _with_claims(member: object) -> object:
    from dataclasses import replace

    from extender.model.dra.claims import PodClaim

    requests = {k: v for k, v in member.requests.items() if k != GPU}  # type: ignore[attr-defined]
    return replace(member, requests=requests, claims=(PodClaim("gpus", template_name="gpus"),))  # type: ignore[type-var]


def dra_compare(nodes_n: int, pods_n: int, repeat: int) -> list[dict[str, object]]:
    """The same gang planned with GPUs as an extended resource and from claims, runs alternating
    (so a busy machine slows both alike)."""
    cases = []
    for dra in (False, True):
        state, members, pg = dra_state(nodes_n, pods_n, dra)
        start = time.perf_counter()
        for m in members:
            state.upsert_pod(m)  # type: ignore[attr-defined]
        pods = [state.pods[m.key] for m in members]  # type: ignore[attr-defined]
        state.snapshot().free("devices/gpu.example.com" if dra else GPU)  # type: ignore[attr-defined]
        cases.append((dra, state, pods, pg, (time.perf_counter() - start) * 1000))
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeat + 1):
        for dra, state, pods, pg, _setup in cases:
            start = time.perf_counter()
            built = build_gang(pg, pods, {"dc": TOPOLOGY})  # type: ignore[arg-type]
            assert built.gang is not None, built.errors
            result = plan(state.snapshot(), built.gang)  # type: ignore[attr-defined]
            times[dra].append((time.perf_counter() - start) * 1000)
            assert isinstance(result, Plan), result
    rows = []
    for dra, _state, _pods, _pg, setup in cases:
        warm = sorted(times[dra][1:])
        rows.append(
            {
                "gpus": "dra" if dra else "extended resource",
                "nodes": nodes_n,
                "pods": pods_n,
                "median_ms": round(statistics.median(warm), 2),
                "p95_ms": round(warm[min(len(warm) - 1, round(0.95 * (len(warm) - 1)))], 2),
                "cold_ms": round(times[dra][0], 2),
                "setup_ms": round(setup, 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, help="run only this cluster size")
    parser.add_argument("--pods", type=int, help="run only this gang size (a multiple of 8)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per case (default 20)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line per case")
    parser.add_argument("--dra", action="store_true", help="GPUs as an extended resource, then from DRA claims")
    args = parser.parse_args()
    if args.dra:
        rows = dra_compare(args.nodes or 10_000, args.pods or 1_024, args.repeat)
        for row in rows:
            print(orjson.dumps(row).decode() if args.json else row)
        print(f"DRA / extended resource, median: {rows[1]['median_ms'] / rows[0]['median_ms']:.2f}x")  # type: ignore[operator]
        return
    node_sizes = [args.nodes] if args.nodes else [1_000, 5_000, 10_000]
    pod_sizes = [args.pods] if args.pods else [64, 256, 1_024]
    if not args.json:
        print(f"{'nodes':>7} {'pods':>6} {'median ms':>10} {'p95 ms':>8} {'cold ms':>8}  outcome")
    for n in node_sizes:
        for p in pod_sizes:
            row = run_case(n, p, args.repeat)
            if args.json:
                sys.stdout.write(orjson.dumps(row).decode() + "\n")
            else:
                print(
                    f"{n:>7} {p:>6} {row['median_ms']:>10} {row['p95_ms']:>8} {row['cold_ms']:>8}"
                    f"  {row['outcome']} ({row['attempts']} domains tried)"
                )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
