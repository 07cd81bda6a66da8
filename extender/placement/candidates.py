"""Candidate domains for a scope, best first.

Both searches open the same way: the domains of one level inside the region that can hold the
scope's minimum, narrowed by the nodes its running pods already hold. The required level keeps
them all, orders domains where the preferred level also holds the scope first, and (exclusive
topology) drops domains that host other gangs' pods; a preferred level keeps the best few.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from extender.placement.demand import Demand
from extender.placement.gang import Scope
from extender.placement.parts import Parts, fewest_domains
from extender.placement.ranking import (
    ALLOTTED,
    COMPACT,
    HOLDS_ALL,
    INNER,
    PARTS,
    PATH,
    PREFERRED,
    REQUIRED,
    ROOM,
    SPANS,
    Recorder,
)
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.state import AttemptState
from extender.placement.tree import BoolArray, Domain, IntArray, TopologyTree

# How many single domains to try at a level reached by a *preference* before spreading out:
# a preference is best effort, so it must not multiply the search.
MAX_PREFERRED_CANDIDATES = 3


@dataclass(frozen=True)
class _Fit:
    """How each candidate domain holds a scope, as `_order` ranks them."""

    room: IntArray  # pods of the dominant shape it takes: all of them where full_ok, else the minimum's (whole parts)
    full_ok: BoolArray  # room for every pod of the scope
    need: int  # the scope's pods of the dominant shape
    spread: IntArray | None  # domains of its parts' level they would take (None: no parts)
    leftover: IntArray  # room - need where full_ok, else -room: the tightest first, the most room first


class Candidates:
    def __init__(self, snapshot: ClusterSnapshot, tree: TopologyTree, state: AttemptState, demand: Demand) -> None:
        self.snapshot = snapshot
        self.tree = tree
        self.state = state
        self.demand = demand
        self.parts = Parts(tree, state, demand)
        self.hints: dict[int, Domain] = {}  # scope id -> the domain its siblings' allotment gave it (allot)
        self._inner: dict[int, list[tuple[Scope, int]]] = {}  # scope id -> descendants with a written preference
        self.recorder: Recorder | None = None  # set only when the plan is to be explained

    def required(self, scope: Scope, region: Domain, level: int) -> Sequence[Domain]:
        """Domains of `level` inside `region` that can hold the scope's minimum, best first."""
        opened = self._fitting(scope, region, level)
        if opened is None:
            return []
        lo, hi, ok = opened
        fitting = int(np.count_nonzero(ok)) if self.recorder is not None else 0
        if scope.rule is not None and scope.rule.exclusive:
            ok &= self.free_of_others(scope, level, lo, hi)
        pinned = self.pinned(scope, level)
        if pinned is not None:
            ok &= np.arange(lo, hi) == pinned.index
        cand: IntArray = np.flatnonzero(ok) + lo
        if len(cand) == 0:
            return []
        rule = scope.rule
        preferred = rule.preferred if rule is not None else None
        rank = []  # no preference: every candidate ranks the same, so no sort key
        if preferred is not None and preferred > level and any(self.demand.minimum[scope.id]):
            # The scope's own preference ranks as a descendant's does (a preference on the same
            # constraint means what it means on a child): fewest preferred domains first.
            rank = [self._domains_needed(scope, level, cand, preferred)]
        inner = self.inner_preferences(scope, level, cand)
        order = self._order(scope, level, cand, *rank, *inner)
        if self.recorder is not None:
            primary = [(SPANS, k) for k in rank] + [(INNER, k) for k in inner]
            self._record(REQUIRED, scope, (region, level), (hi - lo, fitting), cand, order, primary, preferred)
        return _Domains(level, cand[order])

    def pinned(self, scope: Scope, level: int) -> Domain | None:
        """The domain of `level` the scope's running pods pin its constraint to (where the most
        of them run), or None when none runs."""
        fixed = self.demand.fixed[scope.id]
        if not fixed:
            return None
        dom = self.tree.levels[level].domain_of_node
        return Domain(level, Counter(int(dom[n]) for n in fixed).most_common(1)[0][0])

    def preferred(
        self, scope: Scope, region: Domain, level: int, preferred: int, implicit: bool = False
    ) -> list[Domain]:
        """The best few domains of `level` inside `region` on the way up from `preferred`.
        `implicit`: the level is compactness, not a written preference, so the preferences of
        the scope's descendants rank the domains before it does."""
        opened = self._fitting(scope, region, level)
        if opened is None:
            return []
        lo, hi, ok = opened
        fitting = int(np.count_nonzero(ok)) if self.recorder is not None else 0
        fixed = self.demand.fixed[scope.id]
        if fixed:
            dom = self.tree.levels[level].domain_of_node
            ok &= np.isin(np.arange(lo, hi), [int(dom[n]) for n in fixed])
        cand: IntArray = np.flatnonzero(ok) + lo
        if len(cand) == 0:
            if self.recorder is not None:  # none held it here: the climb goes on, which explains it
                kind = COMPACT if implicit else PREFERRED
                self._record(kind, scope, (region, level), (hi - lo, fitting), cand, cand, [], preferred)
            return []
        own = [] if level == preferred else [self._domains_needed(scope, level, cand, preferred)]
        inner = self.inner_preferences(scope, level, cand)
        primary = [*inner, *own] if implicit else [*own, *inner]
        order = self._order(scope, level, cand, *primary)
        if self.recorder is not None:
            named = [(SPANS, k) for k in own] + [(INNER, k) for k in inner]
            named = [*named[len(own) :], *named[: len(own)]] if implicit else named
            kind = COMPACT if implicit else PREFERRED
            self._record(kind, scope, (region, level), (hi - lo, fitting), cand, order, named, preferred)
        return [Domain(level, int(i)) for i in cand[order][:MAX_PREFERRED_CANDIDATES]]

    def inner_preferences(self, scope: Scope, level: int, cand: IntArray) -> list[IntArray]:
        """As a sort key (none when no descendant has a written preference finer than `level`):
        per candidate, the domains of their preferred levels those descendants would span inside
        it. A written preference anywhere in the tree outranks compactness when choosing
        enclosing domains."""
        total: IntArray | None = None
        for inner, preferred in self._preferring(scope):
            if preferred > level and any(self.demand.minimum[inner.id]):
                needed = self._domains_needed(inner, level, cand, preferred)
                total = needed if total is None else total + needed
        return [] if total is None else [total]

    def _preferring(self, scope: Scope) -> list[tuple[Scope, int]]:
        found = self._inner.get(scope.id)
        if found is None:
            found = [(s, s.rule.preferred) for s in scope.walk() if s is not scope and s.rule and s.rule.preferred]
            self._inner[scope.id] = found
        return found

    def _fitting(self, scope: Scope, region: Domain, level: int) -> tuple[int, int, BoolArray] | None:
        """The opening both searches share: the range of `level` in `region`, and where the
        scope's minimum fits in it (None: the region has no domain of that level)."""
        lo, hi = self.tree.descendants(region, level)
        if lo == hi:
            return None
        return lo, hi, self.fits(level, lo, hi, self.demand.minimum[scope.id])

    def fits(self, level: int, lo: int, hi: int, demand: Sequence[int]) -> BoolArray:
        li = self.tree.levels[level]
        ok: BoolArray | None = None
        for s, need in enumerate(demand):
            if need > 0:
                room = self.state.counts[s][level][lo:hi] >= need
                ok = room if ok is None else ok & room
        if ok is None:
            return li.labeled[lo:hi].copy()
        if not li.all_labeled:  # most levels are labeled on every node: one array operation less
            ok &= li.labeled[lo:hi]
        return ok

    def free_of_others(self, scope: Scope, level: int, lo: int, hi: int) -> BoolArray:
        """Domains of `level` in [lo, hi) that host no pod of another gang nor of another scope
        of this gang (exclusive topology: a subgroup shares its domain with no sibling either)."""
        busy = self.snapshot.busy
        own = self._own_elsewhere(scope)
        if (busy is None or not len(busy)) and not own:
            return np.ones(hi - lo, dtype=np.bool_)
        mask = np.zeros(len(self.snapshot.table), dtype=np.bool_) if busy is None or not len(busy) else busy.copy()
        mask[own] = True
        li = self.tree.levels[level]
        per_domain = np.add.reduceat(mask[self.tree.pos_to_node].astype(np.int64), li.starts)
        free: BoolArray = per_domain[lo:hi] == 0
        return free

    def _own_elsewhere(self, scope: Scope) -> list[int]:
        """Nodes holding this gang's pods outside `scope`: placed in this attempt, or running."""
        mine = set(self.demand.fixed[scope.id])
        running = [n for n in self.demand.fixed[self.demand.root] if n not in mine]
        return [*self.state.where.values(), *running]

    def _order(self, scope: Scope, level: int, cand: IntArray, *primary: IntArray) -> IntArray:
        """The candidate allotted to the scope first (see `allot`); then the primary keys; then
        domains that hold every pod by the least room left (tightest fit), then the rest by the
        most room (to take as many optional pods as possible); ties by the fewest domains the
        scope's parts would take, then by path."""
        allotted = self._allotted(scope, level, cand)
        first = [] if allotted is None else [allotted]
        if not self.demand.nshapes:
            return np.lexsort((cand, *reversed(primary), *first))
        fit = self._fit(scope, level, cand)
        spread = [] if fit.spread is None else [fit.spread]
        return np.lexsort((cand, *spread, fit.leftover, ~fit.full_ok, *reversed(primary), *first))

    def _allotted(self, scope: Scope, level: int, cand: IntArray) -> BoolArray | None:
        """As a sort key, False for the candidate the scope's allotment names (None: no allotment)."""
        hint = self.hints.get(scope.id)
        if hint is None or hint.level != level:
            return None
        other: BoolArray = cand != hint.index
        return other

    def _fit(self, scope: Scope, level: int, cand: IntArray) -> _Fit:
        """How each candidate holds the scope's dominant shape (room in whole parts)."""
        counts = self.state.counts
        full = self.demand.full[scope.id]
        s = self.demand.dominant(scope)
        in_parts = self.parts.counted_in_parts(scope, level)
        room_all = self.parts.room(scope, level, cand, s, full=True) if in_parts else counts[s][level][cand]
        full_ok = room_all >= full[s]  # room never exceeds the count of shape s, so s is checked
        for shape, need in enumerate(full):
            if need > 0 and shape != s:
                full_ok &= counts[shape][level][cand] >= need
        room, spread = room_all, None
        if in_parts:  # the minimum's parts may be fewer or smaller than all of them
            room = np.where(full_ok, room_all, self.parts.room(scope, level, cand, s, full=False))
            spread_all = self.parts.domains_needed(scope, level, cand, s, full=True)
            spread_min = self.parts.domains_needed(scope, level, cand, s, full=False)
            if spread_all is not None and spread_min is not None:
                spread = np.where(full_ok, spread_all, spread_min)
            else:
                spread = spread_min if spread_min is not None else spread_all
        leftover = np.where(full_ok, room - full[s], -room)
        return _Fit(room, full_ok, full[s], spread, leftover)

    def allot(self, run: Sequence[Scope], region: Domain, level: int) -> dict[int, Domain]:
        """Domains of `level` inside `region` for RUN, siblings that ask for the same (segments or
        slices of one replica type), by Kueue's greedy (parts.fewest_domains): the fewest
        domains, the last the tightest. Each sibling's search then tries its domain first; a
        sibling left without one (the room runs out) searches as usual."""
        first = run[0]
        opened = self._fitting(first, region, level)
        if opened is None or not self.demand.nshapes:
            return {}
        lo, _, ok = opened
        cand: IntArray = np.flatnonzero(ok) + lo
        if len(cand) == 0:
            return {}
        caps: IntArray | None = None
        for shape, need in enumerate(self.demand.minimum[first.id]):
            if need > 0:
                fit = self.parts.room(first, level, cand, shape, full=False) // need
                caps = fit if caps is None else np.minimum(caps, fit)
        if caps is None:
            return {}
        s = self.demand.dominant(first)
        took = fewest_domains(caps.tolist(), self.state.counts[s][level][cand].tolist(), len(run))
        domains = [Domain(level, int(cand[i])) for i, n in took for _ in range(n)]
        return {child.id: d for child, d in zip(run, domains, strict=False)}

    def _record(
        self,
        kind: str,
        scope: Scope,
        where: tuple[Domain, int],
        counts: tuple[int, int],
        cand: IntArray,
        order: IntArray,
        primary: Sequence[tuple[str, IntArray]],
        preferred: int | None,
    ) -> None:
        """Hand the ranking just made to the recorder: the keys `_order` sorted by, per candidate."""
        assert self.recorder is not None
        level = where[1]
        columns: dict[str, IntArray | BoolArray] = {name: values[order] for name, values in primary}
        keys = tuple(name for name, _ in primary)
        allotted = self._allotted(scope, level, cand)
        if allotted is not None:
            columns[ALLOTTED] = ~allotted[order]
            keys = (ALLOTTED, *keys)
        s = self.demand.dominant(scope)
        if self.demand.nshapes:
            fit = self._fit(scope, level, cand)
            free = self.state.counts[s][level][cand]
            columns |= {HOLDS_ALL: fit.full_ok[order], ROOM: fit.room[order], "free": free[order]}
            keys += (HOLDS_ALL, ROOM)
            if fit.spread is not None:
                columns[PARTS] = fit.spread[order]
                keys += (PARTS,)
        pods = self.demand.full[scope.id][s] if self.demand.nshapes else 0
        minimum = self.demand.minimum[scope.id][s] if self.demand.nshapes else 0
        spans = preferred if any(name == SPANS for name, _ in primary) else None
        self.recorder.ranked(scope, kind, where, counts, cand[order], columns, (*keys, PATH), (pods, minimum, s), spans)

    def _domains_needed(self, scope: Scope, level: int, cand: IntArray, preferred: int) -> IntArray:
        """For each candidate, how many preferred-level domains its pods would span (greedy)."""
        s = self.demand.dominant(scope)
        need = self.demand.minimum[scope.id][s]
        counts = self.state.counts[s][preferred]
        out = np.empty(len(cand), dtype=np.int64)
        for i, d in enumerate(cand):
            lo, hi = self.tree.descendants(Domain(level, int(d)), preferred)
            inner = np.sort(counts[lo:hi])[::-1]
            out[i] = int(np.searchsorted(np.cumsum(inner), need)) + 1
        return out


class _Domains(Sequence[Domain]):
    """Candidate domains in order, made into Domain objects only as the search reaches them."""

    def __init__(self, level: int, indices: IntArray) -> None:
        self._level, self._indices = level, indices

    def __len__(self) -> int:
        return len(self._indices)

    @overload
    def __getitem__(self, i: int) -> Domain: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Domain]: ...
    def __getitem__(self, i: int | slice) -> Domain | Sequence[Domain]:
        if isinstance(i, slice):
            return _Domains(self._level, self._indices[i])
        return Domain(self._level, int(self._indices[i]))
