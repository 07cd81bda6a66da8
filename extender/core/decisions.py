"""The values GangScheduler returns: what to answer kube-scheduler, and what happened.

Outcomes are data; the server renders them to the extender wire types and log lines, the
simulator to its tables. `PlanEvent` is the one record of every placement decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from extender.core.waits import Expected, Overdue, ReservedRoom
from extender.placement import (
    INCOMPLETE,
    NO_CAPACITY,
    NO_DOMAIN,
    SEARCH_LIMIT,
    DomainRef,
    Overrun,
    Plan,
    Preemption,
    Repair,
    Shortfall,
)

# Phases of a group (PodGroup status.phase).
PENDING, SCHEDULED, INVALID, FINISHED = "Pending", "Scheduled", "Invalid", "Finished"

# Why a group is in its phase: the `reason` of its PodGroup conditions. A plan that failed gives
# its Shortfall kind (extender.placement.reasons: NoDomain, NoCapacity, GangIncomplete,
# SearchLimit); the rest are decided here. UNSCHEDULABLE_REASONS say the gang cannot run now.
R_SCHEDULED = "Scheduled"  # the minimum is bound
R_FINISHED = "Finished"  # every pod ran to completion (succeeded or failed)
R_PLANNED = "Planned"  # planned and reserved; waiting for the minimum to bind
R_WAITING = "Waiting"  # complete, not planned yet (no member has been filtered)
R_INVALID = "Invalid"  # the PodGroup (or the workload's annotations) cannot be used
R_GANG_INCOMPLETE = INCOMPLETE  # fewer pods exist than the minimum tree needs
R_BIND_TIMEOUT = "BindTimeout"  # the bind gate closed before the minimum arrived; plan released
R_PLAN_EXPIRED = "PlanExpired"  # the plan made no progress for its lifetime (opened or not); released
R_MEMBER_GONE = "MemberGone"  # a pod of the minimum went away before binding; plan released
R_REPLANNING = "Replanning"  # a planned node stopped fitting; planned again
R_BEYOND_MINIMUM = "BeyondMinimumUnplaced"  # pods beyond the minimum do not fit (the gang runs)
R_NOT_LEADER = "NotLeader"  # this replica lost leadership; the new leader plans again
R_QUEUE_NOT_FOUND = "QueueNotFound"  # spec.queue names a queue the cluster does not have
R_PREEMPTING = "Preempting"  # lower-priority victims are being evicted; their room is held for the gang
R_PREEMPTION_TIMEOUT = "PreemptionTimeout"  # the victims did not leave in time; the room was released
R_DISRUPTION_BUDGET = "DisruptionBudget"  # only victims beyond what PodDisruptionBudgets allow would help
R_PARTIAL_EVICTED = "PartialGangEvicted"  # found part-bound at start, not completed in time; bound pods evicted
R_REPAIRING = "Repairing"  # a broken part of a running gang is moving whole; its room is held
R_UNREPAIRABLE = "Unrepairable"  # a running gang lost pods and no part of it could move in time
UNSCHEDULABLE_REASONS = frozenset(
    {
        R_INVALID,
        R_GANG_INCOMPLETE,
        NO_DOMAIN,
        NO_CAPACITY,
        SEARCH_LIMIT,
        R_BIND_TIMEOUT,
        R_PLAN_EXPIRED,
        R_MEMBER_GONE,
        R_QUEUE_NOT_FOUND,
        R_PREEMPTION_TIMEOUT,
        R_DISRUPTION_BUDGET,
        R_PARTIAL_EVICTED,
        R_UNREPAIRABLE,
    }
)


@dataclass(frozen=True)
class Released:
    """Why a group's plan was dropped, as data."""

    kind: str  # R_REPLANNING, R_BIND_TIMEOUT, R_PLAN_EXPIRED, R_MEMBER_GONE, R_NOT_LEADER, R_PARTIAL_EVICTED
    arrived: int = 0  # R_BIND_TIMEOUT: pods of the minimum that reached bind...
    total: int = 0  # ... of this many; R_PARTIAL_EVICTED: the bound pods evicted
    seconds: float = 0.0  # R_BIND_TIMEOUT, R_PLAN_EXPIRED, R_PARTIAL_EVICTED: the time they had
    pod: str = ""  # R_MEMBER_GONE: the pod that went away
    nodes: tuple[str, ...] = ()  # R_REPLANNING: the planned nodes that stopped fitting, when known
    unbound: int = 0  # R_PLAN_EXPIRED after its gate opened: the planned pods that never bound

    def render(self) -> str:
        if self.kind == R_BIND_TIMEOUT:
            return (
                f"bind gate timed out: {self.arrived}/{self.total} pods of the minimum reached bind,"
                f" and none more for {self.seconds:g}s"
            )
        if self.kind == R_PLAN_EXPIRED and self.unbound:
            return (
                f"plan expired: no pod of it bound for {self.seconds:g}s; the room held for its"
                f" {self.unbound} unbound pod(s) was released"
            )
        if self.kind == R_PLAN_EXPIRED:
            return f"plan expired after {self.seconds:g}s without all pods binding"
        if self.kind == R_MEMBER_GONE:
            return f"pod {self.pod} of the minimum went away before binding"
        if self.kind == R_PARTIAL_EVICTED:
            return (
                f"evicted {self.total} bound pod(s): the gang was found below its minimum after a restart"
                f" and the rest could not be placed within {self.seconds:g}s"
            )
        if self.kind == R_NOT_LEADER:
            return "this replica is no longer the leader"
        if self.nodes:
            shown = ", ".join(self.nodes[:5]) + (f" and {len(self.nodes) - 5} more" if len(self.nodes) > 5 else "")
            return f"re-planning: planned node(s) {shown} no longer fit (deleted, cordoned, not ready or full)"
        return "re-planning: a planned node no longer fits"


