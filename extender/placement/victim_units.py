"""Victim units in cost order, as flat arrays: what evicting any set of them frees, per node.

A *unit* is what can be evicted on its own: one elastic pod of a gang, the rest of a gang (its
*core*: evicting it evicts the gang's elastic pods too), or a plain pod. Units are sorted once
by what each costs alone (elastic pods before whole workloads whatever their priority, then
priority, then pods, the resources taken, the youngest first, pods under no
PodDisruptionBudget first), so "the cheapest units" is a prefix of the ranks. A unit's *tier*
says the same as one number: its priority for a whole workload, and far below every priority
for an elastic pod (an optional pod goes before any minimum). Cores at or above the
preemptor's priority (`ceiling`) are never usable: such a gang gives only its elastic pods.
Pods are kept as flat arrays in rank order (unit rank, node index, request per resource), so
the usage left after any set of units is a few numpy steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from extender.placement.snapshot import NodeTable, Usage
from extender.placement.tree import BoolArray, IntArray
from extender.placement.victims import Budget, RunningPod, VictimSet, Workload

FloatArray = np.ndarray[tuple[int], np.dtype[np.float64]]
SPARE = 2**40  # an elastic pod's tier is its priority minus this: below every whole workload's


class UnitTable:
    def __init__(
        self,
        table: NodeTable,
        workloads: Sequence[Workload],
        resources: Sequence[str],
        measured: Sequence[str],
        budgets: Sequence[Budget],
        ceiling: int | None = None,
    ) -> None:
        """CEILING: the preemptor's priority; cores at or above it may not be evicted (None: any)."""
        self.table = table
        self.workloads = workloads
        self.resources = tuple(resources)  # what the engine reads: the gang's requested resources
        guarded = {p for b in budgets if b.allowed <= 0 for p in b.pods}
        pods = [p for wl in workloads for p in wl.pods]
        m, nw = len(pods), len(workloads)
        index = table.index
        pod_wl: IntArray = np.repeat(np.arange(nw, dtype=np.int64), [len(w.pods) for w in workloads])
        elastic, together = _elastic(workloads, pods, pod_wl)
        node: IntArray = np.fromiter((index.get(p.node, -1) for p in pods), np.int64, m)
        started: FloatArray = np.fromiter((p.started for p in pods), np.float64, m)
        shielded: BoolArray = np.zeros(m, dtype=bool)
        if guarded:
            shielded = np.fromiter((p.key in guarded for p in pods), bool, m)
        wanted = dict.fromkeys((*self.resources, *measured))
        req = {r: np.fromiter((p.requests.get(r, 0) for p in pods), np.int64, m) for r in wanted}

        # unit ids before sorting: workload w's core is w; elastic units (a pod, or a segment's
        # pods together) are nw, nw + 1, ...
        ids, first = np.unique(together[elastic], return_index=True)
        unit: IntArray = pod_wl.copy()
        unit[elastic] = nw + np.searchsorted(ids, together[elastic])
        nu = nw + len(ids)
        u_wl: IntArray = np.concatenate([np.arange(nw, dtype=np.int64), pod_wl[elastic][first]])
        u_whole: BoolArray = np.arange(nu) < nw
        u_prio: IntArray = np.fromiter((w.priority for w in workloads), np.int64, nw)[u_wl]
        wl_pods: IntArray = np.bincount(pod_wl, minlength=nw).astype(np.int64)
        own_pods: IntArray = np.bincount(unit, minlength=nu).astype(np.int64)
        # what taking a unit costs: a core takes the whole workload, elastic pods included
        u_count: IntArray = np.where(u_whole, np.concatenate([wl_pods, np.zeros(nu - nw, np.int64)]), own_pods)
        taken = [_per_unit(nu, pod_wl, unit, elastic, req[r]) for r in measured]
        u_start = np.full(nu, np.inf)
        np.minimum.at(u_start, pod_wl, started)
        np.minimum.at(u_start, unit[elastic], started[elastic])
        u_guard = _per_unit(nu, pod_wl, unit, elastic, shielded.astype(np.int64)) > 0
        u_tier: IntArray = np.where(u_whole, u_prio, u_prio - SPARE)
        order = np.lexsort(
            (np.arange(nu), u_guard, -u_start, *reversed(taken), u_count, u_tier)
        )  # the last key sorts first
        rank_of = np.empty(nu, dtype=np.int64)
        rank_of[order] = np.arange(nu)

        self.workload_of: IntArray = u_wl[order]
        self.whole: BoolArray = u_whole[order]
        self.priority: IntArray = u_prio[order]
        self.tier: IntArray = u_tier[order]
        everything: BoolArray = np.ones(nu, dtype=np.bool_)
        self.usable: BoolArray = everything if ceiling is None else ~self.whole | (self.priority < ceiling)
        self.cost_pods: IntArray = own_pods[order]
        own_taken = np.zeros(nu, dtype=np.int64)
        if measured:
            np.add.at(own_taken, unit, req[measured[0]])
        self.cost_taken: IntArray = own_taken[order]
        self.core_of: dict[int, int] = {w: int(rank_of[w]) for w in range(nw)}
        self.elastic_units: dict[int, list[int]] = {}
        for rank in np.flatnonzero(~self.whole).tolist():
            self.elastic_units.setdefault(int(self.workload_of[rank]), []).append(rank)

        pod_rank = rank_of[unit]
        by_rank = np.argsort(pod_rank, kind="stable")
        self.pod_unit: IntArray = pod_rank[by_rank]
        self.pod_node: IntArray = node[by_rank]
        self.pod_req: dict[str, IntArray] = {r: req[r][by_rank] for r in self.resources}
        self._pods, self._by_rank = pods, by_rank
        # the pods of unit k are pod_start[k]:pod_start[k + 1]
        self.pod_start: IntArray = np.searchsorted(self.pod_unit, np.arange(nu + 1)).astype(np.int64)

    def __len__(self) -> int:
        return len(self.whole)

    def closed(self, ranks: IntArray) -> BoolArray:
        """The units `ranks` stand for: a core brings its workload's elastic units along."""
        chosen: BoolArray = np.zeros(len(self), dtype=np.bool_)
        chosen[ranks] = True
        for rank in ranks[self.whole[ranks]].tolist():
            extra = self.elastic_units.get(int(self.workload_of[rank]))
            if extra:
                chosen[extra] = True
        return chosen

    def usage_without(self, base: Usage, chosen: BoolArray) -> Usage:
        gone = chosen[self.pod_unit] & (self.pod_node >= 0)
        nodes = self.pod_node[gone]
        removed = {}
        for r in self.resources:
            arr = np.zeros(len(self.table), dtype=np.int64)
            np.add.at(arr, nodes, self.pod_req[r][gone])
            removed[r] = arr
        return _Without(base, removed)

    def unit_of_pods(self) -> dict[str, int]:
        """Pod key -> the rank of its unit."""
        keys = (self._pods[i].key for i in self._by_rank.tolist())
        return dict(zip(keys, self.pod_unit.tolist(), strict=True))

    def victim_set(self, chosen: BoolArray) -> VictimSet:
        out = VictimSet()
        for rank in np.flatnonzero(chosen).tolist():
            w = int(self.workload_of[rank])
            if self.whole[rank]:
                out.whole.add(w)
            else:
                lo, hi = int(self.pod_start[rank]), int(self.pod_start[rank + 1])
                keys = (self._pods[i].key for i in self._by_rank[lo:hi].tolist())
                out.alone.setdefault(w, set()).update(keys)
        return out


