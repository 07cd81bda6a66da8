"""The two ways background work runs: kube.background.Background (one loop while leading: the
ungater, the PodGroup writer), server.tasks.Tasks (the extender's fire-and-forget API calls) and
server.tasks.periodically (the sweep)."""

from __future__ import annotations

import asyncio
import contextlib

from structlog.testing import capture_logs

from extender.kube.background import Background
from extender.server.tasks import Tasks, periodically


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


async def test_a_periodic_sweep_that_fails_is_logged_and_the_next_one_runs() -> None:
    rounds: list[int] = []
    three = asyncio.Event()

    def sweep() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 3:
            three.set()
        if len(rounds) == 1:
            raise IndexError("a bug met in one sweep")

    with capture_logs() as logs:
        task = asyncio.create_task(periodically(0.001, sweep, "sweep"))
        await asyncio.wait_for(three.wait(), 30)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    failed = [e for e in logs if e["event"] == "sweep failed"]
    assert len(failed) == 1
    assert failed[0]["log_level"] == "error"
    assert failed[0]["exc_info"] is True  # its traceback is in the line
