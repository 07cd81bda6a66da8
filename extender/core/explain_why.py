"""`explain`'s "why there": the planner's own rankings of candidate domains, told as text and data.

A gang whose pods are all placed is planned again (`replay`) as it would be now with its own
pods' room given back, the engine recording how it ranked the candidates at each constrained
level and for compactness (`plan(..., explain=True)`); the domains it would choose are compared
with those the gang holds, so a cluster that changed since says so. A gang not placed yet gets
the same from the dry run `explain` makes anyway. Nothing here ranks anything: the order and
the keys are the engine's (placement/candidates.py); this module only puts them in words.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.core.exclusivity import snapshot_for
from extender.core.scheduler import GangScheduler
from extender.placement import (
    ALLOTTED,
    COMPACT,
    HOLDS_ALL,
    INNER,
    PARTS,
    PREFERRED,
    REQUIRED,
    ROOM,
    SPANS,
    Gang,
    Plan,
    RankedDomain,
    Ranking,
    TopologyTree,
    plan,
    unpin,
)

REPLAYED, DRY_RUN = "replayed", "dryRun"
SHOWN = 16  # ranking lines in the text (-o json has them all)


@dataclass(frozen=True)
class Why:
    """Why the gang is (or would go) where it is: the engine's rankings, and how sure that is."""

    basis: str  # REPLAYED: planned again with its own room given back; DRY_RUN: planning it now
    rankings: tuple[Ranking, ...] = ()
    moved: tuple[str, ...] = ()  # REPLAYED: scopes planned now elsewhere than they run ("the cluster changed")
    refused: str = ""  # REPLAYED: planned again now, it would not fit (why)


def replay(scheduler: GangScheduler, group: str, gang: Gang, placed: Mapping[str, str]) -> Why:
    """GANG, whose pods are all PLACED (pod -> node, bound or reserved), planned again as it
    would be now: its own pods' room given back (with the devices their claims hold), every other
    gang's pods, reservations and exclusive domains, and the room other schedulers nominated, in place."""
    state = scheduler.state
    nodes = state.table.nodes
    give_back: dict[str, Counter[str]] = {}
    for pod_key, node in placed.items():
        pod = state.pods.get(pod_key)
        if pod is not None:
            give_back.setdefault(node, Counter()).update(state.claimed.held(pod, nodes))
    free = unpin(gang, {gang.root.id})
    snapshot = snapshot_for(state, scheduler.membership, group, free, give_back=give_back)
    result = plan(snapshot, free, explain=True)
    if not isinstance(result, Plan):
        return Why(REPLAYED, refused=result.message)
    tree = state.table.tree(gang.topology)
    return Why(REPLAYED, result.rankings, _moved(gang, tree, state.table.index, placed, result))


def _moved(
    gang: Gang, tree: TopologyTree, index: Mapping[str, int], placed: Mapping[str, str], result: Plan
) -> tuple[str, ...]:
    """The constrained scopes whose pods RESULT puts in other domains (of the level it holds the
    scope at) than those they are in."""
    levels = {tree.level_name(level): level for level in range(tree.depth)}

    def domains(where: Mapping[str, str], keys: list[str], level: int) -> str:
        nodes = [index[n] for k in keys if (n := where.get(k)) is not None and n in index]
        found = {str(tree.ref(tree.node_domain(i, level))) for i in nodes}
        return ", ".join(sorted(found))

    out = []
    for scope in gang.scopes:
        planned = result.domains.get(scope.key)
        level = levels.get(planned.level) if planned is not None else None
        if level is None:
            continue
        keys = [m.key for m in scope.all_members()]
        now, was = domains(result.assignments, keys, level), domains(placed, keys, level)
        if now != was:
            out.append(f"{scope.label} is in {was or 'no domain'}; planned now it would go to {now or 'no domain'}")
    return tuple(out)


# -- words ---------------------------------------------------------------------------------------


def why_lines(why: Why) -> list[str]:
    """The text of WHY: a heading, then one line per scope and kind (the climbs of a compactness or
    preference folded into the line of the level that held it)."""
    if why.refused:
        return [f"planned again now it would not fit (the cluster changed since it was placed): {why.refused}"]
    if not why.rankings:
        return []
    if why.basis == DRY_RUN:
        head = "Why there (planning it now):"
    elif why.moved:
        head = "Why there (planned again now, its own pods' room given back; the cluster changed since):"
    else:
        head = "Why there (planned again now, its own pods' room given back, it goes where it is):"
    lines = [head, *(f"  {m}" for m in why.moved)]
    root = why.rankings[0].scope
    told = [_line(group) for group in _grouped(why.rankings) if group[0].scope == root or _decided(group)]
    lines += [f"  {t}" for t in told[:SHOWN]]
    if len(told) > SHOWN:
        lines.append(f"  ... and {len(told) - SHOWN} more (-o json lists every one)")
    return lines


def _grouped(rankings: Sequence[Ranking]) -> list[list[Ranking]]:
    """Consecutive rankings of one scope and kind (a climb through the levels), together."""
    out: list[list[Ranking]] = []
    for r in rankings:
        last = out[-1][-1] if out else None
        if last is not None and last.scope == r.scope and last.kind == r.kind and last.chosen is None:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def _decided(group: Sequence[Ranking]) -> bool:
    """Whether the rankings chose among something: a compactness no domain had room for (4 pods of
    8 GPUs on nodes of 8) says nothing worth a line but of the gang itself; the JSON keeps them."""
    return group[-1].chosen is not None or group[-1].kind != COMPACT or any(r.fitting for r in group)


