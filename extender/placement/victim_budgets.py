"""PodDisruptionBudgets over victim units: which units a budget covers and what a set overruns.

The Eviction API refuses a budget's pods beyond its `status.disruptionsAllowed`, so a victim set
that overruns a budget can never be evicted whole. Per budget and unit this keeps two counts:
the unit's own pods the budget covers, and the same for the unit *closed* (a gang's core takes
its elastic pods along). A unit whose closed count exceeds what the budget allows breaks it
alone and can be left out of every search; units that only break it together are found when a
set overruns it (`overruns`), and `beyond` says which of them to leave out next time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from extender.placement.tree import BoolArray, IntArray
from extender.placement.victim_units import UnitTable
from extender.placement.victims import Budget, Overrun


class BudgetTable:
    def __init__(self, units: UnitTable, budgets: Sequence[Budget]) -> None:
        self.budgets = tuple(budgets)
        self.size = len(units)
        self.allowed: IntArray = np.fromiter((max(0, b.allowed) for b in budgets), np.int64, len(budgets))
        rank_of = units.unit_of_pods() if budgets else {}  # (a pass over every victim pod)
        pairs = [(j, rank_of[key]) for j, b in enumerate(budgets) for key in b.pods if key in rank_of]
        b_of: IntArray = np.fromiter((j for j, _ in pairs), np.int64, len(pairs))
        r_of: IntArray = np.fromiter((r for _, r in pairs), np.int64, len(pairs))
        # a pod of an elastic unit also counts for its gang's core, which takes it along
        alone = ~units.whole[r_of]
        cores: IntArray = np.fromiter(
            (units.core_of[int(w)] for w in units.workload_of[r_of[alone]].tolist()), np.int64, int(alone.sum())
        )
        self.own_budget, self.own_rank, self.own = _count(b_of, r_of, self.size)
        self.closed_budget, self.closed_rank, self.closed = _count(
            np.concatenate([b_of, b_of[alone]]), np.concatenate([r_of, cores]), self.size
        )

    def __bool__(self) -> bool:
        """Whether any victim unit has a pod some budget covers."""
        return bool(len(self.own))

    def breaking(self) -> BoolArray:
        """Units that alone evict more of some budget's pods than it allows: no set that the
        Eviction API lets through contains them."""
        out: BoolArray = np.zeros(self.size, dtype=np.bool_)
        out[self.closed_rank[self.closed > self.allowed[self.closed_budget]]] = True
        return out

    def over(self, chosen: BoolArray) -> IntArray:
        """Per budget, the pods of the (closed) set `chosen` beyond what it allows."""
        taken = np.zeros(len(self.budgets), dtype=np.int64)
        np.add.at(taken, self.own_budget, np.where(chosen[self.own_rank], self.own, 0))
        out: IntArray = np.maximum(taken - self.allowed, 0)
        return out

    def overruns(self, chosen: BoolArray) -> tuple[Overrun, ...]:
        """The budgets `chosen` overruns, by name."""
        over = self.over(chosen)
        found = (Overrun(self.budgets[j].name, int(self.allowed[j]), int(over[j])) for j in np.flatnonzero(over))
        return tuple(sorted(found, key=lambda o: o.budget))

    def touching(self, chosen: BoolArray) -> BoolArray:
        """Units with pods of a budget that `chosen` overruns (the first to spare)."""
        out: BoolArray = np.zeros(self.size, dtype=np.bool_)
        broken = self.over(chosen) > 0
        out[self.closed_rank[broken[self.closed_budget]]] = True
        return out

    def beyond(self, chosen: BoolArray) -> BoolArray:
        """For each budget `chosen` overruns, its units but the cheapest chosen ones that fit in
        what it allows: a search without them cannot overrun it again."""
        out: BoolArray = np.zeros(self.size, dtype=np.bool_)
        over = self.over(chosen)
        for j in np.flatnonzero(over).tolist():
            mine = self.closed_budget == j
            ranks, counts = self.closed_rank[mine], self.closed[mine]  # in rank order: cheapest first
            kept = chosen[ranks] & (np.cumsum(np.where(chosen[ranks], counts, 0)) <= self.allowed[j])
            out[ranks[~kept]] = True
        return out


def _count(budget: IntArray, rank: IntArray, size: int) -> tuple[IntArray, IntArray, IntArray]:
    """(budget, unit rank, pods) rows, one per pair present, sorted by budget then rank."""
    keys, counts = np.unique(budget * max(size, 1) + rank, return_counts=True)
    return keys // max(size, 1), keys % max(size, 1), counts.astype(np.int64)
