"""The reservation sweep: which waiting gangs may hold room, and the gangs kube-scheduler never
asks about (a full cluster) found so that they queue for it too. The scheduler's, in a module of
its own; `GangScheduler.refresh_reservations` calls it.
"""

from __future__ import annotations

from typing import Protocol

from extender.core.cluster import ClusterState
from extender.core.exclusivity import snapshot_for
from extender.core.membership import GroupView, Membership
from extender.core.plans import Plans
from extender.core.preempting import Preempting
from extender.core.reasons import Reasons
from extender.core.repairing import Repairs
from extender.core.reserving import Reserving
from extender.core.status import queue_of
from extender.placement import NO_CAPACITY, NO_DOMAIN, BoolArray, Gang, Unplaceable, incomplete, plan


class GangScheduler(Protocol):
    """The parts of the scheduler the sweep reads (core/scheduler.py's GangScheduler)."""

    state: ClusterState
    membership: Membership
    plans: Plans
    reasons: Reasons
    preempting: Preempting
    repairs: Repairs
    reserving: Reserving

    def held_from(self, group: str, view: GroupView, now: float) -> BoolArray | None: ...


def refresh(sched: GangScheduler, now: float, wall: float | None) -> tuple[list[str], list[str]]:
    """Who holds room where (the sweep): (gangs given a reservation, gangs whose reservation
    went). WALL: the wall clock at NOW, for pods' start times and estimated starts (None: none)."""
    if sched.reserving.enabled:
        for group in _discover(sched, now):
            sched.reserving.told.add(group)
    ready: dict[str, Gang] = {}
    for group in sched.reserving.queued():
        if not sched.membership.has(group) or group in sched.plans:
            continue
        if sched.preempting.nomination(group) is not None or group in sched.repairs.underway:
            continue
        view = sched.membership.view(group)
        gang = view.built.gang if view.valid and view.built is not None else None
        if gang is not None and incomplete(gang) is None and queue_of(sched.state, view)[0] is None:
            ready[group] = gang
    return sched.reserving.refresh(now, wall, ready)


def _discover(sched: GangScheduler, now: float) -> list[str]:
    """Gangs kube-scheduler never asks about: when its own filters find no node with room (a full
    cluster), topogang is not called, and a gang would never queue for a reservation. Each whole,
    unplanned gang is tried once per cluster change (a plan not kept): refused for room, it queues."""
    version = sched.state.version
    found = []
    for group in sched.membership.groups():
        if group in sched.plans or sched.reserving.is_queued(group) or not sched.reserving.untried(group, version):
            continue
        if sched.preempting.nomination(group) is not None or group in sched.repairs.underway:
            continue
        view = sched.membership.view(group)
        gang = view.built.gang if view.valid and view.built is not None else None
        if gang is None or view.waiting or incomplete(gang) is not None or queue_of(sched.state, view)[0]:
            continue  # (a gang its queue holds back waits for the queue, not for room)
        if any(m.node is not None for m in gang.members()):
            continue  # it runs: pods beyond its minimum do not queue for room
        result = plan(snapshot_for(sched.state, sched.membership, group, gang, sched.held_from(group, view, now)), gang)
        if isinstance(result, Unplaceable) and result.reason.kind in (NO_DOMAIN, NO_CAPACITY):
            sched.reasons.record(group, sched.reserving.waiting(group, now, gang) or result.reason)
            found.append(group)  # (its status tells why it waits, or why it never runs)
    return found
