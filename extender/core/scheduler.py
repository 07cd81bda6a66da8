"""GangScheduler: plan -> reserve -> steer -> bind, one pod call at a time.

  filter      the first call for a member of a complete gang plans the whole gang against the
              cluster (minus other gangs' reservations) and reserves every planned pod at
              once; from then on each member is steered to its planned node. Members of an
              incomplete, invalid or unplaceable gang are refused with the reason.
  prioritize  the planned node gets the top score.
  bind        the gate: the minimum's members wait until all of it has reached bind, then
              all bind together; a plan whose members do not all arrive is released.

Reservations go when a pod binds or leaves; a plan whose node stopped fitting is planned again.

This class only coordinates; each concern is a part that owns its state (kube-scheduler's
framework and Kueue's scheduler are the models):

  plans       plans.Plans        the plans being carried out and every reservation they hold
  steering    steering.Steering  each planned member to its node: nominations, trades
  gates       binding.BindGate   the bind gate: all of the minimum or none
  preempting  preempting.Preempting  victims evicted for a gang, their room held meanwhile
  defragmenting  defragmenting.Defragmenting  movable pods moved out of a waiting gang's domain
  repairs     repairing.Repairs  a broken part of a running gang moved whole
  reasons     reasons.Reasons    why each gang is where it is, as data
  lookup      lookup.Lookup      what the edges read of the cluster and its gangs
  status      status.Status      where each gang stands (read from the parts above)
  reserving   reserving.Reserving  room held for gangs that wait too long (reservations.py)
  minimums    minimums.Minimums  pods beyond a gang's minimum never keep a waiting minimum out
  evicted     evicted.Evicted    the evictions decided, remembered for `explain` (bounded)

The edges call the methods below for anything that changes more than one part, and read the
parts directly (`scheduler.lookup.pod(key)`, `scheduler.gates.progress(group)`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from extender.core.binding import BindGate
from extender.core.cluster import ClusterState
from extender.core.decisions import (
    R_MEMBER_GONE,
    R_REPLANNING,
    BeyondMinimum,
    BindDecision,
    FilterResult,
    PlanEvent,
    Released,
    Repairing,
)
from extender.core.defragmenting import Defragmenting
from extender.core.disruption import whole_only
from extender.core.evicted import Evicted
from extender.core.lookup import Lookup
from extender.core.membership import GroupView, Membership
from extender.core.minimums import Minimums
from extender.core.moves import MoveSettings
from extender.core.nomination import Nomination
from extender.core.offered import Offered
from extender.core.plans import Plans
from extender.core.preempting import Preempting
from extender.core.reasons import Reasons
from extender.core.repairing import Repairs
from extender.core.reservations import Settings
from extender.core.reserving import Reserving
from extender.core.reserving_sweep import refresh
from extender.core.standing import GroupStatus, Split
from extender.core.status import Status, queue_of
from extender.core.steering import Steering
from extender.model.pod import PodInfo
from extender.placement import (
    INCOMPLETE,
    NO_CAPACITY,
    NO_DOMAIN,
    BoolArray,
    Gang,
    Shortfall,
    Unplaceable,
    incomplete,
    meets_minimum,
)

MAX_SCORE = 10
NEW_GATE = ("planned", "replanned")  # outcomes that make a plan with a gate of its own
refuse = FilterResult.refusal


class GangScheduler:
    def __init__(
        self,
        state: ClusterState,
        *,
        plan_ttl: float = 300.0,
        preemption_timeout: float = 60.0,
        repair_timeout: float = 300.0,
        nominate: bool = False,
        reservations: Settings | None = None,
        reserve_level: str | None = None,
        bind_ahead: bool = False,
        moves: MoveSettings | None = None,
    ) -> None:
        """RESERVATIONS, RESERVE_LEVEL: who gets room held (reserving.Reserving; None: none).
        BIND_AHEAD: bind a gang whole as it is planned when nothing is left to add (BindGate.ahead).
        MOVES: defragmentation's settings (moves.MoveSettings; None: the defaults)."""
        self.state = state
        self.bind_ahead = bind_ahead
        self.membership = Membership(state)
        self.plan_ttl = plan_ttl
        self.plans = Plans(state)
        self.reasons = Reasons()
        self.steering = Steering(state, self.membership, self.plans, enabled=nominate)
        self.gates = BindGate(state, self.membership, self.plans)
        self.evicted = Evicted()
        self.preempting = Preempting(state, self.membership, timeout=preemption_timeout, evicted=self.evicted)
        self.repairs = Repairs(state, self.membership, timeout=repair_timeout, evicted=self.evicted)
        self.lookup = Lookup(state, self.membership)
        self.reserving = Reserving(state, self.membership, reservations or Settings(limit=0), reserve_level)
        self.minimums = Minimums(state, self.membership, self.plans, self.reasons, self.preempting, self.repairs)
        settings = moves or MoveSettings()
        self.defragmenting = Defragmenting(state, self.membership, self.preempting, settings, busy=self.minimums.busy)
        self._status = Status(
            state, self.membership, self.plans, self.reasons, self.preempting, self.repairs, self.reserving
        )
        # gangs a second decider placed part of, as last seen (Kubernetes' own gang plugins)
        self.splits: dict[str, Split] = {}

    # -- filter and prioritize ------------------------------------------------------------------

    def filter(self, pod: PodInfo, nodes: Sequence[str], now: float, nominated: str | None = None) -> FilterResult:
        """NOMINATED: the pod's status.nominatedNodeName in this call (kube-scheduler tried it)."""
        if pod.key not in self.state.pods:
            if self.state.was_deleted(pod):  # or behind it: never bring a deleted pod back
                return refuse(nodes, f"topogang: pod {pod.key} was deleted")
            self.state.upsert_pod(pod)  # the request can be ahead of our watch
        if pod.node_name is None and (short := self.still_short(pod.key)) is not None:
            said = PlanEvent(short[0], "pending", short[1].pods, reason=short[1].render())
            return replace(self._refuse_short(nodes, short[0], short[1], said), quick=True)
        group = self.membership.group_of(pod.key)
        if group is None:
            waiting = self.membership.waiting(pod.key)
            if waiting is not None:  # it names a gang that cannot be resolved yet: not a plain pod
                return refuse(nodes, f"topogang: {waiting}")
            if (moved_to := self.defragmenting.moves.claim(pod, now)) is not None and moved_to in nodes:
                return FilterResult([moved_to])  # it replaces a moved pod: the room held for it
            kept_out: frozenset[str] = frozenset()
            if self.reserving.current and (pod.controller is None or pod.controller.kind != "DaemonSet"):
                # (a DaemonSet's pod has one node to go to: never held out)
                kept_out = self.reserving.held_names(pod.key, self.state.pod_priority(pod), pod.runtime_bound, now)
            return self.plans.admit_plain(pod, nodes, kept_out)
        if pod.node_name is not None:  # bound at its gate while kube-scheduler was retrying it
            if pod.node_name in nodes:
                return FilterResult([pod.node_name], group=group)
            return refuse(nodes, f"topogang: the pod is bound to {pod.node_name} already", group)
        if (bound_ahead := self.gates.answer_ahead(group, pod.key, nodes)) is not None:
            return bound_ahead
        view = self.membership.view(group)
        held = self._held_back(group, view, pod.key)
        if held is not None:
            return refuse(nodes, f"topogang: {held}", group)
        event = None
        gp = self.plans.claim(group, pod, self.membership.slot)  # (it may take room held before it existed)
        if (gp is None or pod.key not in gp.reserved) and (moved := self.defragmenting.moves.take(pod, group, now)):
            gp = self.plans.adopt(group, pod, moved.node, now)  # it replaces a member moved for another gang
            event = PlanEvent(group, "extended", 1, (moved.node,), reason=f"replaces {moved.pod}: the room held for it")
        if gp is None or pod.key not in gp.reserved:
            event = self._plan(group, view, now, extend=gp is not None)
            gp = self.plans.get(group)
            if gp is None or pod.key not in gp.reserved:
                why = self.reasons.get(group)
                if isinstance(why, Shortfall) and why.kind == INCOMPLETE:
                    return self._refuse_short(nodes, group, why, event)
                reason = self.reasons.text(group, "no room for this pod beyond its gang's minimum")
                return refuse(nodes, f"topogang: {reason}", group, event)
        node = gp.reserved[pod.key]
        nodes = Offered(nodes)  # the planned node is looked for once, however often asked
        if not self.plans.still_fits(node) or self.steering.lost(node, nodes, nominated):
            # Another scheduler, or kube-scheduler's own filters (all nodes are offered, or the
            # node it was nominated to failed them), took the planned node: plan the pods that
            # are not bound yet again.
            event = self._replan(group, now)
            gp = self.plans.get(group)
            again = gp.reserved.get(pod.key) if gp is not None else None
            if gp is None or again is None or self.steering.lost(again, nodes, nominated):
                reason = self.reasons.text(group, f"planned node {node} is no longer feasible")
                return refuse(nodes, f"topogang: {reason}", group, event)
        result = self.steering.steer(group, gp, pod.key, nodes, nominated, event)
        if self.bind_ahead and event is not None and event.outcome in NEW_GATE:
            batch = self.gates.ahead(group, pod.scheduler_name, now)
            if batch:  # every planned pod binds now: none is woken or nominated to come to bind
                return replace(result, wake=(), steer=None, bind=batch)
        return result

    @staticmethod
    def _refuse_short(nodes: Sequence[str], group: str, why: Shortfall, event: PlanEvent | None) -> FilterResult:
        """A member of a gang short of pods: the count in the reason (Events, logs); for kube-scheduler's
        condition a text that does not change with it, or each retry would cost a status write."""
        refused = refuse(nodes, f"topogang: {why.render()}", group, event)
        return replace(refused, unresolvable=dict.fromkeys(nodes, f"topogang: {why.render_steady()}"))

    def still_short(self, pod_key: str) -> tuple[str, Shortfall] | None:
        """POD_KEY's gang if still short of pods, from its count alone (Membership.still_short):
        planning's refusal without building the gang per member. None: ask the whole question."""
        found = self.membership.still_short(pod_key)
        if found is None:
            return None
        group, present, needed = found
        why = Shortfall(INCOMPLETE, f"PodGroup {group}", needed, present=present)
        self.reasons.record(group, why)
        return group, why

    def _held_back(self, group: str, view: GroupView, pod_key: str) -> str | None:
        """Why GROUP's member POD_KEY cannot be planned now (None: it can). A preemption whose
        victims are gone, or a repair whose moved part is whole again, gives back its room here,
        just before the gang is planned into it."""
        if not view.valid:
            return f"PodGroup {group} is invalid: {view.message}"
        if pod_key in view.waiting:
            return view.waiting[pod_key]
        blocked, _ = queue_of(self.state, view)
        if blocked is not None:
            return f"PodGroup {group}: {blocked}"
        nom = self.preempting.nomination(group)
        if nom is not None:
            if nom.pending:
                return nom.describe()
            self.preempting.settle(group)
        underway = self.repairs.underway.get(group)
        if underway is not None:
            whole = view.built is not None and view.built.gang is not None and incomplete(view.built.gang) is None
            if underway.pending or not whole:
                reason = self.repairs.reason(group)
                self.reasons.record(group, reason)
                return reason.render()
            self.repairs.settle(group)
        return None

    def prioritize(self, pod: PodInfo, nodes: Sequence[str]) -> list[tuple[str, int]]:
        gp = self.plans.get(self.membership.group_of(pod.key))
        node = gp.reserved.get(pod.key) if gp else None
        return [(node, MAX_SCORE)] if node is not None and node in nodes else []

    def nomination_target(self, pod_key: str) -> str | None:
        """The node to nominate POD_KEY on now that its write goes out (Steering.target)."""
        return self.steering.target(self.membership.group_of(pod_key), pod_key)

    def reserved(self, group: str) -> Mapping[str, str]:
        """Pod -> planned node for GROUP's pods that hold a reservation."""
        return self.plans.reserved(group)

    # -- planning ------------------------------------------------------------------------------

    def _plan(self, group: str, view: GroupView, now: float, extend: bool) -> PlanEvent:
        """Plan the group (or, with `extend`, add the pods its plan lacks) and reserve it."""
        gp = self.plans.get(group)
        if extend and gp is not None:
            view = self.membership.view(group, assumed={**gp.reserved, **gp.expected})
        gang = view.built.gang if view.built is not None else None
        assert gang is not None, "only valid groups are planned"
        held = self.held_from(group, view, now)
        assumed = gp.reserved if extend and gp is not None else None
        result, first = self.minimums.place(group, view.priority, gang, held, assumed, self.held_from, now)
        if isinstance(result, Unplaceable):
            # Neither a repair nor preempting helps a gang that misses pods, nor pods beyond a
            # plan's minimum. A running gang moves a broken part of itself before it preempts.
            if result.reason.kind != INCOMPLETE and (not extend or (gp is not None and gp.gate.opened)):
                # (a plan carried out whose gang now misses pods of its minimum: a repair, not extra pods)
                found = self._repair(group, gang, now) or (None if extend else self._make_room(group, now))
                if found is not None:
                    return found
            why = result.reason if extend else self.preempting.blocked(group, result.reason)
            if not extend:
                why = self.defragmenting.blocked(group, why)
            if not extend and result.reason.kind in (NO_DOMAIN, NO_CAPACITY):
                # it waits for room (a reservation may hold some), unless it fits not even with nothing running
                why = self.reserving.waiting(group, now, gang) or why
            self.reasons.record(group, why)
            if result.reason.kind == INCOMPLETE and result.reason.scope == f"PodGroup {group}" and not view.waiting:
                self.membership.short(group, result.reason.pods)  # its next members: counted, not built
            return PlanEvent.refused(group, why, result.attempts)
        self.reserving.started(group)  # (an overdue gang is spared from work that is not)
        new, early, outcome = self.plans.hold(group, result, now, view.expected)  # early: for pods not created yet
        self.repairs.mended(group)
        self.reasons.record(group, BeyondMinimum(len(result.unplaced), first.waiting) if result.unplaced else None)
        return PlanEvent.placed(group, outcome, new, result, first.yielded, first.waiting, first.given_back, early)

    def held_from(self, group: str, view: GroupView, now: float) -> BoolArray | None:
        """The nodes reservations hold from GROUP (its runtime bound: the longest of its pods',
        none when one has none)."""
        if not self.reserving.current:  # the common case: nothing held, no walk over the gang's pods
            return None
        bounds = [p.runtime_bound for k in view.pods if (p := self.state.pods.get(k)) is not None]
        bound = None if not bounds or None in bounds else max(b for b in bounds if b is not None)
        return self.reserving.held_from(group, view.priority, bound, now)

    def refresh_reservations(self, now: float, wall: float | None) -> tuple[list[str], list[str]]:
        """Who holds room where (the sweep): (gangs given a reservation, gangs whose reservation
        went). WALL: the wall clock at NOW, for pods' start times and estimated starts (None: none)."""
        return refresh(self, now, wall)

    def _replan(self, group: str, now: float, why: Released | None = None) -> PlanEvent:
        self._release(group, why or Released(R_REPLANNING))
        event = self._plan(group, self.membership.view(group), now, extend=False)
        return replace(event, outcome="replanned") if event.outcome == "planned" else event

    def _repair(self, group: str, gang: Gang, now: float) -> PlanEvent | None:
        """GROUP runs, and pods of it do not fit where it runs: move the smallest broken part whole."""
        whole = whole_only(self.membership.view(group).spec)
        if (found := self.repairs.find(group, gang, now, whole_only=whole)) is None:
            return None
        self._release(group, Released(R_REPLANNING))  # a plan carried out: the repair gets a gate of its own
        self.repairs.start(group, found, now)
        self.reserving.placed(group)
        self.reasons.record(group, Repairing(found.describe(), len(found.moved)))
        return PlanEvent.of(group, "repairing", found.plan, found.describe(), repair=found)

    def _make_room(self, group: str, now: float) -> PlanEvent | None:
        """Movable pods moved out of a domain for GROUP, else lower-priority victims evicted: the
        room is reserved for it at once (a moved pod keeps running, so moves come first). No
        victim in room reservations keep from it, nor a gang that started overdue (unless it is
        overdue itself)."""
        found = self.defragmenting.attempt(group, now)
        outcome = "defragmenting"
        if not isinstance(found, Nomination):
            held, spared = self.held_from(group, self.membership.view(group), now), self.reserving.waits.spared(group)
            found, outcome = self.preempting.attempt(group, now, held, spared), "preempting"
        if not isinstance(found, Nomination):
            return None
        self.reserving.placed(group)
        self.reasons.record(group, found.reason())
        return PlanEvent.of(group, outcome, found.preemption.plan, found.describe(), preemption=found.preemption)

    def preempt(self, pod_key: str, now: float) -> PlanEvent | None:
        """kube-scheduler found no node for POD_KEY and asks whom to preempt. For a gang member
        topogang answers for the whole gang (a preemption plan whose victims the caller evicts),
        never pod by pod; None when there is nothing to do (a plain pod, a gang planned or
        preempting already, or one that cannot be planned whatever the room)."""
        group = self.membership.group_of(pod_key)
        pod = self.state.pods.get(pod_key)
        if group is None or pod is None or pod.node_name is not None:
            return None
        if group in self.plans or self.preempting.nomination(group) is not None:
            return None
        view = self.membership.view(group)
        gang = view.built.gang if view.valid and view.built is not None else None
        if gang is None or pod_key in view.waiting or incomplete(gang) is not None:
            return None
        bound = {k for k in view.pods if (p := self.state.pods.get(k)) is not None and p.node_name}
        if bound and meets_minimum(gang, bound):
            return None  # the gang runs: pods beyond its minimum never preempt
        return self._plan(group, view, now, extend=False)

    def plan_group(self, group: str, now: float) -> PlanEvent | None:
        """Plan GROUP now if it is valid and has no plan (a gang found part-bound at start)."""
        view = self.membership.view(group)
        if group in self.plans or not view.valid:
            return None
        return self._plan(group, view, now, extend=False)

    # -- the bind gate and releases ------------------------------------------------------------

    def bind(self, pod_key: str, node: str, now: float) -> BindDecision:
        decision = self.gates.arrive(pod_key, node, now)
        if not decision.stale:
            return decision
        # The whole minimum is at the gate, but planned nodes stopped fitting while the members
        # waited: none binds, and the gang is planned again in this call.
        group = self.membership.group_of(pod_key)
        assert group is not None
        why = Released(R_REPLANNING, nodes=decision.stale)
        event = self._replan(group, now, why)
        return replace(decision, error=f"topogang: {why.render()}; planned again", event=event)

    def gate_timeout(self, group: str, seconds: float) -> list[str]:
        """Close GROUP's gate (no new member for SECONDS); the pods that were waiting."""
        return self._release(group, why) if (why := self.gates.closing(group, seconds)) is not None else []

    def _release(self, group: str, why: Released) -> list[str]:
        """Drop the group's plan and every reservation of its unbound pods; returns the pods that
        were waiting at the bind gate (the caller fails their bind calls)."""
        gp = self.plans.release(group)
        if gp is None:
            return []
        self.steering.forget(group)
        self.reasons.record(group, why)
        waiting = sorted(gp.gate.arrived)
        self.gates.drop(waiting, why)
        return waiting

    def give_up(self, group: str, why: Released) -> None:
        """Drop GROUP's plan, if any, and say why (its bound pods are being taken back)."""
        self._release(group, why)
        self.reasons.record(group, why)

    def step_down(self, why: Released) -> None:
        """This replica stopped leading: drop every plan, nomination, repair and held room."""
        for group in self.plans:
            self._release(group, why)
        self.preempting.drop_all()
        self.defragmenting.drop_all()
        self.repairs.drop_all()
        self.reserving.drop_all()

    # -- the sweep -----------------------------------------------------------------------------

    def expire(self, now: float) -> dict[str, list[str]]:
        """Release plans that made no progress for `plan_ttl` seconds (Plans.stalled); forget
        what is kept about gangs that are gone."""
        out = {group: self._release(group, why) for group, why in self.plans.stalled(now, self.plan_ttl).items()}
        groups = set(self.membership.groups())
        for group in self.plans.sweep(groups):
            self.steering.forget(group)
        self.reasons.sweep(groups)
        self.preempting.sweep(groups)
        self.defragmenting.sweep(groups)
        self.repairs.sweep(groups)
        self.reserving.sweep(groups)
        self.minimums.sweep(groups)
        for group in set(self.splits) - groups:
            del self.splits[group]
        return out

    def expire_repairs(self, now: float) -> list[tuple[str, list[PodInfo]]]:
        """Gangs no repair mended within the repair timeout: each with the running pods to evict
        (empty unless its workload asks to be evicted whole)."""
        out = []
        for group in self.repairs.given_up(now, self.reasons):
            if not self.membership.has(group):
                continue
            pods = [p for k in self.membership.members(group) if (p := self.state.pods.get(k)) is not None]
            spec = self.membership.view(group).spec
            annotations = spec.annotations if spec else None
            why, bound = self.repairs.verdict(
                pods, self.reasons.get(group), annotations, now, whole_only=whole_only(spec)
            )
            self.reasons.record(group, why)
            out.append((group, bound))
        return out

    def expire_preemptions(self, now: float) -> list[Nomination]:
        """Release the room held for gangs whose victims did not leave in time."""
        late = self.preempting.expire(now)
        for nom in late:
            self.reasons.record(nom.group, nom.timed_out(self.preempting.nominations.timeout))
        return late

    # -- what the cluster tells us -------------------------------------------------------------

    def observe_pod(self, pod: PodInfo, posted: bool = False) -> None:
        """A pod was added or changed: from the watch, or (POSTED) bound by topogang's own Binding."""
        pod = self.state.posted.seen(pod, self.state.pods.get(pod.key), posted)
        if pod.terminal or pod.deleting:
            self.forget_pod(pod.key)
            self.state.upsert_pod(pod)
            if pod.terminal:
                self.preempting.gone(pod.key)  # it takes no room any more
            return
        self.state.upsert_pod(pod)
        if pod.node_name is None or pod.key not in self.state.reservations:
            return  # nothing held for it (and no O(pods) group lookup per watch event)
        if self.gates.plain_bound(pod.key):
            return  # a plain pod's Binding landed: it counts as bound now
        if self.defragmenting.moves.placed(pod.key) is not None:
            return  # a moved pod's replacement bound: its new room is its own now
        group = self.plans.holder(pod.key)
        gp = self.plans.get(group)
        if group is not None and gp is not None and pod.key in gp.reserved:
            if gp.reserved[pod.key] != pod.node_name:  # another decider placed it
                self.splits[group] = Split(pod.key, pod.node_name, gp.reserved[pod.key])
            self.plans.let_go(gp, pod.key, bound=True)  # bound where planned, or elsewhere: no longer ours to hold

    def forget_pod(self, key: str) -> None:
        """A pod was deleted (or finished): its reservation goes; an unbound minimum cannot stand."""
        self.repairs.gone(key)
        if key not in self.state.reservations:  # every pod a plan holds is reserved
            return
        if self.gates.plain_bound(key):
            return
        if self.defragmenting.moves.placed(key) is not None:
            return  # a moved pod's replacement left before binding: its held room goes
        group = self.plans.holder(key)  # (its gang may no longer resolve: its PodGroup went first)
        gp = self.plans.get(group)
        if group is not None and gp is not None and key in gp.reserved:
            if not gp.gate.opened and key in gp.gate.minimum:
                self._release(group, Released(R_MEMBER_GONE, pod=key))
            else:
                self.plans.let_go(gp, key)

    def delete_pod(self, key: str) -> None:
        self.forget_pod(key)
        self.state.delete_pod(key)
        self.preempting.gone(key)

    def status(self, group: str) -> GroupStatus:
        """Where GROUP stands: phase, the reason as data, counts, domains (status.Status)."""
        status = self._status.of(group)
        split = self.splits.get(group)
        return status if split is None else replace(status, split=split)
