"""Preemptions under way: the room a gang's victims free, held for the gang while they leave.

A nomination is kube-scheduler's nominated node for a whole gang: the preemption plan's pods are
reserved on their nodes at once (so other gangs plan around them and plain pods are kept off,
as for any reservation) while the victims are evicted. When every victim pod is gone the gang
is *ready*: its members are woken and planned as usual, into the room now free. When the
victims do not all go within the timeout, the nomination is released and the reason kept.

Synchronous and clock-free like the rest of the core: callers pass `now`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from extender.core.decisions_room import Preempting, PreemptionTimedOut
from extender.placement import Preemption


@dataclass
class Nomination:
    group: str
    preemption: Preemption
    created: float
    deadline: float
    pending: set[str] = field(default_factory=set)  # victim pods not gone yet

    @property
    def reserved(self) -> dict[str, str]:
        """Preemptor pod -> node: the room held."""
        return dict(self.preemption.plan.assignments)

    def reason(self) -> Preempting:
        return Preempting.of(self.preemption, len(self.preemption.pods) - len(self.pending))

    def describe(self) -> str:
        return self.reason().render()

    def timed_out(self, seconds: float) -> PreemptionTimedOut:
        """Why the room is given back: these victims did not leave within SECONDS."""
        return PreemptionTimedOut(self.preemption.domain, tuple(sorted(self.pending)), seconds)


class Nominations:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.by_group: dict[str, Nomination] = {}
        self._victim_of: dict[str, str] = {}  # victim pod -> the group it makes room for
        self._ready: list[str] = []

    def __contains__(self, group: object) -> bool:
        return group in self.by_group

    def __iter__(self) -> Iterator[Nomination]:
        return iter(list(self.by_group.values()))

    def get(self, group: str) -> Nomination | None:
        return self.by_group.get(group)

    def start(self, preemption: Preemption, now: float, gone: set[str] | None = None) -> Nomination:
        """Hold `preemption`'s room for its gang; `gone` are victim pods known to be gone already."""
        self.drop(preemption.gang)
        pending = set(preemption.pods) - (gone or set())
        nom = Nomination(preemption.gang, preemption, now, now + self.timeout, pending)
        self.by_group[nom.group] = nom
        for pod in pending:
            self._victim_of[pod] = nom.group
        if not pending:
            self._ready.append(nom.group)
        return nom

    def is_victim(self, pod: str) -> bool:
        return pod in self._victim_of

    def evicting(self) -> set[str]:
        """Victim pods on their way out: no other preemption may count on them."""
        return set(self._victim_of)

    def gone(self, pod: str) -> str | None:
        """A pod left; the group it made room for when that was its last victim."""
        group = self._victim_of.pop(pod, None)
        nom = self.by_group.get(group) if group else None
        if nom is None:
            return None
        nom.pending.discard(pod)
        if nom.pending:
            return None
        self._ready.append(nom.group)
        return nom.group

    def ready(self, group: str) -> bool:
        nom = self.by_group.get(group)
        return nom is not None and not nom.pending

    def take_ready(self) -> list[str]:
        """Groups whose victims have all gone since the last call (their members need waking)."""
        out, self._ready = [g for g in self._ready if g in self.by_group], []
        return out

    def expired(self, now: float) -> list[Nomination]:
        """Nominations whose victims did not all go in time, removed."""
        late = [n for n in self.by_group.values() if n.pending and now > n.deadline]
        for nom in late:
            self.drop(nom.group)
        return late

    def drop(self, group: str) -> Nomination | None:
        nom = self.by_group.pop(group, None)
        if nom is not None:
            for pod in nom.pending:
                if self._victim_of.get(pod) == group:
                    del self._victim_of[pod]
        return nom
