"""ClusterSnapshot: the nodes, their free capacity and their eligibility, as one attempt sees them.

`NodeTable` holds what changes only when nodes change (a *generation*): the nodes, allocatable
capacity per resource, topology trees and per-placement eligibility, all cached. `Usage` says
what is taken (bound pods, reservations of other gangs). The snapshot joins the two; the
planner copies what it needs into per-attempt arrays and never writes here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from extender.model.node import NodeInfo
from extender.model.pod import Placement
from extender.model.selectors import term_list_matches, tolerates_all
from extender.model.topology import TopologySpec
from extender.placement.tree import BoolArray, IntArray, TopologyTree

# Why a node cannot host a pod at all, whatever its free capacity (codes in Eligibility.code).
ELIGIBLE, NOT_SCHEDULABLE, TAINTED, NOT_SELECTED = 0, 1, 2, 3
_ELIGIBILITY_CACHE = 256


@dataclass(frozen=True)
class Eligibility:
    """Which nodes a pod with one Placement may land on, and why the others are left out."""

    mask: BoolArray
    code: NDArrayInt8
    taint: Mapping[int, str]  # node index -> the first taint it does not tolerate


NDArrayInt8 = np.ndarray[tuple[int], np.dtype[np.int8]]


class ExtraCapacity(Protocol):
    """Capacity that is not in a node's allocatable (devices of Dynamic Resource Allocation):
    per node in NodeTable order, or None for a resource it does not know."""

    def capacity(self, resource: str, nodes: Sequence[NodeInfo]) -> IntArray | None: ...


class NodeTable:
    """The nodes of one generation, with caches that live as long as the node set does."""

    def __init__(self, nodes: Sequence[NodeInfo], generation: int = 0, extra: ExtraCapacity | None = None) -> None:
        self.nodes = tuple(nodes)
        self.generation = generation
        self.extra = extra
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.schedulable: BoolArray = np.fromiter((n.schedulable for n in self.nodes), np.bool_, len(self.nodes))
        self._alloc: dict[str, IntArray] = {}
        self._trees: dict[TopologySpec, TopologyTree] = {}
        self._eligibility: OrderedDict[Placement, Eligibility] = OrderedDict()
        self._tainted = [i for i, n in enumerate(self.nodes) if n.taints]

    def __len__(self) -> int:
        return len(self.nodes)

    def alloc(self, resource: str) -> IntArray:
        arr = self._alloc.get(resource)
        if arr is None:
            arr = self.extra.capacity(resource, self.nodes) if self.extra is not None else None
            if arr is None:
                arr = np.fromiter((n.allocatable.get(resource, 0) for n in self.nodes), np.int64, len(self.nodes))
            arr.setflags(write=False)
            self._alloc[resource] = arr
        return arr

    def tree(self, spec: TopologySpec) -> TopologyTree:
        tree = self._trees.get(spec)
        if tree is None:
            tree = self._trees[spec] = TopologyTree(spec, self.nodes)
        return tree

    def eligibility(self, placement: Placement) -> Eligibility:
        found = self._eligibility.get(placement)
        if found is not None:
            self._eligibility.move_to_end(placement)
            return found
        code = np.where(self.schedulable, ELIGIBLE, NOT_SCHEDULABLE).astype(np.int8)
        taint: dict[int, str] = {}
        by_taints: dict[tuple[object, ...], str | None] = {}
        for i in self._tainted:
            if code[i] != ELIGIBLE:
                continue
            taints = self.nodes[i].taints
            if taints not in by_taints:
                blocking = tolerates_all(placement.tolerations, taints)
                by_taints[taints] = None if blocking is None else str(blocking)
            if (bad := by_taints[taints]) is not None:
                code[i] = TAINTED
                taint[i] = bad
        if placement.node_selector or placement.affinity:
            selector = dict(placement.node_selector)
            for i, node in enumerate(self.nodes):
                if code[i] != ELIGIBLE:
                    continue
                labels = node.labels
                if any(labels.get(k) != v for k, v in selector.items()) or not term_list_matches(
                    placement.affinity, labels, node.name
                ):
                    code[i] = NOT_SELECTED
        mask: BoolArray = code == ELIGIBLE
        result = Eligibility(mask, code, taint)
        self._eligibility[placement] = result
        if len(self._eligibility) > _ELIGIBILITY_CACHE:
            self._eligibility.popitem(last=False)
        return result


class Usage(Protocol):
    """What is already taken on each node, per resource, in NodeTable order."""

    def used(self, resource: str) -> IntArray: ...


class DictUsage:
    """Usage from per-node request sums; the simple form for tests, the simulator and bench."""

    def __init__(self, table: NodeTable, per_node: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self._table = table
        self._per_node: dict[str, dict[str, int]] = {k: dict(v) for k, v in (per_node or {}).items()}
        self._arrays: dict[str, IntArray] = {}

    def add(self, node: str, requests: Mapping[str, int]) -> None:
        into = self._per_node.setdefault(node, {})
        for r, v in requests.items():
            into[r] = into.get(r, 0) + v
        self._arrays.clear()

    def used(self, resource: str) -> IntArray:
        arr = self._arrays.get(resource)
        if arr is None:
            arr = np.zeros(len(self._table), dtype=np.int64)
            for name, reqs in self._per_node.items():
                i = self._table.index.get(name)
                if i is not None and resource in reqs:
                    arr[i] = reqs[resource]
            self._arrays[resource] = arr
        return arr


class ClusterSnapshot:
    """Free capacity = allocatable - used, per resource, for one planning attempt.

    Exclusive topology (LeaderWorkerSet) adds two node masks: `blocked`, nodes inside a domain
    another gang holds exclusively (this gang may not use them), and `busy`, nodes that host
    another gang's pods (an exclusive scope of this gang may not take their domains).
    """

    def __init__(
        self, table: NodeTable, usage: Usage, blocked: BoolArray | None = None, busy: BoolArray | None = None
    ) -> None:
        self.table = table
        self.usage = usage
        self.blocked = blocked
        self.busy = busy
        self._free: dict[str, IntArray] = {}

    def free(self, resource: str) -> IntArray:
        arr = self._free.get(resource)
        if arr is None:
            arr = self.table.alloc(resource) - self.usage.used(resource)
            arr.setflags(write=False)
            self._free[resource] = arr
        return arr

    @classmethod
    def of(cls, nodes: Iterable[NodeInfo], used: Mapping[str, Mapping[str, int]] | None = None) -> ClusterSnapshot:
        """A snapshot from plain data: nodes and {node name: {resource: milli}} already taken."""
        table = NodeTable(list(nodes))
        return cls(table, DictUsage(table, used))
