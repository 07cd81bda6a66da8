"""Where a gang stands, as data: its phase, counts, domains and what its status message says.

`Status` (status.py) builds a `GroupStatus` from the parts of the scheduler; the edges render it
(the PodGroup's status, `explain`, the simulator's tables) through `message`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.core.decisions import INVALID, PENDING, UNSCHEDULABLE_REASONS, Reason
from extender.core.held_room import ReservedRoom
from extender.core.waits import Expected, Overdue
from extender.placement import DomainRef


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
    expected: int = 0  # room held for pods not created yet (a JobSet Job's followers)

    def render(self) -> str:
        if self.expected and not self.missing:
            return (
                f"planned; its leaders are bound and room is held for {self.expected} pod(s) their"
                " controller creates once the leaders are scheduled"
            )
        held = f", room held for {self.expected} pod(s) not created yet" if self.expected else ""
        return f"planned; waiting for {self.missing} pod(s) of the minimum to bind{held}"


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
