"""The gang placement engine.

`plan(snapshot, gang)` places a whole SubGroup tree at once or explains why it cannot:

  phase 1  demand (demand.py): what each scope needs; state (state.py): copy the free capacity
           of the resources the gang asks for and count, per pod shape, how many pods fit on
           each node and in each domain (bottom up).
  phase 2  the minimum tree, a recursion from the PodGroup down (KAI's job -> SubGroup -> pods):
           2a  place_scope: a scope with a required level finer than its region picks one
               domain of that level: the candidates that can hold its minimum, tightest fit
               first (ties by path; room counted in whole parts when its parts each need one
               finer domain, such as segments in racks), those where its preferred level also
               holds it in one domain before the others (candidates.py); a checkpoint before
               each candidate, a rollback when its subtree fails.
           2b  place_preferred: inside that domain the scope (a leaf of plain pods too) climbs
               from its preferred level (or, for compactness, from the node level) to the first
               level where one domain holds it, and tries the best few of those before
               spreading over the region.
           2c  place_children: its children are placed one unit at a time (a SubGroupSet is
               one unit) until `minMember` of them stand; a leaf (place_members, place_pods)
               places its minimum by descending the tree through the fewest domains (Kueue's
               greedy: the tightest child that holds the rest, else the largest child first).
  phase 3  place_optional: optional members, never at the cost of the minimum: pods beyond
           each leaf's minimum, SubGroups not needed for the minimum (whole or not at all) and
           elastic SubGroups (minMember 0), each inside the domains its constraints hold.
  phase 4  the plan: pod -> node, the domain of each constrained scope; or the deepest
           failure of phase 2 as a Shortfall (failure.py).

The result depends only on the snapshot and the gang: no clock, no randomness, no I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from extender.placement.candidates import Candidates
from extender.placement.demand import Demand
from extender.placement.failure import Failures
from extender.placement.gang import Gang, Member, Scope
from extender.placement.minimum import incomplete
from extender.placement.ranking import COMPACT, PREFERRED, REQUIRED, Recorder
from extender.placement.result import Plan, PlanResult, Unplaceable
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.state import AttemptState
from extender.placement.tree import Domain, IntArray, TopologyTree

# A ceiling on candidate domains tried in one plan; a bound on the worst case, not a tuning knob.
MAX_ATTEMPTS = 20_000
# Up to this many children, place_pods picks the next child in plain Python (see _next_child).
_FEW_CHILDREN = 64


def plan(snapshot: ClusterSnapshot, gang: Gang, *, compact: bool = True, explain: bool = False) -> PlanResult:
    """Place `gang` on `snapshot`: a Plan, or Unplaceable with the reason as data.

    `compact=False` turns off the default compactness of phase 2b (a scope with no preferred level
    does not climb to the fewest domains); only benchmarks compare with it off. `explain=True`
    makes the Plan carry the rankings of the candidate domains that decided it (ranking.py);
    the placement is the same either way.
    """
    missing = incomplete(gang)
    if missing is not None:  # cheap, and checked before any per-attempt array is built
        return Unplaceable(gang.key, missing)
    tree = snapshot.table.tree(gang.topology)
    placer = _Placer(snapshot, tree, gang, compact)
    if explain:
        placer.recorder = placer.candidates.recorder = Recorder(tree, [s.describe() for s in gang.shapes])
    return placer.run()


class _SearchLimit(Exception):
    """Unwinds the recursion when MAX_ATTEMPTS is reached."""


class _Placer:
    """The search of phases 2 and 3 over one attempt's state."""

    def __init__(self, snapshot: ClusterSnapshot, tree: TopologyTree, gang: Gang, compact: bool = True) -> None:
        self.compact = compact  # off: a scope with no preferred level does not climb (benchmarks)
        self.tree = tree
        self.gang = gang
        self.state = AttemptState(snapshot, tree, gang.shapes)
        self.demand = Demand(gang, snapshot.table.index)
        self.candidates = Candidates(snapshot, tree, self.state, self.demand)
        self.failures = Failures(snapshot, tree, gang, self.state, self.demand, self.candidates)
        self.attempts = 0
        self.minimum: frozenset[str] = frozenset()
        self.recorder: Recorder | None = None  # only when the plan is to be explained

    def run(self) -> PlanResult:
        root = self.gang.root
        try:
            placed = self.place_scope(root, self.tree.root)
        except _SearchLimit:
            placed = False
            self.failures.search_limit(self.attempts)
        if not placed:
            return Unplaceable(self.gang.key, self.failures.final(), self.attempts)
        self.minimum = frozenset(self.state.where)
        self.failures.optional = True
        self.demand.grow_units()
        with contextlib.suppress(_SearchLimit):  # the minimum stands; the rest waits for a later plan
            self.place_optional(root)
        return self._plan()

    def _plan(self) -> Plan:
        names = self.tree.node_names
        assignments = {key: names[node] for key, node in self.state.where.items()}
        domains = {}
        for scope in self.gang.scopes:
            pin = self.state.pins.get(scope.id)
            if pin is not None and (scope.rule is not None or scope is self.gang.root):
                domains[scope.key] = self.tree.ref(pin.required if pin.required.level else pin.preferred)
        unplaced = tuple(m.key for m in self.gang.members() if m.node is None and m.key not in assignments)
        levels: dict[str, tuple[str, ...]] = {}
        nodes = np.fromiter(self.state.where.values(), np.int64, len(self.state.where))
        for level in range(1, self.tree.node_level):
            used = set(self.tree.levels[level].domain_of_node[nodes].tolist())
            levels[self.tree.level_name(level)] = tuple(sorted(self.tree.path(Domain(level, d)) for d in used))
        rankings = self.recorder.rankings(self.state.pins) if self.recorder is not None else ()
        return Plan(self.gang.key, assignments, domains, unplaced, self.minimum, levels, self.attempts, rankings)

    def _tick(self) -> None:
        self.attempts += 1
        if self.attempts > MAX_ATTEMPTS:
            raise _SearchLimit

    # -- phase 2a: the required level ----------------------------------------------------------

    def place_scope(self, scope: Scope, region: Domain, required: Domain | None = None) -> bool:
        """Place the scope's minimum inside `region`. `required` is where the required
        constraints above it hold it (`region` may be narrower: a parent's preferred domain)."""
        required = region if required is None else required
        rule = scope.rule
        level = rule.required if rule is not None else None
        if level is not None and level > region.level:
            candidates = self.candidates.required(scope, region, level)
            if not candidates:
                self.failures.record(self.failures.no_domain(scope, region, level), region, scope)
                return False
            for domain in candidates:
                placed = self.place_scope_in(scope, domain, domain)
                if self.recorder is not None:
                    self.recorder.tried(scope, REQUIRED, domain, placed)
                if placed:
                    return True
            return False
        if not self._fixed_inside(scope, region):
            return False
        if level is not None:
            held = self.tree.ancestor(region, level)
            if not self.tree.labeled(held):
                return False  # the region sits on nodes without this level's label
            if (
                rule is not None
                and rule.exclusive
                and not self.candidates.free_of_others(scope, level, held.index, held.index + 1)[0]
            ):
                return False  # a parent's preference narrowed the region to a domain others hold
            if held.level > required.level:
                required = held  # the constraint holds the scope tighter than its parents do
        return self.place_scope_in(scope, required, region)

    def place_scope_in(self, scope: Scope, required: Domain, region: Domain) -> bool:
        """One candidate: pin the scope there and place it, or leave no trace."""
        self._tick()
        cp = self.state.checkpoint()
        self.state.pin(scope.id, required, region)
        if self.place_preferred(scope, region):
            return True
        self.state.rollback(cp)
        return False

    def _fixed_inside(self, scope: Scope, region: Domain) -> bool:
        fixed = self.demand.fixed[scope.id]
        if not fixed or region.level == 0:
            return True
        dom = self.tree.levels[region.level].domain_of_node
        return all(int(dom[n]) == region.index for n in fixed)

    # -- phase 2b: the preferred level, or compactness ------------------------------------------

    def place_preferred(self, scope: Scope, region: Domain) -> bool:
        """Place the scope's contents in one domain of its preferred level (or, for compactness,
        the finest level that holds it) inside `region`, else over the whole region."""
        rule = scope.rule
        preferred = rule.preferred if rule is not None and rule.preferred is not None else None
        implicit = preferred is None
        if preferred is None and self.compact:
            preferred = self.tree.node_level  # compact by default: the fewest domains below
        if preferred is not None and preferred > region.level and any(self.demand.minimum[scope.id]):
            saved = self.failures.deepest
            required = self.state.pins[scope.id].required
            kind = COMPACT if implicit else PREFERRED
            if self.recorder is not None:
                self.recorder.begin(scope, kind)
            for level in range(preferred, region.level, -1):
                for domain in self.candidates.preferred(scope, region, level, preferred, implicit):
                    self._tick()
                    cp = self.state.checkpoint()
                    self.state.pin(scope.id, required, domain)
                    held = self.place_contents(scope, domain)
                    if self.recorder is not None:
                        self.recorder.tried(scope, kind, domain, held)
                    if held:
                        return True
                    self.state.rollback(cp)
                    self.failures.deepest = saved  # a missed preference explains nothing
        return self.place_contents(scope, region)

    # -- phase 2c: children and pods ----------------------------------------------------------------

    def place_contents(self, scope: Scope, region: Domain) -> bool:
        if scope.leaf:
            return self.place_members(scope, region)
        return self.place_children(scope, region)

    def place_children(self, scope: Scope, region: Domain) -> bool:
        """Place children until `min_member` of them stand. Siblings are placed one after the
        other without backtracking between them, so when a child fails after others took room,
        the children are placed again with that child first: at most once per child."""
        order = self._ordered_children(scope)
        moved: set[int] = set()
        start = self.state.checkpoint()
        while True:
            got, failed = self._place_children_once(scope, region, order)
            if got >= scope.min_member:
                return True
            if failed is None or failed.id in moved or self._like_an_earlier(failed, order):
                return False
            moved.add(failed.id)
            self.state.rollback(start)
            order = [failed, *(c for c in order if c is not failed)]

    def _like_an_earlier(self, child: Scope, order: Sequence[Scope]) -> bool:
        """Whether a sibling before `child` asks for the same: then moving `child` first only
        swaps two equals (segments of one replica type), and the retry cannot help."""
        mine = self._signature(child)
        return any(self._signature(c) == mine for c in order[: order.index(child)])

    def _signature(self, c: Scope) -> tuple[object, ...]:
        """What a child asks for: siblings with equal signatures are interchangeable."""
        d = self.demand
        r = c.rule
        rule = None if r is None else (r.required, r.preferred, r.exclusive)
        return (rule, c.min_member, c.weight, tuple(d.minimum[c.id]), tuple(d.full[c.id]), tuple(d.fixed[c.id]))

    def _runs(self, children: Sequence[Scope], region: Domain) -> dict[int, list[Scope]]:
        """Siblings that ask for the same and each need one domain of a level finer than
        `region` (segments, slices), two or more, by the id of each: the candidates allot them
        domains together (Candidates.allot), so they take the fewest domains."""
        runs: dict[tuple[object, ...], list[Scope]] = {}
        for c in children:
            r = c.rule
            if r is None or r.required is None or r.required <= region.level or r.exclusive:
                continue
            if c.weight != 1 or self.demand.fixed[c.id] or c.id in self.state.pins or c.id in self.demand.waiting:
                continue
            runs.setdefault(self._signature(c), []).append(c)
        return {c.id: run for run in runs.values() if len(run) > 1 for c in run}

    def _place_children_once(self, scope: Scope, region: Domain, order: Sequence[Scope]) -> tuple[int, Scope | None]:
        """The weight placed, and the first child that failed after a sibling was placed."""
        required = self.state.pins[scope.id].required
        got, failed, placed_any = 0, None, False
        runs = self._runs([c for c in order if not self.demand.empty_ok[c.id]], region)
        hints = self.candidates.hints
        for child in order:
            if got >= scope.min_member:
                break
            if self.demand.empty_ok[child.id] and not self.demand.fixed[child.id]:
                got += child.weight  # satisfied with no pods (elastic); phase 3 may add some
                continue
            run = runs.get(child.id)
            if run is not None and run[0] is child:
                # Siblings that ask for the same get their domains together: the fewest.
                level = child.rule.required if child.rule is not None and child.rule.required is not None else 0
                hints.update(self.candidates.allot(run[: scope.min_member - got], region, level))
            cp = self.state.checkpoint()
            placed = self.place_scope(child, region, required)
            hints.pop(child.id, None)
            if placed:
                got += child.weight
                placed_any = True
            else:
                self.state.rollback(cp)
                if failed is None and placed_any:
                    failed = child
        for child_id in runs:
            hints.pop(child_id, None)
        return got, failed

    def _ordered_children(self, scope: Scope) -> list[Scope]:
        """Children with running pods first (they pin domains); when all are needed, the
        largest first (first-fit decreasing); otherwise in the order written."""
        all_needed = scope.min_member >= sum(c.weight for c in scope.children)

        def key(item: tuple[int, Scope]) -> tuple[int, int, int]:
            i, child = item
            size = sum(self.demand.minimum[child.id]) if all_needed else 0
            return (0 if self.demand.fixed[child.id] else 1, -size, i)

        return [c for _, c in sorted(enumerate(scope.children), key=key)]

    def _unplaced(self, scope: Scope) -> list[Member]:
        where = self.state.where
        return [m for m in scope.members if m.node is None and m.key not in where]

    def place_members(self, leaf: Scope, region: Domain) -> bool:
        """Place the leaf's minimum pods inside `region`."""
        placed = self.demand.preplaced[leaf.id] + sum(1 for m in leaf.members if m.key in self.state.where)
        need = self.demand.min_pods[leaf.id] - placed
        if need <= 0:
            return True
        todo = self._unplaced(leaf)[:need]
        for shape, keys in _by_shape(todo):
            # Counts are exact per shape, so a shortfall shows before any pod is placed; the
            # second test is not reached while they are.
            short = self.state.counts[shape][region.level][region.index] < len(keys)
            if short or self.place_pods(region, shape, keys) < len(keys):
                reason = self.failures.no_capacity(leaf, region, shape, len(keys))
                self.failures.record(reason, region, leaf, shape)
                return False
        return True

    def place_pods(self, domain: Domain, shape: int, keys: Sequence[str]) -> int:
        """Place as many of the pods `keys` as fit in `domain`, through the fewest child domains."""
        if not keys:
            return 0
        tree = self.tree
        if domain.level == tree.node_level:
            return self._fill_node(tree.node_of(domain), shape, keys)
        child_level = domain.level + 1
        lo, hi = tree.descendants(domain, child_level)
        # The children's room, kept here as pods go in: n pods of `shape` placed in a child lower
        # its count by exactly n (AttemptState.place) and leave the other children's alone.
        live = self.state.counts[shape][child_level][lo:hi]
        room: list[int] | IntArray = live.tolist() if len(live) <= _FEW_CHILDREN else live.copy()
        placed = 0
        while placed < len(keys):
            rest = len(keys) - placed
            i = _next_child(room, rest)
            fits = int(room[i]) if i >= 0 else 0
            if fits <= 0:
                break
            take = keys[placed : placed + min(fits, rest)]
            if child_level == tree.node_level:
                got = self._fill_node(tree.node_at[lo + i], shape, take)
            else:
                got = self.place_pods(Domain(child_level, lo + i), shape, take)
            room[i] -= got
            placed += got
            if fits >= rest:
                break  # the tightest child that takes all the rest: done, whatever it took
        return placed

    def _fill_node(self, node: int, shape: int, keys: Sequence[str]) -> int:
        k = min(len(keys), self.state.room_on(node, shape))
        if k > 0:
            self.state.place(node, shape, keys[:k])
        return k

    # -- phase 3: optional members -----------------------------------------------------------------

    def place_optional(self, scope: Scope) -> None:
        """Place the scope's optional members where its pins allow, never moving the minimum."""
        pin = self.state.pins.get(scope.id)
        if pin is None:
            return
        if scope.id in self.demand.waiting:
            return  # a unit whose pods are not all created yet: placed once they are
        if scope.leaf:
            cp = self.state.checkpoint()
            for shape, keys in _by_shape(self._unplaced(scope)):
                done = self.place_pods(pin.preferred, shape, keys)
                if pin.required != pin.preferred:
                    self.place_pods(pin.required, shape, keys[done:])
            if scope.id in self.demand.units and self._unplaced(scope):
                self.state.rollback(cp)  # a unit (its pods already running there) whole or not at all
            return
        runs = self._runs(scope.children, pin.required)
        for child in scope.children:
            if child.id in self.state.pins:
                self.place_optional(child)
            elif child.id not in runs:
                self.place_optional_child(child, pin.required, pin.preferred)
            elif runs[child.id][0] is child:
                self._place_optional_run(runs[child.id], pin.required, pin.preferred)

    def _place_optional_run(self, run: Sequence[Scope], required: Domain, preferred: Domain) -> None:
        """Optional siblings that ask for the same: as many as fit near the rest of their parent
        (its preferred domain), then the others in its required domain, each time in the domains
        Candidates.allot gives them together (the fewest)."""
        pending = list(run)
        level = run[0].rule.required if run[0].rule is not None and run[0].rule.required is not None else 0
        hints = self.candidates.hints
        for region in dict.fromkeys((preferred, required)):
            if not pending or level <= region.level:
                continue
            allotted = self.candidates.allot(pending, region, level)
            for child in pending:
                if child.id in allotted:
                    hints[child.id] = allotted[child.id]
                    self.place_optional_child(child, required, region)
                    hints.pop(child.id, None)
            pending = [c for c in pending if c.id not in allotted]
        for child in pending:
            self.place_optional_child(child, required, required)

    def place_optional_child(self, child: Scope, required: Domain, preferred: Domain) -> None:
        """An optional child near the rest of its parent (`preferred`, the parent's preferred
        domain) when that takes every pod of the child, else wherever its constraints allow. A
        whole unit (a segment beyond the minimum) goes whole or not at all; another child takes
        as much as fits, where that is the most."""
        if child.id in self.demand.waiting:
            return  # a unit whose pods are not all created yet: placed once they are
        regions = [required]
        if preferred != required and self._holds(preferred, self.demand.full[child.id]):
            regions.insert(0, preferred)
        best: tuple[int, Domain] | None = None
        for region in regions:
            cp = self.state.checkpoint()
            got = self._place_whole(child, region, required)
            if got is not None and got == self._unplaced_count(child):
                return  # everything placed: keep it
            self.state.rollback(cp)
            if got is not None and (best is None or got > best[0]):
                best = (got, region)
        if best is not None and child.id not in self.demand.units:
            self._place_whole(child, best[1], required)

    def _place_whole(self, child: Scope, region: Domain, required: Domain) -> int | None:
        """Place an optional child (its minimum, then what else fits); the pods placed, or None."""
        before = self.state.placed
        if not self.place_scope(child, region, required):
            return None
        self.place_optional(child)
        return self.state.placed - before

    def _unplaced_count(self, scope: Scope) -> int:
        return sum(1 for m in scope.all_members() if m.node is None)

    def _holds(self, domain: Domain, demand: Sequence[int]) -> bool:
        counts = self.state.counts
        return all(counts[s][domain.level][domain.index] >= d for s, d in enumerate(demand))


def _next_child(room: list[int] | IntArray, rest: int) -> int:
    """The child place_pods fills next: the tightest that holds all `rest` pods, else the
    largest (the first of equals either way). Most domains have a few children (the nodes of a
    rack), held in a list, where a Python loop costs less than the numpy calls it replaces.
    -1 when there is no child."""
    if len(room) == 0:
        return -1
    if not isinstance(room, list):
        holds = np.flatnonzero(room >= rest)
        return int(holds[np.argmin(room[holds])]) if len(holds) else int(np.argmax(room))
    top = max(room)
    if top < rest:
        return room.index(top)
    return room.index(min(filter(rest.__le__, room)))


def _by_shape(members: Sequence[Member]) -> list[tuple[int, list[str]]]:
    """Members' keys grouped by shape, the most numerous shape first, order kept within a shape."""
    groups: dict[int, list[str]] = {}
    for m in members:
        groups.setdefault(m.shape, []).append(m.key)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
