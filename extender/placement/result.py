"""What planning returns: a Plan, or an Unplaceable with the reason as data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.placement.ranking import Ranking
from extender.placement.reasons import Shortfall
from extender.placement.ref import DomainRef


@dataclass(frozen=True)
class Plan:
    gang: str
    assignments: Mapping[str, str]  # pod key -> node name, for the pods placed by this plan
    domains: Mapping[str, DomainRef]  # constrained scope (Scope.key) -> the domain it was placed in
    unplaced: tuple[str, ...] = ()  # optional pods (beyond the minimum) that did not fit
    minimum: frozenset[str] = frozenset()  # the pods of `assignments` that form the minimum tree
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # level -> domains used
    attempts: int = 0  # candidate domains tried: how hard the search had to work
    rankings: tuple[Ranking, ...] = ()  # why each scope went where it did (only from plan(..., explain=True))


@dataclass(frozen=True)
class Unplaceable:
    gang: str
    reason: Shortfall
    attempts: int = 0

    @property
    def message(self) -> str:
        return self.reason.render()


PlanResult = Plan | Unplaceable
