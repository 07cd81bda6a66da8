"""HTTP/2 on the mTLS port, next to aiohttp's HTTP/1.1, chosen per connection by ALPN.

Why: kube-scheduler's extender client is a Go http.Transport that keeps two idle connections per
host (Kubernetes sets no MaxIdleConnsPerHost for extenders). Over HTTP/1.1 every bind call in
flight beyond two (plain pods' binds wait for topogang's Binding POST; gang members' at their
gate) opens a connection, with a TLS handshake, that is closed after use: on 1,000 nodes that was
29% of topogang's event loop and a quarter of the pods/s. Go offers "h2" in ALPN by itself, and
over HTTP/2 every call shares one connection.

`serve_tls` listens with the server's SSLContext (ALPN: h2, http/1.1); once the handshake is done
the connection goes to `H2Protocol` or to aiohttp's own protocol, with `transport.set_protocol`.
`H2Protocol` answers through the same `Routes` as aiohttp (app.py): POST to a verb, GET of the
probes and metrics, the same bodies, statuses and body limit. Framing, HPACK and flow control
are the `h2` library's (hyper-h2, the sans-I/O HTTP/2 state machine that hypercorn and httpx
use); this module only moves bytes and sends each answer within the peer's flow-control window.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import structlog

from extender.server.app import Answer, Routes

log = structlog.get_logger("topogang")

ALPN = ["h2", "http/1.1"]
GOAWAY_GRACE = 5.0  # seconds a connection told to go away has to finish the calls it has open


class H2Protocol(asyncio.Protocol):
    """One HTTP/2 connection: streams are answered concurrently, each by `Routes`."""

    def __init__(self, routes: Routes) -> None:
        self.routes = routes
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.transport: asyncio.Transport | None = None
        self.requests: dict[int, tuple[str, str, bytearray | None]] = {}  # stream -> (method, path, body)
        self.windows: dict[int, asyncio.Event] = {}  # stream -> set when the peer opens its window
        self.tasks: set[asyncio.Task[None]] = set()
        self.flushing = False  # a flush is scheduled for the end of this loop iteration
        self.going_away = False  # GOAWAY sent: close once the open calls are answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn.initiate_connection()
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            log.warning("http2 protocol error", error=str(exc))
            self._flush()
            if self.transport is not None:
                self.transport.close()
            return
        for event in events:
            self._on(event)
        self._flush()  # acknowledgements and the answers given at once, in one write

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            headers = {bytes(k): bytes(v) for k, v in event.headers or []}
            path = headers.get(b":path", b"").decode("latin-1").partition("?")[0]
            method = headers.get(b":method", b"").decode("latin-1")
            self.requests[event.stream_id] = (method, path, bytearray())
        elif isinstance(event, h2.events.DataReceived):
            self._body(event)
        elif isinstance(event, h2.events.StreamEnded):
            request = self.requests.pop(event.stream_id, None)
            if request is not None and not self._answer_now(event.stream_id, *request):
                _, path, body = request  # bind: a POST whose answer waits on I/O
                self._spawn(self._answer_later(event.stream_id, path, body))
            self._close_if_gone()
        elif isinstance(event, h2.events.StreamReset):
            self.requests.pop(event.stream_id, None)
            self._opened(event.stream_id)
        elif isinstance(event, h2.events.WindowUpdated):
            for stream in [event.stream_id] if event.stream_id else list(self.windows):
                self._opened(stream)
        elif isinstance(event, h2.events.ConnectionTerminated) and self.transport is not None:
            self.transport.close()

    def _body(self, event: h2.events.DataReceived) -> None:
        """Keep the body up to the limit (past it, only count it: the answer is a 413)."""
        data = event.data or b""
        self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        request = self.requests.get(event.stream_id)
        if request is None or request[2] is None:
            return
        body = request[2]
        if len(body) + len(data) > self.routes.max_body:
            self.requests[event.stream_id] = (request[0], request[1], None)
            return
        body.extend(data)

    def _answer_now(self, stream: int, method: str, path: str, body: bytearray | None) -> bool:
        """Answer a call that needs no I/O (filter, prioritize, preempt, the probes) in the
        callback that read it, so it leaves with this read's write: a task would wait a loop
        iteration or two behind whatever else is ready (watch events, API responses); an answer
        larger than the peer's window goes out from a task as the window opens. False: bind,
        which a task answers."""
        if method == "POST":
            answer = self.routes.post_now(path, bytes(body) if body is not None else None)
        elif method == "GET":
            answer = self.routes.get(path) or Answer(404, b"404: Not Found", "text/plain")
        else:
            answer = Answer(405, b"method not allowed", "text/plain")
        if answer is None:
            return False
        window = min(self.conn.local_flow_control_window(stream), self.conn.max_outbound_frame_size)
        if len(answer.body) > window:
            self._spawn(self._send(stream, answer))
            return True
        with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            # (suppressed: the client reset the stream or went away, nobody to answer)
            self.conn.send_headers(stream, self._headers(answer), end_stream=not answer.body)
            if answer.body:
                self.conn.send_data(stream, answer.body, end_stream=True)
        return True

    async def _answer_later(self, stream: int, path: str, body: bytearray | None) -> None:
        answer = await self.routes.post(path, bytes(body) if body is not None else None)
        await self._send(stream, answer or Answer(404, b"404: Not Found", "text/plain"))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._close_if_gone()

    def go_away(self) -> None:
        """Tell the client to make its next calls on a new connection (GOAWAY, no error): the
        calls it has open here are still answered, then the connection closes (at the latest
        after GOAWAY_GRACE). A Go client retries what it had not sent on a new connection."""
        if self.going_away or self.transport is None or self.transport.is_closing():
            return
        self.going_away = True
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.conn.close_connection()
        self._flush()
        asyncio.get_running_loop().call_later(GOAWAY_GRACE, self._close)
        self._close_if_gone()

    def _close_if_gone(self) -> None:
        if self.going_away and not self.tasks and not self.requests:
            asyncio.get_running_loop().call_soon(self._close)  # after this iteration's answers are flushed

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()

    @staticmethod
    def _headers(answer: Answer) -> list[tuple[str, str]]:
        return [
            (":status", str(answer.status)),
            ("content-type", answer.content_type),
            ("content-length", str(len(answer.body))),
        ]

    async def _send(self, stream: int, answer: Answer) -> None:
        try:
            self.conn.send_headers(stream, self._headers(answer), end_stream=not answer.body)
            view = memoryview(answer.body)
            while view:
                window = min(self.conn.local_flow_control_window(stream), self.conn.max_outbound_frame_size)
                if window <= 0:
                    self._flush()  # what is queued must go out before the peer can open its window
                    await self._wait_window(stream)
                    continue
                chunk, view = view[:window], view[window:]
                self.conn.send_data(stream, bytes(chunk), end_stream=not view)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return  # the client reset the stream or went away: nobody to answer
        finally:
            self._flush_soon()

    async def _wait_window(self, stream: int) -> None:
        event = self.windows.setdefault(stream, asyncio.Event())
        event.clear()
        await event.wait()

    def _opened(self, stream: int) -> None:
        event = self.windows.pop(stream, None)
        if event is not None:
            event.set()

    def _flush_soon(self) -> None:
        """One TLS record and one send() for everything answered in this loop iteration: a write
        per frame cost a fifth of topogang's CPU under kube-scheduler's concurrent calls."""
        if not self.flushing:
            self.flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self.flushing = False
        data = self.conn.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        for task in self.tasks:
            task.cancel()
        for event in self.windows.values():
            event.set()


class Clients:
    """The connections callers hold to the extender port. When this replica stops leading they
    are closed gracefully (`close`): kube-scheduler keeps one connection and would go on calling
    a follower on it, since a Service (the leader label) routes only new connections; its next
    call opens a connection, which reaches the new leader."""

    def __init__(self) -> None:
        self.h2: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
        self.http1: Any = None  # aiohttp's web.Server (its `connections`), once serving

    def close(self) -> int:
        """GOAWAY on every HTTP/2 connection, "close after this request" on every HTTP/1.1
        one; returns how many were told."""
        told = 0
        for h2_conn in list(self.h2):
            h2_conn.go_away()
            told += 1
        for handler in list(getattr(self.http1, "connections", ())):
            handler.close()  # aiohttp: no new request on it; closed once the current one is answered
            told += 1
        return told


class _Negotiated(asyncio.Protocol):
    """Waits for the TLS handshake, then hands the connection to the protocol ALPN chose."""

    def __init__(self, http1: Callable[[], asyncio.BaseProtocol], routes: Routes, clients: Clients) -> None:
        self.http1, self.routes, self.clients = http1, routes, clients

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object: ssl.SSLObject | None = transport.get_extra_info("ssl_object")
        chosen = (ssl_object.selected_alpn_protocol() if ssl_object is not None else None) or "http/1.1"
        self.routes.metrics.connections.labels(chosen).inc()
        protocol: asyncio.BaseProtocol
        if chosen == "h2":
            protocol = H2Protocol(self.routes)
            self.clients.h2.add(protocol)
        else:
            protocol = self.http1()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


async def serve_tls(
    host: str,
    port: int,
    context: ssl.SSLContext,
    http1: Callable[[], Any],
    routes: Routes,
    clients: Clients | None = None,
) -> asyncio.Server:
    """Listen on HOST:PORT with CONTEXT: HTTP/2 when the client offers it, else HTTP1 (aiohttp's
    protocol factory). CLIENTS: where the connections are kept, to be closed on demotion."""
    context.set_alpn_protocols(ALPN)
    clients = clients if clients is not None else Clients()
    clients.http1 = http1
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Negotiated(http1, routes, clients), host, port, ssl=context)
