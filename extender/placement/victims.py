"""What preemption works with and answers: running workloads, budgets, the cost of a victim set.

A *workload* is what may be evicted: a running gang (all its bound pods; the pods beyond its
minimum, `elastic`, may also go alone) or a plain pod. A victim set is compared with another by
`Cost`, field by field: first the pods it would evict beyond what PodDisruptionBudgets allow (as
kube-scheduler: fewest violations first; the search never returns a set with any, since the
Eviction API would refuse it), then the highest victim priority (lower is better), the workloads
evicted whole, the pods, the resources the preemptor asks for taken from victims, and how
recently the oldest victim started (later is better: less work lost).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from extender.model.requests import POD_SLOT
from extender.placement.ref import DomainRef
from extender.placement.result import Plan


@dataclass(frozen=True, slots=True)
class RunningPod:
    key: str  # namespace/name
    node: str
    requests: Mapping[str, int]  # milli-units, as PodInfo.requests
    started: float = 0.0  # seconds since the epoch (0 when unknown)


@dataclass(frozen=True)
class Workload:
    """A running gang or a plain pod, as a candidate victim."""

    key: str  # the PodGroup key, or the pod key of a plain pod
    priority: int
    pods: tuple[RunningPod, ...]
    # Pods of a gang beyond its minimum: any subset may go while the rest keeps the minimum.
    elastic: frozenset[str] = frozenset()
    gang: bool = True
    # Of those, the pods of each optional segment: they go together or not at all.
    segments: tuple[frozenset[str], ...] = ()


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as preemption sees it: how many of its pods may go now."""

    name: str
    allowed: int
    pods: frozenset[str]


@dataclass(frozen=True)
class Overrun:
    """A PodDisruptionBudget a victim set would break: the Eviction API refuses its pods beyond
    `allowed`."""

    budget: str  # namespace/name
    allowed: int  # its status.disruptionsAllowed
    over: int  # victim pods beyond that

    def render(self) -> str:
        return f"PodDisruptionBudget {self.budget} by {self.over} pod(s) (it allows {self.allowed} now)"


@dataclass(frozen=True, order=True)
class Cost:
    budgets: int  # pods beyond what PodDisruptionBudgets allow: the Eviction API would refuse them
    top_priority: int  # the highest priority among the victims
    workloads: int  # gangs and plain pods evicted whole
    pods: int
    taken: tuple[int, ...]  # per measured resource (milli-units), the preemptor's scarcest first
    recency: float  # minus the earliest start among the victims: younger victims cost less

    def describe(self, resources: Sequence[str]) -> str:
        taken = ", ".join(f"{r} {v / 1000:g}" for r, v in zip(resources, self.taken, strict=False) if v)
        return (
            f"{self.workloads} workload(s), {self.pods} pod(s), priority <= {self.top_priority}"
            + (f", taking {taken}" if taken else "")
            + (f", {self.budgets} pod(s) over a PodDisruptionBudget" if self.budgets else "")
        )


@dataclass(frozen=True)
class Preemption:
    """The victims to evict, and the plan that places the gang once they are gone."""

    gang: str
    domain: DomainRef  # where the gang's whole required tree goes: rack z1/b1/r3, the cluster
    victims: tuple[str, ...]  # workloads evicted whole
    elastic: Mapping[str, tuple[str, ...]]  # workload -> its elastic pods taken alone
    pods: tuple[str, ...]  # every pod to evict, sorted
    cost: Cost
    plan: Plan
    resources: tuple[str, ...]  # what Cost.taken measures
    domains_checked: int = 0  # candidate domains verified with the engine
    plans: int = 0  # engine calls
    guarded: tuple[str, ...] = ()  # victim pods some PodDisruptionBudget covers (evicted first)
    # Defragmentation: the victims are moved, not preempted; each one's new node outside `domain`.
    moves: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.moves:
            return f"move {len(self.moves)} pod(s) out of {self.domain} to room held elsewhere"
        return f"evict {self.cost.describe(self.resources)} in {self.domain}"


@dataclass(frozen=True)
class NoPreemption:
    gang: str
    reason: str
    plans: int = 0
    # Victims would make room, but every set found evicts pods beyond what these budgets allow
    # (the cheapest set's overruns): nothing is evicted.
    overruns: tuple[Overrun, ...] = ()


PreemptionResult = Preemption | NoPreemption


def measured_resources(requests: Iterable[Mapping[str, int] | Iterable[tuple[str, int]]]) -> tuple[str, ...]:
    """The resources the preemptor asks for, extended resources (GPUs) before cpu and memory."""
    names: set[str] = set()
    for req in requests:
        items = req.items() if isinstance(req, Mapping) else req
        names.update(r for r, v in items if v > 0 and r != POD_SLOT)
    return tuple(sorted(names, key=lambda r: ("/" not in r, r)))


@dataclass
class VictimSet:
    """Victims chosen so far: whole workloads and elastic pods, with the cost they add up to."""

    whole: set[int] = field(default_factory=set)  # workload indices
    alone: dict[int, set[str]] = field(default_factory=dict)  # workload index -> elastic pods


def cost_of(
    workloads: Sequence[Workload], chosen: VictimSet, resources: Sequence[str], budgets: Sequence[Budget]
) -> tuple[Cost, list[str]]:
    """The cost of `chosen` and the pods it evicts."""
    pods: list[RunningPod] = []
    top = None
    for w in chosen.whole:
        pods.extend(workloads[w].pods)
        top = workloads[w].priority if top is None else max(top, workloads[w].priority)
    for w, keys in chosen.alone.items():
        if w in chosen.whole or not keys:
            continue
        pods.extend(p for p in workloads[w].pods if p.key in keys)
        top = workloads[w].priority if top is None else max(top, workloads[w].priority)
    taken = tuple(sum(p.requests.get(r, 0) for p in pods) for r in resources)
    evicted = sorted(p.key for p in pods)
    gone = set(evicted)
    over = sum(max(0, len(b.pods & gone) - b.allowed) for b in budgets)
    earliest = min((p.started for p in pods), default=0.0)
    return Cost(over, top if top is not None else 0, len(chosen.whole), len(pods), taken, -earliest), evicted
