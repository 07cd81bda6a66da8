"""ClusterCache: one informer per watched resource, applying every event to a GangScheduler.

Objects land where `extender.core.apply` puts them (the simulator uses the same mapping): pods
through `observe_pod` / `delete_pod` so reservations follow them, nodes, PodGroups, Topologies,
PriorityClasses and ResourceInterfaces into the ClusterState, workload owners for the grouper.

An object that fails to parse is logged once per distinct problem (one line naming the object
and its fields) and skipped: the cache keeps what it had of it, nothing for a new object. A
PodGroup that fails to parse is stored as invalid instead, so its gang shows `Invalid` with the
reason. Neither ever stops other objects.

The cache is `ready` when every resource has synced or was found not installed; a CRD that
appears later is picked up by its informer's periodic re-check.

After every list the core holds what the informers hold: the informers reconcile what they
delivered, and the pods informer also deletes pods the core learnt of from kube-scheduler's calls
(ahead of the watch) that the list does not have (`CorePods`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import structlog

from extender.core.apply import apply_object, delete_object
from extender.core.cluster import ClusterState
from extender.core.queues import QUEUE_KINDS
from extender.core.scheduler import GangScheduler
from extender.kube.backoff import Backoff
from extender.kube.client import JSONDict
from extender.kube.informer import Handler, Informer, ListWatch
from extender.kube.reconcile import DELETED, seen
from extender.kube.resources import PODS, WATCHED, Resource
from extender.model.errors import FieldError, InvalidObject


@dataclass(frozen=True)
class Selector:
    """Narrows what one resource's informer sees (pods of every namespace are needed)."""

    namespace: str | None = None
    label_selector: str = ""
    field_selector: str = ""


class CorePods:
    """The pods the core holds, as the pods informer's `Held`. The core learns of a pod from
    kube-scheduler's filter and preempt calls when they are ahead of the watch; one deleted before
    any list or watch event showed it (created and deleted while a relist was due) is in no event,
    and would stay forever, holding room or a place in its gang."""

    def __init__(self, state: ClusterState, namespace: str | None) -> None:
        self._state = state
        self._prefix = f"{namespace}/" if namespace else ""

    def mark(self) -> int:
        """The latest arrival (`ClusterState.arrival` numbers grow in the dict's order)."""
        return next(reversed(self._state.arrival.values()), 0)

    def held_before(self, mark: int) -> Iterator[str]:
        # A pod the core saw before the list was requested existed before the list was taken
        # (kube-scheduler asks only about pods it has seen), so one the list lacks is gone. A pod
        # seen later may be newer than the list: the watch, which resumes from it, will tell.
        arrival = self._state.arrival
        for key in list(arrival):  # (a copy of the keys: pods deleted meanwhile leave the dict)
            if arrival.get(key, mark + 1) <= mark and key.startswith(self._prefix):
                yield key


class ClusterCache:
    def __init__(
        self,
        client: ListWatch,
        scheduler: GangScheduler,
        *,
        resources: Iterable[Resource] = WATCHED,
        selectors: Mapping[str, Selector] | None = None,  # by Resource.name
        log: structlog.typing.FilteringBoundLogger | None = None,
        watch_seconds: int = 300,
        page_size: int = 500,
        recheck_seconds: float = 30.0,
        backoff_cap: float = 30.0,
    ) -> None:
        self.scheduler = scheduler
        self.log = log or structlog.get_logger("topogang.kube")
        self._problems: dict[tuple[str, str], str] = {}  # (resource, object) -> the last problem logged
        self.informers: dict[str, Informer] = {}
        for resource in resources:
            selector = (selectors or {}).get(resource.name, Selector())
            self.informers[resource.name] = Informer(
                client,
                resource,
                self._handler(resource),
                log=self.log,
                namespace=selector.namespace,
                label_selector=selector.label_selector,
                field_selector=selector.field_selector,
                watch_seconds=watch_seconds,
                page_size=page_size,
                recheck_seconds=recheck_seconds,
                backoff=Backoff(initial=min(0.5, backoff_cap), cap=backoff_cap),
                on_installed=self._installed(resource),
                held=self._held(resource, selector),
            )
        self._tasks: list[asyncio.Task[None]] = []

    # -- running -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every informer on the running loop (no-op when started)."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(informer.run(), name=f"informer {name}") for name, informer in self.informers.items()
        ]
        for task in self._tasks:
            task.add_done_callback(self._ended)

    async def stop(self) -> None:
        """Cancel every informer and wait for them to finish."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """An informer only ends when stopped; anything else is a bug, and must not pass silently."""
        if not task.cancelled() and task.exception() is not None:
            self.log.error("informer died", task=task.get_name(), exc_info=task.exception())

    async def __aenter__(self) -> ClusterCache:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def ready(self) -> bool:
        """Every resource has synced, or is known not to be installed."""
        return all(informer.settled for informer in self.informers.values())

    async def wait_ready(self, seconds: float | None = None) -> None:
        """Until `ready`; TimeoutError naming what is still missing after SECONDS."""
        try:
            async with asyncio.timeout(seconds):
                await asyncio.gather(*(i.wait_settled() for i in self.informers.values()))
        except TimeoutError:
            waiting = sorted(name for name, i in self.informers.items() if not i.settled)
            raise TimeoutError(f"cluster cache not ready after {seconds}s; waiting for {', '.join(waiting)}") from None

    def status(self) -> dict[str, dict[str, object]]:
        """Per resource: installed, synced, objects held, the resourceVersion reached, relists."""
        return {
            name: {
                "installed": i.installed,
                "synced": i.synced,
                "objects": len(i),
                "resourceVersion": i.resource_version,
                "relists": i.relists,
            }
            for name, i in self.informers.items()
        }

    # -- applying ------------------------------------------------------------------------------------

    def _held(self, resource: Resource, selector: Selector) -> CorePods | None:
        """For pods: what the core holds beyond the informer (not with a label or field selector,
        which the core cannot apply to the pods it learnt of)."""
        if resource != PODS or selector.label_selector or selector.field_selector:
            return None
        return CorePods(self.scheduler.state, selector.namespace)

    def _installed(self, resource: Resource) -> Callable[[bool], None] | None:
        """For the queue kinds: whether their API exists decides how PodGroup spec.queue is read."""
        kind = f"{resource.group}/{resource.kind}"
        if kind not in QUEUE_KINDS:
            return None

        def tell(installed: bool) -> None:
            self.scheduler.state.set_queue_api(kind, installed)

        return tell

    def _handler(self, resource: Resource) -> Handler:
        def handle(event_type: str, obj: JSONDict) -> None:
            key = (resource.name, seen(obj).key)
            if event_type == DELETED:
                self._problems.pop(key, None)
                delete_object(self.scheduler, obj)
                return
            try:
                errors = apply_object(self.scheduler, obj)
            except InvalidObject as exc:
                self._report(key, resource, exc.errors, "skipped")
                return
            if errors:
                self._report(key, resource, errors, "stored as invalid")
            else:
                self._problems.pop(key, None)

        return handle

    def _report(self, key: tuple[str, str], resource: Resource, errors: tuple[FieldError, ...], outcome: str) -> None:
        message = "; ".join(str(e) for e in errors)
        if self._problems.get(key) == message:
            return  # said already; an object updated often (a Node) would otherwise repeat it
        self._problems[key] = message
        self.log.warning(
            f"invalid {resource.kind} {outcome}",
            resource=resource.name,
            object=key[1],
            fields=sorted({e.field for e in errors}),
            error=message,
        )
