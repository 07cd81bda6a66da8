"""A maximum wait in the running scheduler: an overdue gang goes first in the reservation pass, the
room held for it is kept from higher priorities that are not overdue, and its status, `explain`,
its PodGroup's status body and the sweep (an Event, a log line, a metric) say so; and every
waiting gang's estimated start.

Cluster (tests/test_core_reserving.py's): 2 blocks (b1, b2) of 2 racks of 2 nodes, 8 GPUs each,
every node full with one plain pod; b1's pods declare a runtime bound of 60 s, b2's none. The
gang `big`: 4 pods of 8 GPUs required in one block, priority 0, `max-wait: 60s` on its PodGroup.
The scheduler's clock reads 0 at wall-clock time WALL.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import orjson
import structlog

from extender.core.explain import explain, render
from extender.core.reservations import Settings
from extender.core.scheduler import GangScheduler
from extender.kube.podgroup_status import status_body
from extender.model.max_wait import MAX_WAIT_ANNOTATION
from extender.model.pod import OwnerRef, PodInfo
from extender.server import wire
from extender.server.extender import Extender
from tests.builders import pod, podgroup
from tests.test_core_reserving import NODES, WALL, free_b1_node, plain
from tests.test_core_reserving import setup as busy
from tests.test_server_app import Recorder

BLOCK = {"topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}}


def setup(settings: Settings | None = None, max_wait: str | None = "60s") -> tuple[GangScheduler, list[str]]:
    scheduler, keys = busy(settings or Settings())
    meta = {"annotations": {MAX_WAIT_ANNOTATION: max_wait}} if max_wait else {}
    scheduler.state.set_podgroup("default/big", podgroup({"minMember": 4, **BLOCK}, name="big", **meta))
    return scheduler, keys


def queue_big(scheduler: GangScheduler, keys: list[str], at: float = 0.0) -> None:
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, at).nodes == []


def test_room_held_for_an_overdue_gang_is_kept_from_higher_priorities_that_are_not_overdue() -> None:
    scheduler, keys = setup()
    queue_big(scheduler, keys)
    assert scheduler.refresh_reservations(0.0, WALL) == (["default/big"], [])
    node = free_b1_node(scheduler)
    # Not overdue yet: work of a higher priority may use the room held for it (strict priority order).
    assert node in scheduler.filter(plain("urgent", priority=1000), NODES, 1.0).nodes
    assert scheduler.reserving.overdue_of("default/big") is None
    scheduler.refresh_reservations(61.0, WALL + 61)
    assert scheduler.reserving.waits.take_overdue() == ["default/big"]
    refused = scheduler.filter(plain("urgent-2", priority=1000), NODES, 62.0)
    assert node not in refused.nodes
    assert refused.unresolvable[node].startswith("topogang: room held for a waiting gang")
    # Backfill still passes: bounded, ending before the gang's estimated start.
    assert node in scheduler.filter(plain("short", priority=1000, activeDeadlineSeconds=5), NODES, 62.0).nodes


def test_without_a_maximum_higher_priorities_still_use_held_room() -> None:
    scheduler, keys = setup(max_wait=None)
    queue_big(scheduler, keys)
    scheduler.refresh_reservations(0.0, WALL)
    node = free_b1_node(scheduler)
    scheduler.refresh_reservations(10_000.0, WALL + 10_000)
    assert node in scheduler.filter(plain("urgent", priority=1000), NODES, 10_001.0).nodes
    # The cluster's default applies to gangs that set none.
    scheduler, keys = setup(Settings(max_wait=60.0), max_wait=None)
    queue_big(scheduler, keys)
    scheduler.refresh_reservations(61.0, WALL + 61)
    assert scheduler.reserving.overdue_of("default/big") is not None


def test_an_overdue_gang_takes_the_slot_from_a_higher_priority_gang() -> None:
    scheduler, keys = setup()
    scheduler.state.set_podgroup("default/hi", podgroup({"minMember": 4, **BLOCK}, name="hi"))
    # (it does not preempt the running plain pods: it waits, as big does)
    hi = [pod(f"hi-{i}", group="hi", spec={"priority": 1000, "preemptionPolicy": "Never"}) for i in range(4)]
    for p in hi:
        scheduler.observe_pod(p)
    queue_big(scheduler, keys)
    assert scheduler.filter(hi[0], NODES, 30.0).nodes == []
    assert scheduler.refresh_reservations(30.0, WALL + 30)[0] == ["default/hi"]  # strict priority order
    made, released = scheduler.refresh_reservations(61.0, WALL + 61)
    assert (made, released) == (["default/big"], ["default/hi"])
    room = scheduler.reserving.of("default/big")
    assert room is not None
    assert room.overdue
    status = scheduler.status("default/big")
    assert status.overdue is not None
    assert status.overdue.since == WALL + 60
    assert "overdue since 1970-01-12T13:47:40Z: waited past its maximum wait of 1m0s; room is held for it" in (
        status.message
    )
    assert "kept from work of any priority that is not overdue" in status.message
    # The higher-priority gang is told the room is held, and where it stands in the queue.
    other = scheduler.status("default/hi")
    assert other.expected is not None
    assert (other.expected.position, other.expected.queued) == (2, 2)


def test_every_waiting_gang_gets_an_estimated_start_and_its_status_says_it() -> None:
    scheduler, keys = setup(max_wait=None)
    queue_big(scheduler, keys)
    scheduler.refresh_reservations(0.0, WALL)
    status = scheduler.status("default/big")
    assert status.expected is not None
    assert (status.expected.position, status.expected.start) == (1, WALL + 60)  # b1's pods end at their bound
    assert str(status.expected.domain) == "block z1/b1"
    assert "position 1 of 1 in the queue; expected to start by 1970-01-12T13:47:40Z" in status.message
    assert status.expected.assumed() == "it waits for 4 pod(s) in block z1/b1 to end: 4 at their runtime bound"
    body = status_body(status, None, "2026-01-01T00:00:00Z")
    assert (body["queuePosition"], body["estimatedStart"]) == (1, "1970-01-12T13:47:40Z")
    assert "overdueSince" not in body
    # Off: no estimate.
    scheduler, keys = setup(Settings(estimates=0), max_wait=None)
    queue_big(scheduler, keys)
    scheduler.refresh_reservations(0.0, WALL)
    assert scheduler.status("default/big").expected is None


def test_explain_says_since_when_it_is_overdue_its_place_and_what_the_estimate_assumed() -> None:
    scheduler, keys = setup()
    queue_big(scheduler, keys)
    scheduler.refresh_reservations(61.0, WALL + 61)
    out = render([explain(scheduler, "default/big")])
    assert "  Overdue: overdue since 1970-01-12T13:47:40Z: waited past its maximum wait of 1m0s; room is held" in out
    # (the running pods show no start time: each pass counts their bound of 60 s from then)
    assert (
        "  Queue: position 1 of 1 in the queue; expected to start by 1970-01-12T13:48:41Z; it waits for 4 pod(s)"
        " in block z1/b1 to end: 4 at their runtime bound"
    ) in out
    body = status_body(scheduler.status("default/big"), None, "2026-01-01T00:00:00Z")
    assert body["overdueSince"] == "1970-01-12T13:47:40Z"


def test_run_times_are_learnt_from_pods_seen_to_finish() -> None:
    scheduler, _ = setup(max_wait=None)
    waits = scheduler.reserving.waits
    waits.lifetimes.least = 2
    owner = (OwnerRef("batch/v1", "Job", "train", "u1", True),)
    for i, ran in enumerate((100.0, 300.0)):
        running = replace(pod(f"job-{i}", node_name=NODES[i]), owner_refs=owner, started=WALL - ran)
        scheduler.observe_pod(running)
    scheduler.observe_pod(replace(pod("gone", node_name=NODES[2]), owner_refs=owner, started=WALL - 50))
    waits.learn(WALL)
    assert waits.lifetimes.run("Job") is None  # nothing finished yet
    for i in range(2):
        scheduler.observe_pod(replace(scheduler.state.pods[f"default/job-{i}"], phase="Succeeded"))
    scheduler.delete_pod("default/gone")  # deleted while running: not a run time
    waits.learn(WALL)
    assert waits.lifetimes.run("Job") == 300.0  # the median of 100 and 300 s (the upper of two)


async def test_the_sweep_says_a_gang_became_overdue_once_with_an_event_a_log_line_and_a_metric() -> None:
    scheduler, keys = setup()
    recorder = Recorder()
    extender = Extender(scheduler, recorder, bind_timeout=5)
    queue_big(scheduler, keys, at=time.monotonic() - 120)  # queued two minutes ago: past its 60 s
    with structlog.testing.capture_logs() as logs:
        extender.expire()
        extender.expire()
    for _ in range(10):
        await asyncio.sleep(0)
    overdue = [e for e in logs if e["event"] == "gang overdue"]
    assert len(overdue) == 1
    assert (overdue[0]["group"], overdue[0]["holds"], overdue[0]["max_wait_s"]) == ("default/big", "block z1/b1", 60.0)
    events = [e for e in recorder.said if e[1] == "Overdue"]
    assert len(events) == 1
    name, _, message, kind = events[0]
    assert (name, kind) == ("big", "Warning")
    assert message.startswith("overdue since ")
    assert "room held for it in block z1/b1 (4 nodes)" in message
    assert extender.metrics.overdue._value.get() == 1.0  # type: ignore[attr-defined]


def high_gang(scheduler: GangScheduler, name: str = "hi") -> list[PodInfo]:
    """A gang of a block at priority 1,000 that may preempt."""
    scheduler.state.set_podgroup(f"default/{name}", podgroup({"minMember": 4, **BLOCK}, name=name))
    members = [pod(f"{name}-{i}", group=name, spec={"priority": 1000}) for i in range(4)]
    for p in members:
        scheduler.observe_pod(p)
    return members


def b2_out_of_reach(scheduler: GangScheduler) -> None:
    """b2's running pods at priority 5,000: no gang here may evict them."""
    for n in NODES:
        if "-b2-" in n:
            scheduler.observe_pod(pod(f"run-{n}", node_name=n, spec={"priority": 5000}))


