"""topogang in the e2e tests: `topogang serve` as its own process, kube-scheduler pointed at it.

    async with Topogang.start(kubeconfig, logs) as server:  # https://127.0.0.1:<free port>/topogang
        await plane.restart_scheduler_async(scheduler_config(server.url, server.tls))

The server serves mTLS as in a cluster: `extender_pki` makes (once per directory, with
e2e/controlplane/pki.py) a CA, a serving certificate for 127.0.0.1 and a client certificate for
kube-scheduler. `scheduler_config` is scheduler-config/extender.yaml as shipped, with urlPrefix
and the tlsConfig files set to the test's server and certificates. `tls=False` runs it with
--insecure-http instead. The server's log (JSON lines) is kept in a file whose tail is shown
when a test fails.

    async with Topogang.start(kubeconfig, logs, args=["--leader-elect=true", ...],
                              env={"POD_NAME": "a"}, wait="healthy") as a:   # a follower is never ready
        status, body = await a.request("GET", "/readyz")
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane import ControlPlane
from e2e.controlplane.pki import ClientIdentity, make_pki
from e2e.scenario import install
from extender.kube.client import KubeClient

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = ROOT / "scheduler-config" / "extender.yaml"
CRDS = [
    *sorted((ROOT / "manifests" / "base" / "crds").glob("*.yaml")),
    ROOT / "e2e" / "crds" / "workloads.yaml",
    ROOT / "e2e" / "crds" / "grove.yaml",
    ROOT / "e2e" / "crds" / "queues-flavors.yaml",
]


@dataclass(frozen=True)
class ExtenderPki:
    """The files of topogang's mTLS: its CA, its serving pair, kube-scheduler's client pair."""

    ca: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path

    def serve_args(self) -> list[str]:
        return [f"--tls-cert={self.serving_cert}", f"--tls-key={self.serving_key}", f"--client-ca={self.ca}"]

    def client_context(self) -> ssl.SSLContext:
        """What kube-scheduler does: trust the CA, present the client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


_PKIS: dict[Path, ExtenderPki] = {}


def extender_pki(directory: Path) -> ExtenderPki:
    """A CA, a serving certificate for 127.0.0.1 and localhost, a client certificate (CN
    kube-scheduler), made once under DIRECTORY."""
    directory = directory.resolve()
    if directory not in _PKIS:
        pki = make_pki(directory, {"kube-scheduler": ClientIdentity("kube-scheduler")}, days=2)
        client = pki.clients["kube-scheduler"]
        _PKIS[directory] = ExtenderPki(pki.ca.cert, pki.serving.cert, pki.serving.key, client.cert, client.key)
    return _PKIS[directory]


def scheduler_config(url: str, tls: ExtenderPki | None = None, root: Path = ROOT) -> dict[str, Any]:
    """The shipped KubeSchedulerConfiguration (of the checkout at ROOT), calling topogang at URL
    with the client certificate of TLS (without TLS: plain HTTP, tlsConfig and enableHTTPS
    removed)."""
    doc = yaml.safe_load((root / SHIPPED_CONFIG.relative_to(ROOT)).read_text())
    assert isinstance(doc, dict)
    extender = doc["extenders"][0]
    extender["urlPrefix"] = url
    if tls is None:
        extender.pop("tlsConfig", None)
        extender["enableHTTPS"] = False
    else:
        extender["tlsConfig"].update(
            {"certFile": str(tls.client_cert), "keyFile": str(tls.client_key), "caFile": str(tls.ca)}
        )
    return doc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Topogang:
    def __init__(self, process: asyncio.subprocess.Process, url: str, log_path: Path, tls: ExtenderPki | None) -> None:
        self.process = process
        self.url = url  # the extender's urlPrefix
        self.base = url.rsplit("/topogang", 1)[0]  # https://127.0.0.1:<port>
        self.log_path = log_path
        self.tls = tls  # None: plain HTTP (--insecure-http)
        self._context = tls.client_context() if tls is not None else None

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """(status, body) of one HTTP call to the server; PATH is from the root ("/readyz")."""

        def call() -> tuple[int, bytes]:
            req = urllib.request.Request(self.base + path, data=body, method=method)
            req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=10, context=self._context) as resp:
                    return int(resp.status), bytes(resp.read())
            except urllib.error.HTTPError as exc:
                return int(exc.code), bytes(exc.read())

        return await asyncio.to_thread(call)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        kubeconfig: Path,
        log_dir: Path,
        *,
        bind_timeout: float = 25.0,
        ready_within: float = 60.0,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        wait: str = "ready",
        tls: bool = True,
        port: int = 0,
        root: Path = ROOT,
    ) -> AsyncIterator[Topogang]:
        """WAIT: "ready" (/readyz 200: synced, and the leader) or "healthy" (/healthz 200).
        TLS: mTLS with extender_pki(LOG_DIR / "extender-pki"), else --insecure-http. PORT: 0 for
        a free one; a process restarted in place passes the one it had. ROOT: the checkout whose
        `extender` runs (another branch, to compare side by side)."""
        port = port or _free_port()
        pki = extender_pki(log_dir / "extender-pki") if tls else None
        transport = pki.serve_args() if pki is not None else ["--insecure-http"]
        log_path = log_dir / f"topogang-{port}.log"
        log = log_path.open("wb")
        environ = {**os.environ, "TOPOGANG_LOG_FORMAT": "json", "TOPOGANG_LOG_LEVEL": "info", **(env or {})}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "extender.cli", "serve",
            "--kubeconfig", str(kubeconfig),
            "--listen", f"127.0.0.1:{port}",
            "--url-prefix", "/topogang",
            "--bind-timeout", str(bind_timeout),
            *transport,
            *args,
            stdout=log, stderr=asyncio.subprocess.STDOUT, env=environ, cwd=root,
        )  # fmt: skip
        scheme = "https" if pki is not None else "http"
        server = cls(process, f"{scheme}://127.0.0.1:{port}/topogang", log_path, pki)
        try:
            await server._wait_ready(ready_within, "/readyz" if wait == "ready" else "/healthz")
            yield server
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 10)
                except TimeoutError:
                    process.kill()
                    await process.wait()
            log.close()

    async def _wait_ready(self, seconds: float, path: str = "/readyz") -> None:
        deadline = time.monotonic() + seconds
        url = self.base + path
        while True:
            if self.process.returncode is not None:
                raise RuntimeError(f"topogang serve exited with {self.process.returncode}:\n{self.tail()}")
            try:
                status = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(url, timeout=2, context=self._context).status
                )
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"topogang serve not ready after {seconds:.0f}s:\n{self.tail()}")
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def serving(
    kubeconfig: Path, control_plane: ControlPlane, *objects: Mapping[str, Any], args: Sequence[str] = ()
) -> AsyncIterator[Topogang]:
    """topogang's CRDs and OBJECTS installed, topogang started (with ARGS), kube-scheduler
    configured to call it; kube-scheduler goes back to running alone on the way out."""
    async with await KubeClient.connect(kubeconfig) as kube:
        await install(kube, CRDS, *objects)
    async with Topogang.start(kubeconfig, control_plane.logs_dir, args=args) as server:
        await control_plane.restart_scheduler_async(scheduler_config(server.url, server.tls))
        try:
            yield server
        finally:
            await control_plane.restart_scheduler_async(None)
