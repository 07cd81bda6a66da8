"""Two `topogang serve` replicas behind one address, for failover tests and bench/failover_scale.py.

    async with Replicas.start(kubeconfig, logs, lease=("default", "topogang")) as pair:
        config = scheduler_config(pair.url, pair.tls)        # kube-scheduler calls pair.url
        leader = await pair.leader()                        # the replica that answers /readyz 200
        lost = await pair.kill_leader()                     # SIGKILL; the Lease's expiry noted
        lost = await pair.hand_over()                       # or: the Lease given to the other, the leader alive
        figures = pair.takeover(lost)                       # when the other one led and served

`LeaderService` stands for the Kubernetes Service in front of the Deployment (which selects the
pod carrying the leader label): a TCP forwarder that sends each new connection to the replica
whose /readyz answers 200 (a synced leader), and refuses the connection while there is none.
kube-scheduler keeps one connection open (HTTP/2), so it reconnects, and is routed anew, only
when the replica it talked to went away, as through a Service.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import signal
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from e2e.topogang import ExtenderPki, Topogang, _free_port
from extender.kube.client import KubeClient

SERVE = ("gang placed", "gang pending", "bound")  # log events that show a replica served a call
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"


class LeaderService:
    """127.0.0.1:<port> -> whichever replica is the leader now, per connection."""

    def __init__(self, replicas: dict[str, Topogang]) -> None:
        self.replicas = replicas
        self.port = _free_port()
        self.routed: dict[str, int] = {}
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def leader(self) -> str | None:
        for name, replica in self.replicas.items():
            if replica.process.returncode is None:
                with contextlib.suppress(Exception):
                    if (await replica.request("GET", "/readyz"))[0] == 200:
                        return name
        return None

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        name = await self.leader()
        if name is None:
            writer.close()
            return
        self.routed[name] = self.routed.get(name, 0) + 1
        port = int(self.replicas[name].base.rsplit(":", 1)[1])
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


@dataclass
class Loss:
    """A leader lost (killed, or its Lease taken while it lives): who, when (wall clock), and
    when the Lease is free for the others (its expiry after a kill; at once after a hand-over)."""

    name: str
    at: float
    lease_free_at: float


class Replicas:
    def __init__(self, kube: KubeClient, replicas: dict[str, Topogang], service: LeaderService, lease: tuple[str, str]):
        self.kube = kube
        self.replicas = replicas
        self.service = service
        self.lease = lease
        first = next(iter(replicas.values()))
        self.url = f"https://127.0.0.1:{service.port}/topogang"
        self.tls: ExtenderPki | None = first.tls

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        kubeconfig: Path,
        log_dir: Path,
        *,
        lease: tuple[str, str],
        args: Sequence[str] = (),
        names: Sequence[str] = ("replica-a", "replica-b"),
        ready_within: float = 600.0,
    ) -> AsyncIterator[Replicas]:
        """NAMES replicas with leader election on LEASE (namespace, name), the shipped timings
        unless ARGS say otherwise; returns once one of them leads."""
        elect = ["--leader-elect=true", f"--lease-namespace={lease[0]}", f"--lease-name={lease[1]}", *args]
        async with contextlib.AsyncExitStack() as stack:
            kube = await stack.enter_async_context(await KubeClient.connect(kubeconfig))
            replicas: dict[str, Topogang] = {}
            for name in names:
                replicas[name] = await stack.enter_async_context(
                    Topogang.start(
                        kubeconfig,
                        log_dir,
                        args=elect,
                        wait="healthy",
                        ready_within=ready_within,
                    )
                )
            service = LeaderService(replicas)
            await service.start()
            stack.push_async_callback(service.close)
            pair = cls(kube, replicas, service, lease)
            await pair.leader(within=ready_within)
            yield pair

    async def leader(self, within: float = 60.0) -> str:
        deadline = time.monotonic() + within
        while (name := await self.service.leader()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no replica led within {within:.0f}s")
            await asyncio.sleep(0.2)
        return name

    async def synced(self, within: float = 600.0) -> None:
        """Until every replica's cache has synced (/synced 200): the standby's too."""
        deadline = time.monotonic() + within
        for replica in self.replicas.values():
            while (await replica.request("GET", "/synced"))[0] != 200:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"a replica had not synced after {within:.0f}s")
                await asyncio.sleep(0.2)

    async def kill_leader(self) -> Loss:
        """SIGKILL the leader (it neither releases its Lease nor answers again)."""
        name = await self.leader()
        process = self.replicas[name].process
        process.send_signal(signal.SIGKILL)
        killed_at = time.time()
        await process.wait()
        spec = (await self.kube.get(self._lease_path()))["spec"]
        renewed = _parse_time(str(spec["renewTime"]))
        return Loss(name, killed_at, renewed + float(spec["leaseDurationSeconds"]))

    async def hand_over(self) -> Loss:
        """Take the Lease from the live leader and give it to another replica, as a second
        holder would (a conditional write of the Lease): the leader stays up and learns it at
        its next renewal; the other finds itself the holder at its next retry."""
        name = await self.leader()
        other = next(n for n in self.replicas if n != name)
        identity = next(
            str(e["identity"]) for e in log_entries(self.replicas[other].log_path) if e.get("event") == "serving"
        )
        lease = await self.kube.get(self._lease_path())
        now = datetime.datetime.now(datetime.UTC)
        lease["spec"] = {
            **lease["spec"],
            "holderIdentity": identity,
            "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "leaseTransitions": int(lease["spec"].get("leaseTransitions") or 0) + 1,
        }
        await self.kube.put(self._lease_path(), lease)  # carries the resourceVersion: conditional
        return Loss(name, now.timestamp(), now.timestamp())

    def _lease_path(self) -> str:
        return LEASE_PATH.format(ns=self.lease[0], name=self.lease[1])

    def takeover(self, loss: Loss) -> dict[str, Any]:
        """From the new leader's log: when it became the leader and first served a call
        (planned, refused or bound a gang), in seconds after the Lease was free."""
        others = [(n, r) for n, r in self.replicas.items() if n != loss.name]
        for name, replica in others:
            led = served = None
            for entry in log_entries(replica.log_path):
                at = _parse_time(str(entry.get("timestamp", "")))
                if at < loss.at:
                    continue
                if led is None and entry.get("event") == "became the leader":
                    led = at
                elif led is not None and entry.get("event") in SERVE:
                    served = at
                    break
            if led is not None:
                return {
                    "new_leader": name,
                    "lease_free_after_loss_s": round(loss.lease_free_at - loss.at, 2),
                    "led_after_free_s": round(led - loss.lease_free_at, 2),
                    "served_after_free_s": round(served - loss.lease_free_at, 2) if served else None,
                }
        return {"new_leader": None}


def log_entries(path: Path) -> list[dict[str, Any]]:
    out = []
    for raw in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            entry = orjson.loads(raw)
            if isinstance(entry, dict):
                out.append(entry)
    return out


def _parse_time(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
