"""Informer: list, then watch from the list's resourceVersion, for one resource, until cancelled.

    list     every object of the resource (in pages) at one resourceVersion; the handler gets
             ADDED for each on the first list, the difference on a relist (reconcile.py)
    watch    from that resourceVersion, with bookmarks and a server-side timeout of
             `watch_seconds` to twice that (jittered, as client-go does); the handler gets each
             ADDED, MODIFIED and DELETED; bookmarks only move the resourceVersion on. When the
             server ends the watch, watch again from the last resourceVersion seen.
    410      Gone (an HTTP status or an ERROR event: the resourceVersion is too old) -> relist.
             404 on the watch (the CRD was removed) -> relist too.
    404      on the list: the API is not installed (a CRD that is absent). Logged once; listed
             again every `recheck_seconds`; counts as settled, so it does not hold up readiness.
    else     network errors and other statuses back off (capped, jittered) and retry the step.

Handlers are plain sync callables `(event_type, obj)`: each event is applied to the sync core in
one step of the event loop, so no request ever sees half an event. A list is applied in slices
of at most `slice_seconds` with the loop free in between (`_apply_list` says why that is safe);
the watch starts, and `synced` turns true, only once all of it is applied. A handler that raises
is logged and does not stop the informer. Objects reach it without metadata.managedFields
(`lean`), dropped as each page or event arrives.

The informer remembers what it delivered, event by event (a list stopped halfway is reconciled
from what was delivered). What the handler's side holds beyond that (`Held`: the core learns of
pods from kube-scheduler's calls, ahead of the watch) is deleted once a list has been applied
when the list does not have it, so a pod created and deleted inside a relist's gap, which no
event will ever mention, does not stay.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Sequence
from typing import Protocol

import aiohttp
import structlog

from extender.kube.backoff import Backoff
from extender.kube.client import ApiError, JSONDict, Params
from extender.kube.collector import collections_held
from extender.kube.reconcile import ADDED, BOOKMARK, DELETED, MODIFIED, Event, Seen, relist, seen
from extender.kube.resources import Resource

Handler = Callable[[str, JSONDict], None]
NOT_FOUND, GONE = 404, 410
QUICK_WATCH_SECONDS = 1.0  # a watch that ends sooner than this with nothing in it counts as a failure
# The longest one step of applying a list holds the event loop, which filter calls and the
# Lease's renewal share (in one step, 100,000 pods would hold it for seconds).
SLICE_SECONDS = 0.01


def lean(obj: JSONDict) -> None:
    """Drop what is large and never read (metadata.managedFields) as OBJ arrives: a list is held
    whole until it is applied, and what it holds is memory and garbage-collector time."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


class ListWatch(Protocol):
    """What an informer needs of the API (KubeClient; fakes in unit tests)."""

    async def list(
        self,
        path: str,
        params: Params | None = None,
        *,
        page_size: int = 500,
        each: Callable[[JSONDict], object] | None = None,
    ) -> tuple[builtins.list[JSONDict], str]: ...

    def watch(
        self, path: str, params: Params | None = None, *, timeout_seconds: int = 300
    ) -> AsyncGenerator[tuple[str, JSONDict], None]: ...


class Held(Protocol):
    """What the handler's side holds of the resource besides what the informer delivered."""

    def mark(self) -> int:
        """Taken just before a list is requested."""
        ...

    def held_before(self, mark: int) -> Iterator[str]:
        """The keys it has held since before MARK, lazily (the informer checks one a step): each
        one the list does not have was gone before the list was taken, and gets a DELETED."""
        ...


