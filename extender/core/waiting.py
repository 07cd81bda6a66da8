"""What the reservation pass knows of each waiting gang besides room: its maximum wait, whether it
is overdue and since when, its place in the pass's order, its estimated start; and the run times
learnt from the pods seen to finish, which the estimates expect of running and waiting work.

A part of `reserving.Reserving` (which calls it at each pass with the arrays it built); the
pure work is in core/estimates.py and core/lifetimes.py. Times are the callers' wall clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from extender.core.cluster import ClusterState
from extender.core.estimates import Estimate, Walk
from extender.core.lifetimes import Lifetimes
from extender.core.membership import Membership
from extender.core.reservations import NEVER, BoolArray, FloatArray, Layout, Matrix, Reservation, Running, Settings
from extender.core.reservations import Waiting as Queued
from extender.core.waits import Expected, Overdue
from extender.model.pod import PodInfo
from extender.placement import Domain, DomainRef, Gang


def kind_of(pod: PodInfo) -> str:
    """A pod's owner kind, for the run times learnt ("" for a pod no controller owns)."""
    return pod.controller.kind if pod.controller is not None else ""


class Waits:
    def __init__(self, state: ClusterState, membership: Membership, settings: Settings) -> None:
        self._state = state
        self._membership = membership
        self.settings = settings
        self.lifetimes = Lifetimes()
        self._watched: dict[str, tuple[str, float]] = {}  # running pod -> (owner kind, started)
        self._changed: set[str] = set(state.pods)  # pods changed since `learn` last looked
        state.subscribe(self._pod_changed)
        self.limits: dict[str, float] = {}  # queued group -> its maximum wait, where it has one
        self.overdue: dict[str, float] = {}  # queued group -> when it became overdue
        self.became_overdue: list[str] = []  # groups overdue since the caller last took them
        self.estimates: dict[str, Estimate] = {}  # group -> its estimated start, as of the last pass
        self.positions: dict[str, int] = {}  # queued group -> its place in the pass's order (from 1)
        # group -> the domain its estimate names, resolved when estimated: a domain's index is
        # only good for the node table it was read from, and nodes come and go between passes
        self._where: dict[str, DomainRef | None] = {}
        self._told: dict[str, float] = {}  # group -> the estimated start last taken by `take_moved`
        # Topology -> its walk in progress, spread over passes, and the node table's generation
        # its snapshot is of (a walk of an older table is dropped: its node indices mean other nodes)
        self._walks: dict[str, tuple[int, Walk]] = {}
        # Gangs planned while overdue: work that is not overdue may not evict them (the bound on
        # their wait would mean nothing if what they waited behind evicted them at once).
        self.protected: set[str] = set()

    def forget(self, group: str) -> None:
        for kept in (self.estimates, self.positions, self.overdue, self.limits, self._where):
            kept.pop(group, None)

    def clear(self) -> None:
        self.limits, self.overdue, self.estimates, self.positions, self._where = {}, {}, {}, {}, {}
        self.became_overdue, self._told, self.protected, self._walks = [], {}, set(), {}

    def rank(self, order: list[str], since: Callable[[str], float], wall: float) -> list[str]:
        """ORDER (queue order) as the pass serves it: the overdue gangs first, the one overdue
        longest first. Notes each gang's maximum wait (its own, else the cluster's), who is
        overdue since when (and who just became so), and each gang's place."""
        self.limits = {}
        for g in order:
            spec = self._membership.view(g).spec
            own = spec.max_wait if spec is not None else None
            limit = own if own is not None else self.settings.max_wait
            if limit is not None:
                self.limits[g] = limit
        due = {g: since(g) + limit for g, limit in self.limits.items() if since(g) + limit <= wall}
        self.became_overdue += [g for g in order if g in due and g not in self.overdue]
        self.overdue = due
        place = {g: i for i, g in enumerate(order)}
        ranked = [*sorted(due, key=lambda g: (due[g], place[g])), *(g for g in order if g not in due)]
        self.positions = {g: i for i, g in enumerate(ranked, start=1)}
        # The estimates of gangs still among the first `Settings.estimates` stay until the walk
        # in progress reaches them again (`walk`), at their new place.
        limit = self.settings.estimates
        self.estimates = {
            g: replace(e, position=p)
            for g, e in self.estimates.items()
            if (p := self.positions.get(g, limit + 1)) <= limit
        }
        self._where = {g: d for g, d in self._where.items() if g in self.estimates}
        return ranked

    def walk(
        self,
        topology: str,
        wall: float,
        queue: Sequence[Queued],
        pass_: tuple[Matrix, Running, Layout, Sequence[Reservation], Settings],
        rows: tuple[BoolArray, FloatArray, Sequence[str]],
        ready: Mapping[str, Gang],
    ) -> None:
        """The estimated starts of QUEUE's gangs among the first `Settings.estimates` in the
        pass's order. PASS_: the pass's free room, running pods, layout, reservations made and
        settings; ROWS: per running pod whether its end is a runtime bound, when it started, its
        owner kind. Unbounded pods are expected to end as the run times learnt say (else as the
        pass's rule), gangs to run their runtime bound (else the run time learnt for their owner
        kind, else `floor`)."""
        limit = self.settings.estimates
        walk = sorted((w for w in queue if self.positions.get(w.key, limit + 1) <= limit), key=self._place)
        if not walk:
            self._walks.pop(topology, None)
            return
        generation = self._state.table.generation
        kept = self._walks.get(topology)
        progress = kept[1] if kept is not None and kept[0] == generation else None
        if progress is None or progress.done:
            # A new walk, of this pass's snapshot; it goes on over the next passes until done,
            # each pass estimating `Settings.estimates_per_pass` gangs of it.
            free, running, layout, made, settings = pass_
            known, started, kinds = rows
            ends = self.lifetimes.ends(wall, kinds, started, running.end)
            learnt = Running(running.node, running.request, np.where(known, running.end, ends))
            runs = {w.key: run for w in walk if (run := self._gang_run(ready[w.key])) is not None}
            progress = Walk(wall, walk, free, learnt, known, layout, made, runs, settings)
            self._walks[topology] = (generation, progress)
        per_pass = self.settings.estimates_per_pass
        waiting = {w.key for w in walk}
        spec = self._state.topologies.get(topology)
        tree = self._state.table.tree(spec) if spec is not None else None
        for e in progress.step(per_pass if per_pass > 0 else len(walk)):
            if e.key in waiting:  # a gang that started or left meanwhile gets none
                self.estimates[e.key] = replace(e, position=self.positions[e.key])
                where = None
                if tree is not None and e.level is not None and e.domain is not None and e.start != NEVER:
                    where = tree.ref(Domain(e.level, e.domain))
                self._where[e.key] = where

    def take_moved(self, wall: float, margin: float = 60.0) -> list[str]:
        """The groups whose estimated start appeared, went, or moved by more than a quarter of
        the time left until it (at least MARGIN seconds) since they were last taken: their status
        is worth writing now (smaller moves are written with the next write), so that a pass
        costs a few writes, not one per waiting gang."""
        out = [g for g in self._told if g not in self.estimates]
        for g in out:
            del self._told[g]
        for g, e in self.estimates.items():
            told = self._told.get(g)
            if told is None or abs(e.start - told) > max(margin, 0.25 * max(0.0, min(e.start, told) - wall)):
                self._told[g] = e.start
                out.append(g)
        return out

    def spared(self, group: str) -> frozenset[str]:
        """The gangs GROUP may not evict: those that started overdue, unless it is overdue too."""
        return frozenset() if group in self.overdue else frozenset(self.protected - {group})

    def take_overdue(self) -> list[str]:
        out, self.became_overdue = self.became_overdue, []
        return out

    def _place(self, w: Queued) -> int:
        return self.positions[w.key]

    def _gang_run(self, gang: Gang) -> float | None:
        """How long GANG runs once started: the longest runtime bound of its pods when each has
        one, else the run time learnt for its owner kind (None: not known)."""
        pods = [self._state.pods.get(m.key) for m in gang.members()]
        bounds = [p.runtime_bound for p in pods if p is not None]
        if bounds and None not in bounds:
            return max(b for b in bounds if b is not None)
        first = next((p for p in pods if p is not None), None)
        return self.lifetimes.run(kind_of(first)) if first is not None else None

    def learn(self, wall: float) -> None:
        """The run times of the pods seen to finish since the last pass, by owner kind: a pod
        seen running that is Succeeded or Failed now ran from its start to about now (a pod
        deleted while running is not a run time)."""
        pods = self._state.pods
        changed, self._changed = self._changed, set()
        for key in changed:  # (only the pods changed since the last pass: a pass never scans them all)
            pod = pods.get(key)
            watched = self._watched.get(key)
            if watched is not None:
                if pod is None or pod.terminal:
                    del self._watched[key]
                    if pod is not None:
                        self.lifetimes.observe(watched[0], wall - watched[1])
            elif pod is not None and pod.node_name is not None and not pod.terminal and pod.started is not None:
                self._watched[key] = (kind_of(pod), pod.started)

    def _pod_changed(self, kind: str, key: object) -> None:
        if kind == "pod" and isinstance(key, str):
            self._changed.add(key)

    def overdue_of(self, group: str, holding: bool, clock: bool, wall: float) -> Overdue | None:
        """Whether GROUP is overdue, since when, and whether room is held for it (HOLDING).
        CLOCK: whether the pass had a wall clock (else only durations are shown)."""
        since = self.overdue.get(group)
        if since is None:
            return None
        return Overdue(since if clock else None, self.limits[group], max(0.0, wall - since), holding)

    def expected(self, group: str, clock: bool, wall: float) -> Expected | None:
        """GROUP's estimated start as of the last pass (None: not among the first
        `Settings.estimates` gangs waiting, or not waiting)."""
        e = self.estimates.get(group)
        if e is None:
            return None
        never = e.start == NEVER
        domain = self._where.get(group)
        s = self.settings
        return Expected(
            self.positions.get(group, e.position),
            len(self.positions),
            e.start if clock and not never else None,
            0.0 if never else max(0.0, e.start - wall),
            never,
            domain,
            e.waits_for,
            e.bounded,
            e.ahead,
            s.floor,
            s.stretch,
        )
