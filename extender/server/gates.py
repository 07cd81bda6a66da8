"""The admission webhook's HTTPS listener and, in gates mode, the ungater, wired into `serve`.

    gates = GatesMode(settings, client, scheduler, extender, ready)
    await gates.start()     # the HTTPS listener (its own port); a self-signed CA made here
    await gates.lead()      # leader: sets the webhook configuration's caBundle, starts ungating
    await gates.unlead()    # lost the Lease: stops ungating (plans were dropped by the Extender)
    await gates.close()

With cert-manager the certificate files are re-read when they change (cert-manager renews them
in the mounted Secret), so a renewal needs no restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path

import structlog
from aiohttp import web

from extender.core.scheduler import GangScheduler
from extender.kube.certs import ServingCert, patch_ca_bundle, self_signed, write_pair
from extender.kube.client import ApiError, KubeClient
from extender.kube.ungate import Ungater
from extender.server.extender import Extender
from extender.server.gates_settings import GatesSettings
from extender.server.webhook import GATES, Webhook, create_webhook_app

log = structlog.get_logger("topogang")
RELOAD_EVERY = 30.0  # seconds between checks of cert-manager's files


class GatesMode:
    def __init__(
        self,
        settings: GatesSettings,
        client: KubeClient,
        scheduler: GangScheduler,
        extender: Extender,
        ready: Callable[[], bool],
    ) -> None:
        self.settings = settings
        self.client = client
        self.webhook = Webhook(scheduler, settings.mode, ready, observe=extender.metrics.observe_webhook)
        self.ungater = Ungater(client, scheduler, decided=extender.decided) if settings.mode == GATES else None
        self.cert: ServingCert | None = None
        self._runner: web.AppRunner | None = None
        self._reload: asyncio.Task[None] | None = None
        self._bundle: asyncio.Task[None] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def _context(self) -> tuple[ssl.SSLContext, Path, Path]:
        s = self.settings
        if s.cert_file is not None and s.key_file is not None:
            cert, key = Path(s.cert_file), Path(s.key_file)
        else:
            self.cert = self_signed(s.hosts)
            self._dir = tempfile.TemporaryDirectory(prefix="topogang-webhook-")
            cert, key = write_pair(self.cert, Path(self._dir.name))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        return context, cert, key

    async def start(self) -> None:
        s = self.settings
        context, cert, key = self._context()
        self._runner = web.AppRunner(create_webhook_app(self.webhook), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, s.webhook_host, s.webhook_port, ssl_context=context).start()
        if not s.self_signed:
            self._reload = asyncio.get_running_loop().create_task(self._reloader(context, cert, key))
        log.info(
            "webhook serving",
            listen=f"{s.webhook_host}:{s.webhook_port}",
            mode=s.mode,
            certificate="self-signed" if s.self_signed else str(cert),
            **({"hosts": list(s.hosts), "config": s.webhook_config} if s.self_signed else {}),
        )

    async def _reloader(self, context: ssl.SSLContext, cert: Path, key: Path) -> None:
        def stamp() -> tuple[float, float]:
            return cert.stat().st_mtime, key.stat().st_mtime

        seen = stamp()
        while True:
            await asyncio.sleep(RELOAD_EVERY)
            try:
                now = stamp()
                if now != seen:
                    context.load_cert_chain(cert, key)  # new handshakes use the renewed pair
                    seen = now
                    log.info("webhook certificate reloaded", certificate=str(cert))
            except (OSError, ssl.SSLError) as exc:
                log.warning("webhook certificate not reloaded", certificate=str(cert), error=str(exc))

    async def lead(self) -> None:
        if self.cert is not None:
            self._bundle = asyncio.get_running_loop().create_task(self._set_bundle(self.cert.ca_pem))
        if self.ungater is not None:
            self.ungater.start()

    async def _set_bundle(self, ca_pem: bytes) -> None:
        """Until it works: the API server's calls fail meanwhile (failurePolicy applies)."""
        name, delay = self.settings.webhook_config, 1.0
        while True:
            try:
                count = await patch_ca_bundle(self.client, name, ca_pem)
                log.info("webhook caBundle set", config=name, webhooks=count)
                return
            except (ApiError, OSError) as exc:
                log.warning("webhook caBundle not set", config=name, error=str(exc), retry_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def unlead(self) -> None:
        for task in (self._bundle,):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._bundle = None
        if self.ungater is not None:
            await self.ungater.stop()

    async def close(self) -> None:
        await self.unlead()
        if self._reload is not None:
            self._reload.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload
        if self._runner is not None:
            await self._runner.cleanup()
        if self._dir is not None:
            self._dir.cleanup()
