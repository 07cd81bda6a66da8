"""What the edges read of the cluster and its gangs, without changing anything.

The server, the PodGroup writer, the simulator and `explain` ask these questions of the cluster
state and the membership; they never reach into either directly.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from extender.core.cluster import ClusterState, object_key, shortfall
from extender.core.membership import GroupView, Membership
from extender.grouping import Family
from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec


class Lookup:
    def __init__(self, state: ClusterState, membership: Membership) -> None:
        self._state = state
        self._membership = membership

    def group_of(self, pod: str) -> str | None:
        """The gang POD belongs to (None: a plain pod, or one whose gang is not resolved yet)."""
        return self._membership.group_of(pod)

    def waiting(self, pod: str) -> str | None:
        """Why POD, which names a gang, cannot join it yet (None: it is in a gang, or plain)."""
        return self._membership.waiting(pod)

    def members(self, group: str) -> list[str]:
        """The pods of GROUP."""
        return self._membership.members(group)

    def groups(self) -> list[str]:
        """The gangs some pod belongs to."""
        return self._membership.groups()

    def families(self) -> set[Family]:
        """The families that have pods (see Membership.families)."""
        return self._membership.families()

    def read_by_pods(self, kind: str, namespace: str, name: str) -> bool:
        """Whether some pod's grouping read this object (its owner chain, or its grouper's reads)."""
        return self._membership.read(kind, namespace, name)

    def has_pods(self, group: str) -> bool:
        return self._membership.has(group)

    def view(self, group: str) -> GroupView:
        return self._membership.view(group)

    def pod(self, key: str) -> PodInfo | None:
        return self._state.pods.get(key)

    def was_deleted(self, pod: PodInfo) -> bool:
        """Whether POD was deleted already (a request about it came late)."""
        return self._state.was_deleted(pod)

    def podgroup(self, group: str) -> PodGroupSpec | None:
        """The PodGroup object of GROUP as read from the cluster, if it exists and is valid."""
        return self._state.podgroups.get(group)

    def podgroup_invalid(self, group: str) -> bool:
        """Whether GROUP's PodGroup object exists but cannot be read."""
        return group in self._state.invalid_podgroups

    def known_groups(self) -> set[str]:
        """Every gang with pods or a PodGroup object (valid or not)."""
        state = self._state
        return set(self._membership.groups()) | set(state.podgroups) | set(state.invalid_podgroups)

    def exists(self, group: str) -> bool:
        """Whether GROUP has pods or a PodGroup object."""
        return self._membership.has(group) or group in self._state.podgroups or self.podgroup_invalid(group)

    def watched_object(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A workload object as the watch last saw it."""
        return self._state.objects.get(object_key(api_version, kind, namespace, name))

    def subscribe(self, callback: Callable[[str, object], None]) -> None:
        """Be told of every change to the cluster state (kind, key)."""
        self._state.subscribe(callback)

    def take_freed(self) -> set[str]:
        """The nodes where bound pods gave room back since the last call (ClusterState.freed)."""
        freed = set(self._state.freed)
        self._state.freed.clear()
        return freed

    def could_use(self, group: str, nodes: Collection[str]) -> bool:
        """Whether room on NODES could serve GROUP now: one of its unbound members would pass
        there (eligible, and the node's free room holds its requests). A gang parked for room
        is worth waking only then; anything less changes nothing for it."""
        state = self._state
        table = state.table
        at = [i for n in nodes if (i := table.index.get(n)) is not None]
        if not at:
            return False
        tried: set[tuple[object, ...]] = set()
        for key in self._membership.view(group).pods:
            pod = state.pods.get(key)
            if pod is None or pod.node_name is not None:
                continue
            shape = (pod.placement, tuple(sorted(pod.requests.items())))
            if shape in tried:
                continue
            tried.add(shape)
            eligible = table.eligibility(pod.placement).mask
            for i in at:
                node = table.nodes[i].name
                if eligible[i] and shortfall(state, node, pod.requests) is None:
                    return True
        return False

    def nominations_released(self) -> int:
        """How many pods have stopped waiting on a node another scheduler nominated them to."""
        return self._state.nominations_released

    def reservation_count(self) -> int:
        return len(self._state.reservations)
