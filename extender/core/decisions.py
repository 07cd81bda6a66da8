"""The values GangScheduler returns: what to answer kube-scheduler, and what happened.

Outcomes are data; the server renders them to the extender wire types and log lines, the
simulator to its tables. `PlanEvent` is the one record of every placement decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from extender.core.decisions_room import (
    R_DISRUPTION_BUDGET,
    R_PREEMPTION_TIMEOUT,
    BudgetBlocked,
    Preempting,
    PreemptionTimedOut,
)
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
# (R_PREEMPTING, R_DEFRAGMENTING, R_PREEMPTION_TIMEOUT, R_DISRUPTION_BUDGET: decisions_room.py)
R_PARTIAL_EVICTED = "PartialGangEvicted"  # found part-bound at start, not completed in time; bound pods evicted
R_REPAIRING = "Repairing"  # a broken part of a running gang is moving whole; its room is held
R_UNREPAIRABLE = "Unrepairable"  # a running gang lost pods and no part of it could move in time
# Its leaders bound, pods their controller creates after them never came; the room held was released.
R_FOLLOWERS_MISSING = "FollowersNotCreated"
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
        R_FOLLOWERS_MISSING,
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
    unbound: int = 0  # R_PLAN_EXPIRED after its gate opened, R_FOLLOWERS_MISSING: the planned pods that never bound

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
        if self.kind == R_FOLLOWERS_MISSING:
            return (
                f"its leaders are bound, but no pod of it bound for {self.seconds:g}s: the room"
                f" held for its {self.unbound} pod(s) still to come (their controller creates them once"
                " their leaders are scheduled) was released"
            )
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
    # Gangs whose waiting minimums come first: their room is left to them (core/minimums.py).
    waiting: tuple[str, ...] = ()
    kind: str = R_BEYOND_MINIMUM

    def render(self) -> str:
        if self.waiting:
            more = len(self.waiting) - 3
            shown = ", ".join(self.waiting[:3]) + (f" and {more} more" if more > 0 else "")
            return f"{self.pods} pod(s) beyond the minimum wait: the minimum of {shown} comes first"
        return f"{self.pods} pod(s) beyond the minimum do not fit in the gang's domains"


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
    # what was given up, when not a repair (its leaders bound, pods to come after them never came)
    head: str = ""
    kind: str = R_UNREPAIRABLE

    def render(self) -> str:
        then = (
            f"; its {self.evicted} running pod(s) are evicted so that it can be placed again whole"
            if self.evicted
            else ""
        )
        note = f"; {self.note}" if self.note else ""
        head = self.head or f"no part of the gang could be repaired within {self.seconds:g}s"
        return f"{head}: {self.why}{then}{note}"


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
    outcome: str  # "planned", "replanned", "extended", "pending", "preempting", "defragmenting", "repairing", "invalid"
    pods: int  # pods placed by this decision (or needed, when pending)
    nodes: tuple[str, ...] = ()
    domains: Mapping[str, DomainRef] = field(default_factory=dict)  # constrained scope (Scope.key) -> domain
    reason: str = ""
    attempts: int = 0
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # level -> domains used
    preemption: Preemption | None = None  # outcome "preempting": the victims and the room they free
    repair: Repair | None = None  # outcome "repairing": the scopes moved and the pods evicted for it
    overruns: tuple[Overrun, ...] = ()  # outcome "pending": the budgets that keep it from preempting
    # Optional pods of this gang left unplaced for the waiting minimums of these gangs (core/minimums.py)
    yielded: int = 0
    yielded_to: tuple[str, ...] = ()
    # Gang -> its optional pods whose reservations were given back for this gang's minimum
    given_back: Mapping[str, int] = field(default_factory=dict)
    expected: int = 0  # stand-ins placed by this decision: room held for pods not created yet

    @classmethod
    def refused(cls, group: str, why: Shortfall | BudgetBlocked, attempts: int) -> PlanEvent:
        """A plan refused: the pods it needed, and why (with the budgets that keep it from preempting)."""
        shortfall, overruns = (why.shortfall, why.overruns) if isinstance(why, BudgetBlocked) else (why, ())
        return cls(group, "pending", shortfall.pods, reason=why.render(), attempts=attempts, overruns=overruns)

    @classmethod
    def placed(
        cls,
        group: str,
        outcome: str,
        new: Mapping[str, str],
        p: Plan,
        yielded: int = 0,
        yielded_to: tuple[str, ...] = (),
        given_back: Mapping[str, int] | None = None,
        early: Mapping[str, str] | None = None,
    ) -> PlanEvent:
        """A plan held (NEW: pod -> node reserved now; EARLY: room held for pods not created yet),
        with what minimums first changed in it."""
        early = early or {}
        return cls(
            group,
            outcome,
            len(new),
            (*new.values(), *early.values()),
            p.domains,
            attempts=p.attempts,
            levels=p.levels,
            yielded=yielded,
            yielded_to=yielded_to,
            given_back=dict(given_back or {}),
            expected=len(early),
        )

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
        if self.expected:
            out["held_for_pods_not_created"] = self.expected
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
            if p.moves:
                out["moves"] = dict(sorted(p.moves.items()))
        if self.yielded:
            out["optional_left"] = {"pods": self.yielded, "for_minimums_of": list(self.yielded_to)}
        if self.given_back:
            out["optional_given_back"] = dict(self.given_back)
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
