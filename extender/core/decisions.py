"""The values GangScheduler returns: what to answer kube-scheduler, and what happened.

Outcomes are data; the server renders them to the extender wire types and log lines, the
simulator to its tables. `PlanEvent` is the one record of every placement decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Phases of a group (PodGroup status.phase).
PENDING, SCHEDULED, INVALID = "Pending", "Scheduled", "Invalid"


@dataclass(frozen=True)
class FilterResult:
    nodes: list[str]  # the nodes that pass: always a subset of the names given to filter
    failed: dict[str, str] = field(default_factory=dict)  # node -> reason; preemption may help
    unresolvable: dict[str, str] = field(default_factory=dict)  # node -> reason; it would not
    event: PlanEvent | None = None  # a plan made (or refused) during this call
    wake: tuple[str, ...] = ()  # pods to requeue now: they have a planned node waiting


@dataclass(frozen=True)
class BindDecision:
    """What to do with one bind call at the gang's bind gate."""

    action: str  # BIND (these pods now), WAIT (hold this call), REJECT (fail this call)
    bind: tuple[tuple[str, str], ...] = ()  # (pod, node) to bind now, this call's pod included
    error: str = ""


BIND, WAIT, REJECT = "bind", "wait", "reject"


@dataclass(frozen=True)
class PlanEvent:
    """One placement decision: the canonical log line of topogang."""

    group: str
    outcome: str  # "planned", "replanned", "extended", "pending", "invalid"
    pods: int  # pods placed by this decision (or needed, when pending)
    nodes: tuple[str, ...] = ()
    domains: Mapping[str, str] = field(default_factory=dict)  # scope -> domain
    reason: str = ""
    attempts: int = 0
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # level -> domains used

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {"group": self.group, "outcome": self.outcome, "pods": self.pods}
        if self.nodes:
            out["nodes"] = sorted(set(self.nodes))
        if self.domains:
            out["domains"] = dict(self.domains)
        if self.levels:
            out["levels"] = {level: list(doms) for level, doms in self.levels.items()}
        if self.reason:
            out["reason"] = self.reason
        if self.attempts:
            out["domains_tried"] = self.attempts
        return out


@dataclass(frozen=True)
class SubGroupStatus:
    name: str
    min_member: int
    pods: int  # pods that exist
    planned: int  # pods with a planned node (reserved or bound)
    bound: int
    domain: str = ""


@dataclass(frozen=True)
class GroupStatus:
    key: str
    phase: str
    message: str
    pods: int = 0
    planned: int = 0
    bound: int = 0
    subgroups: tuple[SubGroupStatus, ...] = ()
    domains: Mapping[str, str] = field(default_factory=dict)
