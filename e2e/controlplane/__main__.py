"""`make cluster`: run the local control plane in the foreground until Ctrl-C.

python -m e2e.controlplane [--gpu-nodes 1x2x2x4] [--scheduler-config FILE] [--no-scheduler] [--no-crds]

Unless --no-crds: topogang's CRDs (manifests/crds/) and the Topology of the fake nodes'
labels (topology.yaml here), so a PodGroup can be created at once.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

import yaml

from .binaries import Binaries, BinariesNotBuilt
from .fakenodes import FakeGpuNodes, FakeTopology, GpuNodeShape
from .kube import api_client
from .plane import ControlPlane
from .process import ComponentError, sigterm_raises_keyboard_interrupt


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="make cluster",
        description="Run a local Kubernetes control plane (etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok) until Ctrl-C.",
    )
    p.add_argument(
        "--gpu-nodes",
        type=FakeTopology.parse,
        default=FakeTopology(zones=1, blocks_per_zone=2, racks_per_block=2, nodes_per_rack=4),
        metavar="ZxBxRxN",
        help="fake GPU nodes to create: zones x blocks per zone x racks per block x nodes per "
        "rack (default 1x2x2x4 = 16 nodes; 0x0x0x0 for none)",
    )
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument(
        "--scheduler-config",
        type=Path,
        help="a KubeSchedulerConfiguration for kube-scheduler (e.g. with an extenders: section); "
        "clientConnection.kubeconfig and leader election are set by the launcher",
    )
    p.add_argument("--no-scheduler", action="store_true", help="do not start kube-scheduler")
    p.add_argument(
        "--no-crds",
        action="store_true",
        help="do not install topogang's CRDs and the Topology of the fake nodes (e2e/controlplane/topology.yaml)",
    )
    p.add_argument("--workdir", type=Path, help="directory for certificates, data and logs")
    p.add_argument("--keep", action="store_true", help="keep the working directory at the end")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per component to start")
    return p.parse_args(argv)


CRDS = sorted((Path(__file__).resolve().parents[2] / "manifests" / "crds").glob("*.yaml"))
TOPOLOGY = Path(__file__).resolve().parent / "topology.yaml"


async def install_crds(kubeconfig: Path) -> str:
    """topogang's CRDs and the fake nodes' Topology; the Topology's name."""
    from e2e.scenario import apply_crds, create
    from extender.kube.client import ApiError, KubeClient

    topology = yaml.safe_load(TOPOLOGY.read_text())
    async with await KubeClient.connect(str(kubeconfig)) as kube:
        await apply_crds(kube, CRDS)
        try:
            await create(kube, topology)
        except ApiError as exc:
            if exc.status != 409:
                raise
    return str(topology["metadata"]["name"])


async def _create_nodes(kubeconfig: Path, topology: FakeTopology, gpus: int) -> list[str]:
    async with api_client(kubeconfig) as api:
        return await FakeGpuNodes(api, shape=GpuNodeShape(gpus=gpus)).create(topology)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        binaries = Binaries.locate()
    except BinariesNotBuilt as e:
        print(e, file=sys.stderr)
        return 2
    scheduler: bool | Path = False if args.no_scheduler else (args.scheduler_config or True)
    plane = ControlPlane(
        workdir=args.workdir,
        binaries=binaries,
        scheduler=scheduler,
        timeout=args.timeout,
        log=lambda msg: print(f"  {msg}", flush=True),
    )
    stamp = binaries.stamp()
    print(
        f"starting Kubernetes {stamp.get('kubernetes')} (etcd {stamp.get('etcd')}, "
        f"kwok {stamp.get('kwok')}) from {binaries.bin_dir}",
        flush=True,
    )
    failed = False
    with sigterm_raises_keyboard_interrupt():
        try:
            plane.start()
            if args.gpu_nodes.node_count:
                names = asyncio.run(_create_nodes(plane.kubeconfig, args.gpu_nodes, args.gpus_per_node))
                print(f"  {len(names)} fake GPU nodes Ready ({names[0]} ... {names[-1]})")
            if not args.no_crds:
                name = asyncio.run(install_crds(plane.kubeconfig))
                print(f"  topogang's CRDs installed; Topology {name} over the fake nodes' labels")
            kubectl = plane.kubectl
            print(
                f"\ncontrol plane is up in {plane.startup_seconds['total']:.1f}s; "
                f"API server {plane.server}\n"
                f"kubeconfig: {plane.kubeconfig}\n"
                f"logs:       {plane.logs_dir}\n\n"
                f"  {kubectl} --kubeconfig {plane.kubeconfig} get nodes -L "
                "topology.topogang.io/zone,topology.topogang.io/block,topology.topogang.io/rack\n"
                f"  export KUBECONFIG={plane.kubeconfig} PATH={kubectl.parent}:$PATH\n\n"
                "Ctrl-C stops it.",
                flush=True,
            )
            while True:
                time.sleep(1)
                plane.check()
        except KeyboardInterrupt:
            print("\nstopping the control plane ...", flush=True)
        except ComponentError as e:
            failed = True
            print(f"\ncontrol plane failed: {e}", file=sys.stderr, flush=True)
        except Exception as e:
            failed = True
            print(f"\ncontrol plane failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        finally:
            # A second Ctrl-C must not cut the shutdown short.
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                plane.stop(keep_workdir=args.keep or failed or None)
            finally:
                signal.signal(signal.SIGINT, previous)
    if failed:
        print(f"logs kept in {plane.logs_dir}", file=sys.stderr)
        return 1
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
