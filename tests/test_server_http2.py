"""HTTP/2 on the mTLS port (server/http2.py): the real listener, real certificates, a real HTTP/2
client (the h2 state machine over an asyncio TLS connection that offers "h2" in ALPN, as Go's
client does), and aiohttp's HTTP/1.1 on the same port for clients that do not offer it.

Same cluster and gang as test_server_app.py: rack r1 with 4 nodes, a gang of 4 pods of 8 GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import h2.config
import h2.connection
import h2.events
import orjson
from aiohttp import web

from e2e.controlplane.pki import Pki
from extender.server.app import ROUTES, create_app
from extender.server.extender import Extender
from extender.server.http2 import serve_tls
from extender.server.tls import server_context
from tests.builders import pod
from tests.kube_fakes import until
from tests.test_server_app import Recorder, args, make, member
from tests.test_server_tls import client_context, files, pkis

__all__ = ["pkis"]  # the module fixture, shared with test_server_tls.py

LIMIT = 64 * 1024


@contextlib.asynccontextmanager
async def listening(pki: Pki, limit: int = LIMIT) -> AsyncIterator[tuple[int, Any]]:
    scheduler, recorder, extender = make()
    app = create_app(extender, lambda: True, "/topogang", max_body=limit)
    runner = web.AppRunner(app)
    await runner.setup()
    assert runner.server is not None
    server = await serve_tls("127.0.0.1", 0, server_context(files(pki)), runner.server, app[ROUTES])
    try:
        yield int(server.sockets[0].getsockname()[1]), (scheduler, recorder)
    finally:
        server.close()
        await runner.cleanup()


class H2Client:
    """Just enough of an HTTP/2 client: requests on one connection, answers by stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.answers: dict[int, dict[str, Any]] = {}
        self.done: dict[int, asyncio.Event] = {}
        self.opened = asyncio.Event()  # the server opened a flow-control window
        self.pump = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while data := await self.reader.read(65536):
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.answers[event.stream_id]["status"] = dict(event.headers or [])[b":status"]
                elif isinstance(event, h2.events.DataReceived):
                    self.answers[event.stream_id]["body"] += event.data or b""
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.done[event.stream_id].set()
                elif isinstance(event, h2.events.WindowUpdated):
                    self.opened.set()
            self.writer.write(self.conn.data_to_send())

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        stream = self.conn.get_next_available_stream_id()
        self.answers[stream] = {"body": b""}
        self.done[stream] = asyncio.Event()
        headers = [(":method", method), (":path", path), (":scheme", "https"), (":authority", "127.0.0.1")]
        self.conn.send_headers(stream, headers, end_stream=not body)
        view = memoryview(body)
        while view:  # within the server's flow-control window, waiting for it to open
            size = min(len(view), self.conn.max_outbound_frame_size, self.conn.local_flow_control_window(stream))
            if size <= 0:
                self.writer.write(self.conn.data_to_send())
                self.opened.clear()
                await asyncio.wait_for(self.opened.wait(), 10)
                continue
            self.conn.send_data(stream, bytes(view[:size]), end_stream=size == len(view))
            view = view[size:]
        self.writer.write(self.conn.data_to_send())
        await asyncio.wait_for(self.done[stream].wait(), 10)
        answer = self.answers.pop(stream)
        return int(answer["status"]), answer["body"]


@contextlib.asynccontextmanager
async def h2_client(port: int, pki: Pki) -> AsyncIterator[H2Client]:
    context = client_context(pki, pki)
    context.set_alpn_protocols(["h2", "http/1.1"])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    ssl_object = writer.get_extra_info("ssl_object")
    assert ssl_object.selected_alpn_protocol() == "h2"
    client = H2Client(reader, writer)
    try:
        yield client
    finally:
        client.pump.cancel()
        writer.close()


async def test_a_client_that_offers_h2_is_answered_over_http2_on_one_connection(pkis: tuple[Pki, Pki]) -> None:
    async with listening(pkis[0]) as (port, (scheduler, recorder)), h2_client(port, pkis[0]) as client:
        pods = [member(i) for i in range(4)]
        for p in pods:
            scheduler.observe_pod(p)
        replies = await asyncio.gather(*(client.request("POST", "/topogang/filter", args(p)) for p in pods))
        assert [status for status, _ in replies] == [200] * 4
        nodes = [orjson.loads(body)["NodeNames"] for _, body in replies]
        assert sorted(n for [n] in nodes) == sorted(scheduler.reserved("default/g").values())
        # Four bind calls at the gang's gate at once, on the same connection: all bound together.
        binds = [
            orjson.dumps({"PodName": p.name, "PodNamespace": p.namespace, "PodUID": p.uid, "Node": n})
            for p, [n] in zip(pods, nodes, strict=True)
        ]
        answers = await asyncio.gather(*(client.request("POST", "/topogang/bind", b) for b in binds))
        assert answers == [(200, b'{"Error":""}')] * 4
        assert len(recorder.bound) == 4
        status, text = await client.request("GET", "/metrics")
        assert status == 200
        assert b'topogang_extender_request_duration_seconds_count{code="200",verb="bind"} 4.0' in text
        assert b'topogang_connections_total{protocol="h2"} 1.0' in text
        assert (await client.request("GET", "/nowhere"))[0] == 404


