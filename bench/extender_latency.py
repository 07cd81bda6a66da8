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

    python bench/extender_latency.py --compare /work/old-checkout   # this code vs that one

--compare DIR starts a second server from DIR's code (the same synthetic cluster, built by this
script) and measures both in alternation in one run, ROUNDS rounds of each: one-call latency on a
kept-alive connection and calls/s, a round of one then a round of the other, so machine noise
falls on both; it prints the medians and this/that ratios (> 1: this code is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import multiprocessing
import os
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

# The code under test: this checkout, or (the --compare server) the one named here.
CODE_ENV = "EXTENDER_LATENCY_CODE"
sys.path.insert(0, os.environ.get(CODE_ENV) or str(Path(__file__).resolve().parents[1]))

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

        async def event(
            self, involved: Any, reason: str, message: str, type: str = "Normal", related: Any = None
        ) -> None:
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


class _Printed:
    """The ready signal of a server in a child process of another checkout: a line on stdout."""

    def set(self) -> None:
        print("ready", flush=True)


def _start_other(code: Path, port: int, nodes: int) -> subprocess.Popen[str]:
    """This script's server on CODE's extender package (PYTHONPATH and CODE_ENV point there)."""
    env = {**os.environ, CODE_ENV: str(code), "PYTHONPATH": str(code)}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-port", str(port), "--nodes", str(nodes)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise SystemExit(f"the extender from {code} did not start")
    return proc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _compare(
    code: Path, server: int, port: int, names: list[str], nodes: int, seconds: float, clients: int, rounds: int
) -> list[dict[str, Any]]:
    """Filter (planned pod, and a plain pod) on this server (process SERVER) and on one running
    CODE's extender, alternated round by round: p50 of one-call latency, calls/s under wrk, and
    the server's CPU time per call (its threads' schedstat over the wrk round / wrk's count).
    On a shared machine calls/s swings with the other load; CPU per call much less, so the
    capacity it implies (1 / CPU per call, the server being one thread) is the figure to compare."""
    if shutil.which("wrk") is None:
        raise SystemExit("--compare needs wrk (apt-get install wrk)")
    other_port = _free_port()
    other = _start_other(code, other_port, nodes)
    rows = []
    try:
        for verb, pod in (("filter", "g-0"), ("filter-plain-pod", "plain")):
            body = _request(names, pod)
            servers = ((server, port), (other.pid, other_port))
            conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=30) for _, p in servers]
            for conn in conns:
                _measure(conn, "/topogang/filter", body, 0)  # plans the gang, warms up
            lat: list[list[float]] = [[], []]
            rps: list[list[float]] = [[], []]
            cpu: list[list[float]] = [[], []]
            for _ in range(rounds):
                for i, (pid, p) in enumerate(servers):
                    lat[i].append(statistics.median(_measure(conns[i], "/topogang/filter", body, seconds / 2)))
                    before = _cpu_seconds(pid)
                    found = _wrk_calls(p, "/topogang/filter", body, seconds, clients)
                    assert found is not None
                    cpu[i].append((_cpu_seconds(pid) - before) / found[1] * 1e6)
                    rps[i].append(found[0])
            med = [[statistics.median(x[i]) for i in (0, 1)] for x in (lat, rps, cpu)]
            (this_p50, that_p50), (this_rps, that_rps), (this_cpu, that_cpu) = med
            rows.append(
                {
                    "verb": f"{verb} vs {code}",
                    "nodes": nodes,
                    "rounds": rounds,
                    "p50_ms": round(this_p50, 3),
                    "other_p50_ms": round(that_p50, 3),
                    "rps": round(this_rps, 1),
                    "other_rps": round(that_rps, 1),
                    "cpu_us_per_call": round(this_cpu, 1),
                    "other_cpu_us_per_call": round(that_cpu, 1),
                    "capacity": round(1e6 / this_cpu),
                    "other_capacity": round(1e6 / that_cpu),
                    "capacity_ratio": round(that_cpu / this_cpu, 2),
                    "capacity_ratios": [round(b / a, 2) for a, b in zip(cpu[0], cpu[1], strict=True)],
                    "rps_ratio": round(this_rps / that_rps, 2),
                    "p50_ratio": round(that_p50 / this_p50, 2),
                }
            )
    finally:
        other.terminate()
        other.wait(5)
    return rows


def _request(names: list[str], pod: str) -> bytes:
    meta = {"name": pod, "namespace": "bench"}
    return orjson.dumps({"Pod": {"metadata": meta, "spec": {}}, "Nodes": None, "NodeNames": names})


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


def _cpu_seconds(pid: int) -> float:
    """CPU time of every thread of PID so far (schedstat: nanoseconds, not the 10 ms ticks of stat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def _wrk(port: int, path: str, body: bytes, seconds: float, clients: int) -> float | None:
    found = _wrk_calls(port, path, body, seconds, clients)
    return None if found is None else found[0]


def _wrk_calls(port: int, path: str, body: bytes, seconds: float, clients: int) -> tuple[float, int] | None:
    """wrk's calls/s and its count of calls; None without wrk."""
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
    count = re.search(r"([0-9]+) requests in", out)
    if match is None or count is None or "Non-2xx" in out:
        raise RuntimeError(f"wrk: unexpected output:\n{out}")
    return float(match.group(1)), int(count.group(1))


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
    parser.add_argument("--compare", type=Path, metavar="DIR", help="also measure DIR's code, alternating with this")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds with --compare (default 5)")
    parser.add_argument("--serve-port", type=int, help=argparse.SUPPRESS)  # the --compare server
    args = parser.parse_args()
    if args.serve_port is not None:
        _serve(args.serve_port, args.nodes, _Printed())
        return

    port = _free_port()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, args.nodes, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(120):
            raise SystemExit("the extender did not start")
        names = [f"node-{i}" for i in range(args.nodes)]
        if args.compare is not None:
            assert server.pid is not None
            for row in _compare(
                args.compare.resolve(), server.pid, port, names, args.nodes, args.seconds, args.clients, args.rounds
            ):
                if args.json:
                    print(orjson.dumps(row).decode())
                else:
                    print(
                        f"{row['verb']}, {row['rounds']} alternating rounds (this vs that, medians):\n"
                        f"  CPU per call {row['cpu_us_per_call']:.0f} vs {row['other_cpu_us_per_call']:.0f} us "
                        f"= capacity {row['capacity']} vs {row['other_capacity']} calls/s "
                        f"({row['capacity_ratio']:.2f}x; rounds {row['capacity_ratios']})\n"
                        f"  calls/s (wrk) {row['rps']:.0f} vs {row['other_rps']:.0f} ({row['rps_ratio']:.2f}x), "
                        f"p50 {row['p50_ms']:.3f} vs {row['other_p50_ms']:.3f} ms ({row['p50_ratio']:.2f}x)"
                    )
            return

        def request(pod: str) -> bytes:
            return _request(names, pod)

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
