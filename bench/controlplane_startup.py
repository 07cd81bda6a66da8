"""Warm start-up time of the local control plane (binaries already built by
e2e/controlplane/build.sh): start every component until healthy, make 8 fake GPU nodes and run a
pod asking for 8 GPUs, then stop everything.

    .venv/bin/python bench/controlplane_startup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from e2e.controlplane import (
    ControlPlane,
    FakeGpuNodes,
    FakeTopology,
    api_client,
    create_namespace,
    create_pod,
    gpu_pod,
    wait_pod_running,
)


async def first_pod(kubeconfig: Path) -> None:
    async with api_client(kubeconfig) as api:
        await FakeGpuNodes(api).create(FakeTopology(nodes_per_rack=8))
        namespace = await create_namespace(api)
        await create_pod(api, namespace, gpu_pod("bench", 8))
        await wait_pod_running(api, namespace, "bench")


def one_run() -> dict[str, float]:
    t0 = time.monotonic()
    plane = ControlPlane()
    try:
        plane.start()
        t_up = time.monotonic()
        asyncio.run(first_pod(plane.kubeconfig))
        t_pod = time.monotonic()
    finally:
        t_stop = time.monotonic()
        plane.stop()
    t_end = time.monotonic()
    return {
        "start (all healthy)": t_up - t0,
        "8 nodes + 1 pod Running": t_pod - t_up,
        "stop": t_end - t_stop,
        **{f"  {name}": s for name, s in plane.startup_seconds.items() if name != "total"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    print(f"local control plane, {args.runs} warm runs (seconds): median [min, max]")
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"  {key:<32} {statistics.median(values):6.2f}  [{min(values):.2f}, {max(values):.2f}]")


if __name__ == "__main__":
    main()
