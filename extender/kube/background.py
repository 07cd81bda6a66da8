"""One loop an object runs in the background while this replica leads (the ungater, the
PodGroup writer): started once, cancelled and awaited on stop, so a stop never leaves it running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


class Background:
    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._name = name
        self._run = run
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> bool:
        """Start the loop unless it runs; True when it was started now."""
        if self._task is not None:
            return False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)
        return True

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
