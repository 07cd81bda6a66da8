"""The minimum tree of a gang: whether the pods that exist can meet it, how many pods it needs at
the least, and whether a set of placed pods meets it. No capacity is looked at here.
"""

from __future__ import annotations

from collections.abc import Set

from extender.placement.gang import Gang, Scope
from extender.placement.reasons import INCOMPLETE, Shortfall


def incomplete(gang: Gang) -> Shortfall | None:
    """Why the pods that exist cannot satisfy the minimum tree whatever the capacity, or None."""
    missing = _incomplete(gang.root)
    if missing is None:
        return None
    # The scope that lacks pods, with its own count: a gang can hold more pods than its minimum
    # and still miss some where they are needed.
    present = sum(1 for _ in missing.all_members())
    return Shortfall(INCOMPLETE, missing.label, scope_minimum_pods(missing), present=present)


def _incomplete(scope: Scope) -> Scope | None:
    """The deepest scope whose minimum cannot be met by the pods that exist, or None."""
    if scope.leaf:
        return scope if len(scope.members) < scope.min_member else None
    got, first_missing = 0, None
    for child in scope.children:
        missing = _incomplete(child)
        if missing is None:
            got += child.weight
        elif first_missing is None:
            first_missing = missing
    return None if got >= scope.min_member else (first_missing or scope)


def meets_minimum(gang: Gang, placed: Set[str]) -> bool:
    """Whether the pods in PLACED (keys) satisfy the gang's whole minimum tree."""

    def met(scope: Scope) -> bool:
        if scope.leaf:
            return sum(1 for m in scope.members if m.key in placed) >= scope.min_member
        return sum(c.weight for c in scope.children if met(c)) >= scope.min_member

    return met(gang.root)


def minimum_pods(gang: Gang) -> int:
    """Pods the gang's minimum tree needs at the least (0 for an elastic gang)."""
    return scope_minimum_pods(gang.root)


def scope_minimum_pods(scope: Scope) -> int:
    """Pods SCOPE's minimum tree needs, choosing the smallest children where only some are needed
    (a child counts as its weight: a SubGroupSet stands for the SubGroups it holds)."""
    if scope.leaf:
        return scope.min_member
    sizes = sorted((scope_minimum_pods(c), c.weight) for c in scope.children)
    got, total = 0, 0
    for size, weight in sizes:
        if got >= scope.min_member:
            break
        got += weight
        total += size
    return total
