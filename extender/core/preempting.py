"""Preempting: what the scheduler does for a gang that cannot be placed.

attempt   search for victims (`find_preemption`), at most once per `retry` seconds per gang and
          only when the cluster changed since a search that found nothing; on success the
          plan's pods are reserved on their nodes at once (the nomination) and the victims are
          the caller's to evict.
blocked   why a gang waits when only victims beyond what PodDisruptionBudgets allow would make
          room (a budget that changes lets its search run again at once).
gone      a pod left: when it was a gang's last victim, the gang is ready to be planned.
settle    a ready gang's reservations are given back just before it is planned for real,
          into the room its victims left.
expire    nominations whose victims did not go in time are released.

The server and `explain` read the nominations through it too (`nomination`, `is_victim`,
`take_ready`, `dry_run`).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from extender.core.cluster import ClusterState
from extender.core.decisions_room import BudgetBlocked
from extender.core.evicted import Evicted
from extender.core.membership import Membership
from extender.core.nomination import Nomination, Nominations
from extender.core.preemption import find_preemption
from extender.placement import INCOMPLETE, BoolArray, NoPreemption, Preemption, PreemptionResult, Shortfall

RETRY = 5.0  # seconds between two searches for one gang that found nothing


class Preempting:
    def __init__(
        self,
        state: ClusterState,
        membership: Membership,
        *,
        timeout: float,
        retry: float = RETRY,
        evicted: Evicted | None = None,
    ) -> None:
        """EVICTED: where the victims of each preemption started are remembered (for `explain`)."""
        self.state = state
        self.membership = membership
        self.evicted = evicted if evicted is not None else Evicted()
        self.nominations = Nominations(timeout)
        self.retry = retry
        self._tried: dict[str, tuple[int, float]] = {}  # group -> (state version, when) of a fruitless search
        self.last: dict[str, NoPreemption] = {}  # group -> why its last search found no victims
        state.subscribe(self._changed)

    def _changed(self, kind: str, key: object) -> None:
        """A PodDisruptionBudget changed: the gangs only budgets kept from preempting may search
        again at once (their fruitless search is forgotten, however recent)."""
        if kind == "budget":
            for group in self.budget_blocked():
                self._tried.pop(group, None)

    def budget_blocked(self) -> list[str]:
        """The gangs whose last search found victims only beyond what PodDisruptionBudgets allow."""
        return [g for g, why in self.last.items() if why.overruns]

    def blocked(self, group: str, shortfall: Shortfall) -> Shortfall | BudgetBlocked:
        """Why GROUP waits, its plan refused with SHORTFALL: the PodDisruptionBudgets its last
        search met, when only victims beyond them would have made room."""
        last = self.last.get(group)
        if last is None or not last.overruns or shortfall.kind == INCOMPLETE:
            return shortfall
        return BudgetBlocked(shortfall, last.overruns)

    def attempt(
        self, group: str, now: float, held: BoolArray | None = None, spared: AbstractSet[str] = frozenset()
    ) -> Nomination | NoPreemption | None:
        """Search victims for GROUP; None when a recent search already found none. HELD: nodes
        reservations keep from it; SPARED: gangs it may not evict (find_preemption)."""
        tried = self._tried.get(group)
        if tried is not None and (tried[0] == self.state.version or now - tried[1] < self.retry):
            return None
        evicting = self.nominations.evicting()
        result = find_preemption(self.state, self.membership, group, exclude=evicting, held=held, spared=spared)
        if isinstance(result, NoPreemption):
            self._tried[group] = (self.state.version, now)
            self.last[group] = result
            return result
        self._tried.pop(group, None)
        self.last.pop(group, None)
        return self.hold(result, now)

    def hold(self, preemption: Preemption, now: float) -> Nomination:
        """Hold PREEMPTION's room for its gang while its victims leave (defragmentation's too)."""
        gone = {p for p in preemption.pods if p not in self.state.pods or self.state.pods[p].node_name is None}
        if preemption.moves:  # (moved pods are made again elsewhere: not preempted)
            self.evicted.moved(preemption, now, self.membership.group_of)
        else:
            self.evicted.preempted(preemption, now, self.membership.group_of)
        nom = self.nominations.start(preemption, now, gone)
        expected = self.membership.view(nom.group).expected  # pods not created yet it plans for too
        for pod, node in nom.reserved.items():
            info = self.state.pods.get(pod) or expected.get(pod)
            if info is not None:
                self.state.reserve(pod, node, info.requests)
        return nom

    def gone(self, pod: str) -> str | None:
        """POD left the cluster (deleted or finished); the group it was the last victim for."""
        return self.nominations.gone(pod)

    def settle(self, group: str) -> Nomination | None:
        """Give back a nomination's reservations (its gang is about to be planned for real)."""
        nom = self.nominations.drop(group)
        if nom is not None:
            for pod in nom.reserved:
                self.state.unreserve(pod)
        return nom

    def expire(self, now: float) -> list[Nomination]:
        late = self.nominations.expired(now)
        for nom in late:
            for pod in nom.reserved:
                self.state.unreserve(pod)
        return late

    def forget(self, group: str) -> None:
        """The gang is gone or placed: nothing to hold or remember for it."""
        self.settle(group)
        self._tried.pop(group, None)
        self.last.pop(group, None)

    def drop_all(self) -> None:
        """Give back the room held for every preempting gang, and forget every search (this
        replica stops leading: nothing it remembers may start a preemption)."""
        for nom in self.nominations:
            self.settle(nom.group)
        self._tried.clear()
        self.last.clear()

    def nomination(self, group: str) -> Nomination | None:
        """The preemption under way for GROUP, if any."""
        return self.nominations.get(group)

    def is_victim(self, pod: str) -> bool:
        """Whether POD is being evicted to make room for some gang."""
        return self.nominations.is_victim(pod)

    def take_ready(self) -> list[str]:
        """Gangs whose victims have all gone since the last call: their members need waking."""
        return self.nominations.take_ready()

    def dry_run(self, group: str) -> PreemptionResult:
        """What a preemption for GROUP would evict now (nothing is held or evicted)."""
        return find_preemption(self.state, self.membership, group, exclude=self.nominations.evicting())

    def sweep(self, groups: set[str]) -> None:
        """Forget the gangs not in GROUPS (gone): their nominations and fruitless searches."""
        for nom in self.nominations:
            if nom.group not in groups:
                self.forget(nom.group)
        for group in (set(self._tried) | set(self.last)) - groups:
            self.forget(group)
