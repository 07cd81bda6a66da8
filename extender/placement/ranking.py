"""Why each scope went where it did: the candidate domains as the engine ranked them.

Recorded only when `plan(..., explain=True)` asks: `Candidates` hands the keys it sorted by (the
same arrays, none computed twice for ordering) to a `Recorder`, and the engine tells it which
candidate held the scope. An ordinary plan carries no recorder and pays one `is None` test per
candidate list. A search backtracks, so rankings are kept per (scope, kind, level) and, at the
end, only those that agree with where the scopes stand (their pins) are returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from extender.placement.gang import Scope
from extender.placement.parts import NEVER
from extender.placement.ref import DomainRef
from extender.placement.state import Pin
from extender.placement.tree import BoolArray, Domain, IntArray, TopologyTree

REQUIRED, PREFERRED, COMPACT = "required", "preferred", "compact"
# The sort keys, by name, in the order a ranking applied them (path breaks the last ties).
SPANS, INNER, HOLDS_ALL, ROOM, PATH = "spans", "inner", "holdsAll", "room", "path"
ALLOTTED, PARTS = "allotted", "partDomains"
SHOWN = 5  # candidates kept per ranking, beyond the chosen one and its runner-up
TRIED_SHOWN = 8  # candidates ranked before the chosen one that were tried and failed, by name


@dataclass(frozen=True, slots=True)
class RankedDomain:
    """One candidate domain with the keys it was ranked by."""

    domain: DomainRef
    room: int  # pods of the scope's dominant shape the domain has room for, as ranked (whole parts)
    free: int  # the same, counted pod by pod (more than `room`: fragments no part can use)
    holds_all: bool  # room for every pod of the scope, not only its minimum
    spans: int | None = None  # domains of the scope's preferred level its pods would span
    inner: int | None = None  # domains of its descendants' preferred levels they would span
    parts: int | None = None  # domains of its parts' level its parts would take (None: not a key, or no room)
    allotted: bool = False  # the domain its siblings' allotment gave it (the fewest domains for them all)


@dataclass(frozen=True)
class Ranking:
    """Where one scope went at one level, among which candidates, by which keys."""

    scope: str  # Scope.key
    label: str  # "SubGroup worker-seg-0"
    kind: str  # REQUIRED, PREFERRED (a written preference) or COMPACT (the default compactness)
    level: str  # the level's name
    region: DomainRef  # where the candidates were looked for
    pods: int  # the scope's pods to place, of its dominant shape
    minimum: int  # of those, its minimum
    shape: str  # the dominant shape ("{nvidia.com/gpu: 8}")
    domains: int  # domains of the level in the region
    fitting: int  # of those, the ones with room for the minimum
    keys: tuple[str, ...]  # the sort keys, in the order applied
    candidates: tuple[RankedDomain, ...]  # best first: the first SHOWN, and the chosen one and the next
    ranked: int  # candidates in all (after exclusivity and running pods narrowed them)
    chosen: DomainRef | None  # None: no domain of this level held it
    chosen_rank: int = 0  # its place among the candidates (0: first)
    tried: tuple[DomainRef, ...] = ()  # ranked before it, tried, and the scope's contents did not fit
    preferred: str = ""  # the level `spans` counts, when it is a key
    spread: bool = False  # no domain of any level tried held it: it spread over the region


@dataclass
class _Entry:
    scope: Scope
    kind: str
    region: Domain
    level: int
    domains: int
    fitting: int
    keys: tuple[str, ...]
    order: IntArray  # domain indices, best first
    columns: Mapping[str, IntArray | BoolArray]  # key -> per candidate, in `order`
    pods: int
    minimum: int
    shape: int
    preferred: int | None
    chosen: int | None = None
    tried: list[int] = field(default_factory=list)


class Recorder:
    """The rankings of one plan, as the search makes them (the engine's, when asked)."""

    def __init__(self, tree: TopologyTree, shapes: Sequence[str]) -> None:
        self.tree = tree
        self.shapes = shapes
        self._entries: dict[tuple[int, str, int], _Entry] = {}

    def ranked(
        self,
        scope: Scope,
        kind: str,
        where: tuple[Domain, int],
        counts: tuple[int, int],
        order: IntArray,
        columns: Mapping[str, IntArray | BoolArray],
        keys: tuple[str, ...],
        amounts: tuple[int, int, int],
        preferred: int | None = None,
    ) -> None:
        """A candidate list was made for SCOPE: WHERE (region, level); COUNTS (domains of the level in
        the region, those with room for the minimum); ORDER the candidates, best first; COLUMNS per
        key (and "free"), its value per candidate of ORDER; KEYS the sort keys in the order applied;
        AMOUNTS (pods, minimum, dominant shape); PREFERRED the level `spans` counts."""
        region, level = where
        pods, minimum, shape = amounts
        self._entries[(scope.id, kind, level)] = _Entry(
            scope, kind, region, level, *counts, keys, order, columns, pods, minimum, shape, preferred
        )

    def begin(self, scope: Scope, kind: str) -> None:
        """SCOPE is placed again (KIND): what an earlier attempt ranked for it no longer stands."""
        for key in [k for k in self._entries if k[0] == scope.id and k[1] == kind]:
            del self._entries[key]

    def tried(self, scope: Scope, kind: str, domain: Domain, held: bool) -> None:
        entry = self._entries.get((scope.id, kind, domain.level))
        if entry is None:
            return
        if held:
            entry.chosen = domain.index
        elif domain.index not in entry.tried:
            entry.tried.append(domain.index)

    def rankings(self, pins: Mapping[int, Pin]) -> tuple[Ranking, ...]:
        """The rankings that agree with where the scopes stand, in the gang's order."""
        out: list[tuple[int, int, int, Ranking]] = []
        for (sid, kind, level), e in self._entries.items():
            pin = pins.get(sid)
            if pin is None:
                continue
            where = pin.required if kind == REQUIRED else pin.preferred
            if e.chosen is not None and where == Domain(level, e.chosen):
                out.append((sid, kind != REQUIRED, -level, self._ranking(e, e.chosen)))
            elif kind != REQUIRED and where.level < level and self._inside(where, e.region):
                out.append((sid, 1, -level, self._ranking(e, None, spread=where == e.region)))
        out.sort(key=lambda item: item[:3])
        return tuple(r for *_, r in out)

    def _inside(self, domain: Domain, region: Domain) -> bool:
        return domain.level >= region.level and self.tree.ancestor(domain, region.level) == region

    def _ranking(self, e: _Entry, chosen: int | None, spread: bool = False) -> Ranking:
        tree = self.tree
        order = e.order.tolist()
        rank = order.index(chosen) if chosen is not None else 0
        shown = set(range(min(SHOWN, len(order))))
        if chosen is not None:  # the chosen one and its runner-up, wherever they rank
            shown.update(range(rank, min(rank + 2, len(order))))
        candidates = tuple(self._candidate(e, i, order[i]) for i in sorted(shown))
        return Ranking(
            e.scope.key,
            e.scope.label,
            e.kind,
            tree.level_name(e.level),
            tree.ref(e.region),
            e.pods,
            e.minimum,
            self.shapes[e.shape] if e.shape < len(self.shapes) else "{}",
            e.domains,
            e.fitting,
            e.keys,
            candidates,
            len(order),
            tree.ref(Domain(e.level, chosen)) if chosen is not None else None,
            rank,
            tuple(tree.ref(Domain(e.level, d)) for d in e.tried[:TRIED_SHOWN]),
            tree.level_name(e.preferred) if e.preferred is not None else "",
            spread,
        )

    def _candidate(self, e: _Entry, i: int, index: int) -> RankedDomain:
        col = e.columns

        def value(key: str) -> int | None:
            return int(col[key][i]) if key in col else None

        room = value(ROOM) or 0
        free = value("free")
        parts = value(PARTS)
        return RankedDomain(
            self.tree.ref(Domain(e.level, index)),
            room,
            room if free is None else free,
            bool(col[HOLDS_ALL][i]) if HOLDS_ALL in col else room >= e.pods,
            value(SPANS),
            value(INNER),
            parts if parts is not None and parts < NEVER else None,
            bool(col[ALLOTTED][i]) if ALLOTTED in col else False,
        )
