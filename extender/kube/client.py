"""Raw JSON access to the API server over kubernetes-asyncio's connection.

The generated models of kubernetes-asyncio are far too slow to deserialise for thousands of pods,
so `KubeClient` sends requests on the ApiClient's own aiohttp session (its TLS set-up, its
credentials, refreshed through `update_params_for_auth`) and reads and writes bodies with
orjson. Bodies are plain dicts; every error status becomes an `ApiError` carrying the status
code and the API's message.

    client = await KubeClient.connect("~/.kube/config")   # None: in-cluster config
    pod = await client.get("/api/v1/namespaces/ml/pods/p")
    items, rv = await client.list("/api/v1/pods")
    async for kind, obj in client.watch("/api/v1/pods", {"resourceVersion": rv}): ...
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import time
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from yarl import URL

from extender.kube.trouble import SLOW, UNAVAILABLE, Trouble

JSONDict = dict[str, Any]
Params = Mapping[str, str | int | bool]

USER_AGENT = "topogang"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # server-side apply; JSON is YAML
JSON_CONTENT = "application/json"
WATCH_READ_MARGIN = 30.0  # seconds a watch may stay silent beyond its server-side timeout
# A 429 (or 503) with Retry-After was refused before the server did anything, so any request is
# sent again after the wait it asks for, as client-go does; at most this many times, each wait
# capped, so a throttled bind still answers within kube-scheduler's patience.
RETRY_AFTER_ATTEMPTS = 5
RETRY_AFTER_CAP = 5.0
RETRYABLE_STATUSES = frozenset({429, 503})


class ApiError(Exception):
    """An error status from the API server (or an ERROR event in a watch)."""

    def __init__(self, status: int, message: str, *, reason: str = "", method: str = "", path: str = "") -> None:
        self.status = status
        self.message = message
        self.reason = reason  # the Status reason: "AlreadyExists", "Expired", "NotFound", ...
        self.method = method
        self.path = path
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}{status} {reason or 'error'}: {message}")

    @property
    def gone(self) -> bool:
        """410: the resourceVersion (or continue token) is too old; list again."""
        return self.status == 410

    @classmethod
    def from_status(cls, status: Mapping[str, Any], method: str = "", path: str = "") -> ApiError:
        """From a metav1.Status object."""
        code = status.get("code")
        return cls(
            code if isinstance(code, int) else 500,
            str(status.get("message") or status),
            reason=str(status.get("reason") or ""),
            method=method,
            path=path,
        )

    @classmethod
    def from_body(cls, code: int, body: bytes, method: str, path: str) -> ApiError:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            return cls.from_status({**decoded, "code": code}, method, path)
        text = body[:500].decode(errors="replace").strip()
        return cls(code, text or "no message", method=method, path=path)


class NotLeading(ApiError):
    """A write refused before it was sent: this replica is not the leader, or may no longer be
    (kube/lease.py `may_write`)."""

    def __init__(self, method: str, path: str) -> None:
        message = "this replica is not the leader (or its Lease may have moved): the write was not sent"
        super().__init__(0, message, reason="NotLeader", method=method, path=path)


class ClusterConfigError(Exception):
    """Where the cluster is and how to log in cannot be read: not in a pod and no kubeconfig, or
    a kubeconfig that is missing or broken. The message is one line naming what is wrong; the
    command adds what to set."""


# What kubernetes-asyncio raises on a kubeconfig it cannot use: its own ConfigException, and
# from a file that is empty, not YAML or of the wrong shape, whatever reading it met first.
_CONFIG_ERRORS = (k8s_config.ConfigException, OSError, yaml.YAMLError, TypeError, ValueError, KeyError, AttributeError)


async def make_api_client(kubeconfig: str | Path | None = None, *, context: str | None = None) -> k8s.ApiClient:
    """An ApiClient for KUBECONFIG (its current context, or CONTEXT), or the in-cluster config
    (the pod's ServiceAccount token, refreshed as it rotates) when KUBECONFIG is None. Raises
    ClusterConfigError when neither can be used."""
    configuration = type.__call__(k8s.Configuration)  # not a copy of the process-wide default
    try:
        if kubeconfig is None:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=_kubeconfig_file(kubeconfig),
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except _CONFIG_ERRORS as exc:
        raise ClusterConfigError(_config_problem(kubeconfig, exc)) from None
    # Every informer holds one connection for its watch; writes need their own on top.
    configuration.connection_pool_maxsize = 256
    return k8s.ApiClient(configuration=configuration)


def _expand(path: str | Path) -> str:
    return os.path.expanduser(path)


def _kubeconfig_file(kubeconfig: str | Path) -> str:
    """The kubeconfig's path; a path that is no file is said so (kubernetes-asyncio would
    complain of a missing current-context instead)."""
    path = _expand(kubeconfig)
    if not os.path.isfile(path):
        why = "is a directory" if os.path.isdir(path) else "no such file"
        raise ClusterConfigError(f"kubeconfig {kubeconfig}: {why}")
    return path


def _config_problem(kubeconfig: str | Path | None, exc: Exception) -> str:
    """What went wrong reading the cluster's config, on one line."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        text = f"not valid YAML at line {exc.problem_mark.line + 1}: {exc.problem}"
    elif isinstance(exc, TypeError | ValueError | KeyError | AttributeError):
        text = f"not a kubeconfig ({type(exc).__name__}: {exc})"
    else:
        text = " ".join(str(exc).split()).rstrip(".")
    if kubeconfig is not None:
        return f"kubeconfig {kubeconfig}: {text}"
    if "host/port is not set" in text:  # kubernetes-asyncio's words for "not in a pod"
        return "no kubeconfig given and not in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT unset)"
    return f"no kubeconfig given, and the in-cluster config cannot be used: {text}"


