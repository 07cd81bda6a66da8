"""The benchmark's GPU cluster: zones > blocks > racks > nodes of 8 GPUs (or 4, NVL72-like).

SHAPES are the named shapes bench/trace.py runs: `512` (2 zones > 4 blocks > 8 racks > 8 nodes
of 8 GPUs), `4096` (4 zones > 8 blocks > 16 racks > 8 nodes of 8 GPUs) and `nvl72` (2 zones > 4
blocks > 8 racks of 18 nodes of 4 GPUs: a GB200 NVL72 rack, 72 GPUs, is the NVLink domain).

Nodes are numbered in topology order (zone, block, rack, node), which is also the order of their
names, so the topology-blind first fit walks racks one after another: the kindest case for its
locality. Uneven racks take nodes from some racks and give them to others (same total); cordoned
nodes are marked unschedulable and count for nobody's capacity.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from extender.model.node import HOSTNAME_LABEL, NodeInfo
from extender.model.topology import TopologySpec, parse_topology

GPU = "nvidia.com/gpu"
LEVELS = ("zone", "block", "rack")  # the names the trace uses for the Topology's levels
LABELS = tuple(f"example.com/topology-{lv}" for lv in LEVELS)
TOPOLOGY_NAME = "dc"

IntArray = np.ndarray[tuple[int], np.dtype[np.int64]]


@dataclass(frozen=True)
class Shape:
    nodes: int = 512
    zones: int = 2
    blocks: int = 4  # per zone
    racks: int = 8  # per block
    gpus: int = 8  # per node
    uneven: bool = False  # rack sizes vary (same total)
    cordoned: int = 0  # nodes marked unschedulable
    seed: int = 1
    nvl: bool = False  # racks are NVLink domains (NVL72-like): the trace uses NVIDIA's segment sizes


SHAPES = {
    "512": Shape(),
    "4096": Shape(nodes=4096, zones=4, blocks=8, racks=16),
    "nvl72": Shape(nodes=1152, zones=2, blocks=4, racks=8, gpus=4, nvl=True),
}


@dataclass
class Cluster:
    shape: Shape
    nodes: list[NodeInfo]
    topology: TopologySpec
    rack_of: IntArray  # node -> rack index (racks numbered in topology order)
    block_of_rack: IntArray
    zone_of_block: IntArray
    gpus: IntArray  # GPUs per node, 0 when cordoned
    rack_start: IntArray  # racks are contiguous ranges of nodes
    rack_end: IntArray

    @property
    def capacity(self) -> int:
        return int(self.gpus.sum())

    @property
    def racks(self) -> int:
        return len(self.rack_start)

    def rack_gpus(self) -> IntArray:
        out: IntArray = np.add.reduceat(self.gpus, self.rack_start)
        return out

    def domain_gpus(self, level: str) -> IntArray:
        """Schedulable GPUs per domain of LEVEL (zone, block or rack)."""
        racks = self.rack_gpus()
        if level == "rack":
            return racks
        blocks: IntArray = np.bincount(self.block_of_rack, weights=racks).astype(np.int64)
        if level == "block":
            return blocks
        zones: IntArray = np.bincount(self.zone_of_block, weights=blocks).astype(np.int64)
        return zones

    def domain_of(self, level: str) -> IntArray:
        """Node -> index of its domain at LEVEL."""
        if level == "rack":
            return self.rack_of
        block = self.block_of_rack[self.rack_of]
        if level == "block":
            return block
        out: IntArray = self.zone_of_block[block]
        return out


def rack_sizes(shape: Shape) -> list[int]:
    count = shape.zones * shape.blocks * shape.racks
    base, rest = divmod(shape.nodes, count)
    if base == 0:
        raise ValueError(f"--nodes {shape.nodes}: fewer nodes than racks ({count})")
    sizes = [base + (1 if i < rest else 0) for i in range(count)]
    if shape.uneven:  # move nodes between random pairs of racks: sizes from base/2 to 3*base/2
        rng = random.Random(shape.seed)
        for _ in range(count):
            a, b = rng.randrange(count), rng.randrange(count)
            k = min(base // 4, sizes[a] - max(1, base // 2), 3 * base // 2 - sizes[b])
            if a != b and k > 0:
                sizes[a] -= k
                sizes[b] += k
    return sizes


def build(shape: Shape) -> Cluster:
    sizes = rack_sizes(shape)
    cordoned = set(random.Random(shape.seed + 1).sample(range(shape.nodes), min(shape.cordoned, shape.nodes)))
    nodes: list[NodeInfo] = []
    rack_of: list[int] = []
    for r, size in enumerate(sizes):
        block, rack = divmod(r, shape.racks)
        zone, block_in_zone = divmod(block, shape.blocks)
        for _ in range(size):
            i = len(nodes)
            name = f"gpu-{i:04d}"
            values = (f"z{zone}", f"z{zone}-b{block_in_zone}", f"z{zone}-b{block_in_zone}-r{rack}")
            labels = dict(zip(LABELS, values, strict=True)) | {HOSTNAME_LABEL: name}
            alloc = {GPU: shape.gpus * 1000, "pods": 110_000}
            nodes.append(NodeInfo(name, labels, alloc, unschedulable=i in cordoned))
            rack_of.append(r)
    ends = np.cumsum(sizes)
    topology = parse_topology(
        {"metadata": {"name": TOPOLOGY_NAME}, "spec": {"levels": [{"nodeLabel": lb} for lb in LABELS]}}
    )
    return Cluster(
        shape,
        nodes,
        topology,
        np.array(rack_of, dtype=np.int64),
        np.arange(len(sizes), dtype=np.int64) // shape.racks,
        np.arange(shape.zones * shape.blocks, dtype=np.int64) // shape.blocks,
        np.array([0 if n.unschedulable else shape.gpus for n in nodes], dtype=np.int64),
        (ends - np.array(sizes)).astype(np.int64),
        ends.astype(np.int64),
    )