@dataclass(frozen=True)
class BeyondMinimum:
    """The gang runs, but some pods beyond its minimum do not fit in its domains."""

    pods: int
    kind: str = R_BEYOND_MINIMUM

    def render(self) -> str:
        return f"{self.pods} pod(s) beyond the minimum do not fit in the gang's domains"


@dataclass(frozen=True)
class Preempting:
    """Victims are being evicted for the gang; their room is held for it meanwhile."""

    domain: DomainRef
    victims: tuple[str, ...]  # workloads evicted whole
    elastic: tuple[str, ...]  # gangs losing pods beyond their minimum
    alone: int  # those pods
    top_priority: int
    pods: int  # victim pods in all
    gone: int  # of them, gone already
    kind: str = R_PREEMPTING

    @classmethod
    def of(cls, p: Preemption, gone: int) -> Preempting:
        alone = sum(len(v) for v in p.elastic.values())
        return cls(p.domain, p.victims, tuple(sorted(p.elastic)), alone, p.cost.top_priority, len(p.pods), gone)

    def render(self) -> str:
        shown = ", ".join(self.victims[:5]) + (f" and {len(self.victims) - 5} more" if len(self.victims) > 5 else "")
        parts = [f"{len(self.victims)} workload(s) ({shown})"] if self.victims else []
        if self.alone:
            parts.append(f"{self.alone} elastic pod(s) of {', '.join(self.elastic)}")
        return (
            f"preempting in {self.domain}: evicting {' and '.join(parts) or 'nothing'}, priority <= "
            f"{self.top_priority}; {self.gone}/{self.pods} victim pods gone"
        )


@dataclass(frozen=True)
class PreemptionTimedOut:
    """The victims did not all leave in time: the room held for the gang was released."""

    domain: DomainRef
    pending: tuple[str, ...]  # victim pods still there
    seconds: float
    kind: str = R_PREEMPTION_TIMEOUT

    def render(self) -> str:
        n = len(self.pending)
        shown = ", ".join(self.pending[:5]) + (f" and {n - 5} more" if n > 5 else "")
        return (
            f"preemption timed out: {n} victim pod(s) did not leave within {self.seconds:g}s ({shown}); "
            f"the room held in {self.domain} was released"
        )