class KubeClient:
    """get, list, watch, post, put, patch, apply and delete of raw JSON; one per ApiClient."""

    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        timeout: float = 30.0,
        trouble: Trouble | None = None,
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self.api = api
        self.timeout = timeout  # seconds for a request that is not a watch
        self.trouble = trouble or Trouble()  # throttling, outages and slowness seen, per kind
        self.fence = fence  # asked before each write is sent (each try): False raises NotLeading
        self._owns_api = fence is None
        self._host = str(api.configuration.host).rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._proxy: str | None = None  # "": none

    @classmethod
    async def connect(cls, kubeconfig: str | Path | None = None, *, context: str | None = None) -> KubeClient:
        return cls(await make_api_client(kubeconfig, context=context))

    def fenced(self, fence: Callable[[], bool]) -> KubeClient:
        """A client on the same connection whose writes are sent only while FENCE says so (the
        leader's writes); reads pass. The Lease and the leader label keep this unfenced one."""
        return KubeClient(self.api, timeout=self.timeout, trouble=self.trouble, fence=fence)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()  # not the connector: the ApiClient's session owns it
        if self._owns_api:
            await self.api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- requests ----------------------------------------------------------------------------

    async def get(self, path: str, params: Params | None = None) -> JSONDict:
        return await self._json("GET", path, params)

    async def list(
        self,
        path: str,
        params: Params | None = None,
        *,
        page_size: int = 500,
        each: Callable[[JSONDict], object] | None = None,
    ) -> tuple[builtins.list[JSONDict], str]:
        """Every item of a collection and the resourceVersion of the list, in pages of PAGE_SIZE
        (0: one request). Should a continue token expire midway, the list starts again in one
        request, as client-go's pager does. EACH is called on every item as its page arrives (to
        drop what nobody reads before the whole list is held)."""
        items: builtins.list[JSONDict] = []
        version = ""
        token = ""
        while True:
            query: dict[str, str | int | bool] = {**(params or {})}
            if page_size:
                query["limit"] = page_size
            if token:
                query["continue"] = token
            try:
                page = await self.get(path, query)
            except ApiError as exc:
                if exc.gone and token:
                    return await self.list(path, params, page_size=0, each=each)
                raise
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            got = page.get("items") or []
            if each is not None:
                for item in got:
                    each(item)
            items.extend(got)
            token = str(meta.get("continue") or "")
            if not token:
                return items, version

    async def watch(
        self, path: str, params: Params | None = None, *, timeout_seconds: int = 300
    ) -> AsyncGenerator[tuple[str, JSONDict], None]:
        """(type, object) for each event of a watch that the server ends after TIMEOUT_SECONDS;
        an ERROR event raises ApiError (410 when the resourceVersion is too old). Close it with
        `contextlib.aclosing` when leaving early."""
        query = {**(params or {}), "watch": True, "timeoutSeconds": timeout_seconds}
        limits = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout, sock_read=timeout_seconds + WATCH_READ_MARGIN
        )
        started = time.monotonic()
        with self._counted("WATCH", path):
            response = await self._send("GET", path, query, limits=limits)
        async with response:
            if response.status >= 400:
                body = await response.read()
                self.trouble.status(response.status, "WATCH", path, _brief(body), 0.0)
                raise ApiError.from_body(response.status, body, "WATCH", path)
            self.trouble.status(response.status, "WATCH", path, "", time.monotonic() - started)
            try:
                async for event in watch_events(response.content.iter_any(), path):
                    yield event
            except aiohttp.ClientPayloadError as exc:  # the server went away mid-stream
                self.trouble.record(UNAVAILABLE, "WATCH", path, str(exc) or type(exc).__name__)
                raise

    async def post(
        self, path: str, body: Mapping[str, Any], params: Params | None = None, *, retry_throttled: bool = True
    ) -> JSONDict:
        """RETRY_THROTTLED False: a 429 is the answer (an eviction's, when a budget forbids it)."""
        return await self._json("POST", path, params, body, JSON_CONTENT, retry_throttled=retry_throttled)

    async def patch(
        self, path: str, body: Mapping[str, Any], *, strategic: bool = False, params: Params | None = None
    ) -> JSONDict:
        """A JSON merge patch, or with STRATEGIC a strategic merge patch (built-in kinds only)."""
        return await self._json("PATCH", path, params, body, STRATEGIC_MERGE_PATCH if strategic else MERGE_PATCH)

    async def put(self, path: str, body: Mapping[str, Any], params: Params | None = None) -> JSONDict:
        """Replace the object at PATH; a metadata.resourceVersion in BODY makes it conditional
        (409 Conflict when the object changed since)."""
        return await self._json("PUT", path, params, body, JSON_CONTENT)

    async def apply(self, path: str, body: Mapping[str, Any], *, field_manager: str, force: bool = True) -> JSONDict:
        """Server-side apply of BODY as FIELD_MANAGER: the fields it lists become what it says and
        fields this manager set before but left out are removed; FORCE takes over fields that
        another manager owns instead of failing with 409."""
        params: dict[str, str | int | bool] = {"fieldManager": field_manager, "force": force}
        return await self._json("PATCH", path, params, body, APPLY_PATCH)

    async def delete(self, path: str, params: Params | None = None) -> JSONDict:
        return await self._json("DELETE", path, params)

    # -- plumbing ------------------------------------------------------------------------------

    async def _json(
        self,
        method: str,
        path: str,
        params: Params | None,
        body: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        *,
        retry_throttled: bool = True,
    ) -> JSONDict:
        data = orjson.dumps(body) if body is not None else None
        limits = aiohttp.ClientTimeout(total=self.timeout)
        attempt = 0
        while True:
            if self.fence is not None and method != "GET" and not self.fence():
                raise NotLeading(method, path)
            started = time.monotonic()
            response, raw = await self._exchange(method, path, params, data, content_type, limits)
            message = _brief(raw) if response.status >= 400 else ""  # a good body is decoded once, below
            self.trouble.status(response.status, method, path, message, time.monotonic() - started)
            if response.status < 400:
                break
            attempt += 1
            wait = _retry_after(response) if retry_throttled and response.status in RETRYABLE_STATUSES else None
            if wait is None or attempt >= RETRY_AFTER_ATTEMPTS:
                raise ApiError.from_body(response.status, raw, method, path)
            await asyncio.sleep(wait)
        decoded = orjson.loads(raw) if raw else {}
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    async def _exchange(
        self,
        method: str,
        path: str,
        params: Params | None,
        data: bytes | None,
        content_type: str | None,
        limits: aiohttp.ClientTimeout,
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """One request and its whole body; a connection that fails or times out is trouble."""
        send = self._send(method, path, params, data=data, content_type=content_type, limits=limits)
        with self._counted(method, path):
            async with await send as response:
                return response, await response.read()

    @contextlib.contextmanager
    def _counted(self, method: str, path: str) -> Iterator[None]:
        try:
            yield
        except TimeoutError:  # before aiohttp's connection errors: its timeouts are both
            self.trouble.record(SLOW, method, path, f"no answer within {self.timeout:g}s")
            raise
        except (aiohttp.ClientConnectionError, OSError) as exc:
            self.trouble.record(UNAVAILABLE, method, path, str(exc) or type(exc).__name__)
            raise

    async def _send(
        self,
        method: str,
        path: str,
        params: Params | None,
        *,
        data: bytes | None = None,
        content_type: str | None = None,
        limits: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON_CONTENT, "User-Agent": USER_AGENT}
        if content_type:
            headers["Content-Type"] = content_type
        query = [(k, _param(v)) for k, v in (params or {}).items()]
        await self.api.update_params_for_auth(headers, query, ["BearerToken"])
        rest = self.api.rest_client
        extra: dict[str, Any] = {}
        proxy = self._proxy_for_host()
        if proxy:  # credentials in its URL are used by aiohttp
            extra["proxy"] = proxy
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        return await self._client_session().request(
            method, self._host + path, params=query, data=data, headers=headers, timeout=limits, **extra
        )

    def _client_session(self) -> aiohttp.ClientSession:
        """A session on the ApiClient's connector (its TLS set-up, its pool) that does not read the
        environment on every request: kubernetes-asyncio's trusts it, and aiohttp then looks up
        ~/.netrc and the proxy variables in a worker thread per request (a tenth of topogang's
        CPU under load). The proxy is resolved once instead; a netrc never authenticates to an
        API server."""
        if self._session is None:
            connector = self.api.rest_client.pool_manager.connector
            self._session = aiohttp.ClientSession(
                connector=connector, connector_owner=False, trust_env=False, read_bufsize=2**21
            )
        return self._session

    def _proxy_for_host(self) -> str | None:
        """The kubeconfig's proxy-url, else HTTPS_PROXY/HTTP_PROXY unless NO_PROXY covers the
        host (as client-go does), looked up once."""
        if self._proxy is None:
            configured = self.api.rest_client.proxy
            url = URL(self._host)
            env = urllib.request.getproxies_environment()
            if configured:
                self._proxy = str(configured)
            elif url.host and not urllib.request.proxy_bypass(url.host):
                self._proxy = env.get(url.scheme or "https", "")
            else:
                self._proxy = ""
        return self._proxy or None


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    """The seconds a Retry-After header asks for (capped), or None without one."""
    header = response.headers.get("Retry-After", "")
    try:
        seconds = float(header)
    except ValueError:
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


def _brief(body: bytes) -> str:
    """The message of an error body, for a log line."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:200].decode(errors="replace")
    return str(decoded.get("message", ""))[:200] if isinstance(decoded, dict) else ""


def _param(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


async def watch_events(chunks: AsyncIterable[bytes], path: str = "") -> AsyncIterator[tuple[str, JSONDict]]:
    """Split a watch's byte stream into events, one JSON object per line; lines may be split
    across chunks, and chunks may hold many lines. An ERROR event raises ApiError."""
    buffer = bytearray()
    async for chunk in chunks:
        scanned = len(buffer)
        buffer.extend(chunk)
        start = 0
        while (end := buffer.find(b"\n", max(start, scanned))) >= 0:
            line = bytes(buffer[start:end])
            start = end + 1
            if line.strip():
                yield _event(line, path)
        del buffer[:start]
    if bytes(buffer).strip():
        yield _event(bytes(buffer), path)


def _event(line: bytes, path: str) -> tuple[str, JSONDict]:
    event = orjson.loads(line)
    kind = str(event.get("type") or "")
    obj = event.get("object")
    if not isinstance(obj, dict):
        obj = {}
    if kind == "ERROR":
        raise ApiError.from_status(obj, "WATCH", path)
    return kind, obj
