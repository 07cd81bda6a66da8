"""Steering: each planned member to its planned node, by nomination, trading nodes when that helps.

kube-scheduler with an adaptive percentageOfNodesToScore offers a call only a sample of the
nodes. With nomination on, a member whose planned node is not offered is refused and nominated
there (status.nominatedNodeName: kube-scheduler 1.35+ tries that node first, alone); the
nominations of a new plan go out in kube-scheduler's queue order, each resolving its node when
its write leaves (`target`).

The member whose call plans its gang is the one most likely to be answered "steering": its
planned node was chosen among all nodes, after the sample was drawn. Members of one leaf scope
with the same shape (requests and placement rules) are interchangeable for every constraint, so
when a mate's planned node is in the sample the two trade nodes, before any nomination is sent,
and the call is answered at once. The same holds for a member kube-scheduler takes before its
own nomination landed (its writes can trail its queue): it trades with a mate whose nomination
is still queued, and that nomination goes out for the node traded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from extender.core.cluster import ClusterState
from extender.core.decisions import FilterResult, PlanEvent
from extender.core.membership import Membership
from extender.core.plans import GroupPlan, Plans
from extender.placement import Gang

NEW_PLAN = ("planned", "replanned", "extended")


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


@dataclass
class _Nominations:
    """One plan's nominations: queued and not sent yet, so such a member may still trade its
    node; and members kube-scheduler took on their planned node, whose nomination is moot."""

    generation: int
    unsent: set[str] = field(default_factory=set)
    passed: set[str] = field(default_factory=set)
    sent: dict[str, str] = field(default_factory=dict)  # pod -> the node its last nomination named
    order: tuple[str, ...] = ()  # the members nominated at the last plan, in kube-scheduler's queue order
    kinds: dict[str, tuple[int, int]] | None = None  # kinds() of the gang, when first needed


class Steering:
    def __init__(self, state: ClusterState, membership: Membership, plans: Plans, *, enabled: bool) -> None:
        self._state = state
        self._membership = membership
        self._plans = plans
        # Planned members are steered with status.nominatedNodeName (kube-scheduler 1.35+ tries
        # that node first, alone), so its adaptive percentageOfNodesToScore may leave the planned
        # node out of a call; off, every call must offer it (percentageOfNodesToScore: 100).
        self.enabled = enabled
        self._by_group: dict[str, _Nominations] = {}

    def _of(self, group: str, gp: GroupPlan) -> _Nominations:
        noms = self._by_group.get(group)
        if noms is None or noms.generation != gp.generation:  # a new plan starts afresh
            noms = self._by_group[group] = _Nominations(gp.generation)
        return noms

    def forget(self, group: str) -> None:
        """GROUP's plan was released or carried out."""
        self._by_group.pop(group, None)

    def lost(self, node: str, nodes: Sequence[str], nominated: str | None) -> bool:
        """Whether kube-scheduler cannot take the member to NODE: it is not offered, and no
        nomination will bring it there (off; or the pod was nominated there and refused)."""
        return node not in nodes and (not self.enabled or nominated == node)

    def steer(
        self,
        group: str,
        gp: GroupPlan,
        pod_key: str,
        nodes: Sequence[str],
        nominated: str | None,
        event: PlanEvent | None,
    ) -> FilterResult:
        """A planned member: its planned node, or (not offered this time) a nomination there."""
        noms = self._of(group, gp)
        node = gp.reserved[pod_key]
        # Only the planned node comes back. The others are not listed: kube-scheduler (1.32+)
        # records unlisted nodes as UnschedulableAndUnresolvable, which is what they are for this
        # pod, and it shows those statuses only if the pod fails, which it will not on this node.
        # Listing thousands of identical reasons cost ~1 ms and a large reply per call inside the
        # scheduling cycle. Refusals list every node with the reason.
        wake: tuple[str, ...] = ()
        if event is not None and event.outcome in NEW_PLAN:
            # In kube-scheduler's queue order, so the nominations of the members it takes next land first.
            arrival = self._state.arrival
            wake = tuple(sorted((p for p in gp.reserved if p != pod_key), key=lambda p: arrival.get(p, 0)))
            if self.enabled:
                noms.unsent.update(wake)
                noms.order = wake
            if node not in nodes:  # (mates at the gate or being bound keep their nodes)
                waiting = [p for p in gp.reserved if not gp.gate.fixed(p)]
                node = self._trade(group, gp, noms, pod_key, nodes, waiting)
        elif node not in nodes and self.enabled and nominated is None:
            # Taken before its nomination landed (kube-scheduler outpaced the writes): a mate whose
            # nomination is not sent yet gives its node, and that nomination goes out for this one's.
            # The one kube-scheduler takes last first; lazily: the first mate offered ends the search.
            mates = (p for p in reversed(noms.order) if p in noms.unsent and not gp.gate.fixed(p))
            node = self._trade(group, gp, noms, pod_key, nodes, mates)
        if node not in nodes:
            # Left out of kube-scheduler's sample of the nodes: nominate the pod there; its next
            # attempt tries that node first, alone.
            refused = FilterResult.refusal(nodes, f"topogang: steering to its planned node {node}", group, event)
            noms.sent[pod_key] = node
            return replace(refused, wake=wake, steer=node)
        noms.unsent.discard(pod_key)
        noms.passed.add(pod_key)
        stale = noms.sent.get(pod_key, node) != node
        if stale:
            noms.sent[pod_key] = node
        return FilterResult([node], event=event, wake=wake, group=group, steer=node if stale else None)

    def _trade(
        self, group: str, gp: GroupPlan, noms: _Nominations, pod_key: str, nodes: Sequence[str], mates: Iterable[str]
    ) -> str:
        """POD_KEY's node was not offered: trade nodes with one of MATES, interchangeable with it,
        whose node was; POD_KEY's node after (its own, when it is fixed: a retry after its
        Binding failed)."""
        if gp.gate.fixed(pod_key):
            return gp.reserved[pod_key]
        if noms.kinds is None:
            built = self._membership.view(group).built
            if built is None or built.gang is None:
                return gp.reserved[pod_key]
            noms.kinds = kinds(built.gang)
        mate = offered_mate(pod_key, gp.reserved, noms.kinds, set(nodes), mates)
        if mate is not None:
            self._plans.swap(gp, pod_key, mate)
        return gp.reserved[pod_key]

    def target(self, group: str | None, pod_key: str) -> str | None:
        """The node to nominate POD_KEY on now that its write goes out: its planned node, or None
        when it has none or kube-scheduler took it on that node meanwhile. From now on it no
        longer trades its node."""
        gp = self._plans.get(group)
        if gp is None or group is None:
            return None
        noms = self._of(group, gp)
        noms.unsent.discard(pod_key)
        node = None if pod_key in noms.passed else gp.reserved.get(pod_key)
        if node is not None:
            noms.sent[pod_key] = node
        return node
