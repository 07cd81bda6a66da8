"""What each scope of a gang needs before any pod is placed: the first phase of planning.

Per scope: the nodes its running pods already hold, the pods per shape its minimum needs at
least (any choice of `minMember` children) and its whole needs, and whether it is satisfied
without placing any pod (elastic). Children are prepared before their parents.

A *whole unit* is an elastic segment or slice (`Scope.segment_pods`, `minMember: 0`): a segment
beyond the minimum. Its pods work together (a tensor-parallel group), so it is placed with all
its pods (in one domain of its required level) or not at all: once the minimum stands,
`grow_units` makes each unit's minimum all of its pods, and the optional phase places units as
it places minimums. A unit whose pods are not all created yet *waits* (none of it is placed);
its missing pods count in `full`, in the shape of its siblings' pods, so that the domains chosen
for the gang before they come have room for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from extender.placement.gang import Gang, Scope


class Demand:
    def __init__(self, gang: Gang, index: Mapping[str, int]) -> None:
        self.nshapes = len(gang.shapes)
        self.root = gang.root.id
        self.fixed: dict[int, list[int]] = {}  # node indices of pods already running
        self.minimum: dict[int, list[int]] = {}  # pods per shape the minimum needs at least
        self.full: dict[int, list[int]] = {}  # pods per shape of every unplaced member
        self.preplaced: dict[int, int] = {}  # leaves: members already on a node
        self.empty_ok: dict[int, bool] = {}  # satisfied without placing any pod
        self.min_pods: dict[int, int] = {}  # leaves: the pods that make its minimum (minMember, a unit's all)
        self.units: dict[int, Scope] = {}  # whole units by scope id (see above)
        self.waiting: set[int] = set()  # units with pods not created yet
        self._unit_shape = _unit_shapes(gang)
        self.generation = 0  # counts changes of the amounts above (grow_units), for caches
        for scope in reversed(gang.scopes):  # children before parents
            if scope.leaf:
                self._leaf(scope, index)
            else:
                self._inner(scope)

    def _leaf(self, scope: Scope, index: Mapping[str, int]) -> None:
        bound = [m.node for m in scope.members if m.node is not None]
        self.fixed[scope.id] = [index[n] for n in bound if n in index]
        pre = len(bound)
        unplaced = len(scope.members) - pre
        need = max(0, scope.min_member - pre)
        full = [0] * self.nshapes
        for m in scope.members:
            if m.node is None:
                full[m.shape] += 1
        self.full[scope.id] = full
        # Any `need` of the unplaced pods will do: a lower bound per shape.
        self.minimum[scope.id] = [max(0, need - (unplaced - full[s])) for s in range(self.nshapes)]
        self.preplaced[scope.id] = pre
        self.empty_ok[scope.id] = need == 0
        self.min_pods[scope.id] = scope.min_member
        if scope.segment_pods and scope.min_member == 0:
            missing = max(0, scope.segment_pods - len(scope.members))
            shape = self._unit_shape.get(scope.id)
            if missing and shape is not None:
                full[shape] += missing
                self.waiting.add(scope.id)
            if unplaced or missing:
                self.units[scope.id] = scope

    def grow_units(self) -> None:
        """Phase 3 begins: each whole unit needs all of its pods (the minimum of the gang stands,
        so no parent's minimum is counted again)."""
        self.generation += 1
        for unit in self.units.values():
            if unit.id not in self.waiting:
                self.min_pods[unit.id] = len(unit.members)
                self.minimum[unit.id] = list(self.full[unit.id])

    def _inner(self, scope: Scope) -> None:
        kids = scope.children
        self.empty_ok[scope.id] = sum(c.weight for c in kids if self.empty_ok[c.id]) >= scope.min_member
        self.fixed[scope.id] = [n for c in kids for n in self.fixed[c.id]]
        self.full[scope.id] = [sum(self.full[c.id][s] for c in kids) for s in range(self.nshapes)]
        self.minimum[scope.id] = [self._cheapest(scope, s) for s in range(self.nshapes)]

    def _cheapest(self, scope: Scope, shape: int) -> int:
        """The fewest pods of `shape` that any choice of `min_member` children could need."""
        got, total = 0, 0
        for child in sorted(scope.children, key=lambda c: self.minimum[c.id][shape]):
            if got >= scope.min_member:
                break
            got += child.weight
            total += self.minimum[child.id][shape]
        return total

    def dominant(self, scope: Scope) -> int:
        """The shape that decides where the scope fits: the one its minimum needs most of."""
        full = self.full[scope.id]
        low = self.minimum[scope.id]
        return max(range(self.nshapes), key=lambda s: (low[s], full[s], -s)) if self.nshapes else 0


def _unit_shapes(gang: Gang) -> dict[int, int]:
    """The shape of each segment's pods: its own pods', else the most common of its siblings'
    (segments of one replica type ask for the same); none when no sibling has a pod yet."""
    out: dict[int, int] = {}
    for scope in gang.scopes:
        segments = [c for c in scope.children if c.leaf and c.segment_pods]
        shapes = Counter(m.shape for c in segments for m in c.members)
        if shapes:
            common = shapes.most_common(1)[0][0]
            for c in segments:
                out[c.id] = c.members[0].shape if c.members else common
    return out
