"""Gang: the resolved tree of scopes the engine places, with levels already bound to one tree.

A Scope is the PodGroup, a SubGroup, or a SubGroupSet (a virtual scope around sibling
SubGroups that share a constraint). `min_member` counts the scope's children: child scopes by
their `weight` (a SubGroupSet stands for the SubGroups it holds), or, in a leaf, its members.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from extender.model.pod import Placement
from extender.model.quantity import format_quantity
from extender.model.requests import POD_SLOT
from extender.model.topology import TopologySpec


@dataclass(frozen=True, slots=True)
class Shape:
    """Pods that ask for the same resources with the same placement rules fit the same nodes."""

    requests: tuple[tuple[str, int], ...]  # sorted (resource, milli-units), "pods" included
    placement: Placement = field(default_factory=Placement)

    def describe(self) -> str:
        shown = [f"{r}: {format_quantity(r, v)}" for r, v in self.requests if r != POD_SLOT]
        return "{" + ", ".join(shown) + "}"


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of the gang."""

    key: str  # namespace/name
    shape: int  # index into Gang.shapes
    node: str | None = None  # already bound: counts as placed and pins its constraints


@dataclass(frozen=True, slots=True)
class Rule:
    """A topology constraint resolved to tree levels (1 = the Topology's coarsest label)."""

    required: int | None
    preferred: int | None
    source: str  # the field it came from, for messages
    exclusive: bool = False  # the required domain holds no other gang's pods


@dataclass(frozen=True)
class Scope:
    id: int  # pre-order index, unique in the gang
    label: str  # "PodGroup ml/train", "SubGroup decode", "SubGroupSet [a, b]"
    min_member: int
    children: tuple[Scope, ...] = ()
    members: tuple[Member, ...] = ()
    rule: Rule | None = None
    weight: int = 1
    name: str = ""  # the SubGroup name ("" for the PodGroup and sets)
    key: str = ""  # its identity in results: the PodGroup's ns/name, the SubGroup name, a set's label
    segment_pods: int = 0  # a segment or slice of this many pods: beyond the minimum, all of them or none

    @property
    def leaf(self) -> bool:
        return not self.children

    def walk(self) -> Iterator[Scope]:
        yield self
        for c in self.children:
            yield from c.walk()

    def all_members(self) -> Iterator[Member]:
        for s in self.walk():
            yield from s.members


@dataclass(frozen=True)
class Gang:
    key: str  # namespace/name of the PodGroup
    root: Scope
    shapes: tuple[Shape, ...]
    topology: TopologySpec
    scopes: tuple[Scope, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", tuple(self.root.walk()))

    def members(self) -> Iterator[Member]:
        return self.root.all_members()
