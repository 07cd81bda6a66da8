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
from collections.abc import Mapping, Sequence

import numpy as np

from extender.placement.engine import incomplete, plan
from extender.placement.gang import Gang, Scope
from extender.placement.result import Plan, PlanResult, Unplaceable
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.tree import BoolArray, IntArray, TopologyTree
from extender.placement.victim_domains import Candidate, rank_domains
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

MAX_DOMAINS = 3  # candidate domains verified with the engine
MAX_BISECT = 4  # engine calls spent narrowing one domain's prefix


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
    needed = _needed(gang)
    eligible = _eligible(snapshot, gang)
    candidates = rank_domains(snapshot, tree, level, units, needed, eligible, _pinned(snapshot, tree, gang, level))
    if not candidates:
        where = "the cluster" if level == 0 else f"any {tree.level_name(level)}"
        why = f"evicting every workload below priority {priority} would not free room for the minimum in {where}"
        return NoPreemption(gang.key, why)
    search = _Search(snapshot, tree, gang, units, measured, budgets)
    best: Preemption | None = None
    for cand in candidates:
        if search.verified >= max_domains or (best is not None and cand.key[0] > best.cost.top_priority):
            break
        found = search.verify(cand)
        if found is not None and (best is None or found.cost < best.cost):
            best = found
    if best is None:
        why = search.failure or "the search found no candidate domain"
        return NoPreemption(gang.key, f"evicting lower-priority workloads would not help: {why}", search.plans)
    return dataclasses.replace(best, domains_checked=search.verified, plans=search.plans)


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

    def verify(self, cand: Candidate) -> Preemption | None:
        self.verified += 1
        blocked = self._outside(cand)
        k, total = cand.first, len(cand.units)
        chosen, result = self.attempt(cand, k, blocked)
        if not isinstance(result, Plan):
            if total > k:
                chosen, result = self.attempt(cand, total, blocked)
            if not isinstance(result, Plan):
                self._failed(cand, result)
                return None
            lo, hi, steps = k, total, 0
            while hi - lo > 1 and steps < MAX_BISECT:
                steps += 1
                mid = (lo + hi) // 2
                c, r = self.attempt(cand, mid, blocked)
                if isinstance(r, Plan):
                    hi, chosen, result = mid, c, r
                else:
                    lo = mid
        minimum = self._minimum(result)
        chosen = self.reprieve(chosen, minimum)
        victims = self.units.victim_set(chosen)
        cost, pods = cost_of(self.units.workloads, victims, self.measured, self.budgets)
        workloads = self.units.workloads
        return Preemption(
            gang=self.gang.key,
            domain=self.tree.describe(cand.domain),
            victims=tuple(sorted(workloads[w].key for w in victims.whole)),
            elastic={
                workloads[w].key: tuple(sorted(keys)) for w, keys in victims.alone.items() if w not in victims.whole
            },
            pods=tuple(pods),
            cost=cost,
            plan=minimum,
            resources=self.measured,
        )

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


def _needed(gang: Gang) -> Mapping[str, int]:
    """Per resource, what the pods of the minimum tree that are not placed yet ask for."""
    per_shape = _minimum_shapes(gang.root)
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
