"""mTLS for the extender port: kube-scheduler is the only client, and it proves it with a certificate.

`server_context` loads the serving certificate and key and the CA that signs the clients'
certificates, and requires a client certificate from that CA: a client without one, or with one
from another CA, is refused in the TLS handshake, before any HTTP is read. TLS 1.2 is the floor
(kube-scheduler's Go client offers 1.2 and 1.3).

The files are read once at start; a certificate renewed on disk (cert-manager rewrites the
Secret, the kubelet the mounted files) is picked up by the next restart of the pod.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path


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
    return context
