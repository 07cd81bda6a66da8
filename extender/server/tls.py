"""mTLS for the extender port: kube-scheduler is the only client, and it proves it with a certificate.

`server_context` loads the serving certificate and key and the CA that signs the clients'
certificates, and requires a client certificate from that CA: a client without one, or with one
from another CA, is refused in the TLS handshake, before any HTTP is read. TLS 1.2 is the floor
(kube-scheduler's Go client offers 1.2 and 1.3).

The files are read at start and again whenever one of them changes (`reload_on_change`, every
30 s): cert-manager renews the Secret, the kubelet swaps the mounted files, and new connections
get the new certificate without a restart. Files that changed but cannot be loaded are logged
and the old ones kept.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger("topogang")
RELOAD_EVERY = 30.0  # seconds between looks at the files' modification times


class TlsError(ValueError):
    """A certificate, key or CA file that cannot be used; names the flag."""


@dataclass(frozen=True)
class TlsFiles:
    cert: str  # PEM serving certificate (chain), --tls-cert
    key: str  # PEM private key of that certificate, --tls-key
    client_ca: str  # PEM CA bundle that signs the clients' certificates, --client-ca


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """An SSLContext that serves FILES.cert and requires a client certificate from FILES.client_ca."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    _load(context, files)
    return context


def _load(context: ssl.SSLContext, files: TlsFiles) -> None:
    for flag, path in (("--tls-cert", files.cert), ("--tls-key", files.key)):
        if not Path(path).is_file():
            raise TlsError(f"{flag}: no such file: {path}")
    try:
        context.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(
            f"--tls-cert/--tls-key: cannot load {files.cert} with {files.key} "
            f"(expected a PEM certificate and its PEM private key): {exc}"
        ) from None
    try:
        context.load_verify_locations(cafile=files.client_ca)
    except FileNotFoundError:
        raise TlsError(f"--client-ca: no such file: {files.client_ca}") from None
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"--client-ca: cannot load {files.client_ca} (expected PEM CA certificates): {exc}") from None
    if not context.get_ca_certs():
        raise TlsError(f"--client-ca: {files.client_ca} holds no CA certificate")


def _stamp(files: TlsFiles) -> tuple[int, ...]:
    try:
        return tuple(os.stat(path).st_mtime_ns for path in (files.cert, files.key, files.client_ca))
    except OSError:
        return ()  # mid-swap: look again next time


async def reload_on_change(context: ssl.SSLContext, files: TlsFiles, every: float = RELOAD_EVERY) -> None:
    """Load FILES into CONTEXT again whenever they change; runs until cancelled."""
    seen = _stamp(files)
    while True:
        await asyncio.sleep(every)
        now = _stamp(files)
        if not now or now == seen:
            continue
        try:
            _load(context, files)
        except TlsError as exc:
            log.error("TLS files changed but cannot be loaded; serving with the previous ones", error=str(exc))
        else:
            log.info("TLS files reloaded", cert=files.cert, client_ca=files.client_ca)
        seen = now
