"""Defragmentation's search: the fewest movable pods whose move lets a waiting gang's minimum fit
in one domain, each with a new place outside it.

It is preemption's victim search (`find_victims`) over movable pods only (`core/movable.py`):
plain pods a controller recreates and the members of running gangs beyond their gangs' minimums
(`core/movable_members.py`), of a priority no higher than the gang's, not moved within the
cooldown, not being evicted for someone else. Every candidate is a workload of its own (a gang
member moves alone: it keeps running, so its gang keeps it) and is given one priority, so
sets compare by their count of pods first, then by the room they take and the work they lose
(the youngest pods first), never breaking a PodDisruptionBudget. Then each moved pod must have a
new place (`relocate`): on the cluster without the gang's domain and with the gang's room
taken, a gang member within the domain its own gang's constraints keep it in. A pod with none
is left out and the search runs again, at most MAX_ROUNDS times; when no round finds a set
whose every pod has a new place, nothing is moved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Set as AbstractSet

from extender.core.cluster import ClusterState
from extender.core.exclusivity import snapshot_for
from extender.core.membership import Membership
from extender.core.movable_members import MovableMember, movable_members
from extender.core.preemption import budgets_of, running_workloads
from extender.placement import (
    MovedPod,
    NoPreemption,
    PreemptionResult,
    Stranded,
    Workload,
    closed_domain,
    find_victims,
    relocate,
)

MAX_ROUNDS = 3  # searches, each without the pods the last one could not place elsewhere
FLAT = 0  # the one priority every candidate is given: sets compare by pods, not by priority


def find_moves(
    state: ClusterState,
    membership: Membership,
    group: str,
    movable: Callable[[str], bool],
    exclude: AbstractSet[str] = frozenset(),
    busy: Callable[[str], bool] = lambda group: False,
) -> PreemptionResult:
    """The pods to move for GROUP and where each goes (`Preemption.moves`), or why there are none.
    MOVABLE(pod key): whether the pod may move (the cooldown included); EXCLUDE: pods being
    evicted for someone else; BUSY(group): a gang with a preemption or a repair of its own under
    way (none of its pods moves)."""
    view = membership.view(group)
    gang = view.built.gang if view.built is not None else None
    if gang is None:
        return NoPreemption(group, "the gang is not valid")
    candidates = []
    members: dict[str, MovableMember] = {}  # gang member -> where its gang lets it go
    for w in running_workloads(state, membership, group, exclude):
        if not w.gang:
            if w.priority <= view.priority and movable(w.key):
                candidates.append(dataclasses.replace(w, priority=FLAT))
            continue
        for m in movable_members(state, membership, w, view.priority, movable, busy):
            members[m.pod.key] = m
            candidates.append(Workload(m.pod.key, FLAT, (m.pod,), gang=False))
    if not candidates:
        return NoPreemption(group, f"no movable pod of priority <= {view.priority} runs")
    snapshot = snapshot_for(state, membership, group, gang)
    budgets = budgets_of(state, candidates)
    stranded: list[Stranded] = []
    found: PreemptionResult = NoPreemption(group, "no movable pod helps")
    for _ in range(MAX_ROUNDS):
        found = find_victims(snapshot, gang, FLAT + 1, candidates, budgets)
        if isinstance(found, NoPreemption):
            break
        closed = closed_domain(snapshot, gang, found.domain, found.plan)
        moved = [_moved(state, key, members.get(key)) for key in found.pods]
        where = relocate(snapshot, gang, found.plan, closed, moved)
        if not isinstance(where, Stranded):
            return dataclasses.replace(found, moves=where)
        stranded.append(where)
        candidates = [w for w in candidates if w.key != where.pod]
        if not candidates:
            break
    return _refused(group, found, stranded)


def _moved(state: ClusterState, key: str, member: MovableMember | None) -> MovedPod:
    pod = state.pods[key]
    assert pod.node_name is not None
    if member is None:
        return MovedPod(key, pod.node_name, pod.requests, pod.placement)
    return MovedPod(key, pod.node_name, pod.requests, member.placement, member.within, member.home)


def _refused(group: str, found: PreemptionResult, stranded: list[Stranded]) -> NoPreemption:
    why = found.reason if isinstance(found, NoPreemption) else ""
    # the victim search speaks of priorities; here every candidate has the one FLAT
    why = why.replace(f"evicting every workload below priority {FLAT + 1}", "every movable pod left")
    why = why.removeprefix("evicting lower-priority workloads would not help: ")
    if stranded:
        shown = "; ".join(f"{s.pod}: {s.why}" for s in stranded)
        then = f"; then: {why}" if isinstance(found, NoPreemption) else ""
        why = f"a pod that would be moved has no place elsewhere ({shown}){then}"
    overruns = found.overruns if isinstance(found, NoPreemption) else ()
    plans = found.plans if isinstance(found, NoPreemption) else 0
    return NoPreemption(group, f"moving pods would not help: {why}", plans, overruns)
