"""Reservations and backfill: room held for a gang that has waited too long, where it frees soonest.

kube-scheduler's queue has no head-of-line blocking: a gang that does not fit does not hold the
ones behind it. That keeps small gangs moving and starves large ones, because a stream of small
gangs takes every room that frees before a large gang can use it. A *reservation* fixes that the
way Slurm's backfill does, on the topology:

- Who: a waiting gang that has waited `reserve_after` seconds, or that is first in queue order at
  its priority; at most `limit` gangs, in queue order (priority, then age), so a higher-priority
  gang takes a lower one's place (and domain) when the limit is reached. `coarsest_only` narrows
  who to the gangs whose domain is of that level or coarser (the bench's zone-sized variant).
- Where: one domain of the gang's required level (without one, of the finest level where one
  domain, empty, holds the gang), counting only the nodes its pods may use (`Waiting.usable`:
  taints, selectors), the one *expected to have room soonest*: running pods are
  released in the order of their expected end until some domain holds the gang. Domains of
  different reservations never share a node. A reservation keeps its domain while it lasts, its
  estimated start recomputed at every pass, unless another domain is then expected to hold the
  gang clearly sooner (by a quarter of the wait, at least `move_margin`): a pod without a bound
  that outlives its estimate would otherwise tie the gang to its domain.
- Held: the room of the reserved domain, free now and as it frees, is kept from other work (with
  `children`, the default, only in the fewest children of the domain, one level finer, that hold
  the gang at its estimated start; with `whole_domain=False`, only on the nodes the gang is
  expected to start on: those that hold one of its pods now and those the releases it waits
  for free), with three exceptions (`admits`):
  the gang itself; work of a higher priority (never blocked by a lower-priority reservation),
  unless the gang is *overdue* (below) and that work is not; and *backfill*, work whose runtime
  bound says it ends before the reserved gang's estimated start. Work without a bound does not
  backfill.
- Overdue: a gang that has waited longer than its maximum wait (`Waiting.max_wait`, else
  `Settings.max_wait`; None: no maximum) is overdue. Overdue gangs take the slots first, the one
  overdue longest first (whatever their priority, and whatever `coarsest_only` says), and the
  room held for one is kept from work of any priority that is not overdue itself. This trades
  strict priority order for a bound on waiting: higher-priority work still preempts elsewhere.
- Released: when the gang starts or leaves (the caller stops listing it), or when it is pushed
  out of the first `limit` eligible gangs.

Room is counted as the engine counts it: whole pods of the gang's shape per node, and with parts
(segments required in a finer domain) whole parts per part domain. The estimate is only that:
pods without a bound are expected to run `stretch` times as long again as they have run (at
least `floor` seconds: `expected_end`), the heavy-tailed rule of thumb for job lengths. A wrong estimate costs
time; with the whole domain held it cannot keep the gang from starting unless higher-priority
work keeps taking the room: the domain holds the gang when empty, and every pod in it ends.

Pure: arrays in, reservations out; no clock (callers pass `now`), no I/O. The trace simulator
(bench/tracesim) calls it; the extender's and gates mode's core will call the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import numpy as np

IntArray = np.ndarray[tuple[int], np.dtype[np.int64]]
FloatArray = np.ndarray[tuple[int], np.dtype[np.float64]]
BoolArray = np.ndarray[tuple[int], np.dtype[np.bool_]]
Matrix = np.ndarray[tuple[int, int], np.dtype[np.int64]]

NEVER = float("inf")


@dataclass(frozen=True)
class Settings:
    reserve_after: float = 1800.0  # seconds a gang waits before it gets a reservation
    limit: int = 1  # reservations at once (bench/trace.py: 1 did best of 1, 2 and 4)
    # An unbounded pod is expected to run at least this much longer. A domain drains when its last
    # pod ends, so a pod's median remaining life is too hopeful: 1,800 s is the 89th percentile
    # of a job's run time in the Kalos trace (median 124 s, mean 1,260 s), and on bench/trace.py
    # (8 traces at load 0.85, the default who-rule) it beat 600 s on every figure but small
    # gangs' p99, which moved within noise (docs/trace-results.md, "Reservations: what each variant did").
    floor: float = 1800.0
    # ... and twice as long again as it has run: a domain drains when its *last* pod ends, and a
    # heavy-tailed job that has run long is likely to run longer still (with `children`, on
    # bench/trace.py: large gangs' p99 -2,149 +- 639 s against topogang alone, 4 of 4 traces;
    # docs/trace-results.md, "Reservations: what each variant did").
    stretch: float = 2.0
    heads: bool = True  # the first gang in queue order at each priority is eligible at once
    whole_domain: bool = True  # hold every node of the domain; False: only those the gang waits for
    # Hold only the fewest children of the domain (one level finer) that hold the gang at its
    # estimated start: a gang of two blocks reserved in a zone of four holds two, and the other
    # two stay usable (on bench/trace.py a third less GPU-time held idle).
    children: bool = True
    move: bool = True  # move to another domain expected to free clearly sooner (a quarter of the wait)
    move_margin: float = 300.0  # ... and at least this many seconds sooner
    # Only gangs reserved at this level or a coarser one (0 the cluster, 1 its first level ...);
    # None: any gang. Gangs that fit where room frees often do not need one.
    coarsest_only: int | None = None
    # The slots go to the eligible gangs of the coarsest level first (then the most pods, then
    # queue order), not in queue order: the gangs that need a large domain are those that room
    # freeing by chance rarely serves.
    largest_first: bool = False
    # Seconds a gang may wait for room before it is overdue, for gangs that declare no maximum of
    # their own; None: no maximum (strict priority order, the default).
    max_wait: float | None = None
    # Every overdue gang holds room, beyond `limit` (not a default: bench/trace.py measured it).
    each_overdue: bool = False
    # Waiting gangs given an estimated start, in the pass's order (core/estimates.py): the first
    # this many.
    estimates: int = 50
    # Gangs the walk of the estimates goes through per pass (0: all). Each costs one search over
    # the releases (about 2 ms on 2,000 nodes and 24,000 pods); one walk is spread over passes,
    # the gangs not yet reached keeping their previous estimate, so that no pass stalls the server.
    estimates_per_pass: int = 10


@dataclass(frozen=True)
class Demand:
    """What a waiting gang needs to start, in whole pods of one shape."""

    request: tuple[int, ...]  # one pod, per resource (the columns of the free/capacity matrices)
    pods: int  # the gang's minimum
    part: int = 0  # pods per part, each part required in one domain of part_level (0: no parts)
    part_level: int = 0
    level: int | None = None  # the gang's required level; None: the finest level that holds it


@dataclass(frozen=True)
class Waiting:
    key: str
    priority: int
    since: float  # queued since
    demand: Demand
    max_wait: float | None = None  # its own maximum wait (seconds); None: Settings.max_wait
    # the nodes its pods may use (taints, selectors); None: every node. Room elsewhere is not its.
    usable: BoolArray | None = field(default=None, compare=False)

    def overdue_at(self, settings: Settings) -> float | None:
        """When it becomes (or became) overdue; None: it has no maximum wait."""
        limit = self.max_wait if self.max_wait is not None else settings.max_wait
        return None if limit is None else self.since + limit


@dataclass(frozen=True)
class Running:
    """Running pods as arrays: node, what each takes (pods x resources), expected end."""

    node: IntArray
    request: Matrix
    end: FloatArray

    def by_end(self) -> Running:
        order = np.argsort(self.end, kind="stable")
        return Running(self.node[order], self.request[order], self.end[order])

    def on(self, nodes: BoolArray) -> Running:
        """The pods on NODES (in the same order)."""
        keep = nodes[self.node]
        return Running(self.node[keep], self.request[keep], self.end[keep])


@dataclass(frozen=True)
class Reservation:
    key: str
    priority: int
    level: int
    domain: int
    nodes: IntArray = field(compare=False)  # the held nodes (inside the domain)
    start: float  # estimated start: when the domain is expected to hold the gang
    made: float  # when it was first made (kept across refreshes)
    overdue: float | None = None  # when its gang became overdue; None: it is not


class Admission(Enum):
    OWN = "own"  # the reserved gang itself
    PRIORITY = "priority"  # higher priority than the reservation
    BACKFILL = "backfill"  # bounded, and ends before the estimated start
    HELD = "held"  # kept out of the held room


def expected_end(now: float, started: float, bound: float | None, floor: float, stretch: float = 1.0) -> float:
    """When a running pod is expected to end: at its bound, else after STRETCH times as long again
    as it has run (at least FLOOR from now)."""
    if bound is not None:
        return max(now, started + bound)
    return now + max(stretch * (now - started), floor)


class Layout:
    """The cluster as reservations see it: per level (0 the cluster ... the last the node itself)
    each node's domain index, and each node's capacity (nodes x resources). LABELED: per level,
    per domain, whether its nodes carry the level's label (default: all do); an unlabeled domain
    (nodes without a rack label, at the rack level) is never reserved, as the engine never
    places a constraint of that level in it."""

    def __init__(self, domain_of: Sequence[IntArray], capacity: Matrix, labeled: Sequence[BoolArray] = ()) -> None:
        self.domain_of = [np.asarray(d, dtype=np.int64) for d in domain_of]
        self.capacity = capacity
        self.counts = [int(d.max()) + 1 if len(d) else 0 for d in self.domain_of]
        self.labeled = [
            np.asarray(labeled[i], dtype=np.bool_) if i < len(labeled) else np.ones(c, dtype=np.bool_)
            for i, c in enumerate(self.counts)
        ]
        order = [np.argsort(d, kind="stable") for d in self.domain_of]
        bounds = [
            np.searchsorted(d[o], np.arange(c + 1)) for d, o, c in zip(self.domain_of, order, self.counts, strict=True)
        ]
        self._members = list(zip(order, bounds, strict=True))
        self._parents: dict[tuple[int, int], IntArray] = {}
        self._level_for: dict[Demand, int | None] = {}

    @property
    def nodes(self) -> int:
        return len(self.capacity)

    def members(self, level: int, domain: int) -> IntArray:
        order, bounds = self._members[level]
        out: IntArray = order[bounds[domain] : bounds[domain + 1]]
        return out

    def parent(self, fine: int, coarse: int) -> IntArray:
        """Domain of FINE -> the domain of COARSE holding it."""
        key = (fine, coarse)
        if key not in self._parents:
            out = np.zeros(self.counts[fine], dtype=np.int64)
            out[self.domain_of[fine]] = self.domain_of[coarse]
            self._parents[key] = out
        return self._parents[key]

    def room(self, free: Matrix, demand: Demand, level: int) -> IntArray:
        """Pods of DEMAND that fit in each domain of LEVEL given FREE (whole parts when it has parts)."""
        per_node = _fit(free, demand)
        if demand.part and demand.part_level >= level:
            pl = demand.part_level
            in_part = np.bincount(self.domain_of[pl], weights=per_node, minlength=self.counts[pl]).astype(np.int64)
            whole = (in_part // demand.part) * demand.part
            out: IntArray = np.bincount(self.parent(pl, level), weights=whole, minlength=self.counts[level]).astype(
                np.int64
            )
            return out
        total: IntArray = np.bincount(self.domain_of[level], weights=per_node, minlength=self.counts[level])
        return total.astype(np.int64)

    def level_for(self, demand: Demand) -> int | None:
        """The gang's required level, else the finest level where one empty domain holds it."""
        if demand.level is not None:
            return demand.level
        if demand not in self._level_for:
            found = None
            for level in range(len(self.domain_of) - 1, -1, -1):
                if ((self.room(self.capacity, demand, level) >= demand.pods) & self.labeled[level]).any():
                    found = level
                    break
            self._level_for[demand] = found
        return self._level_for[demand]


