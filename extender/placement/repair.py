"""Repairing a running gang: which part to move whole when a pod's replacement finds no room.

A gang runs; a node under it fails and the workload controller recreates the pod that ran
there. The replacement is planned like any member: bound pods pin every constraint they are
under, so it goes into the domain its SubGroup holds. When that domain has no room left, the
smallest scope with a required constraint around the replacement is moved instead: its
surviving pods are unpinned (their room counts as free) and the gang is planned again, the rest
of it pinned where it runs. If that scope cannot move inside the domains its ancestors hold,
the next required scope up is tried, never the PodGroup itself (moving everything is a new
placement, which is the workload's choice, not a repair).

Pure like the engine: the caller supplies snapshots with the unpinned pods' room given back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from extender.placement.engine import plan
from extender.placement.gang import Gang, Scope
from extender.placement.ref import DomainRef
from extender.placement.result import Plan
from extender.placement.snapshot import ClusterSnapshot


@dataclass(frozen=True)
class Repair:
    """Move SCOPES whole: evict their surviving pods, then place them and the replacements."""

    gang: str
    scopes: Mapping[str, str]  # the scopes moved: Scope.key -> label ("SubGroup worker-segment-2")
    moved: tuple[str, ...]  # their bound pods, to evict so that each scope can move whole
    held: Mapping[str, DomainRef]  # Scope.key -> the domain it held
    plan: Plan  # the gang's unbound pods and the moved ones, placed; the rest stays

    def describe(self) -> str:
        parts = [
            f"{label} from {self.held.get(key, 'where it ran')} to {self.plan.domains.get(key, 'elsewhere')}"
            for key, label in self.scopes.items()
        ]
        return f"moving {', '.join(parts)} whole ({len(self.moved)} running pod(s) evicted)"


def required_chains(gang: Gang, pods: Collection[str]) -> dict[str, tuple[Scope, ...]]:
    """For each of PODS, the scopes with a required constraint around it, innermost first, the
    PodGroup left out."""
    chains: dict[str, tuple[Scope, ...]] = {}

    def walk(scope: Scope, above: tuple[Scope, ...]) -> None:
        here = (*above, scope) if scope is not gang.root and scope.rule and scope.rule.required else above
        for m in scope.members:
            if m.key in pods:
                chains[m.key] = tuple(reversed(here))
        for child in scope.children:
            walk(child, here)

    walk(gang.root, ())
    return chains


def unpin(gang: Gang, scopes: Collection[int]) -> Gang:
    """GANG with the bound pods under SCOPES (by id) unplaced."""

    def free(scope: Scope, inside: bool) -> Scope:
        inside = inside or scope.id in scopes
        members = tuple(replace(m, node=None) for m in scope.members) if inside else scope.members
        return replace(scope, members=members, children=tuple(free(c, inside) for c in scope.children))

    return replace(gang, root=free(gang.root, False))


def plan_repair(gang: Gang, without: Callable[[Mapping[str, str]], ClusterSnapshot], limit: int = 8) -> Repair | None:
    """The smallest repair that places GANG's unbound pods: scopes tried innermost first, one
    required level up at a time. WITHOUT(pods -> node) is the cluster with those bound pods'
    room free. None when no scope short of the whole gang can move."""
    bound = {m.key: m.node for m in gang.members() if m.node is not None}
    unbound = [m.key for m in gang.members() if m.node is None]
    chains = required_chains(gang, set(unbound))
    for depth in range(limit):
        picked = {c[depth].id: c[depth] for c in chains.values() if depth < len(c)}
        if not picked:
            return None
        moved = {m.key: bound[m.key] for s in picked.values() for m in s.all_members() if m.key in bound}
        if not moved:
            continue  # nothing of those scopes runs: moving them changes nothing
        result = plan(without(moved), unpin(gang, picked))
        if isinstance(result, Plan):
            scopes = sorted(picked.values(), key=lambda s: s.id)
            held = _held(gang, scopes, moved, without({}))
            labels = {s.key: s.label for s in scopes}
            return Repair(gang.key, labels, tuple(sorted(moved)), held, result)
    return None


def _held(gang: Gang, scopes: list[Scope], moved: Mapping[str, str], snapshot: ClusterSnapshot) -> dict[str, DomainRef]:
    table = snapshot.table
    tree = table.tree(gang.topology)
    held = {}
    for scope in scopes:
        assert scope.rule is not None
        assert scope.rule.required is not None
        node = next((moved[m.key] for m in scope.all_members() if m.key in moved), None)
        if node is not None and node in table.index:
            held[scope.key] = tree.ref(tree.node_domain(table.index[node], scope.rule.required))
    return held
