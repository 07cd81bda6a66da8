"""Estimated starts for waiting gangs: a walk of the queue over the running work's expected ends.

Slurm's backfill computes an expected start for each pending job by walking the queue in order
over a profile of when running jobs end; this is that walk on the topology, counting room as the
reservation pass does (`reservations.soonest`, the same function: whole pods of the gang's shape per node, whole
parts per part domain):

1. The releases are the running pods' expected ends (their runtime bounds, else the pass's rule:
   twice as long again as they have run, at least `floor`), earliest first.
2. The waiting gangs are walked in the pass's order (overdue first, then priority, then age), as
   many as the caller steps through. Each gets the soonest moment a domain of its level (its reserved domain,
   when it holds one) holds it, given the gangs before it.
3. A gang expected to start at s in domain d takes the room its pods need on the nodes of d that
   hold them at s, counted as taken from now (which only makes later gangs' estimates later), and
   gives it back at s + its expected run: its runtime bound, else `floor` (a pod that has just
   started, by the pass's rule).
4. A gang behind may start before the gangs ahead of it where room they do not take frees, as
   kube-scheduler's queue has no head-of-line blocking.

What it cannot know: work that arrives later (a higher-priority gang goes ahead), pods that
outlive their estimate, held room beyond the pods of its gang. Cost: per gang one bisection over
the releases (`soonest`) and one insertion of its pods' ends; `Walk.step(n)` walks the next n
gangs, so a caller bounds the gangs and may make the walk a few at a time (the server: a few a
pass).

Pure: arrays in, estimates out; no clock, no I/O. The server's reservation pass
(core/reserving.py), the simulator and bench/trace.py call it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from extender.core.reservations import (
    NEVER,
    BoolArray,
    Demand,
    FloatArray,
    IntArray,
    Layout,
    Matrix,
    Reservation,
    Running,
    Settings,
    Waiting,
    released,
    soonest,
)


@dataclass(frozen=True)
class Estimate:
    key: str
    position: int  # in the walk's order, from 1
    start: float  # NEVER: no domain of its level holds it, even empty
    level: int | None = None  # the domain it is expected to start in
    domain: int | None = None
    waits_for: int = 0  # releases in that domain before its start: running pods' and gangs' ahead
    bounded: int = 0  # of those, running pods whose end is their runtime bound
    ahead: int = 0  # of those, pods of gangs expected to start before it


@dataclass
class _Releases:
    """What frees, by node, ordered by when: running pods (KNOWN: their end is a bound) and the
    pods of gangs the walk expects to start (AHEAD)."""

    node: IntArray
    request: Matrix
    end: FloatArray
    known: BoolArray
    ahead: BoolArray

    def add(self, nodes: IntArray, request: Matrix, end: float) -> None:
        at = int(np.searchsorted(self.end, end, side="right"))
        self.node = np.insert(self.node, at, nodes)
        self.request = np.insert(self.request, at, request, axis=0)
        self.end = np.insert(self.end, at, np.full(len(nodes), end))
        self.known = np.insert(self.known, at, np.zeros(len(nodes), dtype=np.bool_))
        self.ahead = np.insert(self.ahead, at, np.ones(len(nodes), dtype=np.bool_))


class Walk:
    """The walk, made a few gangs at a time: `step(n)` estimates the next N gangs of ORDER (the
    pass's order) on the snapshot it was made of, given FREE room (nodes x resources), the RUNNING
    pods (KNOWN: whose end is a runtime bound) and the RESERVATIONS made; RUNS: how long a gang
    runs at most (its runtime bound), where known. A caller spreads one walk over several passes
    (each pass's cost bounded by N searches) and gets the same answers as one whole walk
    (`step(len(order))`)."""

    def __init__(
        self,
        now: float,
        order: Sequence[Waiting],
        free: Matrix,
        running: Running,
        known: BoolArray,
        layout: Layout,
        reservations: Sequence[Reservation],
        runs: Mapping[str, float],
        settings: Settings,
    ) -> None:
        sort = np.argsort(running.end, kind="stable")
        self._releases = _Releases(
            running.node[sort],
            running.request[sort],
            running.end[sort],
            np.asarray(known, dtype=np.bool_)[sort],
            np.zeros(len(sort), dtype=np.bool_),
        )
        self._now, self._layout, self._runs, self._settings = now, layout, dict(runs), settings
        self._order = list(order)
        self._free = free.copy()
        self._reserved = {r.key: r for r in reservations}
        self.position = 0  # gangs of ORDER estimated so far

    @property
    def done(self) -> bool:
        return self.position >= len(self._order)

    def step(self, count: int) -> list[Estimate]:
        """The estimates of the next COUNT gangs of the order (fewer at its end)."""
        out: list[Estimate] = []
        while len(out) < count and not self.done:
            w = self._order[self.position]
            self.position += 1
            out.append(self._one(self.position, w))
        return out

    def _one(self, position: int, w: Waiting) -> Estimate:
        layout, releases, f = self._layout, self._releases, self._free
        r = self._reserved.get(w.key)
        level = r.level if r is not None else layout.level_for(w.demand)
        if level is None:
            return Estimate(w.key, position, NEVER)
        allowed = layout.labeled[level].copy()
        if r is not None:
            allowed[:] = False
            allowed[r.domain] = True
        found = soonest(self._now, w.demand, level, f, releases, layout, allowed)
        if found is None:
            return Estimate(w.key, position, NEVER, level)
        # What frees in its domain before it starts: what it waits for.
        upto = max(found.releases, int(np.searchsorted(releases.end, found.start, side="right")))
        inside = layout.domain_of[level][releases.node[:upto]] == found.domain
        waits = int(inside.sum())
        bounded = int((inside & releases.known[:upto]).sum())
        ahead = int((inside & releases.ahead[:upto]).sum())
        pods = _take(layout, level, found.domain, w.demand, released(f, releases, 0, upto))
        nodes = np.flatnonzero(pods).astype(np.int64)
        taken: Matrix = (pods[nodes, None] * np.array(w.demand.request, dtype=np.int64)[None, :]).astype(np.int64)
        f[nodes] -= taken
        run = self._runs.get(w.key)
        releases.add(nodes, taken, found.start + (run if run is not None else self._settings.floor))
        return Estimate(w.key, position, found.start, level, found.domain, waits, bounded, ahead)


def _take(layout: Layout, level: int, domain: int, demand: Demand, free: Matrix) -> IntArray:
    """Pods of DEMAND per node, placed in DOMAIN of LEVEL given FREE: on the nodes that hold the
    most first (whole parts in the part domains that hold the most whole parts first)."""
    node_level = len(layout.domain_of) - 1
    single = replace(demand, part=0)
    per_node: IntArray = layout.room(free, single, node_level)[layout.domain_of[node_level]]
    members = layout.members(level, domain)
    out: IntArray = np.zeros(layout.nodes, dtype=np.int64)
    if demand.part and demand.part_level > level:
        parts = layout.domain_of[demand.part_level][members]
        keys, inverse = np.unique(parts, return_inverse=True)
        whole = np.bincount(inverse, weights=per_node[members], minlength=len(keys)).astype(np.int64) // demand.part
        wanted = _fill(whole[np.argsort(-whole, kind="stable")], -(-demand.pods // demand.part))
        for i, count in zip(np.argsort(-whole, kind="stable"), wanted, strict=True):
            if count:
                nodes = members[inverse == i]
                out[nodes] = _fill(per_node[nodes], int(count) * demand.part)
        return out
    order = members[np.argsort(-per_node[members], kind="stable")]
    out[order] = _fill(per_node[order], demand.pods)
    return out


def _fill(room: IntArray, need: int) -> IntArray:
    """NEED units taken from ROOM in order, as much of each as it has."""
    before = np.cumsum(room) - room
    taken: IntArray = np.clip(need - before, 0, room).astype(np.int64)
    return taken
