"""A scripted stand-in for the API server's list and watch, for informer and cache tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from extender.kube.client import ApiError, Params, watch_events
from extender.kube.informer import Informer


def pod(name: str, rv: str, uid: str = "") -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv}}


def line(event_type: str, body: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": event_type, "object": body}) + b"\n"


def gone(rv: str) -> bytes:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": f"too old resource version: {rv}"}
    return line("ERROR", status)


ListResult = tuple[list[dict[str, Any]], str] | Exception
WatchResult = list[bytes] | Exception


class ScriptedApi:
    """Answers list and watch calls from queues; once a queue is empty, lists fail with 500
    and watches stay open with nothing in them until `add_watch` scripts one (or the informer is
    stopped)."""

    def __init__(self, lists: list[ListResult], watches: list[WatchResult]) -> None:
        self.lists: deque[ListResult] = deque(lists)
        self.watches: deque[WatchResult] = deque(watches)
        self.list_calls: list[str] = []
        self.watch_calls: list[tuple[str, dict[str, Any], int]] = []
        self.closed = 0
        self._more = asyncio.Event()

    def add_watch(self, result: WatchResult) -> None:
        """Script the next watch; one waiting with nothing scripted takes it."""
        self.watches.append(result)
        self._more.set()

    async def list(
        self,
        path: str,
        params: Params | None = None,
        *,
        page_size: int = 500,
        each: Callable[[dict[str, Any]], object] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        self.list_calls.append(path)
        await asyncio.sleep(0)
        if not self.lists:
            raise ApiError(500, "script ended", method="GET", path=path)
        result = self.lists.popleft()
        if isinstance(result, Exception):
            raise result
        items, rv = result
        copies = [orjson.loads(orjson.dumps(i)) for i in items]
        for item in copies if each is not None else ():
            each(item)
        return copies, rv

    async def watch(
        self, path: str, params: Params | None = None, *, timeout_seconds: int = 300
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        self.watch_calls.append((path, dict(params or {}), timeout_seconds))
        try:
            while not self.watches:
                self._more.clear()
                await self._more.wait()
            result = self.watches.popleft()
            if isinstance(result, Exception):
                raise result
            async for event in watch_events(_chunks(result), path):
                yield event
        finally:
            self.closed += 1


async def _chunks(lines: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in lines:
        await asyncio.sleep(0)
        yield chunk


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []  # (type, name, resourceVersion)

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.events.append((event_type, meta["name"], meta.get("resourceVersion", "")))


async def until(check: Callable[[], bool], what: str, seconds: float = 5.0) -> None:
    """Polls CHECK; fails naming WHAT after SECONDS."""
    for _ in range(int(seconds / 0.005)):
        if check():
            return
        await asyncio.sleep(0.005)
    pytest.fail(f"timed out waiting for {what}")


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Routes:
    """Several ScriptedApis, one per collection path, behind one ListWatch."""

    def __init__(self, apis: dict[str, ScriptedApi]) -> None:
        self.apis = apis

    async def list(
        self,
        path: str,
        params: Params | None = None,
        *,
        page_size: int = 500,
        each: Callable[[dict[str, Any]], object] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        if path not in self.apis:
            raise ApiError(404, "the server could not find the requested resource", reason="NotFound")
        return await self.apis[path].list(path, params, page_size=page_size, each=each)

    def watch(
        self, path: str, params: Params | None = None, *, timeout_seconds: int = 300
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        return self.apis[path].watch(path, params, timeout_seconds=timeout_seconds)