def _elastic(workloads: Sequence[Workload], pods: Sequence[RunningPod], pod_wl: IntArray) -> tuple[BoolArray, IntArray]:
    """Per pod, whether it may go alone (beyond its gang's minimum), and a number the elastic pods
    of one segment share (they go together)."""
    m = len(pods)
    elastic: BoolArray = np.zeros(m, dtype=bool)
    together: IntArray = np.arange(m, dtype=np.int64)
    if any(w.gang and w.elastic for w in workloads):
        spare = [w.elastic if w.gang else frozenset() for w in workloads]
        elastic = np.fromiter((p.key in spare[w] for w, p in zip(pod_wl.tolist(), pods, strict=True)), bool, m)
        if any(w.segments for w in workloads):
            together = _segments(workloads, pods, pod_wl)
    return elastic, together


def _segments(workloads: Sequence[Workload], pods: Sequence[RunningPod], pod_wl: IntArray) -> IntArray:
    """Per pod, a number its segment's elastic pods share (an optional segment goes whole); the
    pod's own position for the others (they go alone)."""
    out: IntArray = np.arange(len(pods), dtype=np.int64)
    where = {(w, p.key): i for i, (w, p) in enumerate(zip(pod_wl.tolist(), pods, strict=True))}
    for w, wl in enumerate(workloads):
        for segment in wl.segments:
            at = [where[(w, k)] for k in segment if (w, k) in where]
            if at:
                out[at] = min(at)
    return out


def _per_unit(nu: int, pod_wl: IntArray, unit: IntArray, elastic: BoolArray, values: IntArray) -> IntArray:
    """Sums per unit: a core over all its workload's pods, an elastic unit over its own pod."""
    out = np.zeros(nu, dtype=np.int64)
    np.add.at(out, pod_wl, values)
    np.add.at(out, unit[elastic], values[elastic])
    return out


class _Without:
    """Usage with some pods gone (the `Usage` protocol)."""

    def __init__(self, base: Usage, removed: dict[str, IntArray]) -> None:
        self._base, self._removed = base, removed

    def used(self, resource: str) -> IntArray:
        arr = self._base.used(resource)
        gone = self._removed.get(resource)
        return arr if gone is None else arr - gone
