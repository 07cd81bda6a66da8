"""Whether a gang refused for room could ever run on the cluster's nodes.

A gang refused for room waits for running work to end, and may be held room meanwhile
(reservations). That wait only makes sense if the gang fits once every running pod is gone: the
planner's own plan, on every node's whole allocatable, with no other gang's reservations and no
held room. A gang that does not fit even then (its nodes lack the level's label, a taint or a
selector leaves too few nodes in every domain, a domain is too small) waits for nothing: it
holds no room, and its reason is the one found with nothing running, which names the constraint
and how far short the best domain falls.

One plan per gang as it is and per node generation: a gang refused again and again costs one.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import replace

from extender.core.cluster import ClusterState
from extender.placement import (
    NO_CAPACITY,
    NO_DOMAIN,
    ClusterSnapshot,
    DictUsage,
    Gang,
    Shortfall,
    Unplaceable,
    plan,
)


class Feasibility:
    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._found: dict[str, tuple[Gang, int, Shortfall | None]] = {}  # group -> (gang, generation, answer)

    def never(self, group: str, gang: Gang) -> Shortfall | None:
        """Why GROUP's GANG cannot run even with nothing running (a Shortfall marked `never`);
        None when it can, or when part of it runs already (a running gang's pods are its own
        business: repair and extra pods)."""
        if any(m.node is not None for m in gang.members()):
            return None
        table = self._state.table
        known = self._found.get(group)
        if known is not None and known[1] == table.generation and (known[0] is gang or known[0] == gang):
            return known[2]
        result = plan(ClusterSnapshot(table, DictUsage(table)), gang)
        found = None
        if isinstance(result, Unplaceable) and result.reason.kind in (NO_DOMAIN, NO_CAPACITY):
            found = replace(result.reason, never=True)
        self._found[group] = (gang, table.generation, found)
        return found

    def sweep(self, groups: AbstractSet[str]) -> None:
        """Forget the gangs not in GROUPS (gone)."""
        if any(g not in groups for g in self._found):
            self._found = {g: v for g, v in self._found.items() if g in groups}
