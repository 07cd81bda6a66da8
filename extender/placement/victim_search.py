"""find_victims: the cheapest set of workloads whose eviction lets a gang's minimum fit.

Pure, like `plan()`: same snapshot, gang and workloads, same answer; no I/O, no clock.

  1  units: the workloads strictly below the preemptor's priority, cut into units (an elastic
     pod alone, the rest of a gang whole, a plain pod), and the elastic pods of gangs of its own
     priority (pods beyond a minimum never keep an equal minimum waiting; their cores stay), sorted
     by what each costs alone: elastic pods first, whatever their priority (victim_units.py).
  2  domains: the gang's root goes whole into one domain of its required level (the cluster
     when it has none). Every such domain is ranked at once by an optimistic estimate: the
     shortest prefix of its cheapest units whose pods free the room the minimum needs.
  3  verify, best estimate first, at most MAX_DOMAINS domains (fewer when the next estimate's
     top priority is already worse than a verified answer): the engine plans the gang inside
     the domain with the estimated prefix evicted; when that fails, with every unit there
     evicted (if even that fails, nothing here helps), then bisects between the two.
  4  reprieve: with the plan's minimum fixed, every victim whose pods fit back next to it is
     spared, the most expensive first (kube-scheduler's reprieve, by node capacity instead of
     by new engine calls); a gang's elastic pods are only spared when its core is. Victims that
     break a PodDisruptionBudget are offered back before the others (as kube-scheduler does).
  5  the verified domain whose victims cost least wins (`victims.Cost`).

PodDisruptionBudgets: the Eviction API refuses a budget's pods beyond what it allows, so such a
set could never be evicted whole. Units that alone overrun a budget are left out of the search;
a set that still overruns one (its units only break it together) is searched again without that
budget's units but the cheapest that fit, at most MAX_ROUNDS times. When no round finds a set
within the budgets, nothing is chosen: the answer is a NoPreemption that names the budgets the
first set found overruns, and by how many pods (the cheapest set without the units that break
a budget alone; when there is none, the cheapest with every unit).

The engine calls per search, every round together, are bounded by MAX_PLANS; everything else is
numpy over the victims' pods, so the search stays bounded on 10,000 nodes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from extender.placement.engine import plan
from extender.placement.gang import Gang, Scope
from extender.placement.minimum import incomplete
from extender.placement.result import Plan, PlanResult, Unplaceable
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.tree import BoolArray, IntArray, TopologyTree
from extender.placement.victim_budgets import BudgetTable
from extender.placement.victim_domains import Candidate, rank_domains, rank_nested
from extender.placement.victim_units import UnitTable
from extender.placement.victims import (
    Budget,
    NoPreemption,
    Preemption,
    PreemptionResult,
    Workload,
    cost_of,
    measured_resources,
)

MAX_DOMAINS = 2  # candidate domains verified with the engine per priority tier
MAX_BISECT = 3  # engine calls spent narrowing one domain's prefix
MAX_PLANS = 20  # engine calls per search, in all (every round together)
MAX_ROUNDS = 3  # searches within the budgets, each without the units of those the last overran


def find_victims(
    snapshot: ClusterSnapshot,
    gang: Gang,
    priority: int,
    workloads: Sequence[Workload],
    budgets: Sequence[Budget] = (),
    *,
    max_domains: int = MAX_DOMAINS,
) -> PreemptionResult:
    """Victims among `workloads` (strictly below `priority`, and the elastic pods of gangs at it)
    that make `gang`'s minimum fit, never more of a budget's pods than it allows."""
    lower = [w for w in workloads if w.pods and (w.priority < priority or (w.priority == priority and w.elastic))]
    missing = incomplete(gang)
    if missing is not None:
        return NoPreemption(gang.key, missing.render())
    if not lower:
        return NoPreemption(
            gang.key, f"no running workload has a priority below {priority}, nor pods beyond its minimum at it"
        )
    search = _Search(snapshot, gang, priority, lower, budgets, max_domains)
    guard = search.guard
    if not guard:
        return search.answer(search.run(None))
    excluded = guard.breaking()
    cheapest: _Found | None = None  # the first set found that overruns a budget
    for _ in range(MAX_ROUNDS):
        found = search.run(excluded)
        if isinstance(found, NoPreemption):
            break
        if not found.preemption.cost.budgets:
            return search.answer(found)
        cheapest = cheapest or found
        excluded = excluded | guard.beyond(found.chosen)
        if search.plans >= MAX_PLANS:
            break
    if cheapest is None:
        # Every set within the budgets needs a unit that breaks one alone: what would the
        # cheapest set be with every unit? (If even that finds nothing, budgets are not why.)
        found = search.run(None) if excluded.any() else found
        if isinstance(found, NoPreemption) or not found.preemption.cost.budgets:
            return search.answer(found)
        cheapest = found
    return search.refused(cheapest)


@dataclasses.dataclass(frozen=True)
class _Found:
    preemption: Preemption
    chosen: BoolArray  # the victim units, closed


def _first_tier(tiers: Sequence[int], rank: Callable[[int], list[Candidate]]) -> int | None:
    """The index of the lowest tier whose estimate finds a domain (more units only add room, so
    a bisection: a cluster with a hundred priorities costs seven rankings, not a hundred)."""
    if rank(tiers[0]):
        return 0  # the common case: the lowest priority alone will do
    lo, hi = 0, len(tiers) - 1  # lo finds nothing, hi finds something
    if not rank(tiers[hi]):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rank(tiers[mid]):
            hi = mid
        else:
            lo = mid
    return hi


class _Search:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        gang: Gang,
        priority: int,
        lower: Sequence[Workload],
        budgets: Sequence[Budget],
        max_domains: int,
    ) -> None:
        self.snapshot, self.gang, self.priority, self.max_domains = snapshot, gang, priority, max_domains
        self.tree = snapshot.table.tree(gang.topology)
        rule = gang.root.rule
        self.level = rule.required if rule is not None and rule.required is not None else 0
        resources = sorted({r for s in gang.shapes for r, v in s.requests if v > 0})
        self.measured = measured_resources(s.requests for s in gang.shapes)
        self.units = UnitTable(snapshot.table, lower, resources, self.measured, budgets, ceiling=priority)
        self.budgets = budgets
        self.guard = BudgetTable(self.units, budgets)
        self.covered = frozenset(p for b in budgets for p in b.pods)
        self.eligible = _eligible(snapshot, gang)
        self.only = _pinned(snapshot, self.tree, gang, self.level)
        self.chunk = _chunk(gang, self.level)
        self.needed = _needed(gang)
        self.shape_of = {m.key: m.shape for m in gang.members()}
        self.verified = 0
        self.plans = 0
        self.failure = ""

    def run(self, excluded: BoolArray | None) -> _Found | NoPreemption:
        """One search over the usable units not `excluded`: the lowest tier that works (elastic
        pods alone first, lowest priority first; then whole workloads too), and its best verified
        domain."""
        self.failure = ""
        units = self.units
        ranked: dict[int, list[Candidate]] = {}
        usable = units.usable if excluded is None else units.usable & ~excluded

        def rank(tier: int) -> list[Candidate]:
            if tier not in ranked:
                ranked[tier] = self._rank(usable & (units.tier <= tier))
            return ranked[tier]

        tiers = [int(t) for t in np.unique(units.tier[usable])]
        first = _first_tier(tiers, rank) if tiers else None
        if first is None:
            where = "the cluster" if self.level == 0 else f"any {self.tree.level_name(self.level)}"
            below = f"every workload below priority {self.priority} and every pod beyond a minimum at it"
            why = f"evicting {below} would not free room for the minimum in {where}"
            return NoPreemption(self.gang.key, why, self.plans)
        for tier in tiers[first:]:  # the lowest top priority that works wins
            best = self.best_of(rank(tier), self.max_domains)
            if best is not None:
                return best
            if self.plans >= MAX_PLANS:
                break
        why = self.failure or f"the search stopped after {self.plans} plans"
        return NoPreemption(self.gang.key, f"evicting lower-priority workloads would not help: {why}", self.plans)

    def _rank(self, allowed: BoolArray) -> list[Candidate]:
        snapshot, tree, level, units = self.snapshot, self.tree, self.level, self.units
        if self.chunk is None:
            return rank_domains(snapshot, tree, level, units, self.needed, self.eligible, allowed, self.only)
        return rank_nested(snapshot, tree, level, units, self.chunk, self.eligible, allowed, self.only)

    def answer(self, found: _Found | NoPreemption) -> PreemptionResult:
        if isinstance(found, NoPreemption):
            return dataclasses.replace(found, plans=self.plans)
        return dataclasses.replace(found.preemption, domains_checked=self.verified, plans=self.plans)

    def refused(self, cheapest: _Found) -> NoPreemption:
        """No set within the budgets: nothing is evicted; which budgets the cheapest set overruns."""
        overruns = self.guard.overruns(cheapest.chosen)
        shown = ", ".join(o.render() for o in overruns[:5]) + (
            f" and {len(overruns) - 5} more" if len(overruns) > 5 else ""
        )
        why = (
            "every victim set found evicts pods beyond what PodDisruptionBudgets allow (the Eviction API "
            f"would refuse them): the cheapest, in {cheapest.preemption.domain}, would overrun {shown}"
        )
        return NoPreemption(self.gang.key, why, self.plans, overruns)

    def attempt(self, cand: Candidate, k: int, blocked: BoolArray | None) -> tuple[BoolArray, PlanResult]:
        chosen = self.units.closed(cand.units[:k])
        usage = self.units.usage_without(self.snapshot.usage, chosen)
        self.plans += 1
        return chosen, plan(ClusterSnapshot(self.snapshot.table, usage, blocked, self.snapshot.busy), self.gang)

    def best_of(self, candidates: Sequence[Candidate], limit: int) -> _Found | None:
        best: _Found | None = None
        for checked, cand in enumerate(candidates):
            if checked >= limit or self.plans >= MAX_PLANS:
                break
            found = self.verify(cand)
            if found is not None and (best is None or found.preemption.cost < best.preemption.cost):
                best = found
        return best

    def verify(self, cand: Candidate) -> _Found | None:
        self.verified += 1
        found = self._shortest(cand, self._outside(cand))
        if found is None:
            return None
        chosen, result = found
        minimum = self._minimum(result)
        chosen = self.reprieve(chosen, minimum)
        victims = self.units.victim_set(chosen)
        cost, pods = cost_of(self.units.workloads, victims, self.measured, self.budgets)
        workloads = self.units.workloads
        preemption = Preemption(
            gang=self.gang.key,
            domain=self.tree.ref(cand.domain),
            victims=tuple(sorted(workloads[w].key for w in victims.whole)),
            elastic={
                workloads[w].key: tuple(sorted(keys)) for w, keys in victims.alone.items() if w not in victims.whole
            },
            pods=tuple(pods),
            cost=cost,
            plan=minimum,
            resources=self.measured,
            guarded=tuple(p for p in pods if p in self.covered),
        )
        return _Found(preemption, chosen)

    def _shortest(self, cand: Candidate, blocked: BoolArray | None) -> tuple[BoolArray, Plan] | None:
        """A short prefix of the domain's units after which the gang fits: the estimate, else
        every unit (if even that fails, nothing here helps), then bisection between the two."""
        k, total = cand.first, len(cand.units)
        chosen, result = self.attempt(cand, k, blocked)
        if isinstance(result, Plan):
            return chosen, result
        if total > k:
            chosen, result = self.attempt(cand, total, blocked)
        if not isinstance(result, Plan):
            self._failed(cand, result)
            return None
        best, low, high = (chosen, result), k, total
        for _ in range(MAX_BISECT):
            if high - low <= 1 or self.plans >= MAX_PLANS:
                break
            mid = (low + high) // 2
            c, r = self.attempt(cand, mid, blocked)
            if isinstance(r, Plan):
                high, best = mid, (c, r)
            else:
                low = mid
        return best

    def _failed(self, cand: Candidate, result: PlanResult) -> None:
        assert isinstance(result, Unplaceable)
        self.failure = f"even with every one of them in {self.tree.describe(cand.domain)} evicted, {result.message}"

    def _outside(self, cand: Candidate) -> BoolArray | None:
        """Nodes the engine may not use: those outside the candidate domain (and those blocked)."""
        base = self.snapshot.blocked
        if cand.domain.level == 0:
            return base
        li = self.tree.levels[cand.domain.level]
        outside: BoolArray = li.domain_of_node != cand.domain.index
        return outside if base is None else outside | base

    def _minimum(self, result: Plan) -> Plan:
        """The plan cut to its minimum: only the minimum justifies evicting anyone."""
        keep = {p: n for p, n in result.assignments.items() if p in result.minimum}
        extra = tuple(sorted(set(result.assignments) - set(keep)))
        return dataclasses.replace(result, assignments=keep, unplaced=tuple(result.unplaced) + extra)

    def reprieve(self, chosen: BoolArray, minimum: Plan) -> BoolArray:
        """Spare every chosen unit whose pods fit back beside the plan, most expensive first."""
        units, table = self.units, self.snapshot.table
        usage = units.usage_without(self.snapshot.usage, chosen)
        slack = {r: table.alloc(r) - usage.used(r) for r in units.resources}
        index = table.index
        for pod, node in minimum.assignments.items():
            requests = dict(self.gang.shapes[self.shape_of[pod]].requests)
            for r in units.resources:
                slack[r][index[node]] -= requests.get(r, 0)
        chosen = chosen.copy()
        order = np.flatnonzero(chosen)[::-1]
        if self.guard:  # those that break a budget are offered back first (kube-scheduler's order)
            breaking = self.guard.touching(chosen)[order]
            order = np.concatenate([order[breaking], order[~breaking]])
        for rank in order.tolist():
            whole = bool(units.whole[rank])
            if not whole and chosen[units.core_of[int(units.workload_of[rank])]]:
                continue  # its gang goes whole: its elastic pods go along
            lo, hi = int(units.pod_start[rank]), int(units.pod_start[rank + 1])
            if _fits_back(slack, units, lo, hi):
                chosen[rank] = False
        return chosen


def _fits_back(slack: dict[str, IntArray], units: UnitTable, lo: int, hi: int) -> bool:
    """Put pods lo:hi back if every node keeps room for the plan; True when they went back."""
    nodes = units.pod_node[lo:hi]
    on = nodes >= 0
    for r, arr in slack.items():
        need = np.zeros(len(arr), dtype=np.int64)
        np.add.at(need, nodes[on], units.pod_req[r][lo:hi][on])
        if np.any(arr[nodes[on]] < need[nodes[on]]):
            return False
    for r, arr in slack.items():
        np.subtract.at(arr, nodes[on], units.pod_req[r][lo:hi][on])
    return True


def _chunk(gang: Gang, level: int) -> tuple[int, Mapping[str, int], int] | None:
    """Parts of the minimum that each need one domain finer than `level` (segments that each
    need a rack): that level, what the smallest part needs, and how many parts; None if none."""
    found: list[Scope] = []

    def walk(scope: Scope) -> None:
        for child in scope.children:
            rule = child.rule
            if rule is not None and rule.required is not None and rule.required > level:
                if _minimum_shapes(child).total():
                    found.append(child)
            else:
                walk(child)

    walk(gang.root)
    if not found:
        return None
    inner = min(s.rule.required for s in found if s.rule is not None and s.rule.required is not None)
    smallest = min(found, key=lambda s: _minimum_shapes(s).total())
    return inner, _needed(gang, smallest), len(found)


def _needed(gang: Gang, scope: Scope | None = None) -> Mapping[str, int]:
    """Per resource, what the pods of the minimum tree (of `scope`) not placed yet ask for."""
    per_shape = _minimum_shapes(gang.root if scope is None else scope)
    out: Counter[str] = Counter()
    for shape, count in per_shape.items():
        for r, v in gang.shapes[shape].requests:
            out[r] += v * count
    return {r: v for r, v in out.items() if v > 0}


def _minimum_shapes(scope: Scope) -> Counter[int]:
    """Pods per shape the minimum needs, with the smallest children where only some are needed."""
    if scope.leaf:
        pre = sum(1 for m in scope.members if m.node is not None)
        need = max(0, scope.min_member - pre)
        return Counter(m.shape for m in [m for m in scope.members if m.node is None][:need])
    parts = sorted(((_minimum_shapes(c), c.weight) for c in scope.children), key=lambda cw: cw[0].total())
    out: Counter[int] = Counter()
    got = 0
    for counter, weight in parts:
        if got >= scope.min_member:
            break
        out.update(counter)
        got += weight
    return out


def _eligible(snapshot: ClusterSnapshot, gang: Gang) -> BoolArray:
    """Nodes where some pod of the gang may go, whatever their free room."""
    mask: BoolArray = np.zeros(len(snapshot.table), dtype=np.bool_)
    for shape in gang.shapes:
        mask |= snapshot.table.eligibility(shape.placement).mask
    return mask if snapshot.blocked is None else mask & ~snapshot.blocked


def _pinned(snapshot: ClusterSnapshot, tree: TopologyTree, gang: Gang, level: int) -> int | None:
    """The domain the gang's running pods already hold at `level`, if any."""
    index = snapshot.table.index
    for m in gang.members():
        if m.node is not None and m.node in index:
            return int(tree.levels[level].domain_of_node[index[m.node]])
    return None
