"""Nodes that cannot take even one pod of a shape, counted by why: the "nodes left out" of
pending messages and of `topogang explain`."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

import numpy as np

from extender.model.requests import POD_SLOT
from extender.placement.gang import Shape
from extender.placement.snapshot import NOT_SCHEDULABLE, NOT_SELECTED, TAINTED, ClusterSnapshot
from extender.placement.tree import IntArray


class Exclusion(enum.Enum):
    NOT_SCHEDULABLE = "not ready or cordoned"
    NOT_SELECTED = "node selector or affinity"
    TAINT = "taint"  # a taint the pod does not tolerate (detail: the taint)
    TOO_MANY_PODS = "too many pods"
    RESOURCE = "resource"  # short of one pod's request (detail: the resource)
    HELD = "held for another gang"  # a reservation's room, or a domain another gang holds exclusively


@dataclass(frozen=True, slots=True)
class Excluded:
    """Why nodes were left out, as a code and what it is about."""

    code: Exclusion
    detail: str = ""

    def __str__(self) -> str:
        if self.code is Exclusion.TAINT:
            return f"taint {self.detail}"
        if self.code is Exclusion.RESOURCE:
            return self.detail
        return str(self.code.value)


def left_out(snapshot: ClusterSnapshot, shape: Shape, nodes: IntArray | None = None) -> dict[Excluded, int]:
    """Among NODES (node indices; all by default): not ready or cordoned, a taint not tolerated,
    selector or affinity not matched, held for another gang, else the first resource short of
    one pod's request."""
    if nodes is None:
        nodes = np.arange(len(snapshot.table), dtype=np.int64)
    elig = snapshot.table.eligibility(shape.placement)
    out: Counter[Excluded] = Counter()
    codes = elig.code[nodes]
    out[Excluded(Exclusion.NOT_SCHEDULABLE)] += int(np.count_nonzero(codes == NOT_SCHEDULABLE))
    out[Excluded(Exclusion.NOT_SELECTED)] += int(np.count_nonzero(codes == NOT_SELECTED))
    for n in nodes[codes == TAINTED]:
        out[Excluded(Exclusion.TAINT, elig.taint[int(n)])] += 1
    left = nodes[codes == 0]
    if snapshot.blocked is not None:
        blocked = snapshot.blocked[left]
        out[Excluded(Exclusion.HELD)] += int(np.count_nonzero(blocked))
        left = left[~blocked]
    for resource, need in shape.requests:
        if need <= 0:
            continue
        short = snapshot.free(resource)[left] < need
        why = Excluded(Exclusion.TOO_MANY_PODS) if resource == POD_SLOT else Excluded(Exclusion.RESOURCE, resource)
        out[why] += int(np.count_nonzero(short))
        left = left[~short]
    return {k: v for k, v in out.items() if v}
