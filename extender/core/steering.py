"""Trading planned nodes between interchangeable members, for the call that made the plan.

kube-scheduler with an adaptive percentageOfNodesToScore offers a call only a sample of the
nodes. The member whose call plans its gang is the one most likely to be answered "steering":
its planned node was chosen among all nodes, after the sample was drawn. Members of one leaf
scope with the same shape (requests and placement rules) are interchangeable for every
constraint, so when a mate's planned node is in the sample the two trade nodes, before any
nomination is sent, and the call is answered at once.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from extender.placement import Gang


def kinds(gang: Gang) -> dict[str, tuple[int, int]]:
    """Pod -> (leaf scope, shape): pods with the same value may trade planned nodes."""
    return {m.key: (scope.id, m.shape) for scope in gang.scopes for m in scope.members}


def offered_mate(
    pod: str,
    reserved: Mapping[str, str],
    kind_of: Mapping[str, tuple[int, int]],
    offered: Collection[str],
    busy: Collection[str],
) -> str | None:
    """A planned pod interchangeable with POD whose node is OFFERED (and that is not BUSY: at
    the bind gate already), or None."""
    kind = kind_of.get(pod)
    if kind is None:
        return None
    for other, node in reserved.items():
        if other != pod and node in offered and other not in busy and kind_of.get(other) == kind:
            return other
    return None
