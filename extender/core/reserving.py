"""Reservations in the running scheduler: the gangs waiting for room, handed to the pure
`core/reservations.py` with the cluster as arrays, and the room it holds as a node mask.

A gang joins the queue here when its plan is refused for room (a `Shortfall` other than missing
pods) and leaves it when it is planned, preempts, repairs or goes away. `refresh` (the sweep)
asks `reserve` who holds room where; `held_from` answers, for any work about to be planned (a
gang, or a plain pod in the filter), which nodes it may not use: the reserved domains that do not
admit it (`admits`: the gang itself, a higher priority, or work whose runtime bound ends before
the gang's estimated start). The planner sees those nodes as blocked, as it sees a domain another
gang holds exclusively.

Clocks: the core's callers pass a monotonic `now`; pods carry wall-clock times (creation, start),
and estimated starts are shown as wall-clock times. `refresh` is given both and keeps their
offset, so a filter call's `now` can be compared with an estimated start.

Free room is the planner's own (`ClusterState.snapshot`: bound pods, reservations, devices that
allocated claims hold), and a running pod gives back at its expected end what preemption would
take from it (its requests and the devices of its own claims), so an estimate and the plan agree.
Room is counted on the schedulable nodes some pod of the gang may use (taints, selectors), in
pods of the gang's largest request per resource: a gang of shapes with different rules makes the
estimate optimistic, never a plan wrong (the plan itself still checks every node). Each Topology
is reserved in on its own; the limit applies to all of them together, in queue order.

Overdue gangs (their maximum wait, `scheduling.topogang.io/max-wait` else `--max-wait`, has
passed) come first in the pass (core/reservations.py); the passes also give the first
`Settings.estimates` gangs in the pass's order an estimated start (core/estimates.py: one walk
spread over passes, `Settings.estimates_per_pass` gangs a pass, core/waiting.py), expecting
unbounded pods to end as the run times of finished pods of their owner kind say (core/lifetimes.py,
learnt here from the pods seen to finish).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from extender.core.cluster import ClusterState
from extender.core.demand import gang_demand, usable_nodes
from extender.core.feasible import Feasibility
from extender.core.held_room import ReservedRoom
from extender.core.membership import Membership
from extender.core.reservations import (
    Admission,
    BoolArray,
    FloatArray,
    IntArray,
    Layout,
    Matrix,
    Reservation,
    Running,
    Settings,
    Waiting,
    admits,
    below_cut,
    reserve,
)
from extender.core.waiting import Waits, kind_of
from extender.core.waits import Expected, Overdue
from extender.model.pod import PodInfo
from extender.model.topology import LevelError, TopologySpec
from extender.placement import Domain, Gang, NodeTable, Shortfall


class Reserving:
    def __init__(
        self, state: ClusterState, membership: Membership, settings: Settings, level: str | None = None
    ) -> None:
        """LEVEL: only gangs that need a domain of this level (a node label, alias or short
        name) or a coarser one get reservations, in each Topology that has it; in a Topology
        without it, any gang may (settings.coarsest_only, by name rather than number)."""
        self._state = state
        self._membership = membership
        self.feasible = Feasibility(state)  # a gang that fits not even with nothing running waits for nothing
        self.settings = settings
        self.level = level
        self._below: set[str] = set()  # queued gangs that need less than LEVEL: no reservation
        self.current: tuple[Reservation, ...] = ()
        self._topology: dict[str, str] = {}  # reserved group -> the Topology its domain is of
        # group -> since when it waits for room: its creation (wall clock), else when it queued
        # (the callers' clock, made a wall-clock time with the offset a pass learns)
        self._queued: dict[str, tuple[float | None, float]] = {}
        self._tried: dict[str, int] = {}  # group -> the cluster version it was last tried at
        self._rows: dict[str, _Row] = {}  # pod -> what it adds to the running arrays (see _running)
        self._rows_key: tuple[int, tuple[str, ...]] = (-1, ())
        self._arrays: tuple[IntArray, Matrix, FloatArray, FloatArray] | None = None  # built from the rows
        self._kinds: list[str] = []  # each row's owner kind, in the order of the arrays
        self._reserved_at = -1  # the reservations' version the arrays were built with
        self._recorded: dict[str, str] = {}  # group -> the reservation its PodGroup status shows
        self._waited: dict[str, tuple[str, str]] = {}  # group -> (overdue, queue) its PodGroup status shows
        self.told: set[str] = set()  # gangs found waiting outside kube-scheduler's calls: status to write
        self._layouts: dict[tuple[int, str, tuple[str, ...]], Layout] = {}
        self._offset = 0.0  # wall clock minus the callers' clock, as of the last refresh
        self._clock = False  # whether a pass was given a wall clock (else times are not shown)
        self._wall = 0.0  # the wall clock at the last pass
        self._mask: BoolArray | None = None  # nodes some reservation holds (None: none)
        self._names: frozenset[str] | None = None  # their names, once asked
        self._freed = False  # held nodes were let go since take_freed
        self._generation = -1  # the node table's generation the reservations' node indices are of
        self.waits = Waits(state, membership, settings)  # maximum waits, overdue gangs, estimated starts

    @property
    def enabled(self) -> bool:
        """Whether gangs queue for room: for reservations, or only for estimated starts."""
        return self.settings.limit > 0 or self.settings.estimates > 0

    # -- the queue -----------------------------------------------------------------------------

    def waiting(self, group: str, now: float, gang: Gang) -> Shortfall | None:
        """GROUP's plan was refused for room: it queues, since its creation (kube-scheduler's
        queue order) or now, unless it fits not even with nothing running (returned: why)."""
        never = self.feasible.never(group, gang)
        if never is None and self.enabled and group not in self._queued:
            self._queued[group] = (self._membership.view(group).created, now)
        return never

    def _since(self, group: str) -> float:
        created, queued = self._queued[group]
        return created if created is not None else queued + self._offset

    def queued(self) -> list[str]:
        return list(self._queued)

    def is_queued(self, group: str) -> bool:
        return group in self._queued

    def untried(self, group: str, version: int) -> bool:
        """Whether GROUP was not tried at this VERSION of the cluster yet (and is now)."""
        if self._tried.get(group) == version:
            return False
        self._tried[group] = version
        return True

    def placed(self, group: str) -> bool:
        """GROUP left the queue (planned, preempting, repairing, gone): its reservation goes.
        True when nodes it held were let go (the gangs refused for them may fit now)."""
        self._queued.pop(group, None)
        self.waits.forget(group)
        if not any(r.key == group for r in self.current):
            return False
        self._set(tuple(r for r in self.current if r.key != group))
        return True

    def started(self, group: str) -> bool:
        """GROUP was planned: it leaves the queue (`placed`); if it was overdue, it is spared from
        preemption by work that is not (Waits.spared)."""
        if group in self.waits.overdue:
            self.waits.protected.add(group)
        return self.placed(group)

    def drop_all(self) -> None:
        """This replica stops leading: nothing is held and nobody queues (a new term starts
        from what the cluster shows)."""
        self._queued.clear()
        self._tried.clear()
        self._below = set()
        self.told.clear()
        self.waits.clear()
        self._set(())
        self._freed = False

    def sweep(self, groups: set[str]) -> bool:
        self.waits.protected &= groups
        self.feasible.sweep(groups)
        self._recorded = {g: v for g, v in self._recorded.items() if g in groups}
        self._waited = {g: v for g, v in self._waited.items() if g in groups}
        self._tried = {g: v for g, v in self._tried.items() if g in groups}
        gone = [g for g in self._queued if g not in groups]
        freed = [self.placed(g) for g in gone]  # every one, not up to the first True
        return any(freed)

    # -- what is held --------------------------------------------------------------------------

    def _current(self) -> bool:
        """Whether the reservations' node indices are still those of the node table (a node
        added or removed renumbers them: they are dropped until the next refresh)."""
        if self.current and self._generation != self._state.table.generation:
            self._set(())
        return bool(self.current)

    def of(self, group: str) -> ReservedRoom | None:
        if not self._current():
            return None
        for r in self.current:
            if r.key == group:
                topology = self._state.topologies.get(self._topology.get(group, ""))
                if topology is None:
                    return None
                tree = self._state.table.tree(topology)
                ref, after = tree.ref(Domain(r.level, r.domain)), max(0.0, r.start - self._wall)
                late = r.overdue is not None
                if not self._clock:  # no wall clock was given: the times are only relative
                    return ReservedRoom(ref, len(r.nodes), None, None, after, late)
                return ReservedRoom(ref, len(r.nodes), r.start, r.made, after, late)
        return None

    def overdue_of(self, group: str) -> Overdue | None:
        """Whether GROUP is overdue, since when, and whether room is held for it."""
        holding = any(r.key == group for r in self.current)
        return self.waits.overdue_of(group, holding, self._clock, self._wall)

    def expected(self, group: str) -> Expected | None:
        """GROUP's estimated start as of the last pass (Waits.expected)."""
        return self.waits.expected(group, self._clock, self._wall)

    def estimated_starts(self) -> dict[str, float]:
        """Group -> its estimated start (wall clock), for the gangs that have one (a metric)."""
        return {
            g: e.start
            for g in list(self.waits.estimates)
            if (e := self.expected(g)) is not None and e.start is not None
        }

    def note(self, group: str, text: str | None, waiting: tuple[str, str] = ("", "")) -> None:
        """What GROUP's PodGroup status says is held for it (the leader wrote it), and WAITING:
        what it says of its wait (overdue since, its place and estimated start), for `explain`."""
        if text is None:
            self._recorded.pop(group, None)
        else:
            self._recorded[group] = text
        if waiting == ("", ""):
            self._waited.pop(group, None)
        else:
            self._waited[group] = waiting

    def recorded_wait(self, group: str) -> tuple[str, str]:
        """(overdue, queue) as GROUP's PodGroup status says them; ("", "") when it says nothing."""
        return self._waited.get(group, ("", ""))

    def text(self, group: str) -> str:
        """The room held for GROUP: this replica's reservation, else what its PodGroup tells of,
        else why it may hold none (it needs less than --reserve-level)."""
        room = self.of(group)
        if room is not None:
            return room.render()
        if group in self._below and group in self._queued:
            return (
                f"none: only gangs that need a domain of level {self.level} or coarser may hold room (--reserve-level)"
            )
        return self._recorded.get(group, "")

    def held(self) -> list[tuple[str, ReservedRoom]]:
        return [(r.key, h) for r in self.current if (h := self.of(r.key)) is not None]

    def held_from(self, key: str, priority: int, bound: float | None, now: float) -> BoolArray | None:
        """Nodes whose room work KEY (a group or a pod) of PRIORITY may not use; BOUND: the most
        seconds it runs (None: unknown). None when nothing is held from it. Read-only: when every
        reservation holds it out (the common case) it is the one mask they all share."""
        if self._mask is None or not self._current():
            return None
        ends = None if bound is None else now + self._offset + bound
        late = key in self.waits.overdue  # (a group; a plain pod is never overdue)
        holding = [r for r in self.current if admits(r, key, priority, ends, late) is Admission.HELD]
        if len(holding) == len(self.current):
            return self._mask
        if not holding:
            return None
        out = np.zeros(len(self._state.table), dtype=np.bool_)
        for r in holding:
            out[r.nodes] = True
        return out

    def held_names(self, key: str, priority: int, bound: float | None, now: float) -> frozenset[str]:
        """The names of the nodes `held_from` answers (for the plain-pod filter, which has names)."""
        mask = self.held_from(key, priority, bound, now)
        if mask is None:
            return frozenset()
        if mask is self._mask and self._names is not None:
            return self._names
        nodes = self._state.table.nodes
        names = frozenset(nodes[i].name for i in np.flatnonzero(mask))
        if mask is self._mask:
            self._names = names
        return names

    def admission(self, group: str, key: str, priority: int, bound: float | None, now: float) -> Admission:
        """How GROUP's reservation admits work KEY (for the log and explain)."""
        ends = None if bound is None else now + self._offset + bound
        for r in self.current:
            if r.key == group:
                return admits(r, key, priority, ends, key in self.waits.overdue)
        return Admission.OWN

    def take_freed(self) -> bool:
        """Whether held nodes were let go since the last call (the work refused for them may
        fit now, and kube-scheduler has no event to retry it on)."""
        freed, self._freed = self._freed, False
        return freed

    def _set(self, current: tuple[Reservation, ...]) -> None:
        before = self._mask
        self.current = current
        self._generation = self._state.table.generation
        self._topology = {k: v for k, v in self._topology.items() if any(r.key == k for r in current)}
        mask: BoolArray | None = None
        if current:
            mask = np.zeros(len(self._state.table), dtype=np.bool_)
            for r in current:
                mask[r.nodes] = True
        if before is not None and (mask is None or len(mask) != len(before) or bool((before & ~mask).any())):
            self._freed = True
        self._mask = mask
        self._names = None

    # -- the pass ------------------------------------------------------------------------------

    def wall(self, now: float) -> float | None:
        """The wall-clock time of the callers' NOW, once a pass was given a wall clock."""
        return now + self._offset if self._clock else None

    def refresh(self, now: float, wall: float | None, ready: Mapping[str, Gang]) -> tuple[list[str], list[str]]:
        """Who holds room where now, who is overdue, and when the first gangs waiting are
        expected to start. READY: the queued gangs that may still be planned (built, whole, not
        planned), which the caller checked. WALL: the wall clock at NOW; None when there is none
        (a simulation of input without times): the estimates are then made on the callers'
        clock and shown only as durations. Returns (groups given a reservation now, groups whose
        reservation went); the groups that became overdue are added to `waits.became_overdue`."""
        self._clock = wall is not None
        wall = now if wall is None else wall
        self._offset, self._wall = wall - now, wall
        self.waits.learn(wall)
        for group in [g for g in self._queued if g not in ready or self.feasible.never(g, ready[g]) is not None]:
            del self._queued[group]  # (planned, gone, or a node went: it fits not even with nothing running)
            self.waits.forget(group)
        self._current()
        before = {r.key for r in self.current}
        if not self.enabled or not self._queued:
            self._set(())
            return [], sorted(before)
        table = self._state.table
        order = sorted(self._queued, key=lambda g: (-self._membership.view(g).priority, self._since(g), g))
        ranked = self.waits.rank(order, self._since, wall)
        by_topology: dict[str, list[str]] = {}
        for g in order:
            by_topology.setdefault(ready[g].topology.name, []).append(g)
        found: list[Reservation] = []
        self._below = set()
        for name, groups in by_topology.items():
            spec = self._state.topologies.get(name)
            if spec is None:
                continue
            columns = sorted({r for g in groups for s in ready[g].shapes for r, v in s.requests if v > 0})
            key = (table.generation, name, tuple(columns))  # (its capacity is per column)
            layout = self._layouts.get(key)
            if layout is None:
                tree = table.tree(spec)
                capacity = _matrix(table, columns)
                capacity[~table.schedulable] = 0
                layout = Layout([li.domain_of_node for li in tree.levels], capacity, [li.labeled for li in tree.levels])
                self._layouts = {key: layout}  # one per generation, Topology and columns in use
            queue = [
                Waiting(
                    g,
                    self._membership.view(g).priority,
                    self._since(g),
                    gang_demand(ready[g], columns),
                    self.waits.limits.get(g),
                    usable_nodes(table, ready[g]),
                )
                for g in groups
            ]
            free = self._free(layout, columns)
            mine = tuple(r for r in self.current if self._topology.get(r.key) == name)
            settings = self._settings_for(spec)
            self._below.update(w.key for w in queue if below_cut(layout, w.demand, settings))
            running = self._running(wall, columns)
            made = reserve(wall, queue, free, running, layout, mine, settings)
            for r in made:
                found.append(r)
                self._topology[r.key] = name
            if self._arrays is not None:
                _, _, started_at, bound = self._arrays
                rows = (~np.isnan(bound), np.where(np.isnan(started_at), wall, started_at), self._kinds)
                self.waits.walk(name, wall, queue, (free, running, layout, made, settings), rows, ready)
        rank = {g: i for i, g in enumerate(ranked)}
        ordered = sorted(found, key=lambda r: rank[r.key])
        kept = sum(1 for r in ordered if r.overdue is not None) if self.settings.each_overdue else 0
        chosen = tuple(ordered[: max(self.settings.limit, kept)])
        self._set(chosen)
        after = {r.key for r in chosen}
        return sorted(after - before), sorted(before - after)

    def _free(self, layout: Layout, columns: Sequence[str]) -> Matrix:
        """Room free now per node and column, as the planner reads it (`ClusterState.snapshot`:
        bound pods, reservations and devices allocated claims hold); none on unschedulable nodes.
        Below zero where more is held than the node has (a preemptor's room reserved while its
        victims still run): both free as they end, so the deficit is kept for them to fill, not
        clipped (what fits reads negative room as none: `_fit`)."""
        snapshot = self._state.snapshot()
        out: Matrix = np.stack([snapshot.free(r) for r in columns], axis=1).astype(np.int64)
        return np.minimum(out, layout.capacity)

    def _settings_for(self, spec: TopologySpec) -> Settings:
        """The settings for SPEC's gangs: with a level, only gangs of that level or coarser."""
        if self.level is None:
            return self.settings
        try:
            return replace(self.settings, coarsest_only=spec.level(self.level))
        except LevelError:
            return self.settings

    def _running(self, wall: float, columns: Sequence[str]) -> Running:
        """Running pods, and pods about to run, as arrays, their expected ends at WALL. What each
        pod contributes is kept between passes (a pod's PodInfo is replaced when it changes, so
        identity says whether it did): a pass costs one look per pod and vector arithmetic, not a
        parse of every pod."""
        key = (self._state.table.generation, tuple(columns))
        if self._rows_key != key:
            self._rows_key, self._rows, self._arrays = key, {}, None
        table = self._state.table
        claims = self._state.devices.claims_version
        rows = self._rows
        changed = len(rows) != len(self._state.pods) or self._arrays is None
        changed |= self._reserved_at != self._state.reserved_version
        for name, pod in self._state.pods.items():
            row = rows.get(name)
            if row is None or row.pod is not pod or (pod.claims and row.claims != claims):
                row = rows[name] = _Row.of(pod, self._state, table, columns)
                changed = True
        if len(rows) > len(self._state.pods):  # deleted pods' rows
            self._rows = rows = {k: v for k, v in rows.items() if k in self._state.pods}
        if changed or self._arrays is None:
            self._reserved_at = self._state.reserved_version
            kept = [r for r in rows.values() if r.node >= 0] + _about_to_run(self._state, table, columns)
            self._kinds = [r.kind for r in kept]
            self._arrays = (
                np.fromiter((r.node for r in kept), np.int64, len(kept)),
                np.array([r.request for r in kept], dtype=np.int64).reshape(len(kept), len(columns)),
                np.fromiter((np.nan if r.started is None else r.started for r in kept), np.float64, len(kept)),
                np.fromiter((np.nan if r.bound is None else r.bound for r in kept), np.float64, len(kept)),
            )
        node, request, started_at, bound = self._arrays
        started = np.where(np.isnan(started_at), wall, started_at)
        floor, stretch = self.settings.floor, self.settings.stretch
        # expected_end, vectorized: at the bound, else STRETCH x as long again as it has run (at least FLOOR)
        end: FloatArray = np.where(
            np.isnan(bound),
            wall + np.maximum(stretch * (wall - started), floor),
            np.maximum(wall, started + np.nan_to_num(bound)),
        )
        return Running(node, request, end)


