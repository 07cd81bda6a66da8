"""Per-attempt mutable state: free capacity, pod counts per domain and pins, with one undo log.

The snapshot and the tree are shared and read-only; everything one planning attempt changes
lives here, so two attempts on one tree never see each other's work. Counts are kept per pod
shape, per level, per domain: `counts[s][l][d]` is how many more pods of shape `s` fit in
domain `d` of level `l` (summed per node, as Kueue counts). Placing a pod updates its node and
the node's ancestors for every shape, so counts stay exact. A pin records where a scope was
put. Placements and pins go to one undo log: a checkpoint is its length and a rollback undoes
both in reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from extender.placement.gang import Shape
from extender.placement.snapshot import ClusterSnapshot, Eligibility
from extender.placement.tree import Domain, IntArray, TopologyTree


@dataclass(frozen=True, slots=True)
class Pin:
    """Where a scope stands: the domain its required constraints hold it in, and the domain its
    preference (or compactness) put its minimum in (the same or narrower)."""

    required: Domain
    preferred: Domain


@dataclass(frozen=True, slots=True)
class _Repin:
    """Undo record of a pin: the scope's previous pin (None: it had none)."""

    scope: int
    previous: Pin | None


class AttemptState:
    def __init__(self, snapshot: ClusterSnapshot, tree: TopologyTree, shapes: Sequence[Shape]) -> None:
        self.tree = tree
        self.snapshot = snapshot
        self.shapes = tuple(shapes)
        self.requests = [tuple((r, v) for r, v in s.requests if v > 0) for s in shapes]
        resources = sorted({r for reqs in self.requests for r, _ in reqs})
        self.free: dict[str, IntArray] = {r: snapshot.free(r).copy() for r in resources}
        self.eligibility: list[Eligibility] = [snapshot.table.eligibility(s.placement) for s in shapes]
        self.usable = [e.mask if snapshot.blocked is None else e.mask & ~snapshot.blocked for e in self.eligibility]
        self.node_count: list[IntArray] = [self._vector_count(i) for i in range(len(shapes))]
        self.counts: list[list[IntArray]] = [self._domain_counts(c) for c in self.node_count]
        # Per node, its domain index at every level: the path a count update walks up.
        self._ancestry = tree.ancestry
        # The same buffers as memoryviews: a count update works one node at a time, and a
        # memoryview reads and writes one int several times faster than numpy indexing does.
        self._free_at = {r: a.data for r, a in self.free.items()}
        self._usable_at = [u.data for u in self.usable]
        self._node_count_at = [c.data for c in self.node_count]
        self._counts_at = [[c.data for c in levels] for levels in self.counts]
        # The undo log: (node, shape, pod key) per placement, a _Repin per pin, in order.
        self._log: list[tuple[int, int, str] | _Repin] = []
        self.where: dict[str, int] = {}  # pod key -> node index
        self.pins: dict[int, Pin] = {}  # scope id -> where it stands

    def _vector_count(self, shape: int) -> IntArray:
        count: IntArray | None = None
        for resource, need in self.requests[shape]:
            fit = self.free[resource] // need
            count = fit if count is None else np.minimum(count, fit)
        assert count is not None, "every shape asks for a pod slot"
        count = np.maximum(count, 0)
        count[~self.usable[shape]] = 0
        return count

    def _domain_counts(self, node_count: IntArray) -> list[IntArray]:
        by_pos = node_count[self.tree.pos_to_node]
        out = []
        for li in self.tree.levels:
            if len(by_pos) == 0:
                out.append(np.zeros(len(li.starts), dtype=np.int64))
            else:
                out.append(np.add.reduceat(by_pos, li.starts).astype(np.int64))
        return out

    def room_on(self, node: int, shape: int) -> int:
        """How many more pods of `shape` fit on `node`."""
        return self._node_count_at[shape][node]

    def _count_at(self, shape: int, node: int) -> int:
        if not self._usable_at[shape][node]:
            return 0
        return max(0, min(self._free_at[r][node] // need for r, need in self.requests[shape]))

    def _apply(self, node: int, shape: int, pods: int) -> None:
        """Take (pods > 0) or give back (pods < 0) the room of `pods` pods of `shape` on `node`,
        and update every shape's count on the node and its ancestors. Called per node placed or
        pod undone, so it works on ints through the memoryviews."""
        for resource, need in self.requests[shape]:
            self._free_at[resource][node] -= pods * need
        path = self._ancestry[node]
        for s, node_count in enumerate(self._node_count_at):
            old = node_count[node]
            if pods > 0 and old == 0:
                continue  # taking capacity never makes room: a node with none for s keeps none
            # Placing pods that fit: every resource's quotient falls by exactly `pods`, so their
            # minimum does too; anything else is counted again.
            delta = -pods if s == shape and 0 < pods <= old else self._count_at(s, node) - old
            if delta:
                node_count[node] = old + delta
                counts = self._counts_at[s]
                for level, dom in enumerate(path):
                    counts[level][dom] += delta

    # -- the transaction ----------------------------------------------------------------------

    @property
    def placed(self) -> int:
        """Pods placed so far in this attempt."""
        return len(self.where)

    def place(self, node: int, shape: int, keys: Sequence[str]) -> None:
        """Place pods of `shape` (by key) on `node`, where they fit, in one count update: the
        count of `shape` on the node and its ancestors falls by exactly len(keys). Each pod is
        undone alone."""
        self._apply(node, shape, len(keys))
        for key in keys:
            self._log.append((node, shape, key))
            self.where[key] = node

    def pin(self, scope: int, required: Domain, preferred: Domain) -> None:
        self._log.append(_Repin(scope, self.pins.get(scope)))
        self.pins[scope] = Pin(required, preferred)

    def checkpoint(self) -> int:
        return len(self._log)

    def rollback(self, checkpoint: int) -> None:
        while len(self._log) > checkpoint:
            entry = self._log.pop()
            if isinstance(entry, _Repin):
                if entry.previous is None:
                    del self.pins[entry.scope]
                else:
                    self.pins[entry.scope] = entry.previous
            else:
                node, shape, key = entry
                self._apply(node, shape, -1)
                del self.where[key]
