"""Room counted in whole parts, and the fewest domains that hold a set of parts.

A *part* is a scope that must sit in one domain of a finer level than where it is placed: a
segment or a slice (one rack, one host). A scope whose pods are all in parts, or in parts and
*loose* pods (a leaf with no required level of its own, such as a launcher), has room in a
candidate domain only in whole parts: a block whose racks have 3 free nodes each has no room for
segments of 4. Loose pods take the fragments the parts leave.

`fewest_domains` is Kueue's greedy for slices (its TAS snapshot's slice assignment): domains
with room for the most parts first, taken whole until what is left fits in one, and that last
one the tightest that holds the rest. It uses the fewest domains there can be (the largest rooms
first) and fills them, so free room stays in whole domains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from extender.placement.demand import Demand
from extender.placement.gang import Scope
from extender.placement.state import AttemptState
from extender.placement.tree import Domain, IntArray, TopologyTree

# Domains needed where the parts do not fit at all: ranks after any real count.
NEVER = 1 << 40


@dataclass(frozen=True)
class Layout:
    """A scope's parts, all required at one finer level, and its loose leaves."""

    parts: tuple[Scope, ...]
    loose: tuple[Scope, ...]
    level: int  # the level every part needs one domain of


class Parts:
    """Room in whole parts for the scopes of one attempt (the counts are the attempt's)."""

    def __init__(self, tree: TopologyTree, state: AttemptState, demand: Demand) -> None:
        self.tree, self.state, self.demand = tree, state, demand
        self._layout: dict[int, Layout | None] = {}
        self._shares_of: dict[tuple[int, int, bool, int], tuple[int, int, int, int] | None] = {}

    def layout(self, scope: Scope) -> Layout | None:
        """The scope's parts and loose leaves, or None when it has no parts, or parts at
        different levels (then its room is counted pod by pod)."""
        if scope.id not in self._layout:
            parts, loose = _split(scope)
            levels = {p.rule.required for p in parts if p.rule is not None}
            found = None
            if parts and len(levels) == 1 and (level := levels.pop()) is not None:
                found = Layout(tuple(parts), tuple(loose), level)
            self._layout[scope.id] = found
        return self._layout[scope.id]

    def counted_in_parts(self, scope: Scope, level: int) -> bool:
        """Whether the scope has parts finer than `level` (else its room is counted pod by pod)."""
        layout = self.layout(scope)
        return layout is not None and layout.level > level

    def room(self, scope: Scope, level: int, cand: IntArray, shape: int, *, full: bool) -> IntArray:
        """Per candidate of `level`: pods of `shape` the scope can put there, counting room for its
        parts in whole parts only (of its smallest part) and loose pods in what is left. `full`:
        parts as large as all their pods, else as their minimum."""
        room: IntArray = self.state.counts[shape][level][cand]
        shares = self._shares(scope, level, shape, full)
        if shares is None or not len(cand):
            return room
        unit, _, loose, part_level = shares
        lo, hi, owner = self._span(level, part_level, cand)
        labeled = self.tree.levels[part_level].labeled[lo:hi]
        whole = (self.state.counts[shape][part_level][lo:hi] // unit) * unit * labeled
        per_owner = np.bincount(owner, weights=whole, minlength=int(cand.max() - cand.min()) + 1).astype(np.int64)
        took = per_owner[cand - cand.min()]
        usable: IntArray = took + np.minimum(room - took, loose)
        return usable

    def domains_needed(self, scope: Scope, level: int, cand: IntArray, shape: int, *, full: bool) -> IntArray | None:
        """Per candidate: the fewest domains of the parts' level its parts would take (NEVER
        where they do not fit in whole parts); None when the scope has no parts below `level`."""
        shares = self._shares(scope, level, shape, full)
        if shares is None:
            return None
        if not len(cand):
            return np.zeros(0, dtype=np.int64)
        unit, count, _, part_level = shares
        lo, hi, owner = self._span(level, part_level, cand)
        caps = (self.state.counts[shape][part_level][lo:hi] // unit) * self.tree.levels[part_level].labeled[lo:hi]
        # Per owner, its part-level domains by room, largest first; a domain is needed while
        # the rooms before it hold fewer than `count` parts.
        order = np.lexsort((-caps, owner))
        caps_sorted, owner_sorted = caps[order], owner[order]
        total = np.cumsum(caps_sorted)
        first = np.searchsorted(owner_sorted, owner_sorted)  # index of each owner's first entry
        before = total - caps_sorted - (total[first] - caps_sorted[first])  # within the owner
        size = int(cand.max() - cand.min()) + 1
        needed = np.bincount(owner_sorted, weights=(before < count) & (caps_sorted > 0), minlength=size)
        held = np.bincount(owner_sorted, weights=caps_sorted, minlength=size)
        mine = cand - cand.min()
        out: IntArray = np.where(held[mine] >= count, needed[mine].astype(np.int64), NEVER)
        return out

    def _span(self, level: int, part_level: int, cand: IntArray) -> tuple[int, int, IntArray]:
        """The domains of `part_level` under the candidates' range [lo, hi), and the candidate
        (counted from the first) each belongs to: the arrays stay as small as the region."""
        first, last = int(cand.min()), int(cand.max())
        lo = self.tree.descendants(Domain(level, first), part_level)[0]
        hi = self.tree.descendants(Domain(level, last), part_level)[1]
        starts = self.tree.levels[part_level].starts[lo:hi]
        owner: IntArray = self.tree.levels[level].domain_of_pos[starts] - first
        return lo, hi, owner

    def _shares(self, scope: Scope, level: int, shape: int, full: bool) -> tuple[int, int, int, int] | None:
        """(the part size counted in, the parts to place, the loose pods, the parts' level) for
        `shape`, or None when room is counted pod by pod here."""
        layout = self.layout(scope)
        if layout is None or layout.level <= level:
            return None
        key = (scope.id, shape, full, self.demand.generation)
        if key not in self._shares_of:
            self._shares_of[key] = self._count_shares(scope, layout, shape, full)
        return self._shares_of[key]

    def _count_shares(self, scope: Scope, layout: Layout, shape: int, full: bool) -> tuple[int, int, int, int] | None:
        amounts = self.demand.full if full else self.demand.minimum
        sizes = [amounts[p.id][shape] for p in layout.parts]
        unit = min((s for s in sizes if s > 0), default=0)
        if unit <= 1:
            return None
        loose = sum(amounts[leaf.id][shape] for leaf in layout.loose)
        in_parts = amounts[scope.id][shape] - loose if not full else sum(sizes)
        return unit, -(-max(0, in_parts) // unit), loose, layout.level


def _split(scope: Scope) -> tuple[list[Scope], list[Scope]]:
    """The nearest scopes below `scope` with a required level (parts), and the leaves with none
    on the way (loose)."""
    parts: list[Scope] = []
    loose: list[Scope] = []
    for child in scope.children:
        if child.rule is not None and child.rule.required is not None:
            parts.append(child)
        elif child.leaf:
            loose.append(child)
        else:
            below, free = _split(child)
            parts.extend(below)
            loose.extend(free)
    return parts, loose


def fewest_domains(caps: Sequence[int], room: Sequence[int], count: int) -> list[tuple[int, int]]:
    """Kueue's greedy: (candidate index, parts) for `count` parts over candidates with room for
    `caps` parts each (`room` in pods breaks ties, least first, then the index): the most room
    first, taken whole, until the rest fits in one; then the tightest candidate that holds the
    rest. Fewer than `count` parts in all when the room runs out."""
    order = sorted((i for i, c in enumerate(caps) if c > 0), key=lambda i: (-caps[i], room[i], i))
    out: list[tuple[int, int]] = []
    left = count
    for k, i in enumerate(order):
        if left <= 0:
            break
        if caps[i] >= left:
            # The last domain: the tightest of those not yet taken that holds the rest (the
            # first such in this order, as Kueue's best fit takes the first of equals).
            best = min((j for j in order[k:] if caps[j] >= left), key=lambda j: caps[j])
            out.append((best, left))
            return out
        out.append((i, caps[i]))
        left -= caps[i]
    return out