def _kind(r: Ranking) -> str:
    if r.kind == REQUIRED:
        return f"required {r.level}"
    if r.kind == PREFERRED:
        return "preferred level"
    return "compactness (no preference written)"


def _line(group: Sequence[Ranking]) -> str:
    last = group[-1]
    missed = [r for r in group if r.chosen is None]
    head = f"{last.label}, {_kind(last)}: "
    if missed:
        levels = _either([r.level for r in missed])
        climb = f"no {levels} of {missed[0].region} has room for its minimum ({_pods(last)})"
        if last.chosen is None:
            return head + climb + (f": spread over {last.region}" if last.spread else "")
        head += f"{climb}; "
    return head + describe(last)


def describe(r: Ranking) -> str:
    """One chosen domain among its candidates, and what the runner-up lacked."""
    assert r.chosen is not None
    minimum = f"with room for its minimum ({_pods(r)})" if r.minimum else "(minimum 0 pods)"
    if r.ranked == 1:
        out = f"{r.chosen}, the only {r.level} in {r.region} {minimum}"
    else:
        count = _plural(r.ranked, r.level)
        out = f"{r.chosen}, ranked {_ordinal(r.chosen_rank + 1)} of {count} in {r.region} {minimum}"
    if r.domains > r.fitting:
        out += f"; {r.domains - r.fitting} other {r.level}{'' if r.domains - r.fitting == 1 else 's'} had less room"
    if r.fitting > r.ranked:
        left = "away from its running pods" + (" or held by other gangs" if r.kind == REQUIRED else "")
        out += f"; {r.fitting - r.ranked} left out, {left}"
    if r.tried:
        out += f"; ranked ahead of it, its contents did not fit in {', '.join(map(str, r.tried))}"
    chosen = next(c for c in r.candidates if c.domain == r.chosen)
    runner = next((c for c in r.candidates if c.domain != r.chosen and c.domain not in r.tried), None)
    if runner is None:
        return out + ("; the others ranked ahead of it could not take it" if r.ranked > 1 else "")
    return out + f"; runner-up {runner.domain}: {versus(r, chosen, runner)}"


def versus(r: Ranking, a: RankedDomain, b: RankedDomain) -> str:
    """Why A ranked before B: the first of the ranking's keys on which they differ."""
    for key in r.keys:
        if key == ALLOTTED and a.allotted != b.allotted:
            return (
                f"{a.domain} was allotted to it with the siblings that ask for the same: the fewest {r.level}s for"
                " them all (the most room first, the last the tightest)"
            )
        if key == SPANS and a.spans != b.spans:
            spans = _plural(b.spans or 0, r.preferred)
            return f"its pods would span {spans} there, {a.spans} in {a.domain} (its preference)"
        if key == INNER and a.inner != b.inner:
            return (
                f"its SubGroups would span {b.inner} domains of their preferred levels there, {a.inner} in {a.domain} "
                "(their preferences)"
            )
        if key == HOLDS_ALL and a.holds_all != b.holds_all:
            return f"room for its minimum but not all {r.pods} pods; {a.domain} holds them all"
        if key == ROOM and a.room != b.room:
            whole = (a.free, b.free) != (a.room, b.room)  # room counted in whole parts: fragments left out
            parts = f" (counted in whole parts; pod by pod {b.free} and {a.free})" if whole else ""
            if a.holds_all:
                return (
                    f"it would leave room for {b.room - r.pods} more pods, {a.domain} for {a.room - r.pods} "
                    f"(the tightest fit first){parts}"
                )
            return f"room for {b.room} pods, {a.domain} for {a.room} (the most room first){parts}"
        if key == PARTS and a.parts != b.parts:
            took = "no room for them" if b.parts is None else f"{b.parts} domains"
            return f"its segments would take {took} there, {a.parts} in {a.domain} (the fewest)"
    return f"equal on every count; {a.domain} comes first by name"


def _pods(r: Ranking) -> str:
    return f"{_plural(r.minimum, 'pod')} x {r.shape}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _either(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


# -- data ----------------------------------------------------------------------------------------


def why_json(why: Why | None) -> dict[str, Any] | None:
    """WHY as `explain -o json` gives it (docs/cli.md documents the fields)."""
    if why is None:
        return None
    return {
        "basis": why.basis,
        "movedSince": list(why.moved),
        "refused": why.refused or None,
        "decisions": [_ranking_json(r) for r in why.rankings],
    }


def _ranking_json(r: Ranking) -> dict[str, Any]:
    chosen = next((c for c in r.candidates if c.domain == r.chosen), None)
    runner = next((c for c in r.candidates if c.domain != r.chosen and c.domain not in r.tried), None)
    return {
        "scope": r.scope,
        "label": r.label,
        "kind": r.kind,
        "level": r.level,
        "region": str(r.region),
        "pods": r.pods,
        "minimum": r.minimum,
        "shape": r.shape,
        "domains": r.domains,
        "withRoom": r.fitting,
        "ranked": r.ranked,
        "keys": list(r.keys),
        "preferredLevel": r.preferred or None,
        "chosen": str(r.chosen) if r.chosen is not None else None,
        "chosenRank": r.chosen_rank if r.chosen is not None else None,
        "spread": r.spread,
        "tried": [str(d) for d in r.tried],
        "runnerUp": str(runner.domain) if runner is not None else None,
        "why": versus(r, chosen, runner) if chosen is not None and runner is not None else None,
        "candidates": [
            {
                "domain": str(c.domain),
                "room": c.room,
                "free": c.free,
                "holdsAll": c.holds_all,
                "spans": c.spans,
                "inner": c.inner,
                "partDomains": c.parts,
                "allotted": c.allotted,
            }
            for c in r.candidates
        ],
    }