def test_a_higher_priority_gang_does_not_preempt_its_way_into_room_held_for_an_overdue_gang() -> None:
    for max_wait, preempts in ((None, True), ("60s", False)):
        scheduler, keys = setup(max_wait=max_wait)
        b2_out_of_reach(scheduler)
        queue_big(scheduler, keys)
        scheduler.refresh_reservations(61.0, WALL + 61)  # big holds b1 (overdue with a maximum)
        hi = high_gang(scheduler)
        scheduler.filter(hi[0], NODES, 62.0)
        found = scheduler.preempting.nomination("default/hi")
        assert (found is not None) == preempts, max_wait
        if found is not None:  # b1's priority-0 pods: strict priority order
            assert str(found.preemption.domain) == "block z1/b1"


def test_a_gang_that_started_overdue_is_not_evicted_by_work_that_is_not() -> None:
    for max_wait, evicted in ((None, True), ("60s", False)):
        scheduler, keys = setup(max_wait=max_wait)
        b2_out_of_reach(scheduler)
        queue_big(scheduler, keys)
        scheduler.refresh_reservations(61.0, WALL + 61)
        for n in NODES:  # b1's pods reached their bound
            if "-b1-" in n:
                scheduler.delete_pod(f"default/run-{n}")
        assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 62.0).nodes != []
        for key, node in dict(scheduler.reserved("default/big")).items():
            scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=node, phase="Running"))
        assert scheduler.status("default/big").phase == "Scheduled"
        hi = high_gang(scheduler)
        scheduler.filter(hi[0], NODES, 63.0)
        found = scheduler.preempting.nomination("default/hi")
        assert (found is not None and "default/big" in found.preemption.victims) == evicted, max_wait


def test_kube_scheduler_may_not_evict_a_gang_that_started_overdue_for_a_plain_pod() -> None:
    scheduler, keys = setup()
    for i, key in enumerate(keys):
        scheduler.observe_pod(replace(scheduler.state.pods[key], node_name=NODES[i], uid=f"u{i}", phase="Running"))
    scheduler.observe_pod(plain("urgent", priority=1000))
    extender = Extender(scheduler, Recorder(), bind_timeout=5)
    victims = {NODES[0]: {"Pods": [{"UID": "u0"}], "NumPDBViolations": 0}, NODES[5]: {"Pods": [{"UID": "x"}]}}
    args = wire.PreemptArgs("default/urgent", victims, {})
    assert set(orjson.loads(extender.preempt(args))["NodeNameToMetaVictims"]) == {NODES[0], NODES[5]}
    scheduler.reserving.waits.protected.add("default/big")  # as when it was planned overdue
    assert set(orjson.loads(extender.preempt(args))["NodeNameToMetaVictims"]) == {NODES[5]}