@dataclass(frozen=True)
class BudgetBlocked:
    """The gang does not fit, and every victim set that would make room evicts pods beyond what
    PodDisruptionBudgets allow (the Eviction API would refuse them): nothing is evicted, and the
    search runs again when a budget changes."""

    shortfall: Shortfall  # why it does not fit as the cluster is
    overruns: tuple[Overrun, ...]  # what the cheapest victim set would overrun
    kind: str = R_DISRUPTION_BUDGET

    def refusal(self) -> str:
        shown = ", ".join(o.render() for o in self.overruns[:5])
        more = f" and {len(self.overruns) - 5} more" if len(self.overruns) > 5 else ""
        return f"preempting would overrun {shown}{more}: nothing is evicted until a PodDisruptionBudget allows it"

    def render(self) -> str:
        return f"{self.shortfall.render()}; {self.refusal()}"


@dataclass(frozen=True)
class Repairing:
    """A broken part of the running gang moves whole: its running pods are being evicted, the
    room where it goes is held."""

    what: str  # Repair.describe()
    leaving: int  # moved pods not gone yet
    kind: str = R_REPAIRING

    def render(self) -> str:
        left = (
            f"; {self.leaving} pod(s) still leaving" if self.leaving else "; waiting for the workload to recreate them"
        )
        return f"repairing: {self.what}{left}"


@dataclass(frozen=True)
class Unrepairable:
    """The running gang lost pods whose replacements fit nowhere, and no part of it could move."""

    why: str  # what the last plan said
    seconds: float
    evicted: int  # bound pods evicted because the workload asks for it (0: it keeps running)
    note: str = ""  # a complaint about the workload's policy annotation
    kind: str = R_UNREPAIRABLE

    def render(self) -> str:
        then = (
            f"; its {self.evicted} running pod(s) are evicted so that it can be placed again whole"
            if self.evicted
            else ""
        )
        note = f"; {self.note}" if self.note else ""
        return f"no part of the gang could be repaired within {self.seconds:g}s: {self.why}{then}{note}"


# Why a group is where it is: a plan refused (Shortfall), a plan dropped, pods left over, a
# preemption or a repair under way or given up.
Reason = (
    Shortfall | Released | BeyondMinimum | Preempting | PreemptionTimedOut | BudgetBlocked | Repairing | Unrepairable
)


@dataclass(frozen=True)
class FilterResult:
    nodes: list[str]  # the nodes that pass: always a subset of the names given to filter
    failed: dict[str, str] = field(default_factory=dict)  # node -> reason; preemption may help
    unresolvable: dict[str, str] = field(default_factory=dict)  # node -> reason; it would not
    event: PlanEvent | None = None  # a plan made (or refused) during this call
    wake: tuple[str, ...] = ()  # pods to requeue now: they have a planned node waiting
    reason: str = ""  # why the nodes left out were left out (refusals give every node one reason)
    group: str | None = None  # the pod's gang (None: a plain pod)
    # Nominate the pod on this node: its planned one, not offered this time (the pod is refused);
    # or, with `nodes`, the node it passed on when a nomination elsewhere was written before it
    # traded (a stale one would count against that node in kube-scheduler's view).
    steer: str | None = None
    # The gang was just planned and is bound ahead: (pod, node) for every planned pod, to bind now.
    bind: tuple[tuple[str, str], ...] = ()
    # Answered from a count of the gang's pods (still short of its minimum), the gang not built:
    # the caller reads no more of it than the refusal says (Membership.still_short).
    quick: bool = False

    @classmethod
    def refusal(
        cls, nodes: Sequence[str], reason: str, group: str | None = None, event: PlanEvent | None = None
    ) -> FilterResult:
        """No node will do and preemption would not help: the gang as a whole is the problem."""
        return cls([], unresolvable=dict.fromkeys(nodes, reason), event=event, reason=reason, group=group)


