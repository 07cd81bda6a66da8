"""The bind gate, as kube-scheduler's bind calls meet it: all of a gang's minimum, or none.

A member of the minimum waits at its plan's gate (`gate.Gate`) until every pod of the minimum
has reached bind, then all are bound together; pods beyond the minimum bind once the minimum
has. Before the gate opens, every arrived member's node is checked against the cluster as it is
now: a node deleted, cordoned, not ready or filled meanwhile opens nothing (the coordinator
plans the gang again). The bind calls waiting at a gate whose plan was dropped are kept here
until the server fails them (`take_dropped`).

*Ahead*: kube-scheduler takes a gang's members one at a time, so the members of a large gang
reach bind over tens of seconds, longer than one bind call may wait (its httpTimeout); their
calls came back and were retried, each retry a refusal and a status write. When every planned pod
needs nothing from kube-scheduler that the plan does not judge (`PodInfo.kube_checks` empty:
no volume or resource claims, host ports, inter-pod affinity or spread constraints) and names
the same scheduler, the gate opens as the plan is made: topogang binds every planned pod at
once, and the members' calls, if they still come, find their pod bound (`DONE`).

*Plain pods* bind as they come, but not into room topogang's own count has taken: kube-scheduler
chose the node from its cache, which lacks the pods topogang bound ahead until its informer
shows them (topogang's watch may show them first, so the filter's check of those nodes,
core/posted.py, can have ended), and a gang may have been planned onto the node between the
pod's filter and its bind. Such a call is refused (kube-scheduler retries the pod); one accepted
reserves the pod's room until its Binding lands, so no plan made meanwhile counts it free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from extender.core.cluster import ClusterState, shortfall
from extender.core.decisions import (
    BIND,
    DONE,
    R_BIND_TIMEOUT,
    REJECT,
    WAIT,
    BindDecision,
    FilterResult,
    Reason,
    Released,
)
from extender.core.membership import Membership
from extender.core.plans import Plans
from extender.model.quantity import format_quantity


class BindGate:
    def __init__(self, state: ClusterState, membership: Membership, plans: Plans) -> None:
        self._state = state
        self._membership = membership
        self._plans = plans
        self._dropped: list[tuple[str, Reason]] = []  # (pod, why): binds waiting at a gate that closed

    def arrive(self, pod_key: str, node: str, now: float) -> BindDecision:
        """POD_KEY's bind call for NODE. A REJECT with `stale` nodes: the whole minimum arrived,
        but those planned nodes no longer fit, so nothing binds (the caller plans again)."""
        group = self._membership.group_of(pod_key)
        if group is None:
            return self._plain(pod_key, node)
        pod = self._state.pods.get(pod_key)
        if pod is not None and pod.node_name is not None:
            # Bound by topogang when its gate opened, after this call's attempt began.
            if pod.node_name == node:
                return BindDecision(DONE)
            return BindDecision(REJECT, error=f"topogang: the pod is bound to {pod.node_name} already, not {node}")
        gp = self._plans.get(group)
        planned = gp.reserved.get(pod_key) if gp else None
        if gp is None or planned is None:
            return BindDecision(REJECT, error=f"topogang: gang {group} has no plan for this pod; it will be retried")
        if planned != node:
            return BindDecision(REJECT, error=f"topogang: the pod is planned on {planned}, not {node}")
        gp.touched = now
        if gp.gate.opened:
            gp.gate.binding.add(pod_key)
            return BindDecision(BIND, ((pod_key, node),))
        gp.gate.arrive(pod_key, node, now)
        if not gp.gate.complete(gp.reserved):
            return BindDecision(WAIT)
        # The whole minimum is at the gate. Its nodes are checked against the cluster as it is
        # now (one may have been deleted, cordoned, gone not ready or filled by another scheduler
        # while the members waited).
        stale = tuple(sorted({n for n in gp.gate.arrived.values() if not self._plans.still_fits(n)}))
        if not stale:
            return BindDecision(BIND, gp.gate.open())
        return BindDecision(REJECT, stale=stale)

    def _plain(self, pod_key: str, node: str) -> BindDecision:
        """A plain pod's bind call: refused where topogang's own count finds no room for it (see
        the module's docstring), else bound, its room reserved until its Binding lands."""
        state = self._state
        pod = state.pods.get(pod_key)
        if pod is None or pod.node_name is not None or pod.claims or pod_key in state.reservations:
            # Unknown to us, bound already (the API answers), counted with its devices (DRA:
            # the claim's allocation guards those), or in room held for it (a moved pod's).
            return BindDecision(BIND, ((pod_key, node),))
        # (a node our watch has not shown yet is not judged)
        if node in state.table.index and (short := shortfall(state, node, pod.requests)) is not None:
            return BindDecision(REJECT, error=_no_room(node, *short))
        state.reserve(pod_key, node, pod.requests, assumed=True)  # (kube-scheduler holds it assumed)
        return BindDecision(BIND, ((pod_key, node),))

    def plain_bound(self, pod_key: str) -> bool:
        """POD_KEY's Binding landed or failed (or the pod went): the room reserved for it as a
        plain pod being bound goes (bound, its pod counts it). False: none was."""
        if pod_key not in self._state.assumed:  # (only a plain pod being bound is reserved so)
            return False
        self._state.unreserve(pod_key)
        return True

    def ahead(self, group: str, scheduler_name: str, now: float) -> tuple[tuple[str, str], ...]:
        """Open GROUP's new plan at once when topogang may bind all of it itself (see the module's
        docstring): (pod, node) of every planned pod, to bind now; () when the members must come
        to bind one by one."""
        gp = self._plans.get(group)
        if gp is None or gp.gate.opened or gp.gate.arrived or not gp.reserved:
            return ()
        pods = self._state.pods
        for key in gp.reserved:
            pod = pods.get(key)
            if pod is None or pod.kube_checks or pod.scheduler_name != scheduler_name:
                return ()
            if pod.node_name is not None or pod.scheduling_gates:  # (a gated pod cannot be bound: gates mode)
                return ()
        gp.touched = now
        return gp.gate.open_all(gp.reserved)

    def answer_ahead(self, group: str, pod_key: str, nodes: Sequence[str]) -> FilterResult | None:
        """The filter's answer for a member of a gang bound ahead (None: it is not one). Its
        Binding was posted with the plan (or failed, and the pod was woken to bind through its
        own call): its node is fixed, no trade, no new plan under a posted Binding, and the
        gang, which changes as each Binding lands, is not built again for the answer."""
        gp = self._plans.get(group)
        if gp is None or not gp.gate.ahead or pod_key not in gp.reserved:
            return None
        node = gp.reserved[pod_key]
        if node in nodes:
            return FilterResult([node], group=group)
        return FilterResult.refusal(nodes, f"topogang: being bound to its planned node {node}", group)

    def missing(self, group: str) -> list[str]:
        """Pods of the minimum that have not reached bind yet."""
        gp = self._plans.get(group)
        return gp.gate.missing(gp.reserved) if gp is not None else []

    def progress(self, group: str) -> tuple[int, int]:
        """(arrived, total) of GROUP's minimum still unbound."""
        gp = self._plans.get(group)
        return gp.gate.counts(gp.reserved) if gp is not None else (0, 0)

    def silence_left(self, group: str, now: float, timeout: float) -> float | None:
        """Seconds before GROUP's gate closes for want of a new member (<= 0: due); None: no
        member is waiting at it."""
        gp = self._plans.get(group)
        return gp.gate.silence_left(now, timeout) if gp is not None else None

    def closing(self, group: str, seconds: float) -> Released | None:
        """Why GROUP's gate closes now that no new member came for SECONDS; None: it has no
        gate still shut."""
        gp = self._plans.get(group)
        if gp is None or gp.gate.opened:
            return None
        arrived, total = gp.gate.counts(gp.reserved)
        return Released(R_BIND_TIMEOUT, arrived, total, seconds)

    def opened_elsewhere(self, group: str, now: float, pods: Iterable[str] = ()) -> None:
        """GROUP's pods are let through without bind calls (gates mode: kube-scheduler binds
        each one); its gate counts as opened from NOW. PODS: those released now, each pinned to
        its planned node (being bound: never traded, never given back)."""
        gp = self._plans.get(group)
        if gp is not None:
            gp.gate.opened = True
            gp.gate.binding.update(p for p in pods if p in gp.reserved)
            gp.touched = now

    def drop(self, pods: list[str], why: Reason) -> None:
        """The bind calls of PODS wait at a gate that closed."""
        self._dropped.extend((p, why) for p in pods)

    def take_dropped(self) -> list[tuple[str, Reason]]:
        """Bind calls waiting at gates that were released since the last call, and why."""
        out, self._dropped = self._dropped, []
        return out


def _no_room(node: str, resource: str, free: int, asked: int) -> str:
    return (
        f"topogang: node {node} has {format_quantity(resource, max(free, 0))} {resource} free, the pod asks"
        f" {format_quantity(resource, asked)}: pods topogang bound, or room reserved for a gang, that"
        " kube-scheduler's cache does not count yet; it will be retried"
    )