async def test_an_answer_larger_than_the_flow_control_window_arrives_whole(pkis: tuple[Pki, Pki]) -> None:
    async with listening(pkis[0], 2**20) as (port, (scheduler, _)), h2_client(port, pkis[0]) as client:
        scheduler.observe_pod(pod("solo"))
        names = [f"z1-b1-r1-n{i}" for i in range(1, 4)] + [f"node-{i:05d}" for i in range(6_000)]  # ~80 KB
        status, body = await client.request("POST", "/topogang/filter", args(pod("solo"), names))
        assert status == 200
        assert len(body) > 65_535  # past the initial window both ways: sent as the peer opens it
        assert orjson.loads(body)["NodeNames"] == names


async def test_a_body_over_the_limit_is_413_over_http2_too(pkis: tuple[Pki, Pki]) -> None:
    async with listening(pkis[0]) as (port, _), h2_client(port, pkis[0]) as client:
        body = args(pod("solo"), [f"node-{i:06d}" for i in range(3_000)])  # ~50 KB
        body = body + b" " * (LIMIT + 1 - len(body))
        status, answer = await client.request("POST", "/topogang/filter", body)
        assert status == 413
        assert "request body larger than the limit of 0.0625 MiB" in orjson.loads(answer)["Error"]


async def test_a_client_that_does_not_offer_h2_gets_http_1_1_on_the_same_port(pkis: tuple[Pki, Pki]) -> None:
    async with listening(pkis[0]) as (port, _):
        connector = aiohttp.TCPConnector(ssl=client_context(pkis[0], pkis[0]))
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(f"https://127.0.0.1:{port}/healthz") as resp,
        ):
            assert (resp.status, resp.version.major, await resp.text()) == (200, 1, "ok")


async def read_after_handshake(port: int, context: ssl.SSLContext) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    await writer.drain()
    return await reader.read(1)


async def test_a_client_without_a_certificate_is_refused_in_the_handshake(pkis: tuple[Pki, Pki]) -> None:
    # (TLS 1.3 finishes the client's side of the handshake before the server checks its
    # certificate, so the refusal may show as the first read failing)
    async with listening(pkis[0]) as (port, _):
        context = client_context(pkis[0], None)
        context.set_alpn_protocols(["h2"])
        try:
            got = await read_after_handshake(port, context)
        except (ssl.SSLError, ConnectionError):
            got = b""
        assert got == b""  # no HTTP/2 frame (not even the server's SETTINGS) ever came


class HeldBindings(Recorder):
    """Bindings that stay in flight until the test lets them land."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0
        self.land = asyncio.Event()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.started += 1
        await self.land.wait()
        await super().bind(namespace, name, uid, node)


def answering() -> int:
    """Bind calls the server is answering (one task each, over HTTP/2)."""
    return sum(1 for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "H2Protocol._answer_later")  # type: ignore[union-attr]


async def test_a_connection_dropped_while_its_call_binds_the_gang_costs_no_binding_and_no_other_answer(
    pkis: tuple[Pki, Pki],
) -> None:
    # kube-scheduler's calls share one HTTP/2 connection, and a connection that drops cancels the
    # handlers of its streams. The call that opened the gate goes away while the gang's Bindings
    # are in flight: the Bindings land, and the calls waiting on another connection (and the
    # dropped call's retry) are answered as they do, far within their budget.
    scheduler, _, _ = make()
    recorder = HeldBindings()
    extender = Extender(scheduler, recorder, bind_timeout=3600, call_budget=3600)
    app = create_app(extender, lambda: True, "/topogang")
    runner = web.AppRunner(app)
    await runner.setup()
    assert runner.server is not None
    server = await serve_tls("127.0.0.1", 0, server_context(files(pkis[0])), runner.server, app[ROUTES])
    port = int(server.sockets[0].getsockname()[1])
    pods = [member(i) for i in range(4)]
    try:
        async with h2_client(port, pkis[0]) as staying:
            for p in pods:
                scheduler.observe_pod(p)
                assert (await staying.request("POST", "/topogang/filter", args(p)))[0] == 200
            plan = dict(scheduler.reserved("default/g"))
            binds = [
                orjson.dumps({"PodName": p.name, "PodNamespace": p.namespace, "PodUID": p.uid, "Node": plan[p.key]})
                for p in pods
            ]
            waiting = [asyncio.create_task(staying.request("POST", "/topogang/bind", b)) for b in binds[:3]]
            await until(lambda: scheduler.gates.progress("default/g") == (3, 4), "three members at the gate")
            async with h2_client(port, pkis[0]) as leaving:
                last = asyncio.create_task(leaving.request("POST", "/topogang/bind", binds[3]))
                await until(lambda: recorder.started == 4, "the gang's four Bindings in flight")
                leaving.writer.transport.abort()  # the connection drops
                await until(lambda: answering() == 3, "the server to drop the call")
            last.cancel()
            retry = asyncio.create_task(staying.request("POST", "/topogang/bind", binds[3]))
            await until(lambda: answering() == 4, "the retry to wait for its Binding")
            recorder.land.set()
            answers = await asyncio.gather(*waiting, retry)  # each request gives up after 10 s
            assert answers == [(200, b'{"Error":""}')] * 4
            assert sorted(recorder.bound) == sorted(plan.items())
    finally:
        server.close()
        await runner.cleanup()
