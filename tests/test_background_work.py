"""The two ways background work runs: kube.background.Background (one loop while leading: the
ungater, the PodGroup writer) and server.tasks.Tasks (the extender's fire-and-forget API calls)."""

from __future__ import annotations

import asyncio

from extender.kube.background import Background
from extender.server.tasks import Tasks


async def test_a_background_loop_starts_once_and_stops_cancelled_and_awaited() -> None:
    runs: list[str] = []
    stopped = asyncio.Event()

    async def loop() -> None:
        runs.append("start")
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.set()

    bg = Background("test loop", loop)
    assert not bg.running
    assert bg.start()
    assert not bg.start()  # running already
    await asyncio.sleep(0)
    assert bg.running
    await bg.stop()
    assert stopped.is_set()  # awaited: nothing of it runs after stop
    assert not bg.running
    await bg.stop()  # stopping twice is harmless
    assert bg.start()
    await asyncio.sleep(0)
    await bg.stop()
    assert runs == ["start", "start"]


async def test_tasks_log_a_failure_instead_of_raising_and_cancel_what_runs_at_the_end() -> None:
    tasks = Tasks()
    cancelled = asyncio.Event()

    async def fails() -> None:
        raise RuntimeError("API down")

    async def hangs() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    tasks.spawn(fails(), "wake")
    tasks.spawn(hangs(), "event")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await tasks.cancel_all()
    assert cancelled.is_set()
