"""mTLS on the extender port: the real aiohttp server with server_context, real certificates
(made by openssl, as e2e/controlplane/pki.py makes the control plane's), real TLS clients.

A client with a certificate from the configured CA is served; one without a certificate, or with
one from another CA, is refused in the TLS handshake and no request reaches the app; plain HTTP
gets no HTTP answer. Bad files are refused at start with the flag named.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from e2e.controlplane.pki import ClientIdentity, Pki, make_pki
from extender.server.app import create_app
from extender.server.tls import TlsError, TlsFiles, reload_on_change, server_context
from tests.test_server_app import make


@pytest.fixture(scope="module")
def pkis(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pki, Pki]:
    """Ours (a CA, a serving certificate for 127.0.0.1, a client certificate) and another CA's."""
    clients = {"kube-scheduler": ClientIdentity("kube-scheduler")}
    return (
        make_pki(tmp_path_factory.mktemp("ours"), clients, days=1),
        make_pki(tmp_path_factory.mktemp("other"), clients, days=1),
    )


def files(pki: Pki) -> TlsFiles:
    return TlsFiles(str(pki.serving.cert), str(pki.serving.key), str(pki.ca.cert))


def client_context(ca: Pki, cert: Pki | None, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca.ca.cert))
    if cert is not None:
        pair = cert.clients["kube-scheduler"]
        context.load_cert_chain(str(pair.cert), str(pair.key))
    if maximum is not None:
        context.maximum_version = maximum
    return context


class Served:
    def __init__(self, port: int) -> None:
        self.port = port
        self.requests = 0


@contextlib.asynccontextmanager
async def serving(context: ssl.SSLContext) -> AsyncIterator[Served]:
    _, _, extender = make()
    app = create_app(extender, lambda: True, "/topogang")
    box: list[Served] = []

    @web.middleware
    async def count(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        box[0].requests += 1
        return await handler(request)

    app.middlewares.append(count)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    box.append(Served(int(runner.addresses[0][1])))
    try:
        yield box[0]
    finally:
        await runner.cleanup()


@pytest.fixture
async def served(pkis: tuple[Pki, Pki]) -> AsyncIterator[Served]:
    async with serving(server_context(files(pkis[0]))) as server:
        yield server


FILTER = orjson.dumps(
    {"Pod": {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}, "NodeNames": ["z1-b1-r1-n1"]}
)


async def post(port: int, context: ssl.SSLContext | None, scheme: str = "https") -> int:
    async with aiohttp.ClientSession() as session:
        url = f"{scheme}://127.0.0.1:{port}/topogang/filter"
        async with session.post(url, data=FILTER, ssl=context if context is not None else False) as resp:
            return resp.status


async def test_a_client_certificate_from_the_ca_is_served(served: Served, pkis: tuple[Pki, Pki]) -> None:
    ours, _ = pkis
    assert await post(served.port, client_context(ours, ours)) == 200
    assert served.requests == 1


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate"])
async def test_other_clients_are_refused_in_the_handshake(served: Served, pkis: tuple[Pki, Pki], who: str) -> None:
    ours, other = pkis
    cert = None if who == "no certificate" else other
    # TLS 1.2: the server's verdict on the client certificate ends the handshake itself, so
    # open_connection (a connect and a handshake, no HTTP) fails.
    tls12 = client_context(ours, cert, ssl.TLSVersion.TLSv1_2)
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        await asyncio.open_connection("127.0.0.1", served.port, ssl=tls12)
    # TLS 1.3 (what kube-scheduler's Go client negotiates): no HTTP answer either.
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await post(served.port, client_context(ours, cert))
    assert served.requests == 0


async def test_plain_http_gets_no_http_answer(served: Served) -> None:
    with pytest.raises(aiohttp.ClientError):
        await post(served.port, None, scheme="http")
    assert served.requests == 0


def test_unusable_files_are_refused_naming_the_flag(pkis: tuple[Pki, Pki], tmp_path: Path) -> None:
    ours, other = pkis
    good = files(ours)
    with pytest.raises(TlsError, match=r"^--tls-cert: no such file: /nope"):
        server_context(TlsFiles("/nope", good.key, good.client_ca))
    with pytest.raises(TlsError, match=r"^--tls-cert/--tls-key: cannot load"):
        server_context(TlsFiles(good.cert, str(other.serving.key), good.client_ca))  # a key of another cert
    with pytest.raises(TlsError, match=r"^--client-ca: no such file"):
        server_context(TlsFiles(good.cert, good.key, str(tmp_path / "ca.crt")))
    empty = tmp_path / "empty.crt"
    empty.write_text("not a certificate\n")
    with pytest.raises(TlsError, match=r"^--client-ca: cannot load"):
        server_context(TlsFiles(good.cert, good.key, str(empty)))


async def test_renewed_files_are_served_without_a_restart(pkis: tuple[Pki, Pki], tmp_path: Path) -> None:
    """cert-manager renews the Secret and the kubelet swaps the files: new connections get the
    new certificate and the new CA's clients, the process keeps running."""
    ours, other = pkis
    paths = TlsFiles(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), str(tmp_path / "ca.crt"))

    def install(pki: Pki) -> None:
        for source, target in zip(
            (pki.serving.cert, pki.serving.key, pki.ca.cert), (paths.cert, paths.key, paths.client_ca), strict=True
        ):
            shutil.copyfile(source, target)

    install(ours)
    context = server_context(paths)
    async with serving(context) as server:
        reloads = asyncio.create_task(reload_on_change(context, paths, every=0.05))
        try:
            assert await post(server.port, client_context(ours, ours)) == 200
            await asyncio.sleep(0.01)  # a later modification time
            install(other)
            for _ in range(100):
                await asyncio.sleep(0.05)
                with contextlib.suppress(aiohttp.ClientError, ssl.SSLError, ConnectionError):
                    if await post(server.port, client_context(other, other)) == 200:
                        break
            else:
                pytest.fail("the renewed certificate was not served")
        finally:
            reloads.cancel()
