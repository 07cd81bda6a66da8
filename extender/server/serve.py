"""`topogang serve`: the running server, wired to the cluster (settings in settings.py)."""

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
from extender.server.app import create_app
from extender.server.extender import Extender
from extender.server.settings import Settings, SettingsError, settings_from

log = structlog.get_logger("topogang")
EXPIRE_EVERY = 5.0  # seconds between sweeps for plans that stopped making progress


async def build(settings: Settings) -> tuple[web.Application, ClusterCache]:
    """The application, wired to the cluster; its cleanup context runs the cache and sweeps."""
    client = await KubeClient.connect(settings.kubeconfig)
    scheduler = GangScheduler(ClusterState(), plan_ttl=settings.plan_ttl)
    cache = ClusterCache(client, scheduler)
    extender = Extender(scheduler, KubeActions(client), bind_timeout=settings.bind_timeout)
    app = create_app(extender, lambda: cache.ready, settings.prefix)

    async def running(_: web.Application) -> AsyncIterator[None]:
        cache.start()

        async def sweep() -> None:
            while True:
                await asyncio.sleep(EXPIRE_EVERY)
                extender.expire()

        sweeper = asyncio.create_task(sweep(), name="plan sweeper")
        try:
            yield
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await extender.close()
            await cache.stop()
            await client.close()

    app.cleanup_ctx.append(running)
    return app, cache


async def serve(settings: Settings, started: asyncio.Event | None = None) -> None:
    """Serve until SIGINT or SIGTERM."""
    app, _ = await build(settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    log.info(
        "serving", listen=f"{settings.host}:{settings.port}", prefix=settings.prefix, bind_timeout=settings.bind_timeout
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
    except SettingsError as exc:
        print(f"topogang serve: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    asyncio.run(serve(settings))
    return 0
