"""Filter and prioritize latency through the real HTTP server on loopback.

The extender (the same aiohttp app `topogang serve` runs) is started in its own process over a
synthetic cluster of N nodes (racks of 16) with one planned gang; this process then calls it the
way kube-scheduler does, one pod at a time on a kept-alive connection, with the node names
kube-scheduler would send (all N, nodeCacheCapable).

    python bench/extender_latency.py                 # 5,000 candidate nodes
    python bench/extender_latency.py --nodes 1000 --json

Latency (p50, p99) is measured one call at a time on a kept-alive connection, as kube-scheduler's
scheduling cycle calls. Calls per second is the server's capacity under CLIENTS concurrent
connections (default 4): measured with wrk when it is installed (`apt-get install wrk`; a C load
generator leaves the CPU to the server), else with Python client processes, which share the
machine's cores with the server and so read low. With --json one object per line per verb:
{"verb", "nodes", "p50_ms", "p99_ms", "rps", "rps_by"}. A last row, filter-mtls, is the same
filter on a server that serves mTLS as in a cluster (one kept-alive connection, as
kube-scheduler's), measured in alternation with the plain-HTTP one, and the ratio of their p50s.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GANG = 8


def _serve(port: int, nodes: int, ready: Any, tls: tuple[str, str, str] | None = None) -> None:
    import asyncio

    from aiohttp import web

    from extender.core.cluster import ClusterState
    from extender.core.scheduler import GangScheduler
    from extender.model.node import HOSTNAME_LABEL, NodeInfo
    from extender.model.pod import parse_pod
    from extender.model.podgroup import parse_podgroup
    from extender.model.topology import parse_topology
    from extender.server.app import create_app
    from extender.server.extender import Extender
    from extender.server.tls import TlsFiles, server_context

    class NoActions:
        async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            pass

        async def wake(self, pods: Any, generation: int) -> None:
            pass

        async def nominate(self, pods: Any, generation: int) -> None:
            pass

        async def event(self, involved: Any, reason: str, message: str, type: str = "Normal") -> None:
            pass

    state = ClusterState()
    for i in range(nodes):
        rack = f"r{i // 16}"
        labels = {"example.com/topology-rack": rack, HOSTNAME_LABEL: f"node-{i}"}
        state.upsert_node(NodeInfo(f"node-{i}", labels, {"nvidia.com/gpu": 8000, "cpu": 96_000, "pods": 110_000}))
    state.set_topology(
        "dc",
        parse_topology({"metadata": {"name": "dc"}, "spec": {"levels": [{"nodeLabel": "example.com/topology-rack"}]}}),
    )
    pg = {
        "metadata": {"name": "g", "namespace": "bench"},
        "spec": {"minMember": GANG, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}},
    }
    state.set_podgroup("bench/g", parse_podgroup(pg))
    scheduler = GangScheduler(state)
    for i in range(GANG):
        body = {
            "metadata": {"name": f"g-{i}", "namespace": "bench", "annotations": {"pod-group-name": "g"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        }
        scheduler.observe_pod(parse_pod(body))
    scheduler.observe_pod(parse_pod({"metadata": {"name": "plain", "namespace": "bench"}, "spec": {"containers": []}}))
    app = create_app(Extender(scheduler, NoActions(), bind_timeout=5), lambda: True, "/topogang")

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        context = server_context(TlsFiles(*tls)) if tls is not None else None
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def _mtls_row(nodes: int, body: bytes, seconds: float, plain: http.client.HTTPConnection) -> dict[str, Any]:
    """Filter for a planned pod on a second server that serves mTLS (certificates made by
    e2e/controlplane/pki.py), on one kept-alive connection as kube-scheduler keeps it. Plain and
    mTLS calls alternate in short rounds, so both see the same machine; the ratio of their p50s
    is the cost of TLS per call."""
    from e2e.controlplane.pki import ClientIdentity, make_pki

    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp), {"kube-scheduler": ClientIdentity("kube-scheduler")}, days=1)
        client = pki.clients["kube-scheduler"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ready = multiprocessing.Event()
        files = (str(pki.serving.cert), str(pki.serving.key), str(pki.ca.cert))
        server = multiprocessing.Process(target=_serve, args=(port, nodes, ready, files), daemon=True)
        server.start()
        try:
            if not ready.wait(120):
                raise SystemExit("the mTLS extender did not start")
            context = ssl.create_default_context(cafile=str(pki.ca.cert))
            context.load_cert_chain(str(client.cert), str(client.key))
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=context)
            _measure(conn, "/topogang/filter", body, 0)  # plans the gang on this server
            tls_times: list[float] = []
            plain_times: list[float] = []
            for _ in range(max(1, round(seconds / 0.5))):
                plain_times += _measure(plain, "/topogang/filter", body, 0.25)
                tls_times += _measure(conn, "/topogang/filter", body, 0.25)
        finally:
            server.terminate()
            server.join(5)
    tls_times.sort()
    p50, plain_p50 = statistics.median(tls_times), statistics.median(plain_times)
    return {
        "verb": "filter-mtls",
        "nodes": nodes,
        "p50_ms": round(p50, 3),
        "p99_ms": round(tls_times[min(len(tls_times) - 1, int(0.99 * len(tls_times)))], 3),
        "plain_p50_ms": round(plain_p50, 3),
        "vs_plain_p50": round(p50 / plain_p50, 2),
        "calls": len(tls_times),
    }


def _measure(conn: http.client.HTTPConnection, path: str, body: bytes, seconds: float) -> list[float]:
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 50:
        start = time.perf_counter()
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        times.append((time.perf_counter() - start) * 1000)
        if resp.status != 200:
            raise RuntimeError(f"{path}: HTTP {resp.status}: {data[:200]!r}")
    return times


def _load(port: int, path: str, body: bytes, seconds: float, start: Any, counts: Any, slot: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    start.wait()
    counts[slot] = len(_measure(conn, path, body, seconds))


def _wrk(port: int, path: str, body: bytes, seconds: float, clients: int) -> float | None:
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "body.json").write_bytes(body)
        script = Path(tmp, "post.lua")
        script.write_text(
            f'local f = io.open("{tmp}/body.json", "rb"); wrk.method = "POST"; wrk.body = f:read("*all"); '
            'f:close(); wrk.headers["Content-Type"] = "application/json"\n'
        )
        out = subprocess.run(
            [
                wrk,
                "-t1",
                f"-c{clients}",
                f"-d{max(1, round(seconds))}s",
                "-s",
                str(script),
                f"http://127.0.0.1:{port}{path}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    match = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    if match is None or "Non-2xx" in out:
        raise RuntimeError(f"wrk: unexpected output:\n{out}")
    return float(match.group(1))


def _throughput(port: int, path: str, body: bytes, seconds: float, clients: int) -> float:
    start = multiprocessing.Event()
    counts = multiprocessing.Array("l", clients)
    procs = [
        multiprocessing.Process(target=_load, args=(port, path, body, seconds, start, counts, i))
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let every client connect first
    began = time.perf_counter()
    start.set()
    for p in procs:
        p.join()
    return sum(counts) / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5_000, help="candidate node names per call (default 5,000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per verb (default 5)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections for calls/s (default 4)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line per verb")
    args = parser.parse_args()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, args.nodes, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(120):
            raise SystemExit("the extender did not start")
        names = [f"node-{i}" for i in range(args.nodes)]

        def request(pod: str) -> bytes:
            meta = {"name": pod, "namespace": "bench"}
            return orjson.dumps({"Pod": {"metadata": meta, "spec": {}}, "Nodes": None, "NodeNames": names})

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        planned = request("g-0")
        conn.request("POST", "/topogang/filter", planned)  # the first call plans the gang
        first = orjson.loads(conn.getresponse().read())
        assert len(first["NodeNames"]) == 1, first
        rows = []
        for verb, body in (("filter", planned), ("prioritize", planned), ("filter-plain-pod", request("plain"))):
            path = "/topogang/" + verb.split("-")[0]
            times = sorted(_measure(conn, path, body, args.seconds))
            rps = _wrk(port, path, body, args.seconds, args.clients)
            rps_by = "wrk"
            if rps is None:
                rps, rps_by = _throughput(port, path, body, args.seconds, args.clients), "python"
            rows.append(
                {
                    "verb": verb,
                    "nodes": args.nodes,
                    "p50_ms": round(statistics.median(times), 3),
                    "p99_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))], 3),
                    "rps": round(rps, 1),
                    "rps_by": rps_by,
                    "calls": len(times),
                }
            )
        mtls = _mtls_row(args.nodes, planned, args.seconds, conn)
        for row in rows:
            if args.json:
                print(orjson.dumps(row).decode())
            else:
                print(
                    f"{row['verb']:<17} nodes {row['nodes']:>6}  p50 {row['p50_ms']:>7.3f} ms  "
                    f"p99 {row['p99_ms']:>7.3f} ms  {row['rps']:>8.1f} calls/s ({row['rps_by']})"
                )
        if args.json:
            print(orjson.dumps(mtls).decode())
        else:
            print(
                f"{mtls['verb']:<17} nodes {mtls['nodes']:>6}  p50 {mtls['p50_ms']:>7.3f} ms  "
                f"p99 {mtls['p99_ms']:>7.3f} ms  {mtls['vs_plain_p50']:.2f}x plain HTTP's p50 "
                f"({mtls['plain_p50_ms']:.3f} ms, measured in alternation)"
            )
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
