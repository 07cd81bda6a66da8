"""Fake GPU nodes for any cluster where kwok manages nodes annotated `kwok.x-k8s.io/node: fake`
(the local control plane, or kwok inside kind).

Each node is a Node object with GPUs, CPU, memory and pods in status.capacity and
status.allocatable; kwok keeps it Ready (heartbeats and a lease) and runs the pods bound to it.

Label scheme (see e2e/controlplane/README.md), for node `gpu-z0-b1-r2-n3`:

    topology.topogang.io/zone   z0            a zone (e.g. a data hall)
    topology.topogang.io/block  z0-b1         a block of racks under one spine, inside a zone
    topology.topogang.io/rack   z0-b1-r2      a rack (one leaf switch), inside a block
    kubernetes.io/hostname      gpu-z0-b1-r2-n3
    e2e.topogang.io/fake-gpu-node  "true"     marks nodes made by this helper

Values are unique across the cluster (a rack value names its block and zone), so a selector on
one label alone picks one domain. The label keys can be changed with TopologyLabels.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
FAKE_NODE_LABEL = "e2e.topogang.io/fake-gpu-node"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class TopologyLabels:
    zone: str = "topology.topogang.io/zone"
    block: str = "topology.topogang.io/block"
    rack: str = "topology.topogang.io/rack"


@dataclass(frozen=True)
class GpuNodeShape:
    """What one node offers; the same values go into capacity and allocatable."""

    gpus: int = 8
    cpu: str = "128"
    memory: str = "2Ti"
    pods: int = 110
    gpu_resource: str = GPU_RESOURCE
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()

    def resources(self) -> dict[str, str]:
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            self.gpu_resource: str(self.gpus),
        }


@dataclass(frozen=True)
class Place:
    """Where a node sits: zone, block in the zone, rack in the block, node in the rack."""

    zone: int
    block: int
    rack: int
    node: int

    @property
    def zone_id(self) -> str:
        return f"z{self.zone}"

    @property
    def block_id(self) -> str:
        return f"{self.zone_id}-b{self.block}"

    @property
    def rack_id(self) -> str:
        return f"{self.block_id}-r{self.rack}"


@dataclass(frozen=True)
class FakeTopology:
    """zones × blocks per zone × racks per block × nodes per rack."""

    zones: int = 1
    blocks_per_zone: int = 1
    racks_per_block: int = 1
    nodes_per_rack: int = 8

    @property
    def node_count(self) -> int:
        return self.zones * self.blocks_per_zone * self.racks_per_block * self.nodes_per_rack

    @classmethod
    def parse(cls, text: str) -> FakeTopology:
        """'ZxBxRxN', e.g. '1x2x2x4' = 16 nodes."""
        parts = [int(p) for p in text.lower().split("x")]
        if len(parts) != 4 or min(parts) < 0:
            raise ValueError(f"expected ZONESxBLOCKSxRACKSxNODES, e.g. 1x2x2x4, not {text!r}")
        return cls(*parts)

    def racks(self) -> Iterator[tuple[int, int, int]]:
        return itertools.product(range(self.zones), range(self.blocks_per_zone), range(self.racks_per_block))


def node_manifest(name: str, place: Place, shape: GpuNodeShape, labels: TopologyLabels) -> dict[str, Any]:
    """The Node object for one fake GPU node (status is kept on create; kwok adds conditions,
    addresses and node info and keeps capacity and allocatable as given)."""
    resources = shape.resources()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(KWOK_ANNOTATION),
            "labels": {
                HOSTNAME_LABEL: name,
                FAKE_NODE_LABEL: "true",
                labels.zone: place.zone_id,
                labels.block: place.block_id,
                labels.rack: place.rack_id,
                **shape.extra_labels,
            },
        },
        "spec": {"taints": [dict(t) for t in shape.taints]} if shape.taints else {},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


# Set by the node lifecycle controller until it has seen the node Ready: a scheduler keeps pods
# off a node while it is there, so a node is not ready for a test before it is gone.
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def node_is_ready(node: client.V1Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    taints = (node.spec.taints if node.spec else None) or []
    untainted = not any(t.key in NOT_READY_TAINTS for t in taints)
    return untainted and any(c.type == "Ready" and c.status == "True" for c in conditions)


class FakeGpuNodes:
    """Creates fake GPU nodes and can add more later in a test.

    nodes = FakeGpuNodes(api)
    await nodes.create(FakeTopology(zones=1, blocks_per_zone=2, racks_per_block=2,
                                    nodes_per_rack=4))
    await nodes.add(zone=0, block=1, rack=0, count=2)   # two more in rack z0-b1-r0
    await nodes.delete_all()
    """

    def __init__(
        self,
        api: client.ApiClient,
        *,
        shape: GpuNodeShape | None = None,
        labels: TopologyLabels | None = None,
        name_prefix: str = "gpu",
        concurrency: int = 16,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.shape = shape or GpuNodeShape()
        self.labels = labels or TopologyLabels()
        self.name_prefix = name_prefix
        self.names: list[str] = []
        self._next_in_rack: dict[tuple[int, int, int], int] = {}
        self._limit = asyncio.Semaphore(concurrency)

    def name_of(self, place: Place) -> str:
        return f"{self.name_prefix}-{place.rack_id}-n{place.node}"

    async def create(self, topology: FakeTopology, *, wait_ready: bool = True, timeout_s: float = 60.0) -> list[str]:
        """Creates every node of TOPOLOGY (after any this helper made already in the same racks);
        returns their names in zone, block, rack, node order."""
        places = []
        for zone, block, rack in topology.racks():
            places.extend(self._next_places(zone, block, rack, topology.nodes_per_rack))
        return await self._create(places, None, wait_ready, timeout_s)

    async def add(
        self,
        *,
        zone: int,
        block: int,
        rack: int,
        count: int = 1,
        shape: GpuNodeShape | None = None,
        wait_ready: bool = True,
        timeout_s: float = 60.0,
    ) -> list[str]:
        """Adds COUNT nodes to one rack (new or existing)."""
        places = self._next_places(zone, block, rack, count)
        return await self._create(places, shape, wait_ready, timeout_s)

    async def wait_ready(self, names: Iterable[str], timeout_s: float = 60.0) -> None:
        """Waits until every named node is Ready; TimeoutError lists the ones that are not."""
        waiting = set(names)
        deadline = time.monotonic() + timeout_s
        while waiting:
            listed = await self.core.list_node(label_selector=f"{FAKE_NODE_LABEL}=true")
            waiting -= {n.metadata.name for n in listed.items if node_is_ready(n)}
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{len(waiting)} fake GPU nodes not Ready after {timeout_s:.0f}s "
                    f"(is kwok running?): {sorted(waiting)[:10]}"
                )
            await asyncio.sleep(0.2)

    async def delete(self, names: Iterable[str]) -> None:
        doomed = list(names)
        await asyncio.gather(*(self._delete_one(n) for n in doomed))
        gone = set(doomed)
        self.names = [n for n in self.names if n not in gone]

    async def delete_all(self) -> None:
        await self.delete(list(self.names))

    def _next_places(self, zone: int, block: int, rack: int, count: int) -> list[Place]:
        first = self._next_in_rack.get((zone, block, rack), 0)
        self._next_in_rack[(zone, block, rack)] = first + count
        return [Place(zone, block, rack, first + i) for i in range(count)]

    async def _create(
        self,
        places: list[Place],
        shape: GpuNodeShape | None,
        wait_ready: bool,
        timeout_s: float,
    ) -> list[str]:
        shape = shape or self.shape
        names = [self.name_of(p) for p in places]
        await asyncio.gather(
            *(
                self._create_one(node_manifest(name, place, shape, self.labels))
                for name, place in zip(names, places, strict=True)
            )
        )
        self.names.extend(names)
        if wait_ready:
            await self.wait_ready(names, timeout_s)
        return names

    async def _create_one(self, body: dict[str, Any]) -> None:
        async with self._limit:
            await self.core.create_node(body)  # type: ignore[arg-type]

    async def _delete_one(self, name: str) -> None:
        async with self._limit:
            try:
                await self.core.delete_node(name)
            except ApiException as e:
                if e.status != 404:
                    raise