@dataclass(frozen=True)
class BindDecision:
    """What to do with one bind call at the gang's bind gate."""

    action: str  # BIND (these pods now), WAIT (hold this call), REJECT (fail this call), DONE (bound already)
    bind: tuple[tuple[str, str], ...] = ()  # (pod, node) to bind now, this call's pod included
    error: str = ""
    event: PlanEvent | None = None  # a plan made when the gate found a planned node gone
    stale: tuple[str, ...] = ()  # the planned nodes that no longer fit when the gate opened


BIND, WAIT, REJECT, DONE = "bind", "wait", "reject", "done"


@dataclass(frozen=True)
class PlanEvent:
    """One placement decision: the canonical log line of topogang."""

    group: str
    outcome: str  # "planned", "replanned", "extended", "pending", "preempting", "repairing", "invalid"
    pods: int  # pods placed by this decision (or needed, when pending)
    nodes: tuple[str, ...] = ()
    domains: Mapping[str, DomainRef] = field(default_factory=dict)  # constrained scope (Scope.key) -> domain
    reason: str = ""
    attempts: int = 0
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # level -> domains used
    preemption: Preemption | None = None  # outcome "preempting": the victims and the room they free
    repair: Repair | None = None  # outcome "repairing": the scopes moved and the pods evicted for it
    overruns: tuple[Overrun, ...] = ()  # outcome "pending": the budgets that keep it from preempting

    @classmethod
    def refused(cls, group: str, why: Shortfall | BudgetBlocked, attempts: int) -> PlanEvent:
        """A plan refused: the pods it needed, and why (with the budgets that keep it from preempting)."""
        shortfall, overruns = (why.shortfall, why.overruns) if isinstance(why, BudgetBlocked) else (why, ())
        return cls(group, "pending", shortfall.pods, reason=why.render(), attempts=attempts, overruns=overruns)

    @classmethod
    def of(
        cls,
        group: str,
        outcome: str,
        p: Plan,
        reason: str = "",
        preemption: Preemption | None = None,
        repair: Repair | None = None,
    ) -> PlanEvent:
        """A decision that placed every pod of plan P (a repair, a preemption)."""
        pods, nodes = len(p.assignments), tuple(p.assignments.values())
        return cls(group, outcome, pods, nodes, p.domains, reason, p.attempts, p.levels, preemption, repair)

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {"group": self.group, "outcome": self.outcome, "pods": self.pods}
        if self.nodes:
            out["nodes"] = sorted(set(self.nodes))
        if self.domains:
            out["domains"] = {scope: str(domain) for scope, domain in self.domains.items()}
        if self.levels:
            out["levels"] = {level: list(doms) for level, doms in self.levels.items()}
        if self.reason:
            out["reason"] = self.reason
        if self.attempts:
            out["domains_tried"] = self.attempts
        if self.preemption is not None:
            p = self.preemption
            out["preemption"] = {
                "domain": str(p.domain),
                "victims": list(p.victims),
                "elastic": {k: len(v) for k, v in p.elastic.items()},
                "victim_pods": len(p.pods),
                "top_priority": p.cost.top_priority,
                "plans": p.plans,
            }
        if self.overruns:
            out["disruption_budgets"] = {o.budget: {"allowed": o.allowed, "over": o.over} for o in self.overruns}
        if self.repair is not None:
            r = self.repair
            out["repair"] = {
                "scopes": list(r.scopes.values()),
                "from": {k: str(d) for k, d in r.held.items()},
                "to": {k: str(r.plan.domains[k]) for k in r.scopes if k in r.plan.domains},
                "evicted": list(r.moved),
            }
        return out


@dataclass(frozen=True)
class SubGroupStatus:
    name: str
    min_member: int
    pods: int  # pods that exist
    planned: int  # pods with a planned node (reserved or bound)
    bound: int
    domain: DomainRef | None = None


@dataclass(frozen=True)
class Finished:
    """Every pod of the gang ran to completion."""

    succeeded: int
    failed: int

    def render(self) -> str:
        return f"finished: {self.succeeded} pod(s) succeeded, {self.failed} failed"


