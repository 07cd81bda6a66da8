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
import signal
import sys
from collections.abc import AsyncIterator, Mapping

import structlog
from aiohttp import web

from extender import logs
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.kube.actions import KubeActions
from extender.kube.cache import ClusterCache
from extender.kube.client import KubeClient
from extender.kube.leader_label import LeaderLabel
from extender.kube.lease import LeaderElector, LeaseConfig
from extender.kube.podgroups import PodGroupWriter
from extender.server import metrics as m
from extender.server.app import create_app
from extender.server.extender import Extender
from extender.server.gates import GatesMode
from extender.server.gates_settings import GatesSettings, gates_settings_from
from extender.server.settings import Settings, SettingsError, settings_from

log = structlog.get_logger("topogang")
EXPIRE_EVERY = 5.0  # seconds between sweeps for plans that stopped making progress


async def build(settings: Settings, gates: GatesSettings | None = None) -> tuple[web.Application, ClusterCache]:
    """The application, wired to the cluster; its cleanup context runs the cache and sweeps (and
    the webhook's listener with GATES: its mode and webhook)."""
    client = await KubeClient.connect(settings.kubeconfig)
    scheduler = GangScheduler(ClusterState(), plan_ttl=settings.plan_ttl)
    cache = ClusterCache(client, scheduler)
    actions = KubeActions(client)
    extender = Extender(scheduler, actions, bind_timeout=settings.bind_timeout)
    writer = PodGroupWriter(client, scheduler, actions)
    extender.changed = writer.touch
    label = LeaderLabel(client, settings.pod_namespace, settings.pod_name)
    webhook = GatesMode(gates, client, scheduler, extender, lambda: cache.ready) if gates and gates.webhook else None

    async def started() -> None:
        label.want(True)  # patched in the background: planning never waits for it
        writer.start()
        if webhook is not None:
            await webhook.lead()

    async def stopped() -> None:
        extender.demote()  # first, in the same step as `leading` turned false
        label.want(False)
        await writer.stop()
        if webhook is not None:
            await webhook.unlead()

    elector = None
    if settings.leader_elect:
        config = LeaseConfig(
            settings.lease_namespace,
            settings.lease_name,
            settings.identity,
            settings.lease_duration,
            settings.lease_renew_deadline,
            settings.lease_retry_period,
        )
        elector = LeaderElector(client, config, on_started=started, on_stopped=stopped)

    def leading() -> bool:
        return elector.leading if elector is not None else True

    app = create_app(extender, lambda: cache.ready, settings.prefix, leading=leading)
    m.watch(
        extender.metrics,
        reservations=lambda: len(scheduler.state.reservations),
        phases=writer.phase_counts,
        status_writes=lambda: {"ok": writer.writes["ok"], "failed": writer.writes["failed"]},
        cache_ready=lambda: float(cache.ready),
        relists=lambda: {name: informer.relists for name, informer in cache.informers.items()},
        leading=lambda: float(leading()),
        transitions=lambda: elector.transitions if elector is not None else 0,
    )

    async def lead() -> None:
        await cache.wait_ready()
        if elector is not None:
            await elector.run()
        else:
            await started()

    async def running(_: web.Application) -> AsyncIterator[None]:
        label.start()
        cache.start()
        if webhook is not None:
            await webhook.start()
        leader = asyncio.create_task(lead(), name="leader election")

        async def sweep() -> None:
            while True:
                await asyncio.sleep(EXPIRE_EVERY)
                extender.expire()

        sweeper = asyncio.create_task(sweep(), name="plan sweeper")
        try:
            yield
        finally:
            sweeper.cancel()
            leader.cancel()
            for task in (sweeper, leader):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
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
            await client.close()

    app.cleanup_ctx.append(running)
    return app, cache


async def serve(settings: Settings, started: asyncio.Event | None = None, gates: GatesSettings | None = None) -> None:
    """Serve until SIGINT or SIGTERM."""
    app, _ = await build(settings, gates)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    log.info(
        "serving",
        listen=f"{settings.host}:{settings.port}",
        prefix=settings.prefix,
        bind_timeout=settings.bind_timeout,
        leader_elect=settings.leader_elect,
        mode=gates.mode if gates else "extender",
        **(
            {"lease": f"{settings.lease_namespace}/{settings.lease_name}", "identity": settings.identity}
            if settings.leader_elect
            else {}
        ),
    )
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
        await runner.cleanup()


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        settings = settings_from(args, environ)
        gates = gates_settings_from(args, environ)
    except SettingsError as exc:
        print(f"topogang serve: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    asyncio.run(serve(settings, gates=gates))
    return 0
