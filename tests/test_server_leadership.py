"""Leadership lost: a demoted replica forgets what it decided and writes nothing more.

The core and the extender as in a server; the API server's side is recorded (e2e/test_failover.py
takes the Lease from a live leader on the real control plane). Clusters:
- tests/test_core_repair.py's: a gang of 4 rack segments running on racks r1..r4 of one zone,
  `on-unrepairable: EvictGang`; a node of r3 fails and its pod's replacement finds no rack free.
- tests/test_core_preemption.py's: `urgent` (priority 1000, one rack) preempts `one` on rack r3.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from extender.server.extender import Extender
from extender.server.serve import _Term
from tests.test_core_repair import fail_node, names
from tests.test_core_repair import setup as running_gang
from tests.test_server_app import call
from tests.test_server_preemption import Evictions, preempt_args, start


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_demoted_replica_keeps_no_broken_gang_and_its_sweep_evicts_no_one() -> None:
    scheduler, keys = running_gang(spare_rack=False, evict_whole=True)
    actions = Evictions()
    leading = True
    extender = Extender(scheduler, actions, bind_timeout=5, leading=lambda: leading)
    replacement = fail_node(scheduler, "z1-b1-r3-n1", 4)
    scheduler.filter(replacement, names(scheduler), time.monotonic() - 120)  # broken for two minutes
    assert "default/g" in scheduler.repairs.broken
    leading = False
    extender.demote()
    assert scheduler.repairs.broken == {}
    extender.expire()  # past the repair timeout: a leader would evict the gang whole now
    await settle()
    assert actions.evicted == []
    assert actions.events == []
    assert all(scheduler.state.pods[k].node_name for k in keys if k != replacement.key)


async def test_demotion_gives_back_held_room_and_cancels_the_writes_not_sent(aiohttp_client: Any) -> None:
    actions = Evictions(blocked={"default/one-0"})  # a budget keeps one victim: retried while wanted
    client, scheduler, extender = await start(aiohttp_client, actions)
    assert await call(client, "preempt", preempt_args("urgent-0")) == {"NodeNameToMetaVictims": {}}
    await settle()
    assert sorted(actions.evicted) == [f"default/one-{i}" for i in (1, 2, 3)]
    assert scheduler.state.reservations  # the rack is held for urgent while one-0 leaves
    extender.wakeups.wake_members("default/urgent")  # a wake-up queued, not sent yet
    extender.demote()
    assert scheduler.preempting.nomination("default/urgent") is None
    assert not scheduler.state.reservations
    assert not scheduler.reserving.current
    await settle()
    assert actions.woken == []
    assert len(extender.tasks) == 0  # the eviction retrying the blocked victim ended too
    extender.expire()
    await settle()
    assert len(extender.tasks) == 0


async def test_shutdown_cancels_a_read_of_past_moves_still_under_way_and_reports_one_that_failed(
    capsys: Any,
) -> None:
    # Without leader election no term ends before shutdown: the read must stop before the client
    # closes, or it fails on the closed session as an exception nobody retrieves.
    term = _Term(*(cast(Any, None) for _ in range(6)))
    term._reading = asyncio.create_task(asyncio.Event().wait())
    reading = term._reading
    await term.stop_reading()
    assert reading.cancelled()
    assert term._reading is None

    async def broken() -> None:
        raise AssertionError("a closed session")

    term._reading = asyncio.create_task(broken())
    await settle()
    await term.stop_reading()  # said, not raised
    assert "moves not read back" in capsys.readouterr().out
