"""Exclusive topology (LeaderWorkerSet's exclusive-topology annotations) as node masks.

A scope with an exclusive rule takes a domain of its level that hosts no other gang's pods
(`busy`), and while it holds it no other gang may place pods there (`blocked`). Both masks are
only built when some gang asks for exclusivity, so ordinary plans pay nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from extender.core.cluster import ClusterState
from extender.core.membership import Membership
from extender.core.nominated import nominated_room
from extender.placement import BoolArray, ClusterSnapshot, Gang


def _exclusive(gang: Gang | None) -> bool:
    return gang is not None and any(s.rule is not None and s.rule.exclusive for s in gang.scopes)


def snapshot_for(
    state: ClusterState,
    membership: Membership,
    group: str,
    gang: Gang,
    held: BoolArray | None = None,
    give_back: Mapping[str, Mapping[str, int]] | None = None,
    taken: Mapping[str, Mapping[str, int]] | None = None,
) -> ClusterSnapshot:
    """The cluster as GROUP's plan sees it: HELD (nodes reservations keep from it) and the
    domains other gangs hold exclusively are blocked, and the room of pods other schedulers
    nominated (of at least its priority) is taken. GIVE_BACK: room counted free again (node ->
    requests; `explain` gives a placed gang its own pods' room back to plan it again). TAKEN:
    room counted taken besides (node -> requests: the minimums a plan's optional pods leave room
    for, core/minimums.py)."""
    room = nominated_room(state, membership, group)
    if taken:
        room = {n: Counter(room.get(n, {})) + Counter(taken.get(n, {})) for n in {*room, *taken}}
    base = state.snapshot(give_back, taken=room)
    if held is not None:
        base = ClusterSnapshot(base.table, base.usage, held)
    others = []
    for other in membership.exclusive_groups():  # known from specs: no other gang is built here
        if other == group:
            continue
        view = membership.view(other)
        g = view.built.gang if view.built else None
        if g is not None and _exclusive(g):
            others.append(g)
    mine = _exclusive(gang)
    if not others and not mine:
        return base
    table = state.table
    index = table.index
    placed: dict[str, str] = {}  # pod -> node, bound or reserved
    for pod in state.pods.values():
        if pod.uses_capacity and pod.node_name is not None:
            placed[pod.key] = pod.node_name
    for pod_key, (node, _) in state.reservations.items():
        placed.setdefault(pod_key, node)

    blocked: BoolArray = np.zeros(len(table), dtype=np.bool_) if held is None else held.copy()
    for g in others:
        tree = table.tree(g.topology)
        for scope in g.scopes:
            if scope.rule is None or not scope.rule.exclusive or scope.rule.required is None:
                continue
            level = scope.rule.required
            for member in scope.all_members():
                where = placed.get(member.key)
                if where is None or where not in index:
                    continue
                blocked[tree.nodes_in(tree.node_domain(index[where], level))] = True

    busy: BoolArray | None = None
    if mine:
        busy = np.zeros(len(table), dtype=np.bool_)
        for pod_key, node in placed.items():
            owner = membership.group_of(pod_key)
            if owner is not None and owner != group and node in index:
                busy[index[node]] = True
    return ClusterSnapshot(table, base.usage, blocked, busy)
