"""The webhook's serving certificate when cert-manager does not provide one.

`self_signed(hosts)` makes a CA and a serving certificate signed by it (ECDSA P-256) for the
given DNS names and IP addresses, in memory; `write_pair` puts the serving pair in files for
`ssl.SSLContext.load_cert_chain`; `patch_ca_bundle` sets the CA as `caBundle` of every webhook of
the one MutatingWebhookConfiguration topogang is allowed to patch (rbac: get and patch on that
name only). Each process makes a new CA at start: nothing is stored, so no Secret is read or
written. With leader election the Service sends the API server's calls to the leader, so the
leader patches the bundle when it takes over.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extender.kube.client import KubeClient

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
CA_DAYS = 3650
SERVING_DAYS = 365


@dataclass(frozen=True)
class ServingCert:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _sans(hosts: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def self_signed(hosts: Sequence[str], now: datetime.datetime | None = None) -> ServingCert:
    """A fresh CA and a serving certificate for HOSTS (DNS names or IP addresses) signed by it."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    now = now or datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(minutes=5)  # clocks of the API server and this pod may differ
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("topogang-webhook-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),  # certSign, crlSign
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + datetime.timedelta(days=SERVING_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_sans(hosts)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCert(
        ca.public_bytes(serialization.Encoding.PEM),
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def write_pair(cert: ServingCert, directory: Path) -> tuple[Path, Path]:
    """The serving certificate and key as files (the key readable by this user only)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.cert_pem)
    key_path.touch(mode=0o600)
    key_path.write_bytes(cert.key_pem)
    return cert_path, key_path


async def patch_ca_bundle(client: KubeClient, name: str, ca_pem: bytes) -> int:
    """Set CA_PEM as caBundle of every webhook of MutatingWebhookConfiguration NAME; returns how
    many webhooks it has. Webhooks are a list merged by name, so a strategic merge patch names
    each one and changes only its caBundle."""
    config = await client.get(f"{WEBHOOKS}/{name}")
    names = [str(w.get("name")) for w in config.get("webhooks") or []]
    bundle = base64.b64encode(ca_pem).decode()
    patch = {"webhooks": [{"name": n, "clientConfig": {"caBundle": bundle}} for n in names]}
    if names:
        await client.patch(f"{WEBHOOKS}/{name}", patch, strategic=True)
    return len(names)
