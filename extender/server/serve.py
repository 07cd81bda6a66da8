"""`topogang serve`: the running server, wired to the cluster (settings in settings.py).

Start-up: the cluster cache lists and watches everything; once it has synced, the replica
campaigns for the Lease (or, without leader election, leads at once). The leader plans, binds
and keeps PodGroups current (PodGroupWriter); losing the Lease drops every plan at once
(Extender.demote) and stops the writer, and the replica campaigns again with a warm cache.
The leader labels its own pod (LeaderLabel), which is how the Service finds it; the label goes
when leadership does, and on shutdown before the Lease is released.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

import structlog
from aiohttp import web

from extender import logs
from extender.core.cluster import ClusterState
from extender.core.moves import MoveSettings
from extender.core.reservations import Settings as ReservationSettings
from extender.core.scheduler import GangScheduler
from extender.kube.actions import KubeActions
from extender.kube.cache import ClusterCache
from extender.kube.client import ClusterConfigError, KubeClient
from extender.kube.leader_label import LeaderLabel
from extender.kube.lease import LeaderElector, LeaseConfig
from extender.kube.moved import read_back
from extender.kube.podgroups import PodGroupWriter
from extender.server import metrics as m
from extender.server.app import LEADING, METRICS, ROUTES, create_app, create_health_app
from extender.server.extender import Extender
from extender.server.gates import GatesMode
from extender.server.gates_settings import GatesSettings, gates_settings_from
from extender.server.http2 import Clients, serve_tls
from extender.server.settings import Settings, settings_from
from extender.server.settings_error import SettingsError
from extender.server.tasks import periodically
from extender.server.tls import TlsError, reload_on_change, server_context

log = structlog.get_logger("topogang")
SET_CLUSTER = "set --kubeconfig (or TOPOGANG_KUBECONFIG, KUBECONFIG) to a kubeconfig, or run topogang in a pod"
STOP_DUMP_AFTER = 15.0  # seconds after SIGTERM before a still-running server dumps its threads' stacks
EXPIRE_EVERY = 5.0  # seconds between sweeps for plans that stopped making progress


async def build(
    settings: Settings, gates: GatesSettings | None = None, clients: Clients | None = None
) -> tuple[web.Application, ClusterCache]:
    """The application, wired to the cluster; its cleanup context runs the cache and sweeps (and
    the webhook's listener with GATES: its mode and webhook). CLIENTS: the extender port's
    connections, closed when this replica stops leading."""
    client = await KubeClient.connect(settings.kubeconfig)
    scheduler = _scheduler(settings)
    cache = ClusterCache(client, scheduler)
    elector: LeaderElector | None = None

    def leading() -> bool:
        return elector.leading if elector is not None else True

    # Every write of the leader is fenced: not sent once the Lease may have moved. The Lease and
    # the leader label keep the unfenced client: a follower removes its own label.
    fenced = client.fenced(lambda: elector.may_write() if elector is not None else True)
    actions = KubeActions(fenced)
    extender = _extender(settings, scheduler, actions, leading)
    writer = PodGroupWriter(fenced, scheduler, actions)
    extender.report.changed = writer.touch
    label = LeaderLabel(client, settings.pod_namespace, settings.pod_name)
    webhook = GatesMode(gates, fenced, scheduler, extender, lambda: cache.ready) if gates and gates.webhook else None

    term = _Term(extender, writer, label, webhook, clients, client)
    elector = _elector(client, settings, term.started, term.stopped)

    app = create_app(extender, lambda: cache.ready, settings.prefix, leading=leading, max_body=settings.max_body)
    _watch(extender, scheduler, writer, cache, client, elector, leading)

    async def lead() -> None:
        await cache.wait_ready()
        if elector is not None:
            await elector.run()
        else:
            await term.started()

    async def running(_: web.Application) -> AsyncIterator[None]:
        label.start()
        cache.start()
        if webhook is not None:
            await webhook.start()
        leader = asyncio.create_task(lead(), name="leader election")

        sweeper = asyncio.create_task(periodically(EXPIRE_EVERY, extender.expire, "sweep"), name="plan sweeper")
        try:
            yield
        finally:
            sweeper.cancel()
            leader.cancel()
            for task in (sweeper, leader):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await term.stop_reading()
            # The label first: once the Lease is free the follower takes over at its next
            # retry and labels its own pod; two labelled pods would split kube-scheduler's calls.
            await label.close()
            if elector is not None:
                await elector.release()
            await writer.stop()
            if webhook is not None:
                await webhook.close()
            await extender.close()
            await cache.stop()
            await fenced.close()
            await client.close()

    app.cleanup_ctx.append(running)
    return app, cache


@dataclass
class _Term:
    """What starts and stops with this replica's leadership."""

    extender: Extender
    writer: PodGroupWriter
    label: LeaderLabel
    webhook: GatesMode | None
    clients: Clients | None
    client: KubeClient  # (reads only)
    _reading: asyncio.Task[None] | None = None

    async def started(self) -> None:
        self.label.want(True)  # patched in the background: planning never waits for it
        self._reading = asyncio.create_task(
            read_back(self.client, self.extender.scheduler.defragmenting), name="moves read back"
        )
        self.writer.start()
        self.extender.recover()
        if self.webhook is not None:
            await self.webhook.lead()

    async def stopped(self) -> None:
        self.extender.demote()  # first, in the same step as `leading` turned false
        await self.stop_reading()
        if self.clients is not None and (told := self.clients.close()):
            log.info("connections closed", count=told, reason="no longer the leader: callers reconnect to the new one")
        self.label.want(False)
        await self.writer.stop()
        if self.webhook is not None:
            await self.webhook.unlead()

    async def stop_reading(self) -> None:
        """Cancel the read of past moves, if still under way (before the client closes: without
        leader election no term ends before shutdown)."""
        task, self._reading = self._reading, None
        if task is None:
            return
        task.cancel()
        await asyncio.wait([task])
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("moves not read back", error=repr(exc), exc_info=exc)


def _scheduler(settings: Settings) -> GangScheduler:
    scheduler = GangScheduler(
        ClusterState(),
        plan_ttl=settings.plan_ttl,
        preemption_timeout=settings.preemption_timeout,
        repair_timeout=settings.repair_timeout,
        nominate=settings.nominate,
        bind_ahead=settings.bind_ahead,
        reservations=ReservationSettings(
            limit=settings.reservations,
            reserve_after=settings.reserve_after,
            largest_first=settings.reserve_largest_first,
            max_wait=settings.max_wait,
            estimates=settings.estimate_gangs,
            estimates_per_pass=settings.estimates_per_pass,
        ),
        reserve_level=settings.reserve_level,
        moves=MoveSettings(
            enabled=settings.defragment,
            per_hour=settings.moves_per_hour,
            cooldown=settings.move_cooldown,
            controllers=settings.move_controllers,
            timeout=max(settings.preemption_timeout, MoveSettings().timeout),
        ),
    )
    scheduler.defragmenting.moves.known = False  # until this replica leads and reads them back
    return scheduler


def _extender(
    settings: Settings, scheduler: GangScheduler, actions: KubeActions, leading: Callable[[], bool]
) -> Extender:
    return Extender(
        scheduler,
        actions,
        bind_timeout=settings.bind_timeout,
        call_budget=settings.bind_call_budget,
        recovery_grace=settings.recovery_grace,
        leading=leading,
    )


def _elector(
    client: KubeClient,
    settings: Settings,
    started: Callable[[], Awaitable[None]],
    stopped: Callable[[], Awaitable[None]],
) -> LeaderElector | None:
    """The Lease campaign, or None without leader election (the replica leads at once)."""
    if not settings.leader_elect:
        return None
    config = LeaseConfig(
        settings.lease_namespace,
        settings.lease_name,
        settings.identity,
        settings.lease_duration,
        settings.lease_renew_deadline,
        settings.lease_retry_period,
    )
    return LeaderElector(client, config, on_started=started, on_stopped=stopped)


def _watch(
    extender: Extender,
    scheduler: GangScheduler,
    writer: PodGroupWriter,
    cache: ClusterCache,
    client: KubeClient,
    elector: LeaderElector | None,
    leading: Callable[[], bool],
) -> None:
    """The gauges read at each scrape."""
    m.watch(
        extender.metrics,
        reservations=scheduler.lookup.reservation_count,
        phases=writer.phase_counts,
        status_writes=lambda: {"ok": writer.writes["ok"], "failed": writer.writes["failed"]},
        cache_ready=lambda: float(cache.ready),
        relists=lambda: {name: informer.relists for name, informer in cache.informers.items()},
        trouble=lambda: {**client.trouble.counts, "relist": sum(i.relists for i in cache.informers.values())},
        leading=lambda: float(leading()),
        transitions=lambda: elector.transitions if elector is not None else 0,
        held=lambda: {group: room.start for group, room in scheduler.reserving.held() if room.start is not None},
        overdue=lambda: len(scheduler.reserving.waits.overdue),
        estimated=scheduler.reserving.estimated_starts,
    )


async def serve(
    settings: Settings,
    context: ssl.SSLContext | None = None,
    started: asyncio.Event | None = None,
    gates: GatesSettings | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM: mTLS with CONTEXT, plain HTTP without (--insecure-http);
    gates mode's webhook too with GATES."""
    clients = Clients()
    app, cache = await build(settings, gates, clients)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    listener = None
    if context is not None:  # mTLS: HTTP/2 or HTTP/1.1, as the client negotiates (http2.py)
        assert runner.server is not None
        listener = await serve_tls(settings.host, settings.port, context, runner.server, app[ROUTES], clients)
    else:
        clients.http1 = runner.server
        await web.TCPSite(runner, settings.host, settings.port).start()
    health = None
    if settings.health is not None:
        leading = app[LEADING]
        health = web.AppRunner(create_health_app(app[METRICS], lambda: cache.ready, leading=leading), access_log=None)
        await health.setup()
        await web.TCPSite(health, *settings.health).start()
    log.info(
        "serving",
        listen=f"{settings.host}:{settings.port}",
        transport="mtls" if context is not None else "insecure-http",
        **({"health_listen": "{}:{}".format(*settings.health)} if settings.health else {}),
        prefix=settings.prefix,
        bind_timeout=settings.bind_timeout,
        bind_call_budget=settings.bind_call_budget,
        leader_elect=settings.leader_elect,
        mode=gates.mode if gates else "extender",
        **(
            {"lease": f"{settings.lease_namespace}/{settings.lease_name}", "identity": settings.identity}
            if settings.leader_elect
            else {}
        ),
    )
    reloads = None
    if context is not None and settings.tls is not None:
        reloads = asyncio.create_task(reload_on_change(context, settings.tls), name="TLS reload")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if started is not None:
        started.set()
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        # A stop that hangs (a handler, a task or a thread that does not end) must say where: the
        # stacks of every thread go to stderr if the process is still here after this long.
        faulthandler.dump_traceback_later(STOP_DUMP_AFTER, exit=False)
        if reloads is not None:
            reloads.cancel()
        if health is not None:
            await health.cleanup()
        if listener is not None:
            listener.close()
        await runner.cleanup()


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        settings = settings_from(args, environ)
        gates = gates_settings_from(args, environ)
    except SettingsError as exc:
        print(f"topogang serve: {exc}", file=sys.stderr)
        return 2
    try:
        context = server_context(settings.tls) if settings.tls is not None else None
    except TlsError as exc:
        print(f"topogang serve: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    try:
        asyncio.run(serve(settings, context, gates=gates))
    except ClusterConfigError as exc:  # raised before anything is served or written
        print(f"topogang serve: {exc}; {SET_CLUSTER}", file=sys.stderr)
        return 2
    faulthandler.cancel_dump_traceback_later()
    return 0
