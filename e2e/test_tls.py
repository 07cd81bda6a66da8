"""mTLS between kube-scheduler and `topogang serve`, as a cluster runs it.

`topogang serve` with --tls-cert, --tls-key and --client-ca (certificates from
e2e/controlplane/pki.py) is how every e2e server runs (e2e/topogang.py): the scenarios of
test_extender.py and test_operations.py run the real kube-scheduler from
scheduler-config/extender.yaml (tlsConfig pointed at its client certificate) over it and place
their gangs. Here: clients that are not kube-scheduler are refused in the TLS handshake (one
without a certificate, one with a certificate from another CA, plain HTTP), and none of their
requests reaches the app.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.controlplane import ControlPlane
from e2e.controlplane.pki import ClientIdentity, make_pki
from e2e.topogang import Topogang

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only, pytest.mark.asyncio(loop_scope="session")]

FILTER = b'{"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}, "NodeNames": []}'


def calls(metrics_text: str) -> float:
    """Extender calls the server has answered, every verb and code."""
    return sum(
        s.value
        for family in text_string_to_metric_families(metrics_text)
        for s in family.samples
        if s.name == "topogang_extender_request_duration_seconds_count"
    )


def attempt(url: str, context: ssl.SSLContext | None) -> str:
    """What a client gets: "HTTP <status>", or the error that ended the connection."""
    request = urllib.request.Request(url, data=FILTER, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            return f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return f"{type(reason).__name__}: {reason}"


def handshake(port: int, context: ssl.SSLContext) -> str:
    """A TLS handshake alone, no HTTP: "ok" or the error that ended it."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return "ok"
    except (ssl.SSLError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


async def test_only_a_client_certificate_from_topogangs_ca_is_served(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    async with Topogang.start(control_plane.kubeconfig, tmp_path) as server:
        assert server.tls is not None
        assert server.url.startswith("https://")
        filter_url = server.url + "/filter"
        ours = server.tls.client_context()
        assert await asyncio.to_thread(attempt, filter_url, ours) == "HTTP 200"

        other = make_pki(tmp_path / "other-ca", {"kube-scheduler": ClientIdentity("kube-scheduler")}, days=1)
        no_cert = ssl.create_default_context(cafile=str(server.tls.ca))
        other_ca = ssl.create_default_context(cafile=str(server.tls.ca))
        other_ca.load_cert_chain(str(other.clients["kube-scheduler"].cert), str(other.clients["kube-scheduler"].key))
        refused = {
            "no certificate": await asyncio.to_thread(attempt, filter_url, no_cert),
            "another CA's certificate": await asyncio.to_thread(attempt, filter_url, other_ca),
            "plain HTTP": await asyncio.to_thread(attempt, filter_url.replace("https://", "http://"), None),
        }
        for who, outcome in refused.items():
            assert not outcome.startswith("HTTP"), f"{who}: {outcome}"
        # Over TLS 1.3 the client learns of the refusal after its side of the handshake (an
        # alert, or the connection closed); over TLS 1.2 the handshake itself fails.
        port = int(server.base.rsplit(":", 1)[1])
        for who, context in (("no certificate", no_cert), ("another CA's certificate", other_ca)):
            context.maximum_version = ssl.TLSVersion.TLSv1_2
            assert await asyncio.to_thread(handshake, port, context) != "ok", who
        ours.maximum_version = ssl.TLSVersion.TLSv1_2
        assert await asyncio.to_thread(handshake, port, ours) == "ok"
        status, body = await server.request("GET", "/metrics")
        assert status == 200
        assert calls(body.decode()) == 1  # only our own call reached the app
