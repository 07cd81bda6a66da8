"""Victim units in cost order, as flat arrays: what evicting any set of them frees, per node.

A *unit* is what can be evicted on its own: one elastic pod of a gang, the rest of a gang (its
*core*: evicting it evicts the gang's elastic pods too), or a plain pod. Units are sorted once
by what each costs alone (priority, then elastic pods before whole workloads, then pods, the
resources taken, the youngest first, pods under no PodDisruptionBudget first), so "the cheapest
units" is a prefix of the ranks. Pods are kept as flat arrays (unit rank, node index, request per
resource) so that the usage left after any set of units is a few numpy operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from extender.placement.snapshot import NodeTable, Usage
from extender.placement.tree import BoolArray, IntArray
from extender.placement.victims import Budget, RunningPod, VictimSet, Workload


@dataclass(frozen=True)
class _Unit:
    workload: int
    whole: bool
    pods: tuple[RunningPod, ...]
    key: tuple[object, ...]


class UnitTable:
    def __init__(
        self,
        table: NodeTable,
        workloads: Sequence[Workload],
        resources: Sequence[str],
        measured: Sequence[str],
        budgets: Sequence[Budget],
    ) -> None:
        self.table = table
        self.workloads = workloads
        self.resources = tuple(resources)  # what the engine reads: the gang's requested resources
        guarded = {p for b in budgets if b.allowed <= 0 for p in b.pods}
        units = sorted(self._units(workloads, measured, guarded), key=lambda u: u.key)
        self.units = units
        n = len(units)
        self.workload_of: IntArray = np.fromiter((u.workload for u in units), np.int64, n)
        self.whole: BoolArray = np.fromiter((u.whole for u in units), np.bool_, n)
        self.priority: IntArray = np.fromiter((workloads[u.workload].priority for u in units), np.int64, n)
        self.cost_pods: IntArray = np.fromiter((_cost_pods(workloads, u) for u in units), np.int64, n)
        first = measured[0] if measured else None
        self.cost_taken: IntArray = np.fromiter(
            (sum(p.requests.get(first, 0) for p in u.pods) if first else 0 for u in units), np.int64, n
        )
        # elastic units of each workload, so evicting a core takes them along
        self.elastic_units: dict[int, list[int]] = {}
        self.core_of: dict[int, int] = {}  # workload -> the rank of its core unit
        for rank, u in enumerate(units):
            if u.whole:
                self.core_of[u.workload] = rank
            else:
                self.elastic_units.setdefault(u.workload, []).append(rank)
        index = table.index
        flat = [(rank, index.get(p.node, -1), p) for rank, u in enumerate(units) for p in u.pods]
        m = len(flat)
        self.pod_unit: IntArray = np.fromiter((f[0] for f in flat), np.int64, m)
        self.pod_node: IntArray = np.fromiter((f[1] for f in flat), np.int64, m)
        self.pod_req: dict[str, IntArray] = {
            r: np.fromiter((f[2].requests.get(r, 0) for f in flat), np.int64, m) for r in self.resources
        }
        # flat pods are in rank order: the pods of unit k are pod_start[k]:pod_start[k + 1]
        self.pod_start: IntArray = np.searchsorted(self.pod_unit, np.arange(n + 1)).astype(np.int64)

    @staticmethod
    def _units(workloads: Sequence[Workload], measured: Sequence[str], guarded: set[str]) -> list[_Unit]:
        out = []
        for i, w in enumerate(workloads):
            elastic = [p for p in w.pods if p.key in w.elastic] if w.gang else []
            for p in elastic:
                out.append(_Unit(i, False, (p,), _key(w, (p,), 1, False, measured, guarded)))
            core = tuple(p for p in w.pods if p not in elastic)
            out.append(_Unit(i, True, core, _key(w, w.pods, len(w.pods), True, measured, guarded)))
        return out

    def __len__(self) -> int:
        return len(self.units)

    def closed(self, ranks: IntArray) -> BoolArray:
        """The units `ranks` stand for: a core brings its workload's elastic units along."""
        chosen: BoolArray = np.zeros(len(self.units), dtype=np.bool_)
        chosen[ranks] = True
        for rank in ranks[self.whole[ranks]]:
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

    def victim_set(self, chosen: BoolArray) -> VictimSet:
        out = VictimSet()
        for rank in np.flatnonzero(chosen):
            u = self.units[int(rank)]
            if u.whole:
                out.whole.add(u.workload)
            else:
                out.alone.setdefault(u.workload, set()).update(p.key for p in u.pods)
        return out


class _Without:
    """Usage with some pods gone (the `Usage` protocol)."""

    def __init__(self, base: Usage, removed: dict[str, IntArray]) -> None:
        self._base, self._removed = base, removed

    def used(self, resource: str) -> IntArray:
        arr = self._base.used(resource)
        gone = self._removed.get(resource)
        return arr if gone is None else arr - gone


def _cost_pods(workloads: Sequence[Workload], u: _Unit) -> int:
    return len(workloads[u.workload].pods) if u.whole else len(u.pods)


def _key(
    w: Workload, pods: tuple[RunningPod, ...], count: int, whole: bool, measured: Sequence[str], guarded: set[str]
) -> tuple[object, ...]:
    taken = tuple(sum(p.requests.get(r, 0) for p in pods) for r in measured)
    started = min((p.started for p in pods), default=0.0)
    protected = any(p.key in guarded for p in pods)
    return (w.priority, whole, count, taken, -started, protected, w.key, pods[0].key if pods else "")
