"""find_victims: the cheapest set of lower-priority workloads whose eviction lets a gang's minimum fit.

Pure, like `plan()`: same snapshot, gang and workloads, same answer; no I/O, no clock.

  1  units: the workloads strictly below the preemptor's priority, cut into units (an elastic
     pod alone, the rest of a gang whole, a plain pod) and sorted by what each costs alone.
  2  domains: the gang's root goes whole into one domain of its required level (the cluster
     when it has none). Every such domain is ranked at once by an optimistic estimate: the
     shortest prefix of its cheapest units whose pods free the room the minimum needs.
  3  verify, best estimate first, at most MAX_DOMAINS domains (fewer when the next estimate's
     top priority is already worse than a verified answer): the engine plans the gang inside
     the domain with the estimated prefix evicted; when that fails, with every unit there
     evicted (if even that fails, nothing here helps), then bisects between the two.
  4  reprieve: with the plan's minimum fixed, every victim whose pods fit back next to it is
     spared, the most expensive first (kube-scheduler's reprieve, by node capacity instead of
     by new engine calls); a gang's elastic pods are only spared when its core is.
  5  the verified domain whose victims cost least wins (`victims.Cost`).

The engine calls per search are bounded by MAX_DOMAINS * (2 + MAX_BISECT); everything else is
numpy over the victims' pods, so the search stays bounded on 10,000 nodes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from extender.placement.engine import incomplete, plan
from extender.placement.gang import Gang, Scope
from extender.placement.result import Plan, PlanResult, Unplaceable
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.tree import BoolArray, IntArray, TopologyTree
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
MAX_PLANS = 20  # engine calls per search, in all


def find_victims(
    snapshot: ClusterSnapshot,
    gang: Gang,
    priority: int,
    workloads: Sequence[Workload],
    budgets: Sequence[Budget] = (),
    *,
    max_domains: int = MAX_DOMAINS,
) -> PreemptionResult:
    """Victims among `workloads` (strictly below `priority`) that make `gang`'s minimum fit."""
    lower = [w for w in workloads if w.priority < priority and w.pods]
    missing = incomplete(gang)
    if missing is not None:
        return NoPreemption(gang.key, missing.render())
    if not lower:
        return NoPreemption(gang.key, f"no running workload has a priority below {priority}")
    tree = snapshot.table.tree(gang.topology)
    rule = gang.root.rule
    level = rule.required if rule is not None and rule.required is not None else 0
    resources = sorted({r for s in gang.shapes for r, v in s.requests if v > 0})
    measured = measured_resources(s.requests for s in gang.shapes)
    units = UnitTable(snapshot.table, lower, resources, measured, budgets)
    eligible = _eligible(snapshot, gang)
    only = _pinned(snapshot, tree, gang, level)
    chunk = _chunk(gang, level)
    needed = _needed(gang)
    search = _Search(snapshot, tree, gang, units, measured, budgets)

    ranked: dict[int, list[Candidate]] = {}

    def rank(tier: int) -> list[Candidate]:
        if tier not in ranked:
            allowed: BoolArray = units.priority <= tier
            if chunk is None:
                ranked[tier] = rank_domains(snapshot, tree, level, units, needed, eligible, allowed, only)
            else:
                ranked[tier] = rank_nested(snapshot, tree, level, units, chunk, eligible, allowed, only)
        return ranked[tier]

    tiers = [int(t) for t in np.unique(units.priority)]
    first = _first_tier(tiers, rank)
    if first is None:
        where = "the cluster" if level == 0 else f"any {tree.level_name(level)}"
        why = f"evicting every workload below priority {priority} would not free room for the minimum in {where}"
        return NoPreemption(gang.key, why)
    for tier in tiers[first:]:  # the lowest top priority that works wins
        best = search.best_of(rank(tier), max_domains)
        if best is not None:
            return dataclasses.replace(best, domains_checked=search.verified, plans=search.plans)
        if search.plans >= MAX_PLANS:
            break
    why = search.failure or f"the search stopped after {search.plans} plans"
    return NoPreemption(gang.key, f"evicting lower-priority workloads would not help: {why}", search.plans)


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
        tree: TopologyTree,
        gang: Gang,
        units: UnitTable,
        measured: tuple[str, ...],
        budgets: Sequence[Budget],
    ) -> None:
        self.snapshot, self.tree, self.gang, self.units = snapshot, tree, gang, units
        self.measured, self.budgets = measured, budgets
        self.shape_of = {m.key: m.shape for m in gang.members()}
        self.verified = 0
        self.plans = 0
        self.failure = ""

    def attempt(self, cand: Candidate, k: int, blocked: BoolArray | None) -> tuple[BoolArray, PlanResult]:
        chosen = self.units.closed(cand.units[:k])
        usage = self.units.usage_without(self.snapshot.usage, chosen)
        self.plans += 1
        return chosen, plan(ClusterSnapshot(self.snapshot.table, usage, blocked, self.snapshot.busy), self.gang)

    def best_of(self, candidates: Sequence[Candidate], limit: int) -> Preemption | None:
        best: Preemption | None = None
        for checked, cand in enumerate(candidates):
            if checked >= limit or self.plans >= MAX_PLANS:
                break
            found = self.verify(cand)
            if found is not None and (best is None or found.cost < best.cost):
                best = found
        return best

    def verify(self, cand: Candidate) -> Preemption | None:
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
        return Preemption(
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
        )

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
        for rank in np.flatnonzero(chosen)[::-1].tolist():
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
