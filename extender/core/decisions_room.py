"""The decisions about room made for a waiting gang by evicting others: preempting their victims
or moving movable pods out of its domain (defragmentation), their timeouts, and the budgets that
forbid them. Values like the rest of `decisions.py`, which re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.placement import DomainRef, Overrun, Preemption, Shortfall

R_PREEMPTING = "Preempting"  # lower-priority victims are being evicted; their room is held for the gang
R_DEFRAGMENTING = "Defragmenting"  # movable pods are moving out of its domain; both rooms are held
R_PREEMPTION_TIMEOUT = "PreemptionTimeout"  # the victims did not leave in time; the room was released
R_DISRUPTION_BUDGET = "DisruptionBudget"  # only victims beyond what PodDisruptionBudgets allow would help


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
    moves: tuple[tuple[str, str], ...] = ()  # defragmenting: (moved pod, its new node)

    @classmethod
    def of(cls, p: Preemption, gone: int) -> Preempting:
        alone = sum(len(v) for v in p.elastic.values())
        top = p.cost.top_priority
        if p.moves:
            moves = tuple(sorted(p.moves.items()))
            return cls(p.domain, p.victims, (), 0, top, len(p.pods), gone, R_DEFRAGMENTING, moves)
        return cls(p.domain, p.victims, tuple(sorted(p.elastic)), alone, top, len(p.pods), gone)

    def render(self) -> str:
        if self.moves:
            n = len(self.moves)
            shown = ", ".join(f"{pod} to {node}" for pod, node in self.moves[:5]) + (
                f" and {n - 5} more" if n > 5 else ""
            )
            return (
                f"defragmenting {self.domain}: moving {n} pod(s) ({shown}), their new room and the gang's held; "
                f"{self.gone}/{self.pods} moved pods gone"
            )
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
    verb: str = "preempting"  # or "moving pods" (defragmentation)

    def refusal(self) -> str:
        shown = ", ".join(o.render() for o in self.overruns[:5])
        more = f" and {len(self.overruns) - 5} more" if len(self.overruns) > 5 else ""
        return f"{self.verb} would overrun {shown}{more}: nothing is evicted until a PodDisruptionBudget allows it"

    def render(self) -> str:
        return f"{self.shortfall.render()}; {self.refusal()}"
