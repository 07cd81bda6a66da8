"""TopologyTree: the domains of one Topology over one set of nodes, built once and shared read-only.

Level 0 is the whole cluster (one domain); levels 1..k-1 are the Topology's labels, coarsest
first; level k is the node itself. Nodes are sorted by their path of label values, so every
domain covers a contiguous range of positions and the children of a domain are a contiguous
range of domain indices one level down. Counting pods per domain is then a `reduceat` over
positions, and "the racks of zone z1" is a slice.

A domain is identified by its full path: two racks with the same label value in different
blocks are different racks. A node without the label of some level (or of a coarser one) sits
in an *unlabeled* domain at that level: usable for constraints on coarser levels, never chosen
to satisfy a constraint on that level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from extender.model.node import NodeInfo
from extender.model.topology import TopologySpec
from extender.placement.ref import DomainRef

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Domain:
    level: int
    index: int


@dataclass(frozen=True)
class LevelIndex:
    """The domains of one level, in path order."""

    starts: IntArray  # first position covered by each domain
    ends: IntArray  # one past the last position
    values: tuple[tuple[str | None, ...], ...]  # label values from level 1 down to this level
    labeled: BoolArray  # False where the node(s) lack this level's label
    domain_of_pos: IntArray  # position -> domain index at this level
    domain_of_node: IntArray  # node index (snapshot order) -> domain index at this level

    @cached_property
    def all_labeled(self) -> bool:
        return bool(self.labeled.all())


class TopologyTree:
    def __init__(self, spec: TopologySpec, nodes: Sequence[NodeInfo]) -> None:
        self.spec = spec
        self.node_level = spec.node_level
        self.depth = self.node_level + 1  # levels 0 (cluster) .. k (node)
        label_names = [lv.node_label for lv in spec.levels[:-1]]

        def path(node: NodeInfo) -> tuple[str | None, ...]:
            out: list[str | None] = []
            missing = False
            for label in label_names:
                value = None if missing else node.labels.get(label)
                missing = missing or value is None
                out.append(value)
            out.append(node.name)
            return tuple(out)

        paths = [path(n) for n in nodes]
        # None sorts before any value so unlabeled nodes gather at the start of their parent.
        order = sorted(range(len(nodes)), key=lambda i: tuple((v is not None, v or "") for v in paths[i]))
        self.pos_to_node: IntArray = np.asarray(order, dtype=np.int64)
        self.node_to_pos: IntArray = np.empty(len(nodes), dtype=np.int64)
        self.node_to_pos[self.pos_to_node] = np.arange(len(nodes), dtype=np.int64)
        sorted_paths = [paths[i] for i in order]
        self.node_names = tuple(n.name for n in nodes)

        levels: list[LevelIndex] = []
        n = len(nodes)
        for level in range(self.depth):
            starts: list[int] = []
            values: list[tuple[str | None, ...]] = []
            dom_of_pos = np.empty(n, dtype=np.int64)
            prev: tuple[str | None, ...] | None = None
            for pos, p in enumerate(sorted_paths):
                key = p[:level]
                if key != prev or not starts:
                    starts.append(pos)
                    values.append(key)
                    prev = key
                dom_of_pos[pos] = len(starts) - 1
            if not starts:  # no nodes at all: keep one empty cluster domain so level 0 exists
                starts, values = ([0], [()]) if level == 0 else ([], [])
            starts_arr = np.asarray(starts, dtype=np.int64)
            ends_arr = np.append(starts_arr[1:], n).astype(np.int64) if starts else starts_arr
            labeled = np.asarray([level == 0 or v[-1] is not None for v in values], dtype=np.bool_)
            dom_of_node = np.empty(n, dtype=np.int64)
            dom_of_node[self.pos_to_node] = dom_of_pos
            levels.append(LevelIndex(starts_arr, ends_arr, tuple(values), labeled, dom_of_pos, dom_of_node))
        self.levels = tuple(levels)

    @cached_property
    def ancestry(self) -> list[tuple[int, ...]]:
        """Per node (snapshot order), its domain index at every level, as plain ints: the path
        a count update walks up once per pod placed, where numpy scalars cost the most."""
        by_level = [li.domain_of_node.tolist() for li in self.levels]
        return list(zip(*by_level, strict=True))

    # -- navigation -------------------------------------------------------------------------

    @property
    def root(self) -> Domain:
        return Domain(0, 0)

    def size(self, level: int) -> int:
        return len(self.levels[level].starts)

    def descendants(self, domain: Domain, level: int) -> tuple[int, int]:
        """The [first, last+1) domain indices at `level` (finer than domain.level) inside `domain`."""
        li = self.levels[domain.level]
        start, end = int(li.starts[domain.index]), int(li.ends[domain.index])
        if start == end:
            return (0, 0)
        target = self.levels[level]
        return int(target.domain_of_pos[start]), int(target.domain_of_pos[end - 1]) + 1

    def ancestor(self, domain: Domain, level: int) -> Domain:
        """The domain at a coarser `level` that contains `domain`."""
        pos = int(self.levels[domain.level].starts[domain.index])
        return Domain(level, int(self.levels[level].domain_of_pos[pos]))

    def node_domain(self, node: int, level: int) -> Domain:
        return Domain(level, int(self.levels[level].domain_of_node[node]))

    def node_of(self, domain: Domain) -> int:
        """The node index of a node-level domain."""
        return self.node_at[domain.index]

    @cached_property
    def node_at(self) -> list[int]:
        """Per node-level domain index, its node index (snapshot order), as plain ints."""
        nodes: list[int] = self.pos_to_node[self.levels[self.node_level].starts].tolist()
        return nodes

    def nodes_in(self, domain: Domain) -> IntArray:
        """The node indices (snapshot order) inside `domain`."""
        li = self.levels[domain.level]
        return self.pos_to_node[li.starts[domain.index] : li.ends[domain.index]]

    def labeled(self, domain: Domain) -> bool:
        return bool(self.levels[domain.level].labeled[domain.index])

    # -- names for messages -----------------------------------------------------------------

    def level_name(self, level: int) -> str:
        if level == 0:
            return "cluster"
        if level == self.node_level:
            return "node"
        return self.spec.levels[level - 1].display

    def describe(self, domain: Domain) -> str:
        """'rack z1/b2/r3', 'node gpu-17', 'the cluster'."""
        if domain.level == 0:
            return "the cluster"
        if domain.level == self.node_level:
            return f"node {self.levels[domain.level].values[domain.index][-1]}"
        return f"{self.level_name(domain.level)} {self.path(domain)}"

    def ref(self, domain: Domain) -> DomainRef:
        """The domain by value, for results that outlive the tree."""
        if domain.level == 0:
            return DomainRef(self.level_name(0), "")
        if domain.level == self.node_level:
            return DomainRef(self.level_name(domain.level), self.value(domain))
        return DomainRef(self.level_name(domain.level), self.path(domain))

    def path(self, domain: Domain) -> str:
        """The label values from the coarsest level down to the domain's own: 'z1/b2/r3'."""
        return "/".join(v if v is not None else "(unlabeled)" for v in self.levels[domain.level].values[domain.index])

    def value(self, domain: Domain) -> str:
        """The label value of the domain's own level ('r3'), or the node name."""
        if domain.level == 0:
            return ""
        v = self.levels[domain.level].values[domain.index][-1]
        return v if v is not None else "(unlabeled)"
