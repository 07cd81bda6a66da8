"""Trading planned nodes between interchangeable members whose nomination is not out yet.

kube-scheduler with an adaptive percentageOfNodesToScore offers a call only a sample of the
nodes. The member whose call plans its gang is the one most likely to be answered "steering":
its planned node was chosen among all nodes, after the sample was drawn. Members of one leaf
scope with the same shape (requests and placement rules) are interchangeable for every
constraint, so when a mate's planned node is in the sample the two trade nodes, before any
nomination is sent, and the call is answered at once. The same holds for a member kube-scheduler
takes before its own nomination landed (its writes can trail its queue): it trades with a mate
whose nomination is still queued, and that nomination goes out for the node traded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from extender.placement import Gang


def kinds(gang: Gang) -> dict[str, tuple[int, int]]:
    """Pod -> (leaf scope, shape): pods with the same value may trade planned nodes."""
    return {m.key: (scope.id, m.shape) for scope in gang.scopes for m in scope.members}


def offered_mate(
    pod: str,
    reserved: Mapping[str, str],
    kind_of: Mapping[str, tuple[int, int]],
    offered: Collection[str],
    mates: Iterable[str],
) -> str | None:
    """One of MATES (planned pods) interchangeable with POD whose planned node is OFFERED, or None."""
    kind = kind_of.get(pod)
    if kind is None:
        return None
    for other in mates:
        node = reserved.get(other)
        if other != pod and node is not None and node in offered and kind_of.get(other) == kind:
            return other
    return None