class Informer:
    def __init__(
        self,
        client: ListWatch,
        resource: Resource,
        handler: Handler,
        *,
        log: structlog.typing.FilteringBoundLogger | None = None,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        watch_seconds: int = 300,
        page_size: int = 500,
        recheck_seconds: float = 30.0,
        backoff: Backoff | None = None,
        rand: Callable[[], float] = random.random,
        on_installed: Callable[[bool], None] | None = None,
        held: Held | None = None,
        slice_seconds: float = SLICE_SECONDS,
    ) -> None:
        self.client = client
        self.resource = resource
        self.handler = handler
        self.namespace = namespace
        self.selectors: dict[str, str | int | bool] = {}
        if label_selector:
            self.selectors["labelSelector"] = label_selector
        if field_selector:
            self.selectors["fieldSelector"] = field_selector
        self.watch_seconds = watch_seconds
        self.page_size = page_size
        self.recheck_seconds = recheck_seconds
        self.log = (log or structlog.get_logger("topogang.kube")).bind(resource=resource.name)
        self.resource_version = ""  # the last one seen; "" means list next
        self.version = ""  # the API version being listed and watched
        self.installed: bool | None = None  # None until the first list answers
        self._on_installed = on_installed  # told when `installed` changes
        self._held = held
        self.slice_seconds = slice_seconds
        self.relists = 0
        self._known: dict[str, Seen] = {}
        self._backoff = backoff or Backoff()
        self._rand = rand
        self._progress = True  # events arrived since the last list
        self._relist_reason = ""
        self._synced = asyncio.Event()
        self._settled = asyncio.Event()

    # -- state -------------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """The first list has been applied."""
        return self._synced.is_set()

    @property
    def settled(self) -> bool:
        """Synced, or found not installed: nothing more to wait for before serving."""
        return self._settled.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def wait_settled(self) -> None:
        await self._settled.wait()

    def keys(self) -> list[str]:
        """The objects the informer holds, as namespace/name (or name)."""
        return list(self._known)

    def __len__(self) -> int:
        return len(self._known)

    @property
    def api_version(self) -> str:
        return self.resource.api_version(self.version or self.resource.versions[0])

    # -- the loop ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled. Run again after a stop and it watches on from the
        resourceVersion it had reached (a relist if that is too old by then)."""
        while True:
            try:
                await self._step()
            except ApiError as exc:
                if self.resource_version and exc.status in (GONE, NOT_FOUND):
                    await self._expired(exc)
                else:
                    await self._retry(exc)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                await self._retry(exc)

    async def _step(self) -> None:
        if not self.resource_version and not await self._list():
            await asyncio.sleep(self.recheck_seconds)  # not installed: look again later
            return
        await self._watch()

    async def _expired(self, exc: ApiError) -> None:
        self._relist_reason = f"{exc.status} {exc.reason or 'error'}: {exc.message}"
        self.resource_version = ""
        if not self._progress:  # expired again without anything in between: do not spin
            await asyncio.sleep(self._backoff.next())

    async def _retry(self, exc: Exception) -> None:
        delay = self._backoff.next()
        step = "watch" if self.resource_version else "list"
        self.log.warning(f"{step} failed; retrying", error=str(exc) or type(exc).__name__, retry_in=round(delay, 2))
        await asyncio.sleep(delay)

    # -- list ----------------------------------------------------------------------------------------

    async def _list(self) -> bool:
        """List and apply, with the garbage collector held off (collector.py says why); False
        when no version of the API is installed."""
        with collections_held():
            return await self._list_and_apply()

    async def _list_and_apply(self) -> bool:
        started = time.monotonic()
        mark = self._held.mark() if self._held is not None else 0
        for version in self._versions():
            path = self.resource.collection_path(version, self.namespace)
            try:
                items, resource_version = await self.client.list(
                    path, self.selectors, page_size=self.page_size, each=lean
                )
            except ApiError as exc:
                if exc.status == NOT_FOUND:
                    continue
                raise
            self._found(version)
            await self._apply_list(items, resource_version, time.monotonic() - started, mark)
            return True
        await self._missing()
        return False

    def _versions(self) -> Sequence[str]:
        versions = self.resource.versions
        return (self.version, *(v for v in versions if v != self.version)) if self.version else versions

    async def _apply_list(self, items: list[JSONDict], resource_version: str, seconds: float, mark: int) -> None:
        """Apply a list (reconcile.relist's events, then a DELETED for what the handler's side
        holds that the list does not have) in slices, the event loop free in between.

        Why a filter call between two slices is safe: each object the core holds is then at the
        version it had before the relist or at the list's, never one that did not exist, so the
        core sees what a watch that delivered part of the gap's events would have shown. Deletions
        come first, as in `relist`: nothing is planned onto a node that is gone, no gang counts a
        pod that is gone, and a name created again (DELETED then ADDED) is never two pods. Room a
        deletion freed can show before the pod that took it is applied, as when a watch delivers a
        deletion before a binding; the core's view was that stale before the relist began, and
        kube-scheduler's own filters and the gate's `still_fits` check judge nodes at bind time."""
        api_version, kind = self.api_version, self.resource.kind

        def tombstone(gone: Seen) -> JSONDict:
            return gone.tombstone(api_version, kind)

        listed = len(items)
        counts = await self._deliver_sliced(relist(dict(self._known), items, tombstone))  # (empties ITEMS)
        await self._deliver_sliced(self._unlisted(mark, tombstone))
        self.resource_version = resource_version
        self._progress = False
        self._backoff.reset()
        if not self.synced:
            self.log.info("synced", objects=listed, version=self.version, seconds=round(seconds, 3))
            self._synced.set()
            self._settled.set()
            return
        self.relists += 1
        self.log.info(
            "relisted",
            reason=self._relist_reason or "resumed",
            objects=listed,
            added=counts[ADDED],
            modified=counts[MODIFIED],
            deleted=counts[DELETED],
            seconds=round(seconds, 3),
        )
        self._relist_reason = ""

    def _unlisted(self, mark: int, tombstone: Callable[[Seen], JSONDict]) -> Iterator[tuple[Event, ...]]:
        """A DELETED for each key the handler's side held before the list began that the list
        does not have (read once the list is applied: the generator is lazy), a step per key."""
        if self._held is None:
            return
        gone = []
        for key in self._held.held_before(mark):
            if key in self._known:
                yield ()
                continue
            gone.append(key)
            namespace, _, name = key.rpartition("/")
            yield ((DELETED, tombstone(Seen(namespace, name, "", ""))),)
        if gone:
            self.log.info("deleted what no list has", objects=len(gone), first=gone[:5])

    async def _deliver_sliced(self, steps: Iterable[tuple[Event, ...]]) -> Counter[str]:
        """Deliver the events of STEPS in order, yielding to the event loop whenever a slice has
        held it for `slice_seconds` (checked between steps, never inside one); their counts."""
        counts: Counter[str] = Counter()
        until = time.perf_counter() + self.slice_seconds
        for step in steps:
            for event_type, obj in step:
                self._note(event_type, obj)
                self._deliver(event_type, obj)
                counts[event_type] += 1
            if time.perf_counter() >= until:
                await asyncio.sleep(0)
                until = time.perf_counter() + self.slice_seconds
        return counts

    def _found(self, version: str) -> None:
        if self.installed is False:
            self.log.info("resource installed", version=version)
            self._relist_reason = "installed"
        if self.installed is not True and self._on_installed is not None:
            self._on_installed(True)
        self.installed = True
        self.version = version

    async def _missing(self) -> None:
        if self.installed is not False:
            self.log.info(
                "resource not installed", versions=list(self.resource.versions), recheck_seconds=self.recheck_seconds
            )
        if self.installed is not False and self._on_installed is not None:
            self._on_installed(False)
        self.installed = False
        self.resource_version = ""
        if self._known:  # it was installed and went away: so did its objects
            api_version, kind = self.api_version, self.resource.kind
            gone = [((DELETED, s.tombstone(api_version, kind)),) for s in self._known.values()]
            await self._deliver_sliced(gone)
        self._settled.set()

    # -- watch ---------------------------------------------------------------------------------------

    async def _watch(self) -> None:
        params = {**self.selectors, "resourceVersion": self.resource_version, "allowWatchBookmarks": True}
        timeout = int(self.watch_seconds * (1 + self._rand()))
        path = self.resource.collection_path(self.version, self.namespace)
        started, events = time.monotonic(), 0
        async with contextlib.aclosing(self.client.watch(path, params, timeout_seconds=timeout)) as stream:
            async for event_type, obj in stream:
                events += 1
                self._progress = True
                self._backoff.reset()
                version = seen(obj).resource_version
                if event_type == BOOKMARK:
                    self.resource_version = version or self.resource_version
                    continue
                if event_type not in (ADDED, MODIFIED, DELETED):
                    self.log.warning("unknown watch event", type=event_type)
                    continue
                self._note(event_type, obj)
                self.resource_version = version or self.resource_version
                self._deliver(event_type, obj)
        if not events and time.monotonic() - started < QUICK_WATCH_SECONDS:
            await asyncio.sleep(self._backoff.next())  # a watch closed at once: do not spin

    def _note(self, event_type: str, obj: JSONDict) -> None:
        """Remember OBJ's identity as it is delivered (what a relist reconciles against), and
        give it its type (a list's items and watch events come without)."""
        lean(obj)
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.resource.kind)
        now = seen(obj)
        if event_type == DELETED:
            self._known.pop(now.key, None)
        else:
            self._known[now.key] = now

    def _deliver(self, event_type: str, obj: JSONDict) -> None:
        try:
            self.handler(event_type, obj)
        except Exception:
            self.log.exception("handler failed", type=event_type, object=seen(obj).key)
