"""What each node has given away: requests of bound pods, and of reservations, per resource.

Kept as arrays aligned with the NodeTable and updated in place as pods come and go, so a plan
starts from them in O(nodes) numpy work instead of summing every pod again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from extender.placement import IntArray, NodeTable


class UsageLedger:
    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._arrays: dict[str, IntArray] = {}

    def add(self, node: str, requests: Mapping[str, int], sign: int = 1) -> None:
        i = self.table.index.get(node)
        if i is None:
            return  # a pod on a node we do not know (yet): it takes nothing we plan with
        for resource, value in requests.items():
            arr = self._arrays.get(resource)
            if arr is None:
                arr = self._arrays[resource] = np.zeros(len(self.table), dtype=np.int64)
            arr[i] += sign * value

    def used(self, resource: str) -> IntArray:
        arr = self._arrays.get(resource)
        return arr if arr is not None else np.zeros(len(self.table), dtype=np.int64)

    def at(self, node: str, resource: str) -> int:
        i = self.table.index.get(node)
        arr = self._arrays.get(resource)
        return 0 if i is None or arr is None else int(arr[i])

    def at_index(self, i: int, resource: str) -> int:
        arr = self._arrays.get(resource)
        return 0 if arr is None else int(arr[i])


class PlanningUsage:
    """Bound + reserved + devices claims hold, minus the reservations a re-plan gives back, plus
    the room of pods other schedulers nominated that the plan yields to (the `Usage` protocol)."""

    def __init__(
        self,
        bound: UsageLedger,
        reserved: UsageLedger,
        give_back: Mapping[str, Mapping[str, int]],
        allocated: Callable[[str], IntArray | None] | None = None,
        taken: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self._bound, self._reserved = bound, reserved
        self._give_back = give_back
        self._allocated = allocated
        self._taken = taken or {}

    def used(self, resource: str) -> IntArray:
        arr = self._bound.used(resource) + self._reserved.used(resource)
        held = self._allocated(resource) if self._allocated is not None else None
        if held is not None:
            arr += held
        index = self._bound.table.index
        for sign, per_node in ((-1, self._give_back), (1, self._taken)):
            for node, requests in per_node.items():
                value = requests.get(resource)
                if value and node in index:
                    arr[index[node]] += sign * value
        return arr
