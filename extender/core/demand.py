"""What a waiting gang needs to start, as the reservation pass (`reserve`) reads it: its minimum
in pods of its largest request, its required level and its parts, and the nodes it may use."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from extender.core.reservations import BoolArray, Demand
from extender.placement import Gang, NodeTable, Scope, scope_minimum_pods


def _parts(root: Scope) -> list[Scope]:
    """The topmost scopes under ROOT with a required level finer than ROOT's (segments)."""
    top = root.rule.required if root.rule is not None and root.rule.required is not None else 0
    out: list[Scope] = []
    stack = list(root.children)
    while stack:
        s = stack.pop()
        if s.rule is not None and s.rule.required is not None and s.rule.required > top:
            out.append(s)
        else:
            stack.extend(s.children)
    return out


def gang_demand(gang: Gang, columns: Sequence[str]) -> Demand:
    """What GANG needs to start, for `reserve`: its minimum in pods of its largest request per
    resource (COLUMNS), its required level, and its parts (segments required in a finer domain)."""
    request = tuple(max((dict(s.requests).get(r, 0) for s in gang.shapes), default=0) for r in columns)
    rule = gang.root.rule
    level = rule.required if rule is not None else None
    part = part_level = 0
    parts = _parts(gang.root)
    levels = {p.rule.required for p in parts if p.rule is not None}
    sizes = [m for p in parts if (m := scope_minimum_pods(p)) > 0]
    if sizes and len(levels) == 1:
        (found,) = levels
        part, part_level = min(sizes), found or 0
    return Demand(request, max(scope_minimum_pods(gang.root), 1), part, part_level, level)


def usable_nodes(table: NodeTable, gang: Gang) -> BoolArray | None:
    """The schedulable nodes some pod of GANG may use (taints, selectors, as the planner reads
    them); None when it may use every one."""
    usable = np.zeros(len(table), dtype=np.bool_)
    for shape in gang.shapes:
        usable |= table.eligibility(shape.placement).mask
    return None if bool((usable | ~table.schedulable).all()) else usable
