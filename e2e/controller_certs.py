"""Where the controllers of e2e/controllers.py find their webhook certificates, with no root and
no path shared between runs.

- Kueue, with its own certificate management on: `kueue_certificates` makes the CA and serving
  certificate its rotator keeps, the Secret that holds them and the directory it serves from;
  `Conversion` points its CRDs' conversion at it by URL.
- The training operator, whose rotator looks for its certificate in a directory fixed in its
  code under /tmp: `with_private_tmp` runs it in a mount namespace where /tmp is a directory of
  this run (`unshare`, in a user namespace of its own: no root needed).
"""

from __future__ import annotations

import base64
import functools
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane.pki import make_rotator_pki

# The rotator renews a certificate that expires within 90 days: the harness's outlive that.
ROTATOR_DAYS = 365
# A shell in the new namespace: into the binary's directory ($1) first, so that the binary is
# found by its relative name even when it lies under the /tmp the bind then hides; the
# directory $0 on /tmp; then the command.
_BIND_TMP = 'cd "$1" && shift && mount --bind "$0" /tmp && exec "$@"'


@dataclass(frozen=True)
class RotatorCertificates:
    cert_dir: Path  # tls.crt and tls.key, the webhook server's certDir
    ca_bundle: str  # base64 PEM of the CA, for webhook configurations and CRD conversion
    secret: dict[str, Any]  # the Secret the rotator reads and keeps


def kueue_certificates(
    directory: Path, *, namespace: str, secret_name: str, ca_name: str, dns_name: str
) -> RotatorCertificates:
    """The certificates of Kueue's own certificate management, made here rather than by its
    rotator so that the serving certificate is also valid for 127.0.0.1 (the API server calls
    the webhooks by URL). Blocking (openssl)."""
    ca, serving = make_rotator_pki(directory / "pki", ca_name=ca_name, dns_names=(dns_name,), days=ROTATOR_DAYS)
    cert_dir = directory / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(serving.cert, cert_dir / "tls.crt")
    shutil.copy(serving.key, cert_dir / "tls.key")

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name, "namespace": namespace},
        "data": {
            "ca.crt": b64(ca.cert),
            "ca.key": b64(ca.key),
            "tls.crt": b64(serving.cert),
            "tls.key": b64(serving.key),
        },
    }
    return RotatorCertificates(cert_dir=cert_dir, ca_bundle=b64(ca.cert), secret=secret)


@dataclass(frozen=True)
class Conversion:
    """The CRDs whose conversion calls a controller's webhook at URL, trusting CA_BUNDLE."""

    crds: tuple[str, ...]
    url: str
    ca_bundle: str

    def apply(self, crd: dict[str, Any]) -> dict[str, Any]:
        """CRD with its conversion done by the webhook, as its install's patch does by Service."""
        if crd["metadata"]["name"] not in self.crds:
            return crd
        webhook = {"clientConfig": {"url": self.url, "caBundle": self.ca_bundle}, "conversionReviewVersions": ["v1"]}
        return {**crd, "spec": {**crd["spec"], "conversion": {"strategy": "Webhook", "webhook": webhook}}}


NO_CONVERSION_PATCH = {"spec": {"conversion": {"strategy": "None", "webhook": None}}}


def with_private_tmp(directory: Path, binary: Path, args: list[str]) -> list[str]:
    """BINARY with ARGS run with DIRECTORY mounted on /tmp, in a mount namespace of its own (no
    path in ARGS may lie under /tmp). The process keeps its pid (unshare and sh exec), so
    stopping it stops the binary."""
    unshare = [_unshare(), "--user", "--map-root-user", "--mount", "--"]
    return [*unshare, "sh", "-c", _BIND_TMP, str(directory), str(binary.parent), f"./{binary.name}", *args]


@functools.cache
def _unshare() -> str:
    """util-linux's unshare, once checked to give this user a private /tmp; else a RuntimeError
    that says what the machine refuses."""
    found = shutil.which("unshare")
    if found is None:
        raise RuntimeError("the training operator needs util-linux's `unshare` for a private /tmp; it is not on PATH")
    with tempfile.TemporaryDirectory(prefix="topogang-unshare-check-") as probe:
        done = subprocess.run(
            [found, "--user", "--map-root-user", "--mount", "--", "sh", "-c", _BIND_TMP, probe, "/", "true"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(
            "the training operator looks for its certificate under a fixed /tmp path, so the tests give it a "
            "private /tmp in an unprivileged user and mount namespace, which this machine refuses "
            f"(`unshare --user --map-root-user --mount`: {done.stderr.strip()}). Allow unprivileged user "
            "namespaces (for instance sysctl kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu)."
        )
    return found
