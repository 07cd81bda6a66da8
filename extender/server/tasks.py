"""The extender's background work: API calls it starts and does not wait for (wake-ups,
nominations, Events, evictions). A failure is logged, never raised into a handler; at shutdown
everything still running is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import structlog

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
            except Exception as exc:
                log.warning(f"{what} failed", error=str(exc))

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