def _fit(free: Matrix, demand: Demand) -> IntArray:
    """Pods of DEMAND's shape that fit on each node."""
    req = np.array(demand.request, dtype=np.int64)
    asked = np.flatnonzero(req > 0)
    if not len(asked):
        return np.full(len(free), demand.pods, dtype=np.int64)
    out: IntArray = np.min(np.maximum(free[:, asked], 0) // req[asked], axis=1)
    return out


@dataclass(frozen=True)
class Found:
    domain: int
    start: float
    releases: int  # the first this many of the running pods (by end) free the room


class Releases(Protocol):
    """Pods that free room, by node, ordered by their expected end (`Running.by_end`, or the
    estimates' walk, which adds the gangs it expects to start)."""

    @property
    def node(self) -> IntArray: ...

    @property
    def request(self) -> Matrix: ...

    @property
    def end(self) -> FloatArray: ...


def released(free: Matrix, releases: Releases, a: int, b: int) -> Matrix:
    """FREE plus what releases A..B give back, per node and resource (bincount: far faster than
    add.at)."""
    out = free.copy()
    if b > a:
        for c in range(free.shape[1]):
            out[:, c] += np.bincount(releases.node[a:b], weights=releases.request[a:b, c], minlength=len(free)).astype(
                np.int64
            )
    return out


def soonest(
    now: float, demand: Demand, level: int, free: Matrix, running: Releases, layout: Layout, allowed: BoolArray
) -> Found | None:
    """The ALLOWED domain of LEVEL expected to hold DEMAND first, and when; RUNNING sorted by end.

    Releases only add room, so "some allowed domain holds it after the first k releases" is
    monotone in k: a bisection over the releases, each step adding to the room it knew only the
    releases between its bounds (the releases are counted about twice, not once a step)."""

    def holding(f: Matrix) -> BoolArray:
        out: BoolArray = (layout.room(f, demand, level) >= demand.pods) & allowed
        return out

    now_holds = holding(free)
    if now_holds.any():
        return Found(int(np.flatnonzero(now_holds)[0]), now, 0)
    lo, hi, f_lo = 0, len(running.end), free
    last = holding(released(free, running, 0, hi))
    if not last.any():
        return None
    while hi - lo > 1:  # holding after lo releases is empty, after hi it is not
        mid = (lo + hi) // 2
        f_mid = released(f_lo, running, lo, mid)
        found = holding(f_mid)
        if found.any():
            hi, last = mid, found
        else:
            lo, f_lo = mid, f_mid
    return Found(int(np.flatnonzero(last)[0]), max(now, float(running.end[hi - 1])), hi)


def _held(layout: Layout, level: int, found: Found, demand: Demand, free: Matrix, running: Running) -> IntArray:
    """The nodes a reservation holds: those of its domain that hold a pod of the gang now, and
    those the releases it waits for free. Room freeing elsewhere in the domain stays usable."""
    members = layout.members(level, found.domain)
    mask = np.zeros(layout.nodes, dtype=np.bool_)
    mask[running.node[: found.releases]] = True
    mask[members[_fit(free[members], demand) > 0]] = True
    inside = np.zeros(layout.nodes, dtype=np.bool_)
    inside[members] = True
    out: IntArray = np.flatnonzero(mask & inside).astype(np.int64)
    return out


def _fewest_children(
    layout: Layout, level: int, found: Found, demand: Demand, free: Matrix, running: Running
) -> IntArray:
    """The nodes of the fewest children of FOUND's domain that hold DEMAND at its estimated start
    (every pod expected to end by then gone), the roomiest first (ties: the lower index)."""
    f = free.copy()
    k = max(found.releases, int(np.searchsorted(running.end, found.start, side="right")))
    for c in range(f.shape[1]):
        f[:, c] += np.bincount(running.node[:k], weights=running.request[:k, c], minlength=len(f)).astype(np.int64)
    fine = level + 1
    kids = np.flatnonzero(layout.parent(fine, level) == found.domain)
    room = layout.room(f, demand, fine)[kids]
    order = np.argsort(-room, kind="stable")
    enough = int(np.searchsorted(np.cumsum(room[order]), demand.pods)) + 1
    chosen = np.zeros(layout.counts[fine], dtype=np.bool_)
    chosen[kids[order[:enough]]] = True
    out: IntArray = np.flatnonzero(chosen[layout.domain_of[fine]]).astype(np.int64)
    return out


def _as_seen(w: Waiting, free: Matrix, running: Running) -> tuple[Matrix, Running]:
    """FREE and RUNNING (sorted by end) as W sees them: no room on a node it may not use."""
    if w.usable is None:
        return free, running
    seen: Matrix = np.where(w.usable[:, None], free, 0)
    return seen, running.on(w.usable)


def below_cut(layout: Layout, demand: Demand, settings: Settings) -> bool:
    """Whether a gang of DEMAND is kept from reservations by `coarsest_only`: it needs a finer
    domain than that level (or no domain of the layout holds it)."""
    if settings.coarsest_only is None:
        return False
    level = layout.level_for(demand)
    return level is None or level > settings.coarsest_only


def _level_rank(layout: Layout, demand: Demand) -> int:
    level = layout.level_for(demand)
    return len(layout.domain_of) if level is None else level


def _clearly_sooner(now: float, other: float, current: float, settings: Settings) -> bool:
    return other < current - max(settings.move_margin, 0.25 * (current - now))


def reserve(
    now: float,
    queue: Sequence[Waiting],
    free: Matrix,
    running: Running,
    layout: Layout,
    current: Sequence[Reservation],
    settings: Settings,
) -> tuple[Reservation, ...]:
    """The reservations after this pass: QUEUE is the gangs still waiting, in queue order; CURRENT
    the reservations before it (a gang keeps its domain unless a gang before it in queue order took
    it, or another domain is expected to hold it clearly sooner)."""
    if not queue or settings.limit <= 0:
        return ()
    due = overdue(now, queue, settings)
    queue = [w for w in queue if w.key in due or not below_cut(layout, w.demand, settings)]
    heads: set[str] = set()
    seen: set[int] = set()
    for w in queue if settings.heads else ():
        if w.priority not in seen:
            seen.add(w.priority)
            heads.add(w.key)
    eligible = [w for w in queue if w.key not in due and (w.key in heads or now - w.since >= settings.reserve_after)]
    if settings.largest_first:  # stable: queue order among equals
        eligible.sort(key=lambda w: (_level_rank(layout, w.demand), -w.demand.pods))
    eligible = [*overdue_first(queue, due), *eligible]
    if not eligible:
        return ()
    all_free, all_ordered = free, running.by_end()
    previous = {r.key: r for r in current}
    taken = np.zeros(layout.nodes, dtype=np.bool_)  # the domains of the reservations so far
    out: list[Reservation] = []
    for w in eligible:
        if len(out) >= settings.limit and not (settings.each_overdue and w.key in due):
            break
        free, ordered = _as_seen(w, all_free, all_ordered)
        old = previous.get(w.key)
        kept: Found | None = None
        if old is not None and not taken[layout.members(old.level, old.domain)].any():
            allowed = np.zeros(layout.counts[old.level], dtype=np.bool_)
            allowed[old.domain] = True
            kept = soonest(now, w.demand, old.level, free, ordered, layout, allowed)
        chosen = old.level if old is not None else layout.level_for(w.demand)
        if chosen is None:
            continue  # no domain holds it even empty: nothing to reserve
        clear = np.bincount(layout.domain_of[chosen], weights=taken, minlength=layout.counts[chosen]) == 0
        clear &= layout.labeled[chosen]  # a gang whose nodes lack the level's label holds no room there
        best = soonest(now, w.demand, chosen, free, ordered, layout, clear)
        # Keep the domain unless another is now expected to free clearly sooner: a pod without a
        # bound that outlives its estimate would otherwise hold the gang to that domain.
        moves = settings.move and best is not None and kept is not None
        if kept is not None and not (
            moves and best is not None and _clearly_sooner(now, best.start, kept.start, settings)
        ):
            found = kept
        elif best is not None:
            found = best
        else:
            continue
        level, made = chosen, old.made if old is not None else now
        members = layout.members(level, found.domain)
        if not settings.whole_domain:
            nodes = _held(layout, level, found, w.demand, free, ordered)
        elif settings.children and level + 1 < len(layout.domain_of) - 1:
            nodes = _fewest_children(layout, level, found, w.demand, free, ordered)
        else:
            nodes = members
        out.append(Reservation(w.key, w.priority, level, found.domain, nodes, found.start, made, due.get(w.key)))
        taken[members] = True
    return tuple(out)


def overdue(now: float, queue: Sequence[Waiting], settings: Settings) -> dict[str, float]:
    """The gangs of QUEUE overdue at NOW: key -> when each became overdue."""
    out: dict[str, float] = {}
    for w in queue:
        at = w.overdue_at(settings)
        if at is not None and at <= now:
            out[w.key] = at
    return out


def overdue_first(queue: Sequence[Waiting], due: Mapping[str, float]) -> list[Waiting]:
    """The overdue gangs of QUEUE (DUE: when each became overdue), the one overdue longest first
    (ties: the order given). Priority does not enter: a higher-priority gang that is overdue
    competes as an overdue gang."""
    rank = {w.key: i for i, w in enumerate(queue)}
    return sorted((w for w in queue if w.key in due), key=lambda w: (due[w.key], rank[w.key]))


def admits(r: Reservation, key: str, priority: int, ends_at: float | None, overdue: bool = False) -> Admission:
    """May work KEY of PRIORITY, ending at ENDS_AT at the latest (None: no bound), use R's held
    room? OVERDUE: the work is an overdue gang (only such work passes an overdue gang's room by
    priority)."""
    if key == r.key:
        return Admission.OWN
    if priority > r.priority and (r.overdue is None or overdue):
        return Admission.PRIORITY
    if ends_at is not None and ends_at <= r.start:
        return Admission.BACKFILL
    return Admission.HELD


def held(
    reservations: Sequence[Reservation],
    nodes: int,
    key: str,
    priority: int,
    ends_at: float | None,
    overdue: bool = False,
) -> BoolArray:
    """The nodes whose free room KEY may not use (see `admits`)."""
    out = np.zeros(nodes, dtype=np.bool_)
    for r in reservations:
        if admits(r, key, priority, ends_at, overdue) is Admission.HELD:
            out[r.nodes] = True
    return out
