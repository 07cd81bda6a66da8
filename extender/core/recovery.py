"""Gangs left part-bound by a crash: finish them, or take back what was bound.

A gate's binds go out together, but a process can die between two of them: the binds already
sent land, the rest never do, and the gang runs below its minimum. When a replica starts leading
it looks for every gang with some but not all of its minimum bound, plans the rest at once (so
its room is held) and gives it a deadline (the bind timeout plus a grace). A gang whose minimum
is bound by then is done; one still below it is given up: its bound members are to be evicted
(the caller does the I/O) and its status says why. Gangs with finished pods are left alone: they
ran, and a pod that ends is not a bind that was lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from extender.core.decisions import R_PARTIAL_EVICTED, PlanEvent, Released
from extender.core.scheduler import GangScheduler
from extender.placement import meets_minimum


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


@dataclass
class Recovery:
    within: float  # seconds a part-bound gang has to reach its minimum
    deadlines: dict[str, float] = field(default_factory=dict)  # group -> when it is given up

    def start(self, scheduler: GangScheduler, now: float) -> list[PlanEvent]:
        """Find the part-bound gangs, plan the rest of each, start their clocks."""
        events = []
        for group in scheduler.lookup.groups():
            if group in self.deadlines or bound_below_minimum(scheduler, group) is None:
                continue
            self.deadlines[group] = now + self.within
            event = scheduler.plan_group(group, now)
            if event is not None:
                events.append(event)
        return events

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
                scheduler.give_up(group, Released(R_PARTIAL_EVICTED, total=len(bound), seconds=self.within))
                out[group] = bound
        return out
