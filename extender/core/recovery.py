"""Gangs found below their minimum when a replica starts leading: cut off mid-bind, or degraded.

A gate's binds go out together, but a process can die between two of them: the binds already
sent land, the rest never do, and the gang runs below its minimum. A gang that ran whole and
then lost a pod (a node failed, a repair is under way) is also below its minimum, and while one
leader runs it is kept (its `on-unrepairable` policy decides, through the repair path). A new
leader must not mistake the second for the first, or every rollout would evict degraded jobs.

The pods tell them apart. A gate opens only once every pod of the minimum has reached it, so
after a cut every member still unbound was created before the first of the bound ones was bound
(its PodScheduled condition, which the API server's Binding sets). A degraded gang's missing
members are replacements, created after the others were bound, or are not there at all. A gang
whose bound pods are leaders waiting for followers their controller creates only after them (a
JobSet with exclusive placement: grouping/expected.py) was neither: its room for the followers is
held again at once, with no deadline, as the last leader held it. Only a
gang cut off mid-bind is planned at once and given a deadline (the bind timeout plus a grace);
one still below its minimum by then is given up: its bound members are to be evicted (the caller
does the I/O) and its status says why. When the times are unknown the gang is kept: running work
is never evicted on a guess. Gangs with finished pods are left alone: they ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from extender.core.decisions import R_PARTIAL_EVICTED, PlanEvent, Released
from extender.core.evicted import RECOVERY, eviction
from extender.core.scheduler import GangScheduler
from extender.model.pod import PodInfo
from extender.placement import incomplete, meets_minimum


def bound_below_minimum(scheduler: GangScheduler, group: str) -> list[str] | None:
    """The bound members of GROUP when some but not all of its minimum is bound, else None."""
    view = scheduler.lookup.view(group)
    gang = view.built.gang if view.valid and view.built is not None else None
    if gang is None:
        return None
    pods = [p for k in view.pods if (p := scheduler.lookup.pod(k)) is not None]
    if any(p.terminal for p in pods):
        return None
    bound = {p.key for p in pods if p.node_name is not None}
    if not bound or meets_minimum(gang, bound):
        return None
    return sorted(bound)


def cut_mid_bind(members: Sequence[PodInfo], complete: bool) -> bool:
    """Whether MEMBERS (some bound, the gang below its minimum) are a gate cut off between two
    binds: the minimum all present (COMPLETE), and every unbound member created no later than
    the first bound one was bound (times have one-second steps, so equal counts as before)."""
    if not complete:
        return False  # members of the minimum are missing: it lost pods, it was not cut
    bound_at = [p.scheduled_at if p.scheduled_at is not None else p.started for p in members if p.node_name]
    created = [p.created for p in members if p.node_name is None]
    if not bound_at or None in bound_at or None in created:
        return False  # unknown: keep the running pods rather than evict on a guess
    first = min(t for t in bound_at if t is not None)
    return all(t is not None and t <= first for t in created)


@dataclass
class Found:
    """What a new leader found: gangs cut off mid-bind (planned, on a deadline) and gangs that
    ran whole and run below their minimum now (kept)."""

    events: list[PlanEvent] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)


@dataclass
class Recovery:
    within: float  # seconds a part-bound gang has to reach its minimum
    deadlines: dict[str, float] = field(default_factory=dict)  # group -> when it is given up

    def start(self, scheduler: GangScheduler, now: float) -> Found:
        """Find the gangs below their minimum; plan the rest of each one cut off mid-bind and
        start its clock. Degraded gangs are left to the repair path, as under one leader."""
        found = Found()
        for group in scheduler.lookup.groups():
            if group in self.deadlines or bound_below_minimum(scheduler, group) is None:
                continue
            view = scheduler.lookup.view(group)
            gang = view.built.gang if view.built is not None else None
            members = [p for k in view.pods if (p := scheduler.lookup.pod(k)) is not None]
            if view.expected and all(p.node_name is not None for p in members):
                event = scheduler.plan_group(group, now)  # its leaders wait for their followers: hold their room
                found.events.extend([event] if event is not None else [])
                continue
            if gang is None or not cut_mid_bind(members, incomplete(gang) is None and not view.waiting):
                found.degraded.append(group)
                continue
            self.deadlines[group] = now + self.within
            event = scheduler.plan_group(group, now)
            if event is not None:
                found.events.append(event)
        return found

    def overdue(self, scheduler: GangScheduler, now: float) -> dict[str, list[str]]:
        """Gangs past their deadline still below the minimum -> their bound pods to evict. Gangs
        that made it (or are gone) stop being watched."""
        out = {}
        for group, deadline in list(self.deadlines.items()):
            bound = bound_below_minimum(scheduler, group) if scheduler.lookup.has_pods(group) else None
            if bound is None:
                del self.deadlines[group]
            elif now >= deadline:
                del self.deadlines[group]
                why = Released(R_PARTIAL_EVICTED, total=len(bound), seconds=self.within)
                scheduler.give_up(group, why)
                scheduler.evicted.record(eviction(group, RECOVERY, why.render(), bound, now))
                out[group] = bound
        return out
