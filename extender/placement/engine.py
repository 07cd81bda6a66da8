"""The gang placement engine.

`plan(snapshot, gang)` places a whole SubGroup tree at once or explains why it cannot:

  phase 1  state: copy the free capacity of the resources the gang asks for and count, per pod
           shape, how many pods fit on each node and in each domain (bottom up).
  phase 2  the minimum tree, a recursion from the PodGroup down (KAI's job -> SubGroup -> pods):
           2a  a scope with a required level finer than its region picks one domain of that
               level: the candidates that can hold its minimum, tightest fit first (ties by
               path; room counted in whole parts when its parts each need one finer domain,
               such as segments in racks), those where its preferred level also holds it in one
               domain before the others; a checkpoint before each candidate, a rollback when its
               subtree fails.
           2b  inside that domain the scope (a leaf of plain pods too) climbs from its preferred
               level (or, for compactness, from the node level) to the first level where one
               domain holds it, and tries the best few of those before spreading over the whole
               region.
           2c  its children are placed one unit at a time (a SubGroupSet is one unit) until
               `minMember` of them stand; a leaf places its minimum pods by descending the tree
               through the fewest domains (Kueue's greedy: the tightest child that holds the
               rest, else the largest child first).
  phase 3  optional members, never at the cost of the minimum: pods beyond each leaf's minimum,
           SubGroups not needed for the minimum (whole or not at all) and elastic SubGroups
           (minMember 0), each inside the domains its constraints already hold.
  phase 4  the plan: pod -> node, the domain of each constrained scope.

The result depends only on the snapshot and the gang: no clock, no randomness, no I/O.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Sequence, Set
from typing import overload

import numpy as np

from extender.placement.gang import Gang, Member, Scope
from extender.placement.leftout import left_out
from extender.placement.reasons import INCOMPLETE, NO_CAPACITY, NO_DOMAIN, SEARCH_LIMIT, Shortfall
from extender.placement.result import Plan, PlanResult, Unplaceable
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.state import AttemptState
from extender.placement.tree import BoolArray, Domain, IntArray, TopologyTree

# How many single domains to try at a level reached by a *preference* before spreading out:
# a preference is best effort, so it must not multiply the search.
MAX_SOFT_CANDIDATES = 3
# A ceiling on candidate domains tried in one plan; a bound on the worst case, not a tuning knob.
MAX_ATTEMPTS = 20_000


def plan(snapshot: ClusterSnapshot, gang: Gang, *, compact: bool = True) -> PlanResult:
    """Place `gang` on `snapshot`: a Plan, or Unplaceable with the reason as data.

    `compact=False` turns off the default compactness of phase 2b (a scope with no preferred level
    does not climb to the fewest domains); only benchmarks compare with it off.
    """
    missing = incomplete(gang)
    if missing is not None:  # cheap, and checked before any per-attempt array is built
        return Unplaceable(gang.key, missing)
    tree = snapshot.table.tree(gang.topology)
    return _Placer(snapshot, tree, gang, compact).run()


def incomplete(gang: Gang) -> Shortfall | None:
    """Why the pods that exist cannot satisfy the minimum tree whatever the capacity, or None."""
    if _incomplete(gang.root) is None:
        return None
    present = sum(1 for _ in gang.members())
    return Shortfall(INCOMPLETE, gang.root.label, _minimum_pods(gang.root), present=present)


class _SearchLimit(Exception):
    """Unwinds the recursion when MAX_ATTEMPTS is reached."""


@dataclasses.dataclass
class _Pin:
    scope: int
    hard: Domain  # where its required constraints hold it
    soft: Domain  # where its preference (or compactness) put its minimum


class _Placer:
    def __init__(self, snapshot: ClusterSnapshot, tree: TopologyTree, gang: Gang, compact: bool = True) -> None:
        self.snapshot = snapshot
        self.compact = compact
        self.tree = tree
        self.gang = gang
        self.nshapes = len(gang.shapes)
        self.state = AttemptState(snapshot, tree, gang.shapes)
        self.pins: list[_Pin] = []
        self.pin_of: dict[int, _Pin] = {}
        self.attempts = 0
        self.minimum: frozenset[str] = frozenset()
        self.optional = False  # phase 3: failures there explain nothing
        self.failure: tuple[Shortfall, Domain, int] | None = None  # reason, region, shape
        self.parts: dict[int, list[Scope]] = {}  # scope -> its constrained parts (see _parts)
        self._prepare(gang.root)

    # -- phase 1: static facts about the gang ---------------------------------------------------

    def _prepare(self, root: Scope) -> None:
        """Per scope: pre-placed nodes, and the pods its minimum and its whole need, per shape."""
        self.fixed: dict[int, list[int]] = {}
        self.min_demand: dict[int, list[int]] = {}
        self.full_demand: dict[int, list[int]] = {}
        self.preplaced: dict[int, int] = {}
        self.empty_ok: dict[int, bool] = {}  # satisfied without placing any pod
        index = self.snapshot.table.index
        for scope in reversed(self.gang.scopes):  # children before parents
            if scope.leaf:
                fixed = [index[m.node] for m in scope.members if m.node is not None and m.node in index]
                pre = sum(1 for m in scope.members if m.node is not None)
                unplaced = [m for m in scope.members if m.node is None]
                need = max(0, scope.min_member - pre)
                per_shape = Counter(m.shape for m in unplaced)
                full = [per_shape.get(s, 0) for s in range(self.nshapes)]
                # Any `need` of the unplaced pods will do: a lower bound per shape.
                low = [max(0, need - (len(unplaced) - full[s])) for s in range(self.nshapes)]
                self.preplaced[scope.id] = pre
                self.empty_ok[scope.id] = need == 0
            else:
                self.empty_ok[scope.id] = (
                    sum(c.weight for c in scope.children if self.empty_ok[c.id]) >= scope.min_member
                )
                fixed = [n for c in scope.children for n in self.fixed[c.id]]
                full = [sum(self.full_demand[c.id][s] for c in scope.children) for s in range(self.nshapes)]
                low = [self._cheapest(scope, s) for s in range(self.nshapes)]
            self.fixed[scope.id] = fixed
            self.full_demand[scope.id] = full
            self.min_demand[scope.id] = low

    def _cheapest(self, scope: Scope, shape: int) -> int:
        """The fewest pods of `shape` that any choice of `min_member` children could need."""
        got, total = 0, 0
        for child in sorted(scope.children, key=lambda c: self.min_demand[c.id][shape]):
            if got >= scope.min_member:
                break
            got += child.weight
            total += self.min_demand[child.id][shape]
        return total

    def _dominant(self, scope: Scope) -> int:
        full = self.full_demand[scope.id]
        low = self.min_demand[scope.id]
        return max(range(self.nshapes), key=lambda s: (low[s], full[s], -s)) if self.nshapes else 0

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> PlanResult:
        root = self.gang.root
        try:
            placed = self.place_unit(root, self.tree.root)
        except _SearchLimit:
            placed = False
            self.failure = (
                Shortfall(SEARCH_LIMIT, root.label, 0, tried=self.attempts),
                self.tree.root,
                0,
            )
        if not placed:
            return Unplaceable(self.gang.key, self._final_reason(), self.attempts)
        self.minimum = frozenset(self.state.where)
        self.optional = True
        with contextlib.suppress(_SearchLimit):  # the minimum stands; the rest waits for a later plan
            self.place_optional(root)
        return self._plan()

    def _plan(self) -> Plan:
        names = self.tree.node_names
        assignments = {key: names[node] for key, node in self.state.where.items()}
        domains = {}
        for scope in self.gang.scopes:
            pin = self.pin_of.get(scope.id)
            if pin is not None and (scope.rule is not None or scope is self.gang.root):
                domains[scope.label] = self.tree.describe(pin.hard if pin.hard.level else pin.soft)
        unplaced = tuple(m.key for m in self.gang.members() if m.node is None and m.key not in assignments)
        levels: dict[str, tuple[str, ...]] = {}
        for level in range(1, self.tree.node_level):
            used = {self.tree.node_domain(node, level) for node in self.state.where.values()}
            levels[self.tree.level_name(level)] = tuple(sorted(self.tree.describe(d).partition(" ")[2] for d in used))
        return Plan(self.gang.key, assignments, domains, unplaced, self.minimum, levels, self.attempts)

    # -- the transaction --------------------------------------------------------------------------

    def checkpoint(self) -> tuple[int, int]:
        return self.state.checkpoint(), len(self.pins)

    def rollback(self, cp: tuple[int, int]) -> None:
        self.state.rollback(cp[0])
        while len(self.pins) > cp[1]:
            gone = self.pins.pop()
            if self.pin_of.get(gone.scope) is gone:
                prev = next((p for p in reversed(self.pins) if p.scope == gone.scope), None)
                if prev is None:
                    del self.pin_of[gone.scope]
                else:
                    self.pin_of[gone.scope] = prev

    def pin(self, scope: Scope, hard: Domain, soft: Domain) -> None:
        p = _Pin(scope.id, hard, soft)
        self.pins.append(p)
        self.pin_of[scope.id] = p

    def _tick(self) -> None:
        self.attempts += 1
        if self.attempts > MAX_ATTEMPTS:
            raise _SearchLimit

    # -- phase 2a: the required level ----------------------------------------------------------

    def place_unit(self, scope: Scope, region: Domain, hard: Domain | None = None) -> bool:
        """Place the scope's minimum inside `region`. `hard` is where the required constraints
        above it hold it (`region` may be narrower: a parent's preferred or compact domain)."""
        hard = region if hard is None else hard
        rule = scope.rule
        level = rule.required if rule is not None else None
        if level is not None and level > region.level:
            candidates = self.hard_candidates(scope, region, level)
            if not candidates:
                self.fail(self.no_domain(scope, region, level), region, scope)
                return False
            return any(self._try(scope, domain, domain) for domain in candidates)
        if not self._fixed_inside(scope, region):
            return False
        if level is not None:
            held = self.tree.ancestor(region, level)
            if not self.tree.labeled(held):
                return False  # the region sits on nodes without this level's label
            if held.level > hard.level:
                hard = held  # the constraint holds the scope tighter than its parents do
        return self._try(scope, hard, region)

    def _try(self, scope: Scope, hard: Domain, region: Domain) -> bool:
        """One candidate: pin the scope there and place it, or leave no trace."""
        self._tick()
        cp = self.checkpoint()
        self.pin(scope, hard, region)
        if self.place_soft(scope, region):
            return True
        self.rollback(cp)
        return False

    def _fixed_inside(self, scope: Scope, region: Domain) -> bool:
        fixed = self.fixed[scope.id]
        if not fixed or region.level == 0:
            return True
        dom = self.tree.levels[region.level].domain_of_node
        return all(int(dom[n]) == region.index for n in fixed)

    def _fits(self, level: int, lo: int, hi: int, demand: Sequence[int]) -> BoolArray:
        ok: BoolArray = self.tree.levels[level].labeled[lo:hi].copy()
        for s, need in enumerate(demand):
            if need > 0:
                ok &= self.state.counts[s][level][lo:hi] >= need
        return ok

    def hard_candidates(self, scope: Scope, region: Domain, level: int) -> Sequence[Domain]:
        """Domains of `level` inside `region` that can hold the scope's minimum, best first."""
        lo, hi = self.tree.descendants(region, level)
        if lo == hi:
            return []
        ok = self._fits(level, lo, hi, self.min_demand[scope.id])
        if scope.rule is not None and scope.rule.exclusive:
            ok &= self._free_of_others(level, lo, hi)
        fixed = self.fixed[scope.id]
        if fixed:  # pods already running pin the constraint to their domain (the most of them)
            dom = self.tree.levels[level].domain_of_node
            forced = Counter(int(dom[n]) for n in fixed).most_common(1)[0][0]
            ok &= np.arange(lo, hi) == forced
        cand: IntArray = np.flatnonzero(ok) + lo
        if len(cand) == 0:
            return []
        rule = scope.rule
        preferred = rule.preferred if rule is not None else None
        rank: IntArray = np.zeros(len(cand), dtype=np.int64)
        if preferred is not None and preferred > level:
            rank = self._preference_rank(scope, level, cand, preferred)
        return _Domains(level, cand[self._order(scope, level, cand, rank)])

    def _free_of_others(self, level: int, lo: int, hi: int) -> BoolArray:
        """Domains of `level` in [lo, hi) that host no other gang's pods (exclusive topology)."""
        busy = self.snapshot.busy
        if busy is None or not len(busy):
            return np.ones(hi - lo, dtype=np.bool_)
        li = self.tree.levels[level]
        per_domain = np.add.reduceat(busy[self.tree.pos_to_node].astype(np.int64), li.starts)
        free: BoolArray = per_domain[lo:hi] == 0
        return free

    def _order(self, scope: Scope, level: int, cand: IntArray, *primary: IntArray) -> IntArray:
        """Tightest fit first: domains that hold every pod by leftover room, then the rest by
        room, largest first (to take as many optional pods as possible); ties by path."""
        if not self.nshapes:
            return np.lexsort((cand, *reversed(primary)))
        s = self._dominant(scope)
        room = self._usable_room(scope, level, cand, s)
        full_ok = room >= self.full_demand[scope.id][s]
        for shape, need in enumerate(self.full_demand[scope.id]):
            if need > 0:
                full_ok &= self.state.counts[shape][level][cand] >= need
        leftover = np.where(full_ok, room - self.full_demand[scope.id][s], -room)
        keys = (cand, leftover, (~full_ok).astype(np.int64), *reversed(primary))
        return np.lexsort(keys)

    def _usable_room(self, scope: Scope, level: int, cand: IntArray, shape: int) -> IntArray:
        """Room for the scope in each candidate, counting only what its parts can use: where each
        part must sit in one domain of a finer level (segments in a rack), a rack holds whole parts
        only, so a block of three racks with 3 free nodes each has no room for segments of 4.
        Tightness measured on this room puts segments where they strand the fewest nodes."""
        room: IntArray = self.state.counts[shape][level][cand]
        parts = self._parts(scope)
        finer = {p.rule.required for p in parts if p.rule is not None}
        if not parts or len(finer) != 1:
            return room
        (part_level,) = finer
        unit = min(self.min_demand[p.id][shape] for p in parts)
        if part_level is None or part_level <= level or unit <= 1:
            return room
        inner = self.tree.levels[part_level]
        whole = (self.state.counts[shape][part_level] // unit) * unit * inner.labeled
        owner = self.tree.levels[level].domain_of_pos[inner.starts]
        usable = np.bincount(owner, weights=whole, minlength=len(self.tree.levels[level].starts))
        return np.minimum(room, usable[cand].astype(np.int64))

    def _parts(self, scope: Scope) -> list[Scope]:
        """The nearest scopes below SCOPE with a required level, when every pod is under one."""
        found = self.parts.get(scope.id)
        if found is None:
            found = []
            for child in scope.children:
                if child.rule is not None and child.rule.required is not None:
                    found.append(child)
                elif child.leaf or not (below := self._parts(child)):
                    found = []
                    break
                else:
                    found.extend(below)
            self.parts[scope.id] = found
        return found

    def _preference_rank(self, scope: Scope, level: int, cand: IntArray, preferred: int) -> IntArray:
        """0 where one domain of the preferred level holds the scope, 1 for the next level up..."""
        rank = np.full(len(cand), preferred - level, dtype=np.int64)
        demand = self.min_demand[scope.id]
        for finer in range(level + 1, preferred + 1):
            li = self.tree.levels[finer]
            fits = self._fits(finer, 0, len(li.starts), demand)
            owners = self.tree.levels[level].domain_of_pos[li.starts[fits]]
            rank[np.isin(cand, owners)] = preferred - finer
        return rank

    # -- phase 2b: the preferred level, or compactness ------------------------------------------

    def place_soft(self, scope: Scope, region: Domain) -> bool:
        rule = scope.rule
        preferred = rule.preferred if rule is not None and rule.preferred is not None else None
        if preferred is None and self.compact:
            preferred = self.tree.node_level  # compact by default: the fewest domains below
        if preferred is not None and preferred > region.level and any(self.min_demand[scope.id]):
            saved = self.failure
            for level in range(preferred, region.level, -1):
                for domain in self.soft_candidates(scope, region, level, preferred):
                    self._tick()
                    cp = self.checkpoint()
                    self.pin(scope, self.pin_of[scope.id].hard, domain)
                    if self.place_contents(scope, domain):
                        return True
                    self.rollback(cp)
                    self.failure = saved  # a missed preference explains nothing
        return self.place_contents(scope, region)

    def soft_candidates(self, scope: Scope, region: Domain, level: int, preferred: int) -> list[Domain]:
        lo, hi = self.tree.descendants(region, level)
        if lo == hi:
            return []
        ok = self._fits(level, lo, hi, self.min_demand[scope.id])
        fixed = self.fixed[scope.id]
        if fixed:
            dom = self.tree.levels[level].domain_of_node
            ok &= np.isin(np.arange(lo, hi), [int(dom[n]) for n in fixed])
        cand: IntArray = np.flatnonzero(ok) + lo
        if len(cand) == 0:
            return []
        if level == preferred:
            order = self._order(scope, level, cand)
        else:
            order = self._order(scope, level, cand, self._domains_needed(scope, level, cand, preferred))
        return [Domain(level, int(i)) for i in cand[order][:MAX_SOFT_CANDIDATES]]

    def _domains_needed(self, scope: Scope, level: int, cand: IntArray, preferred: int) -> IntArray:
        """For each candidate, how many preferred-level domains its pods would span (greedy)."""
        s = self._dominant(scope)
        need = self.min_demand[scope.id][s]
        counts = self.state.counts[s][preferred]
        out = np.empty(len(cand), dtype=np.int64)
        for i, d in enumerate(cand):
            lo, hi = self.tree.descendants(Domain(level, int(d)), preferred)
            inner = np.sort(counts[lo:hi])[::-1]
            out[i] = int(np.searchsorted(np.cumsum(inner), need)) + 1
        return out

    # -- phase 2c: children and pods ----------------------------------------------------------------

    def place_contents(self, scope: Scope, region: Domain) -> bool:
        if scope.leaf:
            return self.place_members(scope, region)
        hard = self.pin_of[scope.id].hard
        got = 0
        for child in self._ordered_children(scope):
            if got >= scope.min_member:
                break
            if self.empty_ok[child.id] and not self.fixed[child.id]:
                got += child.weight  # satisfied with no pods (elastic); phase 3 may add some
                continue
            cp = self.checkpoint()
            if self.place_unit(child, region, hard):
                got += child.weight
            else:
                self.rollback(cp)
        return got >= scope.min_member

    def _ordered_children(self, scope: Scope) -> list[Scope]:
        """Children with running pods first (they pin domains); when all are needed, the
        largest first (first-fit decreasing); otherwise in the order written."""
        all_needed = scope.min_member >= sum(c.weight for c in scope.children)

        def key(item: tuple[int, Scope]) -> tuple[int, int, int]:
            i, child = item
            size = sum(self.min_demand[child.id]) if all_needed else 0
            return (0 if self.fixed[child.id] else 1, -size, i)

        return [c for _, c in sorted(enumerate(scope.children), key=key)]

    def _unplaced(self, scope: Scope) -> list[Member]:
        where = self.state.where
        return [m for m in scope.members if m.node is None and m.key not in where]

    def place_members(self, leaf: Scope, region: Domain) -> bool:
        placed = self.preplaced[leaf.id] + sum(1 for m in leaf.members if m.key in self.state.where)
        need = leaf.min_member - placed
        if need <= 0:
            return True
        todo = self._unplaced(leaf)[:need]
        for shape, members in _by_shape(todo):
            # Counts are exact per shape, so a shortfall shows before any pod is placed.
            if self.state.counts[shape][region.level][region.index] < len(members):
                self.fail(self.no_capacity(leaf, region, shape, len(members)), region, leaf, shape)
                return False
            if self.descend(region, shape, members) < len(members):  # not reached while counts are exact
                self.fail(self.no_capacity(leaf, region, shape, len(members)), region, leaf, shape)
                return False
        return True

    def descend(self, domain: Domain, shape: int, members: Sequence[Member]) -> int:
        """Place as many of `members` as fit in `domain`, through the fewest child domains."""
        if not members:
            return 0
        tree, state = self.tree, self.state
        if domain.level == tree.node_level:
            node = tree.node_of(domain)
            k = min(len(members), int(state.node_count[shape][node]))
            for m in members[:k]:
                state.place(node, shape, m.key)
            return k
        child_level = domain.level + 1
        lo, hi = tree.descendants(domain, child_level)
        counts = state.counts[shape][child_level]  # live: updated as pods are placed
        placed = 0
        while placed < len(members):
            rest = len(members) - placed
            room = counts[lo:hi]
            holds = np.flatnonzero(room >= rest)
            if len(holds):  # the tightest child that takes all the rest
                i = int(holds[np.argmin(room[holds])])
                placed += self.descend(Domain(child_level, lo + i), shape, members[placed:])
                break
            i = int(np.argmax(room))  # else the largest child first
            if room[i] <= 0:
                break
            placed += self.descend(Domain(child_level, lo + i), shape, members[placed : placed + int(room[i])])
        return placed

    # -- phase 3: optional members -----------------------------------------------------------------

    def place_optional(self, scope: Scope) -> None:
        pin = self.pin_of.get(scope.id)
        if pin is None:
            return
        if scope.leaf:
            for shape, members in _by_shape(self._unplaced(scope)):
                done = self.descend(pin.soft, shape, members)
                if pin.hard != pin.soft:
                    self.descend(pin.hard, shape, members[done:])
            return
        for child in scope.children:
            if child.id in self.pin_of:
                self.place_optional(child)
                continue
            # Near the rest of the scope (its compact domain) when that takes every pod of the
            # child; else wherever its constraints allow, if that takes more.
            regions = [pin.hard]
            if pin.soft != pin.hard and self._holds(pin.soft, self.full_demand[child.id]):
                regions.insert(0, pin.soft)
            best: tuple[int, Domain] | None = None
            for region in regions:
                cp = self.checkpoint()
                got = self._place_whole(child, region, pin.hard)
                if got is not None and got == self._unplaced_count(child):
                    best = None
                    break  # everything placed: keep it
                self.rollback(cp)
                if got is not None and (best is None or got > best[0]):
                    best = (got, region)
            if best is not None:
                self._place_whole(child, best[1], pin.hard)

    def _place_whole(self, child: Scope, region: Domain, hard: Domain) -> int | None:
        """Place an optional child (its minimum, then what else fits); the pods placed, or None."""
        before = len(self.state.log)
        if not self.place_unit(child, region, hard):
            return None
        self.place_optional(child)
        return len(self.state.log) - before

    def _unplaced_count(self, scope: Scope) -> int:
        return sum(1 for m in scope.all_members() if m.node is None)

    def _holds(self, domain: Domain, demand: Sequence[int]) -> bool:
        return all(self.state.counts[s][domain.level][domain.index] >= d for s, d in enumerate(demand))

    # -- reasons ---------------------------------------------------------------------------------------

    def fail(self, reason: Shortfall, region: Domain, scope: Scope, shape: int | None = None) -> None:
        if self.optional:
            return
        reason = dataclasses.replace(reason, progress=len(self.state.log))
        if self.failure is None or reason.progress > self.failure[0].progress:
            self.failure = (reason, region, self._dominant(scope) if shape is None else shape)

    def _final_reason(self) -> Shortfall:
        if self.failure is None:  # every child failed without a recorded reason: name the root
            root = self.gang.root
            return Shortfall(NO_CAPACITY, root.label, sum(self.min_demand[root.id]))
        reason, region, shape = self.failure
        if reason.kind in (NO_DOMAIN, NO_CAPACITY):
            reason = dataclasses.replace(reason, excluded=self.excluded(region, shape))
        return reason

    def _demand_text(self, scope: Scope, demand: Sequence[int]) -> tuple[int, str]:
        s = self._dominant(scope)
        shown = self.gang.shapes[s].describe() if self.gang.shapes else "{}"
        others = sum(demand) - demand[s] if demand else 0
        if others:
            shown += f" and {others} other pod{'s' if others != 1 else ''}"
        return (demand[s] if demand else 0), shown

    def no_domain(self, scope: Scope, region: Domain, level: int) -> Shortfall:
        demand = self.min_demand[scope.id]
        pods, shape = self._demand_text(scope, demand)
        s = self._dominant(scope)
        lo, hi = self.tree.descendants(region, level)
        labeled = self.tree.levels[level].labeled[lo:hi]
        exclusive = scope.rule is not None and scope.rule.exclusive
        if exclusive:
            labeled = labeled & self._free_of_others(level, lo, hi)
        room = self.state.counts[s][level][lo:hi][labeled] if self.nshapes else np.zeros(0, dtype=np.int64)
        name = self.tree.level_name(level)
        return Shortfall(
            NO_DOMAIN,
            scope.label,
            pods,
            shape=shape,
            level=name,
            exclusive=exclusive,
            region=self.tree.describe(region) if region.level else None,
            best=int(room.max()) if len(room) else 0,
            source=scope.rule.source if scope.rule else "",
        )

    def no_capacity(self, leaf: Scope, region: Domain, shape: int, pods: int) -> Shortfall:
        return Shortfall(
            NO_CAPACITY,
            leaf.label,
            pods,
            shape=self.gang.shapes[shape].describe(),
            region=self.tree.describe(region) if region.level else None,
            best=int(self.state.counts[shape][region.level][region.index]),
        )

    def excluded(self, region: Domain, shape: int) -> dict[str, int]:
        """Nodes in `region` that could not take even one pod of `shape` before this gang, by why."""
        if not self.gang.shapes:
            return {}
        li = self.tree.levels[region.level]
        nodes = self.tree.pos_to_node[li.starts[region.index] : li.ends[region.index]]
        return left_out(self.snapshot, self.gang.shapes[shape], nodes)


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


def _by_shape(members: Sequence[Member]) -> list[tuple[int, list[Member]]]:
    """Members grouped by shape, the most numerous shape first, order kept within a shape."""
    groups: dict[int, list[Member]] = {}
    for m in members:
        groups.setdefault(m.shape, []).append(m)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _incomplete(scope: Scope) -> Scope | None:
    """The deepest scope whose minimum cannot be met by the pods that exist, or None."""
    if scope.leaf:
        return scope if len(scope.members) < scope.min_member else None
    got, first_missing = 0, None
    for child in scope.children:
        missing = _incomplete(child)
        if missing is None:
            got += child.weight
        elif first_missing is None:
            first_missing = missing
    return None if got >= scope.min_member else (first_missing or scope)


def meets_minimum(gang: Gang, placed: Set[str]) -> bool:
    """Whether the pods in PLACED (keys) satisfy the gang's whole minimum tree."""

    def met(scope: Scope) -> bool:
        if scope.leaf:
            return sum(1 for m in scope.members if m.key in placed) >= scope.min_member
        return sum(c.weight for c in scope.children if met(c)) >= scope.min_member

    return met(gang.root)


def _minimum_pods(scope: Scope) -> int:
    """Pods the minimum tree needs, choosing the smallest children where only some are needed."""
    if scope.leaf:
        return scope.min_member
    sizes = sorted((_minimum_pods(c), c.weight) for c in scope.children)
    got, total = 0, 0
    for size, weight in sizes:
        if got >= scope.min_member:
            break
        got += weight
        total += size
    return total
