"""Candidate domains for a preemption, ranked by a cheap estimate of what each would cost.

A gang whose root has a required level goes whole into one domain of that level, so victims
are chosen per domain. For every domain at once (numpy over the victims' pods): the room the
gang's minimum needs, per resource, against the free room of the nodes its pods may use there;
then the shortest prefix of that domain's victim units, cheapest first, whose pods would free
enough. Summed room ignores fragmentation and finer constraints, so the estimate is optimistic:
good for ordering domains and as a first guess, and the engine has the last word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from extender.placement.snapshot import ClusterSnapshot
from extender.placement.tree import BoolArray, Domain, IntArray, TopologyTree
from extender.placement.victim_units import UnitTable

# Estimated key of a domain where the free room already suffices (no victim needed by count).
NOTHING = (-(2**62), 0, 0, 0)


@dataclass(frozen=True)
class Candidate:
    domain: Domain
    units: IntArray  # unit ranks with pods in the domain, cheapest first
    first: int  # how many of them the summed room says must go
    key: tuple[int, int, int, int]  # estimated (top tier, workloads, pods, measured resource taken)
    room: int = 1  # how many times the summed room, with every unit gone, holds what was asked


def rank_domains(
    snapshot: ClusterSnapshot,
    tree: TopologyTree,
    level: int,
    units: UnitTable,
    needed: Mapping[str, int],
    eligible: BoolArray,
    allowed: BoolArray,
    only: int | None = None,
) -> list[Candidate]:
    """Domains of `level` that could hold the minimum if every allowed unit in them went, best
    first."""
    li = tree.levels[level]
    ndom = len(li.starts)
    dom_of_node = li.domain_of_node
    avail = {}
    for r in needed:
        free = np.where(eligible, np.maximum(snapshot.free(r), 0), 0)
        avail[r] = np.zeros(ndom, dtype=np.int64)
        np.add.at(avail[r], dom_of_node, free)
    rows = _rows(units, dom_of_node, eligible, allowed, needed)
    row_dom, row_rank, freed = rows
    starts = np.flatnonzero(np.diff(row_dom, prepend=-1)) if len(row_dom) else np.zeros(0, dtype=np.int64)
    ends = np.append(starts[1:], len(row_dom)).astype(np.int64)
    ok = np.ones(len(row_dom), dtype=np.bool_)
    cum: dict[str, IntArray] = {}
    for r, need in needed.items():
        cum[r] = _group_cumsum(freed[r], starts, ends)
        ok &= avail[r][row_dom] + cum[r] >= need
    cum_whole = _group_cumsum(units.whole[row_rank].astype(np.int64), starts, ends)
    cum_pods = _group_cumsum(units.cost_pods[row_rank], starts, ends)
    cum_taken = _group_cumsum(units.cost_taken[row_rank], starts, ends)
    first_ok = np.where(ok, np.arange(len(ok)), len(ok))

    def room(d: int, lo: int, hi: int) -> int:
        """How many times everything in domain d, every unit gone, holds `needed`."""
        return min(int(avail[r][d] + (cum[r][hi - 1] if hi > lo else 0)) // need for r, need in needed.items())

    out: list[Candidate] = []
    seen: set[int] = set()
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        d = int(row_dom[lo])
        seen.add(d)
        if (only is not None and d != only) or not li.labeled[d]:
            continue
        ranks = row_rank[lo:hi]
        if all(avail[r][d] >= need for r, need in needed.items()):
            out.append(Candidate(Domain(level, d), ranks, 0, NOTHING, room(d, lo, hi)))
            continue
        f = int(first_ok[lo:hi].min()) if hi > lo else len(ok)
        if f >= hi:
            continue  # even every unit here would not free enough
        key = (int(units.tier[row_rank[f]]), int(cum_whole[f]), int(cum_pods[f]), int(cum_taken[f]))
        out.append(Candidate(Domain(level, d), ranks, f - lo + 1, key, room(d, lo, hi)))
    for d in range(ndom):  # domains with no victim at all, where the room may suffice already
        if d in seen or (only is not None and d != only) or not li.labeled[d]:
            continue
        if all(avail[r][d] >= need for r, need in needed.items()):
            out.append(Candidate(Domain(level, d), np.zeros(0, dtype=np.int64), 0, NOTHING, room(d, 0, 0)))
    out.sort(key=lambda c: (c.key, c.domain.index))
    return out


def _rows(
    units: UnitTable, dom_of_node: IntArray, eligible: BoolArray, allowed: BoolArray, needed: Mapping[str, int]
) -> tuple[IntArray, IntArray, dict[str, IntArray]]:
    """One row per (domain, unit) with pods there, sorted by domain then rank: what it frees."""
    on = (units.pod_node >= 0) & allowed[units.pod_unit]
    nodes = units.pod_node[on]
    doms = dom_of_node[nodes]
    ranks = units.pod_unit[on]
    counts = eligible[nodes]
    n = max(len(units), 1)
    keys = doms * n + ranks
    uniq, inv = np.unique(keys, return_inverse=True)
    freed = {}
    for r in needed:
        arr = np.zeros(len(uniq), dtype=np.int64)
        np.add.at(arr, inv, np.where(counts, units.pod_req[r][on], 0))
        freed[r] = arr
    return uniq // n, uniq % n, freed


def _group_cumsum(values: IntArray, starts: IntArray, ends: IntArray) -> IntArray:
    """Cumulative sums restarting at each group."""
    total = np.cumsum(values)
    if not len(total):
        return total
    before = np.where(starts > 0, total[np.maximum(starts - 1, 0)], 0)
    out: IntArray = total - np.repeat(before, ends - starts)
    return out


def rank_nested(
    snapshot: ClusterSnapshot,
    tree: TopologyTree,
    level: int,
    units: UnitTable,
    chunk: tuple[int, Mapping[str, int], int],
    eligible: BoolArray,
    allowed: BoolArray,
    only: int | None = None,
) -> list[Candidate]:
    """Domains of `level` for a gang made of `count` chunks that each need one domain of a finer
    level (segments that each need a rack): inside each domain, the finer domains that are
    cheapest to free for one chunk, and the units to evict in that order."""
    chunk_level, need, count = chunk
    inner = rank_domains(snapshot, tree, chunk_level, units, need, eligible, allowed)
    li = tree.levels[level]
    starts = tree.levels[chunk_level].starts
    by_outer: dict[int, list[Candidate]] = {}
    for cand in inner:  # already cheapest first
        outer = int(li.domain_of_pos[starts[cand.domain.index]])
        if (only is None or outer == only) and li.labeled[outer]:
            by_outer.setdefault(outer, []).append(cand)
    out = []
    for outer, cands in by_outer.items():
        chosen, rest, hosted = [], [], 0
        for c in cands:  # cheapest first, each taking as many chunks as its room allows
            if hosted < count:
                chosen.append(c)
                hosted += max(1, c.room)
            else:
                rest.append(c)
        if hosted < count:
            continue  # even with every unit gone, its finer domains would not hold every chunk
        # a finer domain that takes one chunk needs its estimated prefix; more than one, all of it
        head = [c.units[: c.first] if c.room <= 1 else c.units for c in chosen]
        tail = [c.units[c.first :] for c in chosen if c.room <= 1] + [c.units for c in rest]
        order = _unique(np.concatenate([*head, *tail]) if head or tail else np.zeros(0, dtype=np.int64))
        first = len(_unique(np.concatenate(head))) if head else 0
        key = (
            max(c.key[0] for c in chosen),
            sum(c.key[1] for c in chosen),
            sum(c.key[2] for c in chosen),
            sum(c.key[3] for c in chosen),
        )
        out.append(Candidate(Domain(level, outer), order, first, key, hosted))
    out.sort(key=lambda c: (c.key, c.domain.index))
    return out


def _unique(ranks: IntArray) -> IntArray:
    """Ranks without repeats, in the order they first appear."""
    _, first = np.unique(ranks, return_index=True)
    out: IntArray = ranks[np.sort(first)]
    return out
