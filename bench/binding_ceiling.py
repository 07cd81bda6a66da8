"""How fast this API server takes one gang's Bindings: the floor under a gang's part-bound window.

A gang binds whole only when all its Bindings have landed; between the first and the last it is
part-bound. topogang posts a planned gang's Bindings itself, many at a time (kube/actions.py, 32
writes in flight), so the window is the API server's rate at taking them. This bench measures
that rate without any scheduler: on the local control plane with NODES kwok GPU nodes it creates
PODS unscheduled 1-GPU pods (kube-scheduler is not running), then posts their Bindings (8 to a
node, as a packed gang) through topogang's own write path (`KubeActions.bind`) with each
CONCURRENCY in turn, fresh pods each time, and reports per run:

  post_s          first Binding sent to the last answered (the client's view)
  part_bound_s    first pod seen bound to the last, by a pod watch (the part-bound window)
  bindings_per_s  PODS / post_s
  apiserver_cpu_s kube-apiserver's CPU seconds over the run

    python bench/binding_ceiling.py                              # 1,000 nodes, 1,024 pods
    python bench/binding_ceiling.py --concurrency 32,128 --reps 2 --json

Needs the control-plane binaries (`make controlplane`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kwok_cluster import (
    BindClock,
    Shape,
    add_plane_arguments,
    clean,
    cpu_seconds,
    make_nodes,
    namespace,
    running_plane,
    until_schedulable,
)
from e2e.controlplane import FakeGpuNodes, api_client
from e2e.scenario import gpu_pod
from extender.kube.actions import KubeActions
from extender.kube.client import KubeClient

PER_NODE = 8


async def create_pods(kube: KubeClient, ns: str, count: int) -> list[tuple[str, str]]:
    """COUNT unscheduled 1-GPU pods of NS: (name, uid)."""
    limit = asyncio.Semaphore(32)

    async def one(i: int) -> tuple[str, str]:
        async with limit:
            made = await kube.post(f"/api/v1/namespaces/{ns}/pods", gpu_pod(f"p-{i}", gpus=1))
            return str(made["metadata"]["name"]), str(made["metadata"]["uid"])

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def one_run(
    kube: KubeClient, apiserver_pid: int, nodes: list[str], count: int, concurrency: int, tag: str
) -> dict[str, Any]:
    ns = f"ceiling-{tag}"
    await namespace(kube, ns)
    pods = await create_pods(kube, ns, count)
    actions = KubeActions(kube, concurrency=concurrency)
    cpu_before = cpu_seconds(apiserver_pid)
    async with BindClock(kube, ns, count) as clock:
        clock.started()
        await asyncio.gather(*(actions.bind(ns, name, uid, nodes[i // PER_NODE]) for i, (name, uid) in enumerate(pods)))
        clock.created()  # here: the last Binding answered
        complete = await clock.all_bound(120)
    post_s = clock.last_create - clock.first_create
    row = {
        "concurrency": concurrency,
        "pods": count,
        "complete": complete,
        "post_s": round(post_s, 3),
        "part_bound_s": round(clock.last_bound - clock.first_bound, 3),
        "bindings_per_s": round(count / max(post_s, 1e-9), 1),
        "apiserver_cpu_s": round(cpu_seconds(apiserver_pid) - cpu_before, 2),
        "load_1m": round(os.getloadavg()[0], 2),
    }
    await clean(kube, ns)
    return row


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    with running_plane(args) as plane:
        async with api_client(plane.kubeconfig) as api, await KubeClient.connect(plane.kubeconfig) as kube:
            kube.timeout = 120
            made = await make_nodes(FakeGpuNodes(api, name_prefix="ceil", concurrency=32), args.nodes, Shape())
            await until_schedulable(kube, len(made), timeout_s=args.nodes_timeout, share=0.97)
            if len(made) * PER_NODE < args.pods:
                raise SystemExit(f"--pods {args.pods} do not fit on {len(made)} nodes of {PER_NODE} GPUs")
            pid = plane.components["kube-apiserver"].pid or 0
            rows = []
            for rep in range(args.reps):
                for c in (int(x) for x in args.concurrency.split(",")):
                    row = await one_run(kube, pid, made, args.pods, c, f"{c}-{rep}")
                    print(f"concurrency {c}: {row}", file=sys.stderr)
                    rows.append(row)
            return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--pods", type=int, default=1_024, help="Bindings per run (default 1,024)")
    parser.add_argument("--concurrency", default="32,64,128", help="Bindings in flight, comma-separated")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    add_plane_arguments(parser)
    args = parser.parse_args()
    rows = asyncio.run(main_async(args))
    for row in rows:
        print(orjson.dumps(row).decode() if args.json else row)


if __name__ == "__main__":
    main()
