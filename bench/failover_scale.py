"""Leader failover while a large gang binds, at scale, on the real control plane.

Starts the local control plane, NODES kwok GPU nodes (racks of 32, blocks of 4 racks, zones of 8
blocks: 1,024 nodes), optionally BACKGROUND bound pods (1 cpu each, spread over the nodes, so the caches hold
that many pods), two `topogang serve` replicas with leader election (the shipped Lease timings)
behind one address that reaches the leader (e2e/failover.py: what the Service does in a
cluster), and kube-scheduler from scheduler-config/extender.yaml calling that address. Then it
creates one gang of GANG pods of 8 GPUs (required in one zone) and, KILL seconds after the leader
planned the gang (while members reach the gate or Bindings are posted), loses the leader: kills
it (SIGKILL), or with --demote gives its Lease to the standby while it stays up (it must stop
writing and close kube-scheduler's connection, so that the calls reach the new leader). Reports:

  lease_free_after_loss_s     when the Lease was free for the standby, after the loss (a dead
                              leader's Lease expires; a demoted one's is given at once)
  led_after_free_s            the standby became the leader, after that
  served_after_free_s         the standby answered its first call for the gang (planned, refused
                              or bound it), after that: the target is 10 s
  whole                       every pod of the gang bound (no partial gang)
  bound_after_loss_s          the last pod bound, after the loss
  reservations_left           topogang_reservations of the new leader once all are bound
  old_leader_writes           with --demote: log lines of writes (binds, evictions, room held)
                              by the old leader after it lost the Lease: the target is 0

    python bench/failover_scale.py                              # 5,000 nodes, 1,024 pods
    python bench/failover_scale.py --nodes 1000 --gang 256 --demote --json

Needs the control-plane binaries (`make controlplane`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kwok_cluster import (
    LABEL,
    TOPOLOGY,
    Shape,
    add_plane_arguments,
    create_topology,
    make_nodes,
    running_plane,
    until_schedulable,
)
from e2e.controlplane import ControlPlane, FakeGpuNodes, api_client
from e2e.failover import Replicas, log_entries
from e2e.scenario import apply_crds, create, gpu_pod
from e2e.topogang import CRDS, scheduler_config
from extender import logs
from extender.kube.client import KubeClient

NS = "failover"
RAISED_QPS = {"qps": 1000, "burst": 2000}  # so kube-scheduler's own client does not limit it


async def background(kube: KubeClient, nodes: list[str], count: int) -> float:
    """COUNT pods bound round-robin to NODES (1 cpu, no GPU), created through the API; seconds."""
    started = time.perf_counter()
    await kube.post("/api/v1/namespaces", {"metadata": {"name": f"{NS}-bg"}})
    limit = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"bg-{i}"},
            "spec": {
                "nodeName": nodes[i % len(nodes)],
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            },
        }
        async with limit:
            await create(kube, body, f"{NS}-bg")

    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - started


def planned_at(path: Path, group: str) -> bool:
    return any(e.get("event") == "gang placed" and e.get("group") == group for e in log_entries(path))


async def run(plane: ControlPlane, kube: KubeClient, pair: Replicas, args: argparse.Namespace) -> dict[str, Any]:
    group = f"{NS}/big"
    config = scheduler_config(pair.url, pair.tls)
    config["clientConnection"] = dict(RAISED_QPS)
    await plane.start_scheduler_async(config)
    spec = {
        "minMember": args.gang,
        "topologyConstraints": {"global": {"requiredTopologyLevel": "zone"}},
    }
    body = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "big", "annotations": {"kai.scheduler/topology": TOPOLOGY}},
        "spec": spec,
    }
    await create(kube, body, NS)
    limit = asyncio.Semaphore(64)

    async def member(i: int) -> None:
        async with limit:
            await create(kube, gpu_pod(f"big-{i}", annotations={"pod-group-name": "big"}), NS)

    created = time.perf_counter()
    await asyncio.gather(*(member(i) for i in range(args.gang)))
    print(f"{args.gang} pods created in {time.perf_counter() - created:.1f} s", file=sys.stderr)
    leader = pair.replicas[await pair.leader()]
    deadline = time.monotonic() + args.timeout
    while not planned_at(leader.log_path, group):
        if time.monotonic() > deadline:
            raise TimeoutError("the leader never planned the gang")
        await asyncio.sleep(0.2)
    await asyncio.sleep(args.kill)
    bound_at_loss = await bound_count(kube)
    loss = await (pair.hand_over() if args.demote else pair.kill_leader())
    how = "demoted" if args.demote else "killed"
    print(f"{how} {loss.name} with {bound_at_loss}/{args.gang} bound", file=sys.stderr)
    while (bound := await bound_count(kube)) < args.gang:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(2)
    bound_after = time.time() - loss.at
    # The figures once the standby leads (a gang the old leader's Bindings finished gives it
    # nothing to serve: then only when it led is known).
    while (figures := pair.takeover(loss))["new_leader"] is None and time.monotonic() < deadline:  # noqa: ASYNC110 (its log)
        await asyncio.sleep(0.5)
    new = pair.replicas.get(figures.get("new_leader") or "")
    reservations = None
    if new is not None:
        _, text = await new.request("GET", "/metrics")
        for line in text.decode().splitlines():
            if line.startswith("topogang_reservations "):
                reservations = float(line.split()[1])
    return {
        **figures,
        "lost": how,
        "bound_at_loss": bound_at_loss,
        "whole": bound == args.gang,
        "bound": bound,
        "bound_after_loss_s": round(bound_after, 1),
        "reservations_left": reservations,
        **({"old_leader_writes": writes_after_loss(pair.replicas[loss.name].log_path)} if args.demote else {}),
    }


WRITES = ("bound", "evicted", "gang preempting", "gang repairing", "room held")


def writes_after_loss(path: Path) -> int:
    """Log lines of writes a replica made after it logged losing the Lease."""
    entries = log_entries(path)
    lost = next((i for i, e in enumerate(entries) if e.get("event") == "lost leadership"), len(entries))
    return sum(1 for e in entries[lost:] if e.get("event") in WRITES)


async def bound_count(kube: KubeClient) -> int:
    items, _ = await kube.list(f"/api/v1/namespaces/{NS}/pods", {"fieldSelector": "spec.nodeName!="})
    return len(items)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    load = os.getloadavg()
    with running_plane(args) as plane:
        async with api_client(plane.kubeconfig) as api, await KubeClient.connect(plane.kubeconfig) as kube:
            kube.timeout = 120
            await apply_crds(kube, CRDS)
            await create_topology(kube)
            t = time.perf_counter()
            shape = Shape(zone_blocks=args.zone_blocks)
            if shape.gpus("zone") < args.gang * 8:
                raise SystemExit(f"--gang {args.gang} does not fit in one zone of {shape.gpus('zone') // 8} nodes")
            nodes = FakeGpuNodes(api, name_prefix="fo", concurrency=32)
            made = await make_nodes(nodes, args.nodes, shape, timeout_s=args.nodes_timeout)
            usable = await until_schedulable(kube, len(made), timeout_s=args.nodes_timeout, share=0.97)
            print(f"{len(made)} nodes ({usable} usable) in {time.perf_counter() - t:.0f} s", file=sys.stderr)
            bg_seconds = await background(kube, made, args.background) if args.background else 0.0
            await kube.post("/api/v1/namespaces", {"metadata": {"name": NS}})
            started = time.perf_counter()
            async with Replicas.start(plane.kubeconfig, plane.logs_dir, lease=("default", "topogang")) as pair:
                await pair.synced()
                both_synced = time.perf_counter() - started
                result = await run(plane, kube, pair, args)
        return {
            "nodes": len(made),
            "usable_nodes": usable,
            "background_pods": args.background,
            "background_create_s": round(bg_seconds, 1),
            "gang": args.gang,
            "loss_after_plan_s": args.kill,
            "replicas_synced_s": round(both_synced, 1),
            "load_average_at_start": [round(x, 2) for x in load],
            "cores": os.cpu_count(),
            **result,
            "labels": sorted(LABEL.values()),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--gang", type=int, default=1_024, help="pods of 8 GPUs in the gang (default 1,024)")
    parser.add_argument("--zone-blocks", type=int, default=8, help="blocks of 4 racks of 32 nodes per zone (8)")
    parser.add_argument("--background", type=int, default=0, help="bound pods made before (default 0)")
    parser.add_argument("--kill", type=float, default=3.0, help="seconds after the plan to lose the leader")
    parser.add_argument("--demote", action="store_true", help="give the live leader's Lease away instead of killing it")
    parser.add_argument("--timeout", type=float, default=600, help="seconds the gang may take (default 600)")
    parser.add_argument("--json", action="store_true")
    add_plane_arguments(parser)
    args = parser.parse_args()
    logs.configure("info", "console")  # the bench's own client says its API trouble on stderr, not in the JSON
    result = asyncio.run(main_async(args))
    if args.json:
        print(orjson.dumps(result).decode())
    else:
        for key, value in result.items():
            print(f"{key:<28} {value}")


if __name__ == "__main__":
    main()
