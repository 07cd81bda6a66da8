"""topogang in the e2e tests: `topogang serve` as its own process, kube-scheduler pointed at it.

    async with Topogang.start(kubeconfig) as server:        # http://127.0.0.1:<free port>/topogang
        await plane.restart_scheduler_async(scheduler_config(server.url))

`scheduler_config` is scheduler-config/extender.yaml as shipped, with urlPrefix set to the test's
server. The server's log (JSON lines) is kept in a file whose tail is shown when a test fails.

    async with Topogang.start(kubeconfig, logs, args=["--leader-elect=true", ...],
                              env={"POD_NAME": "a"}, wait="healthy") as a:   # a follower is never ready
        status, body = await a.request("GET", "/readyz")
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = ROOT / "scheduler-config" / "extender.yaml"
CRDS = [
    *sorted((ROOT / "manifests" / "crds").glob("*.yaml")),
    ROOT / "e2e" / "crds" / "workloads.yaml",
    ROOT / "e2e" / "crds" / "queues-flavors.yaml",
]


def scheduler_config(url: str) -> dict[str, Any]:
    """The shipped KubeSchedulerConfiguration, calling topogang at URL."""
    doc = yaml.safe_load(SHIPPED_CONFIG.read_text())
    assert isinstance(doc, dict)
    doc["extenders"][0]["urlPrefix"] = url
    return doc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Topogang:
    def __init__(self, process: asyncio.subprocess.Process, url: str, log_path: Path) -> None:
        self.process = process
        self.url = url  # the extender's urlPrefix
        self.base = url.rsplit("/topogang", 1)[0]  # http://127.0.0.1:<port>
        self.log_path = log_path

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """(status, body) of one HTTP call to the server; PATH is from the root ("/readyz")."""

        def call() -> tuple[int, bytes]:
            req = urllib.request.Request(self.base + path, data=body, method=method)
            req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
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
    ) -> AsyncIterator[Topogang]:
        """WAIT: "ready" (/readyz 200: synced, and the leader) or "healthy" (/healthz 200)."""
        port = _free_port()
        log_path = log_dir / f"topogang-{port}.log"
        log = log_path.open("wb")
        environ = {**os.environ, "TOPOGANG_LOG_FORMAT": "json", "TOPOGANG_LOG_LEVEL": "info", **(env or {})}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "extender.cli", "serve",
            "--kubeconfig", str(kubeconfig),
            "--listen", f"127.0.0.1:{port}",
            "--url-prefix", "/topogang",
            "--bind-timeout", str(bind_timeout),
            *args,
            stdout=log, stderr=asyncio.subprocess.STDOUT, env=environ, cwd=ROOT,
        )  # fmt: skip
        server = cls(process, f"http://127.0.0.1:{port}/topogang", log_path)
        try:
            await server._wait_ready(port, ready_within, "/readyz" if wait == "ready" else "/healthz")
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

    async def _wait_ready(self, port: int, seconds: float, path: str = "/readyz") -> None:
        deadline = time.monotonic() + seconds
        url = f"http://127.0.0.1:{port}{path}"
        while True:
            if self.process.returncode is not None:
                raise RuntimeError(f"topogang serve exited with {self.process.returncode}:\n{self.tail()}")
            try:
                status = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=2).status)
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"topogang serve not ready after {seconds:.0f}s:\n{self.tail()}")
            await asyncio.sleep(0.2)