@dataclass(frozen=True, slots=True)
class _Row:
    """What one pod adds to the running arrays: its node index (-1: takes no room), the room it
    gives back when it ends per column, when it started and its bound. CLAIMS: the claims'
    version that room was read at (the devices its claims hold change without the pod)."""

    pod: PodInfo | None  # (None: room reserved for a pod not created yet)
    node: int
    request: tuple[int, ...]
    started: float | None
    bound: float | None
    claims: int = -1
    kind: str = ""  # its owner's kind, for the run times learnt

    @staticmethod
    def of(pod: PodInfo, state: ClusterState, table: NodeTable, columns: Sequence[str]) -> _Row:
        claims = state.devices.claims_version
        where = table.index.get(pod.node_name) if pod.uses_capacity and pod.node_name is not None else None
        if where is None:
            return _Row(pod, -1, (), None, None, claims)
        started = pod.started if pod.started is not None else pod.created
        # as preemption and repair count it: its requests and the devices its own claims hold
        # (its requests name no device once its claim is allocated)
        gives = state.claimed.held(pod, table.nodes)
        request = tuple(gives.get(r, 0) for r in columns)
        return _Row(pod, where, request, started, pod.runtime_bound, claims, kind_of(pod))


def _about_to_run(state: ClusterState, table: NodeTable, columns: Sequence[str]) -> list[_Row]:
    """Room reserved for pods about to run (plans binding, preemptors' nominations, moved pods'
    replacements): the snapshot counts it taken, so it frees as a pod that starts now would. Left
    out, a gang being bound when another becomes overdue would hold its node for good in the pass's
    eyes, and the overdue gang would get no room until the next pass."""
    out = []
    for key, (node, requests) in state.reservations.items():
        where = table.index.get(node)
        if where is None:
            continue
        pod = state.pods.get(key)  # (None: a stand-in for a pod not created yet)
        request = tuple(requests.get(r, 0) for r in columns)
        bound = pod.runtime_bound if pod is not None else None
        out.append(_Row(pod, where, request, None, bound, kind=kind_of(pod) if pod is not None else ""))
    return out


def _matrix(table: NodeTable, columns: Sequence[str]) -> Matrix:
    out: Matrix = np.stack([table.alloc(r) for r in columns], axis=1).astype(np.int64)
    return out
