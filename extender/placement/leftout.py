"""Nodes that cannot take even one pod of a shape, counted by why: the "nodes left out" of
pending messages and of `topogang explain`."""

from __future__ import annotations

from collections import Counter

import numpy as np

from extender.model.pod import POD_SLOT
from extender.placement.gang import Shape
from extender.placement.snapshot import NOT_SCHEDULABLE, NOT_SELECTED, TAINTED, ClusterSnapshot
from extender.placement.tree import IntArray


def left_out(snapshot: ClusterSnapshot, shape: Shape, nodes: IntArray | None = None) -> dict[str, int]:
    """Among NODES (node indices; all by default): not ready or cordoned, a taint not tolerated,
    selector or affinity not matched, else the first resource short of one pod's request."""
    if nodes is None:
        nodes = np.arange(len(snapshot.table), dtype=np.int64)
    elig = snapshot.table.eligibility(shape.placement)
    out: Counter[str] = Counter()
    codes = elig.code[nodes]
    out["not ready or cordoned"] += int(np.count_nonzero(codes == NOT_SCHEDULABLE))
    out["node selector or affinity"] += int(np.count_nonzero(codes == NOT_SELECTED))
    for n in nodes[codes == TAINTED]:
        out[f"taint {elig.taint[int(n)]}"] += 1
    left = nodes[codes == 0]
    for resource, need in shape.requests:
        if need <= 0:
            continue
        short = snapshot.free(resource)[left] < need
        out["too many pods" if resource == POD_SLOT else resource] += int(np.count_nonzero(short))
        left = left[~short]
    return {k: v for k, v in out.items() if v}
