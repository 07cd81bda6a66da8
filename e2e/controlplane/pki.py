"""Certificates and keys for the local control plane, made with the openssl command line.

One throw-away CA signs kube-apiserver's serving certificate and a client certificate per
component; the API server trusts that CA for client certificates, so every component (and the
admin kubeconfig) authenticates with a certificate whose CN is its user name and whose O is its
group. Its keys are ECDSA P-256, which is quick to generate. The service-account signing key is
separate from the CA. `make_rotator_pki` makes the RSA pair a controller's own certificate
rotator expects (needs OpenSSL 3).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# kube-apiserver's own names, plus the first address of the service range (the `kubernetes`
# Service's ClusterIP), so the serving certificate is valid however a client reaches it.
SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


class PkiError(RuntimeError):
    """openssl failed or is missing."""


@dataclass(frozen=True)
class CertKey:
    """A PEM certificate and its PEM private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ClientIdentity:
    """A Kubernetes user: CN is the user name, O the groups."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pki:
    ca: CertKey
    serving: CertKey
    service_account_key: Path
    service_account_public_key: Path
    clients: dict[str, CertKey]


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise PkiError("the control plane needs the openssl command to make its certificates")
    proc = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise PkiError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _new_key(path: Path, *, rsa: bool = False) -> None:
    if rsa:  # PKCS#1 ("BEGIN RSA PRIVATE KEY"), the one form some Go rotators parse a CA key in
        _openssl("genrsa", "-traditional", "-out", str(path), "2048", cwd=path.parent)
    else:
        _openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path),
            cwd=path.parent,
        )  # fmt: skip
    path.chmod(0o600)


def _subject(user: str, groups: tuple[str, ...]) -> str:
    return "".join(f"/O={g}" for g in groups) + f"/CN={user}"


def _issue(
    directory: Path,
    name: str,
    *,
    subject: str,
    extensions: list[str],
    ca: CertKey | None,
    days: int,
    rsa: bool = False,
) -> CertKey:
    """Makes NAME.key and NAME.crt in DIRECTORY, signed by CA or self-signed when CA is None."""
    key = directory / f"{name}.key"
    cert = directory / f"{name}.crt"
    csr = directory / f"{name}.csr"
    ext = directory / f"{name}.ext"
    _new_key(key, rsa=rsa)
    ext.write_text("[ext]\n" + "\n".join(extensions) + "\n")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr), cwd=directory)
    signing = (
        ["-signkey", str(key)] if ca is None else ["-CA", str(ca.cert), "-CAkey", str(ca.key), "-set_serial", _serial()]
    )
    _openssl(
        "x509", "-req", "-in", str(csr), *signing, "-days", str(days), "-sha256",
        "-extfile", str(ext), "-extensions", "ext", "-out", str(cert),
        cwd=directory,
    )  # fmt: skip
    csr.unlink()
    ext.unlink()
    return CertKey(cert=cert, key=key)


def _serial() -> str:
    return "0x" + secrets.token_hex(16)


def make_pki(
    directory: Path,
    clients: dict[str, ClientIdentity],
    *,
    serving_ips: tuple[str, ...] = ("127.0.0.1",),
    days: int = 30,
) -> Pki:
    """Makes a CA, a serving certificate, one client certificate per entry of CLIENTS (keyed by
    a file name) and a service-account signing key, all under DIRECTORY."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _issue(
        directory,
        "ca",
        subject="/CN=topogang-local-ca",
        extensions=[
            "basicConstraints=critical,CA:TRUE",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "subjectKeyIdentifier=hash",
        ],
        ca=None,
        days=days,
    )
    alt_names = [f"DNS:{d}" for d in SERVING_DNS_NAMES] + [f"IP:{ip}" for ip in serving_ips]
    serving = _issue(
        directory,
        "apiserver",
        subject="/CN=kube-apiserver",
        extensions=[
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth",
            "subjectAltName=" + ",".join(alt_names),
            "authorityKeyIdentifier=keyid",
        ],
        ca=ca,
        days=days,
    )
    client_pairs = {
        name: _issue(
            directory,
            f"client-{name}",
            subject=_subject(identity.user, identity.groups),
            extensions=[
                "basicConstraints=critical,CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                "extendedKeyUsage=clientAuth",
                "authorityKeyIdentifier=keyid",
            ],
            ca=ca,
            days=days,
        )
        for name, identity in clients.items()
    }
    sa_key = directory / "service-account.key"
    sa_pub = directory / "service-account.pub"
    _new_key(sa_key)
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub), cwd=directory)
    return Pki(
        ca=ca,
        serving=serving,
        service_account_key=sa_key,
        service_account_public_key=sa_pub,
        clients=client_pairs,
    )


def make_rotator_pki(
    directory: Path, *, ca_name: str, dns_names: tuple[str, ...], days: int
) -> tuple[CertKey, CertKey]:
    """(CA, serving certificate) in the shape a controller's own certificate rotator (the
    cert-controller library) accepts as valid and keeps: an RSA CA whose key is PKCS#1 and
    whose certificate names CA_NAME, and a serving certificate for DNS_NAMES and 127.0.0.1.
    The rotator renews what expires within 90 days, so DAYS must be more than that."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _issue(
        directory,
        "ca",
        subject=f"/CN={ca_name}",
        extensions=[
            "basicConstraints=critical,CA:TRUE",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "subjectKeyIdentifier=hash",
            f"subjectAltName=DNS:{ca_name}",
        ],
        ca=None,
        days=days,
        rsa=True,
    )
    serving = _issue(
        directory,
        "serving",
        subject=f"/CN={dns_names[0]}",
        extensions=[
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth",
            "subjectAltName=" + ",".join([*(f"DNS:{d}" for d in dns_names), "IP:127.0.0.1"]),
            "authorityKeyIdentifier=keyid",
        ],
        ca=ca,
        days=days,
    )
    return ca, serving
