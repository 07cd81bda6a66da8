"""Evicted: a bounded memory of the gangs (and plain pods) topogang chose to evict, for `explain`.

A preempted gang's pods are deleted, and without its pods a gang is nowhere to be found; a
repaired gang's moved pods are recreated under new names. So every eviction topogang decides is
kept here, newest last: who was evicted, why (preempted for another gang, moved by a repair or
to make a domain whole for another gang, given up by recovery or as unrepairable), by whom,
where, which pods and when (the callers' clock). The parts record as they decide (`Preempting`,
`Repairs`, recovery); `explain` reads.

Bounded: at most LIMIT workloads are kept (the oldest forgotten first) and at most POD_LIMIT pod
names each (a pod beyond them is not found by name; its gang still is). What PodGroup statuses
tell of evictions (`note`: a leader wrote them, `explain` on a live cluster reads them) is one
text per PodGroup object, dropped with the object.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from extender.placement import Preemption

PREEMPTED, REPAIRED, RECOVERY, UNREPAIRABLE = "Preempted", "Repaired", "PartialGangEvicted", "Unrepairable"
MOVED = "Moved"  # to make a domain whole for another gang (defragmentation)
LIMIT = 256
POD_LIMIT = 1024


@dataclass(frozen=True)
class Eviction:
    """One workload's pods evicted by one decision."""

    workload: str  # the gang's key, or a plain pod's
    cause: str  # PREEMPTED, MOVED, REPAIRED, RECOVERY, UNREPAIRABLE
    by: str  # the gang the room was for (itself for a repair)
    what: str  # the decision in a few words: "1 workload(s), 4 pod(s), priority <= 10, ..."
    pods: tuple[str, ...]  # the pods evicted (the first POD_LIMIT)
    count: int  # how many pods in all
    at: float  # when it was decided (the callers' clock)
    whole: bool = True  # False: only pods beyond the gang's minimum, or the part a repair moved
    gang: bool = True  # False: a plain pod
    where: str = ""  # the domain the room was made in (a preemption)

    def render(self, when: str = "") -> str:
        """The eviction in words; WHEN ("at 2026-...Z") follows the verb (the PodGroup status
        keeps the time in a field of its own, so it renders without)."""
        at = f" {when}" if when else ""
        shown = ", ".join(self.pods[:8]) + (f" and {self.count - 8} more" if self.count > 8 else "")
        if self.cause == PREEMPTED:
            part = "" if self.whole else " beyond its minimum"
            return (
                f"preempted{at} by {self.by}, for {self.where}: {self.count} pod(s){part} evicted ({shown}); "
                f"the victims in all: {self.what}"
            )
        if self.cause == MOVED:
            return (
                f"moved{at} for {self.by}, to make {self.where} whole: {self.count} pod(s) evicted, "
                f"each replaced by its controller in room held for it ({self.what})"
            )
        if self.cause == REPAIRED:
            return f"repaired{at}: {self.what}; pods evicted to move: {shown}"
        if self.cause == RECOVERY:
            return f"evicted{at}: {self.what} ({shown})"
        return f"evicted whole{at}, unrepairable: {self.what} ({shown})"


class Evicted:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._by_workload: OrderedDict[str, Eviction] = OrderedDict()
        self._by_pod: dict[str, str] = {}  # evicted pod -> its workload (of the kept records)
        # group -> the last eviction its PodGroup's status tells of (a leader wrote it; `explain`
        # on a live cluster has no memory of its own): one per PodGroup object, gone with it
        self._noted: dict[str, str] = {}

    def record(self, eviction: Eviction) -> None:
        old = self._by_workload.pop(eviction.workload, None)
        if old is not None:
            self._unindex(old)
        self._by_workload[eviction.workload] = eviction
        for pod in eviction.pods:
            self._by_pod[pod] = eviction.workload
        while len(self._by_workload) > self.limit:
            _, oldest = self._by_workload.popitem(last=False)
            self._unindex(oldest)

    def _unindex(self, eviction: Eviction) -> None:
        for pod in eviction.pods:
            if self._by_pod.get(pod) == eviction.workload:
                del self._by_pod[pod]

    def preempted(self, p: Preemption, now: float, group_of: Callable[[str], str | None]) -> None:
        """P's victims, as it is decided: each gang (GROUP_OF its pods) and plain pod it evicts."""
        partial = set(p.elastic) - set(p.victims)
        for workload, keys in _by_workload(p.pods, group_of).items():
            gang = workload not in keys
            what, whole, where = p.cost.describe(p.resources), workload not in partial, str(p.domain)
            self.record(Eviction(workload, PREEMPTED, p.gang, what, _first(keys), len(keys), now, whole, gang, where))

    def moved(self, p: Preemption, now: float, group_of: Callable[[str], str | None]) -> None:
        """P's moved pods, as the move is decided: each gang (GROUP_OF its pods) and plain pod a
        pod moves from, with the node held for each one's replacement."""
        for workload, keys in _by_workload(p.moves, group_of).items():
            shown = sorted(keys)
            to = ", ".join(f"{k} to node {p.moves[k]}" for k in shown[:8]) + (" ..." if len(shown) > 8 else "")
            gang = workload not in keys  # (a gang's moved pods are beyond its minimum: never whole)
            where = str(p.domain)
            self.record(Eviction(workload, MOVED, p.gang, to, _first(shown), len(keys), now, not gang, gang, where))

    def of(self, workload: str) -> Eviction | None:
        return self._by_workload.get(workload)

    def note(self, group: str, text: str | None) -> None:
        """What GROUP's PodGroup status says evicted it last (None: nothing)."""
        if text is None:
            self._noted.pop(group, None)
        else:
            self._noted[group] = text

    def noted(self, group: str) -> str:
        return self._noted.get(group, "")

    def noted_groups(self) -> list[str]:
        return list(self._noted)

    def made_for(self, group: str) -> list[Eviction]:
        """The preemptions' victims GROUP's room was made from, oldest first."""
        return [e for e in self._by_workload.values() if e.cause == PREEMPTED and e.by == group]

    def of_pod(self, pod: str) -> Eviction | None:
        workload = self._by_pod.get(pod)
        return self._by_workload.get(workload) if workload is not None else None

    def workloads(self) -> list[str]:
        """The evicted workloads remembered, oldest first."""
        return list(self._by_workload)

    def pods(self) -> list[str]:
        return list(self._by_pod)


def _by_workload(pods: Iterable[str], group_of: Callable[[str], str | None]) -> dict[str, list[str]]:
    """PODS by the gang each is a member of (GROUP_OF); a plain pod is its own workload."""
    out: dict[str, list[str]] = {}
    for pod in pods:
        out.setdefault(group_of(pod) or pod, []).append(pod)
    return out


def eviction(
    workload: str, cause: str, what: str, pods: Sequence[str], now: float, *, by: str = "", whole: bool = True
) -> Eviction:
    """An Eviction of WORKLOAD's PODS (kept up to POD_LIMIT)."""
    return Eviction(workload, cause, by or workload, what, _first(pods), len(pods), now, whole)


def _first(pods: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(pods)[:POD_LIMIT])
