"""The extender's background work: API calls it starts and does not wait for (wake-ups,
nominations, Events, evictions). A failure is logged, never raised into a handler; a write
refused because this replica no longer leads is dropped quietly. When leadership is lost, and
at shutdown, everything still running is cancelled."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

import structlog

from extender.kube.client import NotLeading

log = structlog.get_logger("topogang")


class Tasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Awaitable[None], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except NotLeading:
                log.debug(f"{what} dropped", reason="no longer the leader")
            except Exception as exc:
                log.warning(f"{what} failed", error=str(exc))

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if inspect.iscoroutine(work):  # cancelled before it ran: close it, or Python warns it was never awaited
            task.add_done_callback(lambda t: work.close() if t.cancelled() else None)

    def __len__(self) -> int:
        """How many are running."""
        return len(self._tasks)

    def cancel(self) -> None:
        """Cancel everything running (each task stops at its next await)."""
        for task in list(self._tasks):
            task.cancel()

    async def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def periodically(seconds: float, work: Callable[[], None], what: str) -> None:
    """WORK every SECONDS until cancelled. A failure is logged with its traceback and the next
    round runs: a bug met in one sweep must not stop every later one."""
    while True:
        await asyncio.sleep(seconds)
        try:
            work()
        except Exception:
            log.exception(f"{what} failed")
