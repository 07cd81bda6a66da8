"""GangScheduler: plan -> reserve -> steer -> bind, one pod call at a time.

  filter      the first call for a member of a complete gang plans the whole gang against the
              cluster (minus other gangs' reservations) and reserves every planned pod at
              once; from then on each member is steered to its planned node. Members of an
              incomplete, invalid or unplaceable gang are refused with the reason.
  prioritize  the planned node gets the top score.
  bind        the gate: a member of the minimum waits until every pod of the minimum has
              reached bind, then all are bound together; pods beyond the minimum bind once
              the minimum has. A plan whose members do not all arrive is released (the caller
              decides when: the server on its bind timeout, `expire` on a plan's age).

Reservations are dropped when a pod binds, is deleted or binds elsewhere; a plan whose node no
longer fits (another scheduler took the space) is planned again for the pods not yet bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from extender.core.cluster import ClusterState, object_key
from extender.core.decisions import (
    BIND,
    DONE,
    FINISHED,
    INVALID,
    PENDING,
    R_BIND_TIMEOUT,
    R_FINISHED,
    R_GANG_INCOMPLETE,
    R_INVALID,
    R_MEMBER_GONE,
    R_PARTIAL_EVICTED,
    R_PLAN_EXPIRED,
    R_PLANNED,
    R_QUEUE_NOT_FOUND,
    R_REPAIRING,
    R_REPLANNING,
    R_SCHEDULED,
    R_WAITING,
    REJECT,
    SCHEDULED,
    WAIT,
    BeyondMinimum,
    BindDecision,
    FilterResult,
    GroupStatus,
    PlanEvent,
    PreemptionTimedOut,
    Reason,
    Released,
    Repairing,
    SubGroupStatus,
    Unrepairable,
)
from extender.core.exclusivity import snapshot_for
from extender.core.gate import Gate
from extender.core.membership import GroupView, Membership
from extender.core.nomination import Nomination
from extender.core.preempting import Preempting
from extender.core.preemption import find_preemption
from extender.core.queues import queue_problem
from extender.core.repairing import LastRepair, Repairs, unrepairable_policy
from extender.core.steering import kinds, offered_mate
from extender.grouping import Family
from extender.model.errors import FieldError
from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec
from extender.placement import (
    INCOMPLETE,
    DomainRef,
    Gang,
    Plan,
    PreemptionResult,
    Unplaceable,
    build_gang,
    incomplete,
    meets_minimum,
    plan,
)

RESERVED = "topogang: capacity reserved for a gang"
MAX_SCORE = 10


@dataclass
class GroupPlan:
    """A plan being carried out: what is reserved, what has reached the bind gate."""

    plan: Plan
    generation: int
    reserved: dict[str, str]  # pod -> node, not bound yet
    gate: Gate  # the minimum, who of it reached bind, and when the last new one did
    created: float
    touched: float  # last progress: a plan, a pod reaching bind
    # Nominations (steering.py): queued and not sent yet, so such a member may still trade its
    # node; and members kube-scheduler took on their planned node, whose nomination is moot.
    unsent: set[str] = field(default_factory=set)
    passed: set[str] = field(default_factory=set)
    sent: dict[str, str] = field(default_factory=dict)  # pod -> the node its last nomination named
    order: tuple[str, ...] = ()  # the members nominated at the last plan, in kube-scheduler's queue order
    kinds: dict[str, tuple[int, int]] | None = None  # steering.kinds of the gang, when first needed


class GangScheduler:
    def __init__(
        self,
        state: ClusterState,
        *,
        plan_ttl: float = 300.0,
        preemption_timeout: float = 60.0,
        repair_timeout: float = 300.0,
        nominate: bool = False,
    ) -> None:
        self.state = state
        self.membership = Membership(state)
        self.plan_ttl = plan_ttl
        self.preempting = Preempting(state, self.membership, timeout=preemption_timeout)
        self.repairs = Repairs(state, timeout=repair_timeout)
        # Planned members are steered with status.nominatedNodeName (kube-scheduler 1.35+ tries
        # that node first, alone), so its adaptive percentageOfNodesToScore may leave the planned
        # node out of a call; off, every call must offer it (percentageOfNodesToScore: 100).
        self.nominate = nominate
        self.plans: dict[str, GroupPlan] = {}
        self.reasons: dict[str, Reason] = {}  # group -> why it is where it is (pending, left over)
        self.domains: dict[str, Mapping[str, DomainRef]] = {}  # group -> where its last plan put each constrained scope
        self.dropped: list[tuple[str, Reason]] = []  # (pod, why): binds waiting at a gate that closed
        self._generation = 0

    # -- filter --------------------------------------------------------------------------------

    def filter(self, pod: PodInfo, nodes: Sequence[str], now: float, nominated: str | None = None) -> FilterResult:
        """NOMINATED: the pod's status.nominatedNodeName in this call (kube-scheduler tried it)."""
        if pod.key not in self.state.pods:
            if self.state.was_deleted(pod):  # or behind it: never bring a deleted pod back
                return _refuse(nodes, f"topogang: pod {pod.key} was deleted")
            self.state.upsert_pod(pod)  # the request can be ahead of our watch
        group = self.membership.group_of(pod.key)
        if group is None:
            waiting = self.membership.waiting(pod.key)
            if waiting is not None:  # it names a gang that cannot be resolved yet: not a plain pod
                return _refuse(nodes, f"topogang: {waiting}")
            return self._filter_plain(pod, nodes)
        if pod.node_name is not None:  # bound at its gate while kube-scheduler was retrying it
            if pod.node_name in nodes:
                return FilterResult([pod.node_name], group=group)
            return _refuse(nodes, f"topogang: the pod is bound to {pod.node_name} already", group)
        view = self.membership.view(group)
        if not view.valid:
            return _refuse(nodes, f"topogang: PodGroup {group} is invalid: {view.message}", group)
        if pod.key in view.waiting:
            return _refuse(nodes, f"topogang: {view.waiting[pod.key]}", group)
        blocked, _ = self._queue(view)
        if blocked is not None:
            return _refuse(nodes, f"topogang: PodGroup {group}: {blocked}", group)
        nom = self.preempting.nominations.get(group)
        if nom is not None:
            if nom.pending:
                return _refuse(nodes, f"topogang: {nom.describe()}", group)
            self.preempting.settle(group)  # the victims are gone: plan into the room they left
        underway = self.repairs.underway.get(group)
        if underway is not None:
            whole = view.built is not None and view.built.gang is not None and incomplete(view.built.gang) is None
            if underway.pending or not whole:
                return _refuse(nodes, f"topogang: {self._repairing(group)}", group)
            self.repairs.settle(group)  # the moved part is whole again: plan it into the room held
        event = None
        gp = self.plans.get(group)
        if gp is None or pod.key not in gp.reserved:
            event = self._plan(group, view, now, extend=gp is not None)
            gp = self.plans.get(group)
            if gp is None or pod.key not in gp.reserved:
                reason = self.reason_text(group, "no room for this pod beyond its gang's minimum")
                return _refuse(nodes, f"topogang: {reason}", group, event)
        return self._steer(group, gp, pod.key, nodes, now, nominated, event)

    def _steer(
        self,
        group: str,
        gp: GroupPlan,
        pod_key: str,
        nodes: Sequence[str],
        now: float,
        nominated: str | None,
        event: PlanEvent | None,
    ) -> FilterResult:
        """A planned member: its planned node, or (not offered this time) a nomination there."""
        node = gp.reserved[pod_key]
        if not self._still_fits(node) or (node not in nodes and (not self.nominate or nominated == node)):
            # Another scheduler, or kube-scheduler's own filters (all nodes are offered, or the
            # node it was nominated to failed them), took the planned node: plan the pods that
            # are not bound yet again.
            event = self._replan(group, now)
            replanned = self.plans.get(group)
            again = replanned.reserved.get(pod_key) if replanned is not None else None
            if replanned is None or again is None or (again not in nodes and (not self.nominate or again == nominated)):
                reason = self.reason_text(group, f"planned node {node} is no longer feasible")
                return _refuse(nodes, f"topogang: {reason}", group, event)
            gp, node = replanned, again
        # Only the planned node comes back. The others are not listed: kube-scheduler (1.32+)
        # records unlisted nodes as UnschedulableAndUnresolvable, which is what they are for this
        # pod, and it shows those statuses only if the pod fails, which it will not on this node.
        # Listing thousands of identical reasons cost ~1 ms and a large reply per call inside the
        # scheduling cycle. Refusals (below and in _refuse) list every node with the reason.
        wake: tuple[str, ...] = ()
        if event is not None and event.outcome in ("planned", "replanned", "extended"):
            # In kube-scheduler's queue order, so the nominations of the members it takes next land first.
            arrival = self.state.arrival
            wake = tuple(sorted((p for p in gp.reserved if p != pod_key), key=lambda p: arrival.get(p, 0)))
            if self.nominate:
                gp.unsent.update(wake)
                gp.order = wake
            if node not in nodes:
                node = self._trade(group, gp, pod_key, nodes, [p for p in gp.reserved if p not in gp.gate.arrived])
        elif node not in nodes and self.nominate and nominated is None:
            # Taken before its nomination landed (kube-scheduler outpaced the writes): a mate whose
            # nomination is not sent yet gives its node, and that nomination goes out for this one's.
            # The one kube-scheduler takes last first; lazily: the first mate offered ends the search.
            mates = (p for p in reversed(gp.order) if p in gp.unsent and p not in gp.gate.arrived)
            node = self._trade(group, gp, pod_key, nodes, mates)
        if node not in nodes:
            # Left out of kube-scheduler's sample of the nodes: nominate the pod there; its next
            # attempt tries that node first, alone.
            refused = _refuse(nodes, f"topogang: steering to its planned node {node}", group, event)
            gp.sent[pod_key] = node
            return replace(refused, wake=wake, steer=node)
        gp.unsent.discard(pod_key)
        gp.passed.add(pod_key)
        stale = gp.sent.get(pod_key, node) != node
        if stale:
            gp.sent[pod_key] = node
        return FilterResult([node], event=event, wake=wake, group=group, steer=node if stale else None)

    def _trade(self, group: str, gp: GroupPlan, pod_key: str, nodes: Sequence[str], mates: Iterable[str]) -> str:
        """POD_KEY's node was not offered: trade nodes with one of MATES, interchangeable with it,
        whose node was (steering.py); POD_KEY's node after."""
        if gp.kinds is None:
            built = self.membership.view(group).built
            if built is None or built.gang is None:
                return gp.reserved[pod_key]
            gp.kinds = kinds(built.gang)
        mate = offered_mate(pod_key, gp.reserved, gp.kinds, set(nodes), mates)
        if mate is None:
            return gp.reserved[pod_key]
        mine, theirs = gp.reserved[pod_key], gp.reserved[mate]
        gp.reserved[pod_key], gp.reserved[mate] = theirs, mine
        self.state.reserve(pod_key, theirs, self.state.pods[pod_key].requests)
        self.state.reserve(mate, mine, self.state.pods[mate].requests)
        return theirs

    def _filter_plain(self, pod: PodInfo, nodes: Sequence[str]) -> FilterResult:
        """Plain pods pass, except onto nodes where they would take a gang's reserved room."""
        reserved = self.state.reserved_nodes
        failed = {}
        if reserved:
            for node in nodes:
                if node in reserved and any(self.state.free_on(node, r) < v for r, v in pod.requests.items()):
                    failed[node] = RESERVED
        if not failed:
            return FilterResult(nodes if isinstance(nodes, list) else list(nodes))
        return FilterResult([n for n in nodes if n not in failed], failed=failed, reason=RESERVED)

    def _still_fits(self, node: str) -> bool:
        info = self.state.nodes.get(node)
        if info is None or not info.schedulable:
            return False
        return all(self.state.free_on(node, r) >= 0 for r in info.allocatable)

    # -- planning ------------------------------------------------------------------------------

    def _plan(self, group: str, view: GroupView, now: float, extend: bool) -> PlanEvent:
        """Plan the group (or, with `extend`, add the pods its plan lacks) and reserve it."""
        gp = self.plans.get(group)
        if extend and gp is not None:
            view = self.membership.view(group, assumed=gp.reserved)
        gang = view.built.gang if view.built is not None else None
        assert gang is not None, "only valid groups are planned"
        result = plan(snapshot_for(self.state, self.membership, group, gang), gang)
        if isinstance(result, Unplaceable):
            # Neither a repair nor preempting helps a gang that misses pods, nor pods beyond a
            # plan's minimum. A running gang moves a broken part of itself before it preempts.
            if result.reason.kind != INCOMPLETE and (not extend or (gp is not None and gp.gate.opened)):
                # (a plan carried out whose gang now misses pods of its minimum: a repair, not extra pods)
                found = self._repair(group, gang, now) or (None if extend else self._preempt(group, now))
                if found is not None:
                    return found
            self._why(group, result.reason)
            return PlanEvent(group, "pending", result.reason.pods, reason=result.message, attempts=result.attempts)
        new = {p: n for p, n in result.assignments.items() if gp is None or p not in gp.reserved}
        for pod_key, node in new.items():
            self.state.reserve(pod_key, node, self.state.pods[pod_key].requests)
        if gp is None:
            self._generation += 1
            gp = GroupPlan(result, self._generation, dict(new), Gate(frozenset(result.minimum)), now, now)
            self.plans[group] = gp
            outcome = "planned"
        else:
            gp.reserved.update(new)
            gp.touched = now
            outcome = "extended"
        self.domains[group] = result.domains
        self.repairs.mended(group)
        if result.unplaced:
            self._why(group, BeyondMinimum(len(result.unplaced)))
        else:
            self._why(group, None)
        return PlanEvent(
            group,
            outcome,
            len(new),
            tuple(new.values()),
            result.domains,
            attempts=result.attempts,
            levels=result.levels,
        )

    # -- repair ------------------------------------------------------------------------------------

    def _repair(self, group: str, gang: Gang, now: float) -> PlanEvent | None:
        """GROUP runs, and pods of it do not fit where it runs: move the smallest broken part whole."""
        found = self.repairs.find(group, gang, now)
        if found is None:
            return None
        self.release(group, Released(R_REPLANNING))  # a plan carried out: the repair gets a gate of its own
        self.repairs.start(group, found, now)
        self._why(group, Repairing(found.describe(), len(found.moved)))
        p = found.plan
        return PlanEvent(
            group,
            "repairing",
            len(p.assignments),
            tuple(p.assignments.values()),
            p.domains,
            reason=found.describe(),
            attempts=p.attempts,
            levels=p.levels,
            repair=found,
        )

    def _repairing(self, group: str) -> str:
        underway = self.repairs.underway[group]
        reason = Repairing(underway.repair.describe(), len(underway.pending))
        self._why(group, reason)
        return reason.render()

    def expire_repairs(self, now: float) -> list[tuple[str, list[PodInfo]]]:
        """Gangs no repair mended within the repair timeout: each with the running pods to evict
        (empty unless its workload asks to be evicted whole)."""
        out = []
        for group in self.repairs.given_up(now):
            if not self.membership.has(group):
                continue
            pods = [p for k in self.membership.members(group) if (p := self.state.pods.get(k)) is not None]
            evict, note = unrepairable_policy(pods)
            bound = [p for p in pods if p.node_name is not None and not p.terminal] if evict else []
            why = self.reasons.get(group)
            text = why.render() if why is not None and why.kind != R_REPAIRING else "the moved pods did not leave"
            self._why(group, Unrepairable(text, self.repairs.timeout, len(bound), note))
            out.append((group, bound))
        return out

    def repair_pending(self, group: str, pod: str) -> bool:
        """Whether POD must still leave for GROUP's repair under way."""
        underway = self.repairs.underway.get(group)
        return underway is not None and pod in underway.pending

    def last_repair(self, group: str) -> LastRepair | None:
        """GROUP's last repair (what moved, and when), if any."""
        return self.repairs.last.get(group)

    def note_repair(self, group: str, text: str) -> None:
        """GROUP's PodGroup status tells of a repair (made by this or an earlier leader)."""
        self.repairs.recorded[group] = text

    def last_repair_text(self, group: str) -> str:
        """The last repair of GROUP this replica made, else the one its PodGroup tells of."""
        live = self.repairs.last.get(group)
        return live.message if live is not None else self.repairs.recorded.get(group, "")

    # -- preemption --------------------------------------------------------------------------------

    def _preempt(self, group: str, now: float) -> PlanEvent | None:
        """Victims whose eviction makes room for GROUP: their room is reserved for it at once."""
        found = self.preempting.attempt(group, now)
        if not isinstance(found, Nomination):
            return None
        p = found.preemption
        self._why(group, found.reason())
        return PlanEvent(
            group,
            "preempting",
            len(p.plan.assignments),
            tuple(p.plan.assignments.values()),
            p.plan.domains,
            reason=found.describe(),
            attempts=p.plan.attempts,
            levels=p.plan.levels,
            preemption=p,
        )

    def preempt(self, pod_key: str, now: float) -> PlanEvent | None:
        """kube-scheduler found no node for POD_KEY and asks whom to preempt. For a gang member
        topogang answers for the whole gang (a preemption plan whose victims the caller evicts),
        never pod by pod; None when there is nothing to do (a plain pod, a gang planned or
        preempting already, or one that cannot be planned whatever the room)."""
        group = self.membership.group_of(pod_key)
        pod = self.state.pods.get(pod_key)
        if group is None or pod is None or pod.node_name is not None:
            return None
        if group in self.plans or group in self.preempting.nominations:
            return None
        view = self.membership.view(group)
        gang = view.built.gang if view.valid and view.built is not None else None
        if gang is None or pod_key in view.waiting or incomplete(gang) is not None:
            return None
        bound = {k for k in view.pods if (p := self.state.pods.get(k)) is not None and p.node_name}
        if bound and meets_minimum(gang, bound):
            return None  # the gang runs: pods beyond its minimum never preempt
        return self._plan(group, view, now, extend=False)

    def preemption_now(self, group: str) -> PreemptionResult:
        """What a preemption for GROUP would evict now (a dry run: nothing is held or evicted)."""
        return find_preemption(self.state, self.membership, group, exclude=self.preempting.nominations.evicting())

    def nomination(self, group: str) -> Nomination | None:
        """The preemption under way for GROUP, if any."""
        return self.preempting.nominations.get(group)

    def is_victim(self, pod_key: str) -> bool:
        """Whether POD_KEY is being evicted to make room for some gang."""
        return self.preempting.nominations.is_victim(pod_key)

    def drop_preemptions(self) -> None:
        """Give back the room held for every preempting gang (this replica stops leading)."""
        for nom in self.preempting.nominations:
            self.preempting.settle(nom.group)

    def next_generation(self) -> int:
        """A new generation number, for wake-ups that are not a new plan."""
        self._generation += 1
        return self._generation

    def take_preempted(self) -> list[str]:
        """Gangs whose victims have all gone since the last call: their members need waking."""
        return self.preempting.nominations.take_ready()

    def expire_preemptions(self, now: float) -> list[Nomination]:
        """Release the room held for gangs whose victims did not leave in time."""
        late = self.preempting.expire(now)
        timeout = self.preempting.nominations.timeout
        for nom in late:
            self._why(nom.group, PreemptionTimedOut(nom.preemption.domain, tuple(sorted(nom.pending)), timeout))
        return late

    def _replan(self, group: str, now: float) -> PlanEvent:
        self.release(group, Released(R_REPLANNING))
        view = self.membership.view(group)
        event = self._plan(group, view, now, extend=False)
        if event.outcome == "planned":
            return replace(event, outcome="replanned")
        return event

    def release(self, group: str, why: Released) -> list[str]:
        """Drop the group's plan and every reservation of its unbound pods; returns the pods that
        were waiting at the bind gate (the caller fails their bind calls)."""
        gp = self.plans.pop(group, None)
        if gp is None:
            return []
        for pod_key in gp.reserved:
            self.state.unreserve(pod_key)
        self.domains.pop(group, None)
        self._why(group, why)
        waiting = sorted(gp.gate.arrived)
        self.dropped.extend((p, why) for p in waiting)
        return waiting

    def plan_group(self, group: str, now: float) -> PlanEvent | None:
        """Plan GROUP now if it is valid and has no plan (a gang found part-bound at start)."""
        view = self.membership.view(group)
        if group in self.plans or not view.valid:
            return None
        return self._plan(group, view, now, extend=False)

    def give_up(self, group: str, why: Released) -> None:
        """Drop GROUP's plan, if any, and say why (its bound pods are being taken back)."""
        self.release(group, why)
        self._why(group, why)

    def release_all(self, why: Released) -> None:
        """Drop every plan (this replica stopped leading)."""
        for group in list(self.plans):
            self.release(group, why)

    def _why(self, group: str, reason: Reason | None) -> None:
        """Record why GROUP is where it is (None: nothing to say)."""
        if reason is None:
            self.reasons.pop(group, None)
        else:
            self.reasons[group] = reason

    def reason(self, group: str) -> Reason | None:
        """Why GROUP is pending (or runs without some pods), as data; None: nothing to say."""
        return self.reasons.get(group)

    def reason_text(self, group: str, default: str = "") -> str:
        reason = self.reasons.get(group)
        return reason.render() if reason is not None else default

    def take_dropped(self) -> list[tuple[str, Reason]]:
        """Bind calls waiting at gates that were released since the last call, and why."""
        out, self.dropped = self.dropped, []
        return out

    def generation(self, group: str) -> int:
        gp = self.plans.get(group)
        return gp.generation if gp else 0

    # -- prioritize ----------------------------------------------------------------------------

    def prioritize(self, pod: PodInfo, nodes: Sequence[str]) -> list[tuple[str, int]]:
        group = self.membership.group_of(pod.key)
        gp = self.plans.get(group) if group else None
        node = gp.reserved.get(pod.key) if gp else None
        return [(node, MAX_SCORE)] if node is not None and node in nodes else []

    # -- bind gate -----------------------------------------------------------------------------

    def bind(self, pod_key: str, node: str, now: float) -> BindDecision:
        group = self.membership.group_of(pod_key)
        if group is None:
            return BindDecision(BIND, ((pod_key, node),))
        pod = self.state.pods.get(pod_key)
        if pod is not None and pod.node_name is not None:
            # Bound by topogang when its gate opened, after this call's attempt began.
            if pod.node_name == node:
                return BindDecision(DONE)
            return BindDecision(REJECT, error=f"topogang: the pod is bound to {pod.node_name} already, not {node}")
        gp = self.plans.get(group)
        planned = gp.reserved.get(pod_key) if gp else None
        if gp is None or planned is None:
            return BindDecision(REJECT, error=f"topogang: gang {group} has no plan for this pod; it will be retried")
        if planned != node:
            return BindDecision(REJECT, error=f"topogang: the pod is planned on {planned}, not {node}")
        gp.touched = now
        if gp.gate.opened:
            return BindDecision(BIND, ((pod_key, node),))
        gp.gate.arrive(pod_key, node, now)
        if not gp.gate.complete(gp.reserved):
            return BindDecision(WAIT)
        return self._open(group, gp, now)

    def _open(self, group: str, gp: GroupPlan, now: float) -> BindDecision:
        """The whole minimum is at the gate. Its nodes are checked against the cluster as it is
        now (one may have been deleted, cordoned, gone not ready or filled by another scheduler
        while the members waited); if any fails, none binds and the gang is planned again."""
        stale = tuple(sorted({n for n in gp.gate.arrived.values() if not self._still_fits(n)}))
        if not stale:
            return BindDecision(BIND, gp.gate.open())
        self.release(group, Released(R_REPLANNING, nodes=stale))
        event = self._plan(group, self.membership.view(group), now, extend=False)
        if event.outcome == "planned":
            event = replace(event, outcome="replanned")
        error = f"topogang: {Released(R_REPLANNING, nodes=stale).render()}; planned again"
        return BindDecision(REJECT, error=error, event=event, stale=stale)

    def gate_missing(self, group: str) -> list[str]:
        """Pods of the minimum that have not reached bind yet."""
        gp = self.plans.get(group)
        return gp.gate.missing(gp.reserved) if gp is not None else []

    def gate_progress(self, group: str) -> tuple[int, int]:
        """(arrived, total) of GROUP's minimum still unbound."""
        gp = self.plans.get(group)
        return gp.gate.counts(gp.reserved) if gp is not None else (0, 0)

    def gate_silence_left(self, group: str, now: float, timeout: float) -> float | None:
        """Seconds before GROUP's gate closes for want of a new member (<= 0: due); None: no
        member is waiting at it."""
        gp = self.plans.get(group)
        return gp.gate.silence_left(now, timeout) if gp is not None else None

    def gate_timeout(self, group: str, seconds: float) -> list[str]:
        """Close GROUP's gate: no new member reached bind for SECONDS; returns the pods that
        were waiting (their plan and reservations are released)."""
        gp = self.plans.get(group)
        if gp is None or gp.gate.opened:
            return []
        arrived, total = gp.gate.counts(gp.reserved)
        return self.release(group, Released(R_BIND_TIMEOUT, arrived, total, seconds))

    def expire(self, now: float) -> dict[str, list[str]]:
        """Release plans whose minimum made no progress for `plan_ttl` seconds."""
        out = {}
        for group, gp in list(self.plans.items()):
            if not gp.gate.opened and now - gp.touched > self.plan_ttl:
                out[group] = self.release(group, Released(R_PLAN_EXPIRED, seconds=self.plan_ttl))
            elif gp.gate.opened and not gp.reserved:
                del self.plans[group]  # carried out: the bound pods now speak for the gang
        groups = set(self.membership.groups())
        for group in (set(self.reasons) | set(self.domains)) - groups:  # the gang is gone
            self._why(group, None)
            self.domains.pop(group, None)
        for nom in self.preempting.nominations:
            if nom.group not in groups:
                self.preempting.forget(nom.group)
        for group in (set(self.repairs.underway) | set(self.repairs.broken) | set(self.repairs.last)) - groups:
            self.repairs.forget(group)
        return out

    # -- what the edges ask ------------------------------------------------------------------------

    def group_of(self, pod: str) -> str | None:
        """The gang POD belongs to (None: a plain pod, or one whose gang is not resolved yet)."""
        return self.membership.group_of(pod)

    def waiting(self, pod: str) -> str | None:
        """Why POD, which names a gang, cannot join it yet (None: it is in a gang, or plain)."""
        return self.membership.waiting(pod)

    def members(self, group: str) -> list[str]:
        """The pods of GROUP."""
        return self.membership.members(group)

    def groups(self) -> list[str]:
        """The gangs some pod belongs to."""
        return self.membership.groups()

    def families(self) -> set[Family]:
        """The families that have pods (see Membership.families)."""
        return self.membership.families()

    def has_pods(self, group: str) -> bool:
        return self.membership.has(group)

    def view(self, group: str) -> GroupView:
        return self.membership.view(group)

    def pod(self, key: str) -> PodInfo | None:
        return self.state.pods.get(key)

    def podgroup(self, group: str) -> PodGroupSpec | None:
        """The PodGroup object of GROUP as read from the cluster, if it exists and is valid."""
        return self.state.podgroups.get(group)

    def podgroup_invalid(self, group: str) -> bool:
        """Whether GROUP's PodGroup object exists but cannot be read."""
        return group in self.state.invalid_podgroups

    def known_groups(self) -> set[str]:
        """Every gang with pods or a PodGroup object (valid or not)."""
        state = self.state
        return set(self.membership.groups()) | set(state.podgroups) | set(state.invalid_podgroups)

    def exists(self, group: str) -> bool:
        """Whether GROUP has pods or a PodGroup object."""
        return self.membership.has(group) or group in self.state.podgroups or self.podgroup_invalid(group)

    def watched_object(self, api_version: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A workload object as the watch last saw it."""
        return self.state.objects.get(object_key(api_version, kind, namespace, name))

    def subscribe(self, callback: Callable[[str, object], None]) -> None:
        """Be told of every change to the cluster state (kind, key)."""
        self.state.subscribe(callback)

    def reservation_count(self) -> int:
        return len(self.state.reservations)

    def reserved(self, group: str) -> Mapping[str, str]:
        """Pod -> planned node for GROUP's pods that hold a reservation."""
        gp = self.plans.get(group)
        return gp.reserved if gp is not None else {}

    def nomination_target(self, pod_key: str) -> str | None:
        """The node to nominate POD_KEY on now that its write goes out: its planned node, or None
        when it has none or kube-scheduler took it on that node meanwhile. From now on it no
        longer trades its node (steering.py)."""
        group = self.membership.group_of(pod_key)
        gp = self.plans.get(group) if group is not None else None
        if gp is None:
            return None
        gp.unsent.discard(pod_key)
        node = None if pod_key in gp.passed else gp.reserved.get(pod_key)
        if node is not None:
            gp.sent[pod_key] = node
        return node

    # -- what the cluster tells us -------------------------------------------------------------

    def observe_pod(self, pod: PodInfo) -> None:
        """A pod was added or changed (from the watch, or after our own bind)."""
        if pod.terminal or pod.deleting:
            self.forget_pod(pod.key)
            self.state.upsert_pod(pod)
            if pod.terminal:
                self.preempting.gone(pod.key)  # it takes no room any more
            return
        self.state.upsert_pod(pod)
        if pod.node_name is None or pod.key not in self.state.reservations:
            return  # nothing held for it (and no O(pods) group lookup per watch event)
        group = self.membership.group_of(pod.key)
        gp = self.plans.get(group) if group else None
        if gp is not None and pod.key in gp.reserved:
            del gp.reserved[pod.key]  # bound where planned, or elsewhere: no longer ours to hold
            gp.gate.arrived.pop(pod.key, None)
            self.state.unreserve(pod.key)

    def forget_pod(self, key: str) -> None:
        """A pod was deleted (or finished): its reservation goes; an unbound minimum cannot stand."""
        self.repairs.gone(key)
        if key not in self.state.reservations:  # every pod a plan holds is reserved
            return
        group = self.membership.group_of(key)
        gp = self.plans.get(group) if group else None
        if gp is not None and key in gp.reserved:
            if not gp.gate.opened and key in gp.gate.minimum:
                assert group is not None
                self.release(group, Released(R_MEMBER_GONE, pod=key))
            else:
                del gp.reserved[key]
                self.state.unreserve(key)

    def was_deleted(self, pod: PodInfo) -> bool:
        """Whether POD was deleted already (a request about it came late)."""
        return self.state.was_deleted(pod)

    def delete_pod(self, key: str) -> None:
        self.forget_pod(key)
        self.state.delete_pod(key)
        self.preempting.gone(key)

    # -- status --------------------------------------------------------------------------------

    def status(self, group: str) -> GroupStatus:
        """Where GROUP stands: phase, message, the reason as data, counts, domains. A PodGroup
        object that no pod joins yet has a status too (pending with 0 pods, or invalid)."""
        view = self.membership.view(group) if self.membership.has(group) else self._view_without_pods(group)
        pods = [self.state.pods[k] for k in view.pods if k in self.state.pods]
        bound = sum(1 for p in pods if p.node_name is not None)
        if not view.valid:
            return GroupStatus(group, INVALID, view.message, len(pods), 0, bound, reason=R_INVALID)
        if pods and all(p.terminal for p in pods):
            # The workload ran: its pods are done, not missing.
            succeeded = sum(1 for p in pods if p.phase == "Succeeded")
            message = f"finished: {succeeded} pod(s) succeeded, {len(pods) - succeeded} failed"
            return GroupStatus(group, FINISHED, message, len(pods), 0, bound, reason=R_FINISHED)
        gp = self.plans.get(group)
        planned = bound + (len(gp.reserved) if gp else 0)
        domains = dict(gp.plan.domains if gp else self.domains.get(group, {}))
        subgroups = tuple(self._subgroup_status(view, gp))
        blocked, queue_warning = self._queue(view)
        warnings = "; ".join([*view.warnings, *([queue_warning] if queue_warning else [])])
        gang = view.built.gang if view.built is not None else None
        bound_keys = {p.key for p in pods if p.node_name is not None}
        if gang is not None and bound_keys and meets_minimum(gang, bound_keys):
            message = f"{bound} pod(s) bound" + (f"; {self.reasons[group].render()}" if group in self.reasons else "")
            phase, reason = SCHEDULED, R_SCHEDULED
        elif gp is not None:
            missing = len([p for p in gp.gate.minimum if p in gp.reserved])
            message = f"planned; waiting for {missing} pod(s) of the minimum to bind"
            phase, reason = PENDING, R_PLANNED
        elif blocked is not None:
            message, phase, reason = f"PodGroup {group}: {blocked}", PENDING, R_QUEUE_NOT_FOUND
        elif (nom := self.preempting.nominations.get(group)) is not None:
            preempting = nom.reason()
            message, phase, reason = preempting.render(), PENDING, preempting.kind
        # What is true now (pods missing) before what last happened (why a plan was refused).
        elif missing_message := self._incomplete_message(view):
            message, phase, reason = missing_message, PENDING, R_GANG_INCOMPLETE
            if (why := self.reasons.get(group)) is not None and why.kind == R_PARTIAL_EVICTED:
                message, reason = f"{why.render()}; {missing_message}", R_PARTIAL_EVICTED
        elif group in self.reasons:
            message, phase, reason = self.reasons[group].render(), PENDING, self.reasons[group].kind
        else:
            message, phase, reason = "waiting to be planned", PENDING, R_WAITING
        if view.waiting:
            message += "; " + "; ".join(f"{k}: {why}" for k, why in sorted(view.waiting.items()))
        if warnings:
            message += f"; {warnings}"
        # A planning attempt failed: pods missing is no attempt (KAI does not try an incomplete gang).
        failed = group in self.reasons and reason == self.reasons[group].kind and reason != R_GANG_INCOMPLETE
        marked = failed and view.spec is not None and view.spec.scheduling_backoff == 1
        repaired = self.repairs.last.get(group)
        return GroupStatus(
            group,
            phase,
            message,
            len(pods),
            planned,
            bound,
            subgroups,
            domains,
            reason,
            marked,
            repaired.message if repaired else "",
        )

    def _view_without_pods(self, group: str) -> GroupView:
        """A PodGroup object no pod has joined yet, as a view with no pods."""
        spec = self.state.podgroups.get(group)
        if spec is None:
            errors = self.state.invalid_podgroups.get(group) or (
                FieldError(f"PodGroup {group}", "metadata.name", "not found"),
            )
            return GroupView(group, None, None, errors, source=f"PodGroup {group}")
        built = build_gang(spec, [], self.state.topologies)
        return GroupView(group, spec, built, built.errors, source=f"PodGroup {group}")

    def _queue(self, view: GroupView) -> tuple[str | None, str | None]:
        spec = view.spec
        if spec is None or not spec.queue:
            return None, None
        return queue_problem(spec.queue, spec.namespace, self.state.queue_apis, self.state.queues)

    def _incomplete_message(self, view: GroupView) -> str:
        gang = view.built.gang if view.built else None
        missing = incomplete(gang) if gang is not None else None
        return missing.render() if missing is not None else ""

    def _subgroup_status(self, view: GroupView, gp: GroupPlan | None) -> Iterable[SubGroupStatus]:
        gang = view.built.gang if view.built else None
        if gang is None:
            return
        reserved = gp.reserved if gp else {}
        domains = gp.plan.domains if gp else self.domains.get(view.key, {})
        for scope in gang.scopes:
            if not scope.name:
                continue
            keys = [m.key for m in scope.all_members()]
            bound = sum(1 for k in keys if (p := self.state.pods.get(k)) is not None and p.node_name)
            yield SubGroupStatus(
                scope.name,
                scope.min_member,
                len(keys),
                bound + sum(1 for k in keys if k in reserved),
                bound,
                domains.get(scope.key),
            )


def _refuse(
    nodes: Sequence[str], reason: str, group: str | None = None, event: PlanEvent | None = None
) -> FilterResult:
    """No node will do and preemption would not help: the gang as a whole is the problem."""
    return FilterResult([], unresolvable=dict.fromkeys(nodes, reason), event=event, reason=reason, group=group)