@dataclass(frozen=True)
class Bound:
    """The gang's minimum is bound: it runs."""

    pods: int

    def render(self) -> str:
        return f"{self.pods} pod(s) bound"


@dataclass(frozen=True)
class Planned:
    """Planned and reserved; waiting for the rest of the minimum to bind."""

    missing: int  # pods of the minimum not bound yet

    def render(self) -> str:
        return f"planned; waiting for {self.missing} pod(s) of the minimum to bind"


@dataclass(frozen=True)
class QueueBlocked:
    """spec.queue names a queue the cluster does not have."""

    group: str
    problem: str  # queues.queue_problem's first answer

    def render(self) -> str:
        return f"PodGroup {self.group}: {self.problem}"


@dataclass(frozen=True)
class NotPlanned:
    """Complete, and no member has been filtered yet (`explain` says more: it can plan now)."""

    def render(self) -> str:
        return "waiting to be planned"


@dataclass(frozen=True)
class Headline:
    """A sentence an edge composed itself, in place of what the core said (`explain`'s dry run)."""

    text: str

    def render(self) -> str:
        return self.text


@dataclass(frozen=True)
class Split:
    """A member of a gang bound where topogang did not plan it: a second decider (Kubernetes'
    own gang plugins in another profile or scheduler, a manual binding) placed part of the gang."""

    pod: str
    node: str
    planned: str

    def render(self) -> str:
        return (
            f"gang split between two deciders: pod {self.pod} was bound to node {self.node} by another"
            f" scheduler, not to its planned node {self.planned} (turn Kubernetes' GangScheduling and"
            " TopologyPlacementGenerator plugins off in the profiles whose gangs topogang decides)"
        )


# What a status message says, in order: where the gang stands, then what last happened to it.
Said = Reason | Finished | Bound | Planned | QueueBlocked | NotPlanned | Headline | ReservedRoom | Overdue | Expected


@dataclass(frozen=True)
class GroupStatus:
    """Where a gang stands, as data; `message` is composed from it when an edge reads it."""

    key: str
    phase: str
    detail: str = ""  # text made elsewhere (an invalid object's field errors); it opens the message
    pods: int = 0
    planned: int = 0
    bound: int = 0
    minimum: int = 0  # pods its minimum tree needs at the least (0: elastic, or Invalid)
    subgroups: tuple[SubGroupStatus, ...] = ()
    domains: Mapping[str, DomainRef] = field(default_factory=dict)  # constrained scope (Scope.key) -> domain
    reason: str = ""  # one of the R_* reasons above, or a Shortfall kind
    # PodGroup spec.schedulingBackoff 1 (KAI's hierarchical PodGroup design): a planning attempt failed, so the gang is
    # marked unschedulable on the node pool; -1 (or unset) never marks it.
    node_pool_unschedulable: bool = False
    last_repair: str = ""  # what the gang's last repair moved, from where to where
    last_eviction: str = ""  # what evicted its pods last (preempted, given up), kept for its status
    said: tuple[Said, ...] = ()  # what the message says, in order
    waiting: tuple[tuple[str, str], ...] = ()  # (pod, why) of pods waiting outside the gang, sorted
    warnings: tuple[str, ...] = ()  # the grouper's, placement's and the queue's warnings
    split: Split | None = None  # a member another decider bound elsewhere
    reservation: ReservedRoom | None = None  # room held for it while it waits
    overdue: Overdue | None = None  # it has waited past its maximum wait
    expected: Expected | None = None  # when it is expected to start, while it waits

    @property
    def message(self) -> str:
        parts = [self.detail] if self.detail else []
        if self.split is not None:
            parts.append(self.split.render())
        parts += [s.render() for s in self.said]
        if self.waiting:
            parts.append("; ".join(f"{pod}: {why}" for pod, why in self.waiting))
        if warnings := "; ".join(self.warnings):
            parts.append(warnings)
        return "; ".join(parts)

    @property
    def unschedulable(self) -> bool:
        return self.phase == INVALID or (self.phase == PENDING and self.reason in UNSCHEDULABLE_REASONS)
