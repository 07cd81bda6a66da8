"""Why the minimum did not fit: the deepest failure of the search, built into a Shortfall.

Every dead end of the minimum's search is offered here with the pods placed when it happened;
the one reached with the most pods placed explains best. Failures while placing optional
members explain nothing and are ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from extender.placement.candidates import Candidates
from extender.placement.demand import Demand
from extender.placement.gang import Gang, Scope
from extender.placement.leftout import Excluded, left_out
from extender.placement.reasons import NO_CAPACITY, NO_DOMAIN, SEARCH_LIMIT, Shortfall
from extender.placement.snapshot import ClusterSnapshot
from extender.placement.state import AttemptState
from extender.placement.tree import Domain, TopologyTree


class Failures:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        tree: TopologyTree,
        gang: Gang,
        state: AttemptState,
        demand: Demand,
        candidates: Candidates,
    ) -> None:
        self.snapshot, self.tree, self.gang = snapshot, tree, gang
        self.state, self.demand, self.candidates = state, demand, candidates
        self.optional = False  # placing optional members: failures there explain nothing
        self.deepest: tuple[Shortfall, Domain, int] | None = None  # reason, region, shape

    def record(self, reason: Shortfall, region: Domain, scope: Scope, shape: int | None = None) -> None:
        if self.optional:
            return
        reason = dataclasses.replace(reason, progress=self.state.placed)
        if self.deepest is None or reason.progress > self.deepest[0].progress:
            self.deepest = (reason, region, self.demand.dominant(scope) if shape is None else shape)

    def search_limit(self, attempts: int) -> None:
        self.deepest = (Shortfall(SEARCH_LIMIT, self.gang.root.label, 0, tried=attempts), self.tree.root, 0)

    def final(self) -> Shortfall:
        if self.deepest is None:  # every child failed without a recorded reason: name the root
            root = self.gang.root
            return Shortfall(NO_CAPACITY, root.label, sum(self.demand.minimum[root.id]))
        reason, region, shape = self.deepest
        if reason.kind in (NO_DOMAIN, NO_CAPACITY):
            reason = dataclasses.replace(reason, excluded=self._excluded(region, shape))
        return reason

    def no_domain(self, scope: Scope, region: Domain, level: int) -> Shortfall:
        """No domain of the required `level` inside `region` holds the scope's minimum."""
        demand = self.demand.minimum[scope.id]
        pods, shape = self._demand_text(scope, demand)
        s = self.demand.dominant(scope)
        lo, hi = self.tree.descendants(region, level)
        labeled = self.tree.levels[level].labeled[lo:hi]
        exclusive = scope.rule is not None and scope.rule.exclusive
        if exclusive:
            labeled = labeled & self.candidates.free_of_others(scope, level, lo, hi)
        counts = self.state.counts
        room = counts[s][level][lo:hi][labeled] if self.demand.nshapes else np.zeros(0, dtype=np.int64)
        best = int(room.max()) if len(room) else 0
        pinned = self.candidates.pinned(scope, level)
        if pinned is not None and self.demand.nshapes:
            best = int(counts[s][level][pinned.index])
        return Shortfall(
            NO_DOMAIN,
            scope.label,
            pods,
            shape=shape,
            level=self.tree.level_name(level),
            exclusive=exclusive,
            region=self.tree.describe(region) if region.level else None,
            best=best,
            source=scope.rule.source if scope.rule else "",
            no_label="" if self.tree.levels[level].labeled[lo:hi].any() else self._label_nobody_has(region, level),
            pinned=self.tree.describe(pinned) if pinned is not None else None,
        )

    def _label_nobody_has(self, region: Domain, level: int) -> str:
        """The coarsest node label down to `level` that no node in `region` carries."""
        labels = [lv.node_label for lv in self.tree.spec.levels[:level]]
        nodes = [self.snapshot.table.nodes[int(i)] for i in self.tree.nodes_in(region)]
        for label in labels:
            if not any(label in n.labels for n in nodes):
                return label
        return labels[-1]

    def no_capacity(self, leaf: Scope, region: Domain, shape: int, pods: int) -> Shortfall:
        """The leaf's region holds fewer than `pods` more pods of `shape`."""
        return Shortfall(
            NO_CAPACITY,
            leaf.label,
            pods,
            shape=self.gang.shapes[shape].describe(),
            region=self.tree.describe(region) if region.level else None,
            best=int(self.state.counts[shape][region.level][region.index]),
        )

    def _demand_text(self, scope: Scope, demand: Sequence[int]) -> tuple[int, str]:
        s = self.demand.dominant(scope)
        shown = self.gang.shapes[s].describe() if self.gang.shapes else "{}"
        others = sum(demand) - demand[s] if demand else 0
        if others:
            shown += f" and {others} other pod{'s' if others != 1 else ''}"
        return (demand[s] if demand else 0), shown

    def _excluded(self, region: Domain, shape: int) -> dict[Excluded, int]:
        """Nodes in `region` that could not take even one pod of `shape` before this gang, by why."""
        if not self.gang.shapes:
            return {}
        return left_out(self.snapshot, self.gang.shapes[shape], self.tree.nodes_in(region))
