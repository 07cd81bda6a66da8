"""Placement policies side by side: topogang through its engine, and the baselines users would pick.

A policy maps a job and the cluster's free GPUs to one node per pod (in pod order, segment k
being pods k*segment .. (k+1)*segment-1), or None when it cannot place the whole job now. The
baselines are small, honest versions of what each project documents, on the same cluster model
(whole levels zone > block > rack > node; a segment's pods are its *units* when it has segments):

  first-fit   topology-blind: every pod on the first node (in name order) with room, constraints
              ignored. The ceiling for allocation, the floor for locality.
  bestfit     Kueue's TAS "BestFit": a required level takes the tightest domain that holds the
              job; without one the finest level where one domain holds it; inside, each level
              takes its largest children until one child holds the rest, then the tightest such
              child. Segments count in whole slices per rack (Kueue's podset slices).
  fullest     KAI-Scheduler's binpacking: a required level takes the fullest domain (fewest free
              GPUs) that holds the job; inside it, segments go to the fullest rack that holds them
              and pods to the fullest nodes; without any constraint, the fullest nodes anywhere.
  topogang    extender.placement.plan on a ClusterSnapshot, the server's own call; the gang is
              built by build_gang from the job's PodGroup and pods (bench/tracesim/gangs.py).
              With `reserve` settings, extender.core.reservations decides after each walk which
              waiting gangs hold room where (bench/tracesim/holding.py), and each plan sees the
              held room as taken unless the reservation admits the job (its own, a higher
              priority, or a backfill that ends before the estimated start).
  topogang-whole  the same engine, each elastic gang's optional pods placed with its minimum in
              queue order, never given back (minimums first off: the order before it).
  topogang+defrag  topogang, and a gang that does not fit has movable pods (services) moved out
              of its way by the server's move search and limits (bench/tracesim/defrag.py).

Elastic jobs (a minimum below their pods): `start` places a job's minimum, and with
`minimums_first` off its optional pods too, as many as fit (the baselines: the whole job if it
fits, else its minimum, then as many optional units as fit); `grow` places optional pods of a
running job inside the domains its placed pods hold (whole segments). topogang's engine does both
itself (the job's PodGroup with its running pods given their nodes); the baselines place the
missing units as a job of their own, the nodes outside the job's required domain counted full.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from bench.tracesim.cluster import GPU, LEVELS, Cluster, IntArray
from bench.tracesim.defrag import Candidate, Limits, Mover
from bench.tracesim.gangs import NAMESPACE, gang, pod_name
from bench.tracesim.holding import Holding, Started
from bench.tracesim.workload import Job
from extender.core.reservations import Settings
from extender.placement import ClusterSnapshot, Gang, NodeTable, NoPreemption, Plan, plan

ROOT, NODE = 0, len(LEVELS) + 1  # tree levels: 0 cluster, 1 zone, 2 block, 3 rack, 4 node
RACK = LEVELS.index("rack") + 1


class Policy(Protocol):
    name: str
    aware: bool  # honours required constraints (must break none)
    minimums_first: bool  # every waiting minimum before optional pods, which give their room back
    mover: Mover | None  # moves movable pods for a gang that does not fit (topogang+defrag)

    def prepare(self, job: Job) -> None:
        """Called once when the job arrives (the server groups pods before it plans)."""

    def place(self, job: Job, used: IntArray, pods: IntArray, now: float) -> list[int] | None: ...

    def start(self, job: Job, used: IntArray, pods: IntArray, now: float, trial: bool = False) -> dict[int, int] | None:
        """Pod index -> node for the pods JOB starts with (its minimum at least), or None. TRIAL:
        only asking (nothing is recorded: held room, refusals)."""

    def grow(
        self, job: Job, used: IntArray, pods: IntArray, now: float, placed: Mapping[int, int], want: Sequence[int]
    ) -> dict[int, int]:
        """Pod index -> node for as many of JOB's pods WANT as fit (whole segments) beside PLACED."""

    def done(self, job: Job) -> None: ...

    def walk_key(self, job: Job, now: float) -> Hashable:
        """Jobs with equal keys get the same answer within one walk (same free GPUs)."""

    def retry(self, queue: Sequence[Job], now: float) -> list[Job]:
        """Waiting jobs to try again though no GPU was freed (held room moved)."""

    def after_walk(self, now: float, queue: Sequence[Job], used: IntArray, running: Sequence[Started]) -> None:
        """The jobs still waiting after a walk, for policies that reserve room."""

    def defragment(
        self, job: Job, used: IntArray, pods: IntArray, now: float, movable: list[Candidate]
    ) -> dict[str, int]:
        """Pod key -> new node of the MOVABLE pods to move so that JOB fits, or {}."""

    @property
    def holding(self) -> Holding | None: ...


def demand_key(job: Job) -> tuple[int, int, int, str, str, int]:
    return (job.pods, job.gpus, job.segment, job.segment_level, job.job_level, job.minimum)


def sized(job: Job, pods: int) -> Job:
    """JOB cut to its first PODS pods, rigid (whole segments)."""
    return replace(job, pods=pods, minimum=0)


class _ArrayUsage:
    """What is taken per node, read by the engine's snapshot (extender.placement.snapshot.Usage)."""

    def __init__(self, gpus: IntArray, pods: IntArray) -> None:
        self._used = {GPU: gpus * 1000, "pods": pods * 1000}
        self._zero = np.zeros(len(gpus), dtype=np.int64)

    def used(self, resource: str) -> IntArray:
        return self._used.get(resource, self._zero)


class Topogang:
    aware = True

    def __init__(
        self,
        cluster: Cluster,
        name: str = "topogang",
        compact: bool = True,
        reserve: Settings | None = None,
        minimums_first: bool = True,
        moves: Limits | None = None,
    ) -> None:
        self.name, self.compact, self.minimums_first = name, compact, minimums_first
        self.mover = Mover(moves) if moves is not None else None
        self.cluster = cluster
        self.table = NodeTable(cluster.nodes)  # lives as long as the node set, as in the server
        self.gangs: dict[int, Gang] = {}
        self._holding = Holding(cluster, reserve) if reserve is not None else None

    @property
    def holding(self) -> Holding | None:
        return self._holding

    def prepare(self, job: Job) -> None:
        self.gangs[job.id] = gang(job, self.cluster)

    def walk_key(self, job: Job, now: float) -> Hashable:
        if self.mover is not None:  # which pods may move for it depends on its priority
            return (demand_key(job), job.priority)
        if self._holding is None:
            return demand_key(job)
        return (demand_key(job), self._holding.signature(job, now))

    def place(self, job: Job, used: IntArray, pods: IntArray, now: float) -> list[int] | None:
        """JOB whole (all its pods, its minimum or not), as the baselines' `place`."""
        whole = sized(job, job.pods)
        result = plan(
            ClusterSnapshot(self.table, _ArrayUsage(used, pods)), gang(whole, self.cluster), compact=self.compact
        )
        if not isinstance(result, Plan):
            return None
        placed = self._nodes(whole, result.assignments)
        return [placed[i] for i in range(job.pods)]

    def start(self, job: Job, used: IntArray, pods: IntArray, now: float, trial: bool = False) -> dict[int, int] | None:
        if self._holding is not None:
            used = self._holding.view(job, used, now)
        snapshot = ClusterSnapshot(self.table, _ArrayUsage(used, pods))
        result = plan(snapshot, self.gangs[job.id], compact=self.compact)
        if not isinstance(result, Plan):
            if self._holding is not None and not trial:
                self._holding.refused(job, now)
            return None
        keep = result.minimum if self.minimums_first else result.assignments  # the rest: `grow`, later
        placed = self._nodes(job, {k: n for k, n in result.assignments.items() if k in keep})
        if self._holding is not None and not trial:
            self._holding.started(job, list(placed.values()), now)
        return placed

    def grow(
        self, job: Job, used: IntArray, pods: IntArray, now: float, placed: Mapping[int, int], want: Sequence[int]
    ) -> dict[int, int]:
        if self._holding is not None:
            used = self._holding.view(job, used, now)
        nodes = self.table.nodes
        running = gang(job, self.cluster, {i: nodes[n].name for i, n in placed.items()})
        result = plan(ClusterSnapshot(self.table, _ArrayUsage(used, pods)), running, compact=self.compact)
        if not isinstance(result, Plan):
            return {}
        return {i: n for i, n in self._nodes(job, result.assignments).items() if i in set(want)}

    def _nodes(self, job: Job, assignments: Mapping[str, str]) -> dict[int, int]:
        index = self.table.index
        keys = {f"{NAMESPACE}/{pod_name(job, i)}": i for i in range(job.pods)}
        return {keys[k]: index[n] for k, n in assignments.items() if k in keys}

    def defragment(
        self, job: Job, used: IntArray, pods: IntArray, now: float, movable: list[Candidate]
    ) -> dict[str, int]:
        mover = self.mover
        if mover is None:
            return {}
        left = mover.room_left(now)
        mine = mover.eligible(movable, job, now)
        outcome, moves = "none", {}
        if left <= 0:
            outcome = "budget"
        elif mine:
            free_used, free_pods = used.copy(), pods.copy()
            for c in mine:
                free_used[c.node] -= c.job.gpus
                free_pods[c.node] -= 1
            if self.start(job, free_used, free_pods, now, trial=True) is None:
                outcome = "blocked"  # the shortcut: no set of them can help
            else:
                found = mover.search(self.table, _ArrayUsage(used, pods), self.gangs[job.id], mine)
                if isinstance(found, NoPreemption):
                    outcome = "nohelp"
                elif len(found.pods) > left:
                    outcome = "budget"
                else:
                    outcome, moves = "moved", {k: self.table.index[n] for k, n in found.moves.items()}
                    mover.moved(moves, now)
        mover.log.append((job.id, outcome))
        return moves

    def done(self, job: Job) -> None:
        self.gangs.pop(job.id, None)
        if self._holding is not None:
            self._holding.ended(job)

    def retry(self, queue: Sequence[Job], now: float) -> list[Job]:
        return self._holding.retry(queue, now) if self._holding is not None else []

    def after_walk(self, now: float, queue: Sequence[Job], used: IntArray, running: Sequence[Started]) -> None:
        if self._holding is not None:
            self._holding.refresh(now, queue, used, running)


class _Tree:
    """Child ranges per level: the cluster's zones, a zone's blocks, a block's racks, a rack's nodes."""

    def __init__(self, cluster: Cluster) -> None:
        s = cluster.shape
        zones, blocks = s.zones, s.zones * s.blocks
        self.cluster = cluster
        self.first: list[IntArray] = [
            np.array([0]),
            np.arange(zones) * s.blocks,
            np.arange(blocks) * s.racks,
            cluster.rack_start,
        ]
        self.last: list[IntArray] = [
            np.array([zones]),
            np.arange(1, zones + 1) * s.blocks,
            np.arange(1, blocks + 1) * s.racks,
            cluster.rack_end,
        ]

    def up(self, units: IntArray, level: int) -> list[IntArray]:
        """Per level 0..LEVEL, the sum of UNITS (given per domain of LEVEL) in each domain."""
        out = [units]
        for lv in range(level - 1, -1, -1):
            out.insert(0, np.add.reduceat(out[0], self.first[lv]) if len(out[0]) else out[0])
        return out

    def children(self, level: int, d: int) -> range:
        return range(int(self.first[level][d]), int(self.last[level][d]))

    def nodes(self, level: int, d: int) -> range:
        """The nodes of domain D of LEVEL (contiguous)."""
        lo = hi = d
        for lv in range(level, NODE):
            lo, hi = int(self.first[lv][lo]), int(self.last[lv][hi]) - 1
        return range(lo, hi + 1)


class _Baseline(ABC):
    """A baseline's shared steps; each baseline says only where a job's pods go (`place`)."""

    aware = True
    minimums_first = False
    mover: Mover | None = None

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.tree = _Tree(cluster)

    holding = None

    def prepare(self, job: Job) -> None:
        return None

    def done(self, job: Job) -> None:
        return None

    def walk_key(self, job: Job, now: float) -> Hashable:
        return demand_key(job)

    def retry(self, queue: Sequence[Job], now: float) -> list[Job]:
        return []

    def after_walk(self, now: float, queue: Sequence[Job], used: IntArray, running: Sequence[Started]) -> None:
        return None

    def defragment(
        self, job: Job, used: IntArray, pods: IntArray, now: float, movable: list[Candidate]
    ) -> dict[str, int]:
        return {}

    @abstractmethod
    def place(self, job: Job, used: IntArray, pods: IntArray, now: float) -> list[int] | None:
        """The node of each pod of JOB, or None when it does not fit."""

    def start(self, job: Job, used: IntArray, pods: IntArray, now: float, trial: bool = False) -> dict[int, int] | None:
        """The whole job if it fits, else its minimum and then as many optional units as fit."""
        nodes = self.place(sized(job, job.pods), used, pods, now)
        if nodes is not None or not job.elastic:
            return None if nodes is None else dict(enumerate(nodes))
        nodes = self.place(sized(job, job.minimum), used, pods, now)
        if nodes is None:
            return None
        placed = dict(enumerate(nodes))
        taken = used.copy()
        np.add.at(taken, nodes, job.gpus)
        return placed | self.grow(job, taken, pods, now, placed, range(job.minimum, job.pods))

    def grow(
        self, job: Job, used: IntArray, pods: IntArray, now: float, placed: Mapping[int, int], want: Sequence[int]
    ) -> dict[int, int]:
        """The most whole units of WANT that fit as a job of their own inside JOB's required domain."""
        if job.job_level and placed:
            domain = self.cluster.domain_of(job.job_level)
            inside = domain == domain[next(iter(placed.values()))]
            used = np.where(inside, used, self.cluster.gpus)
        unit = job.segment or 1
        lo, hi = 0, len(want) // unit  # lo units fit (none at first), hi is the most there are
        found: list[int] = []
        while lo < hi:  # the largest count that fits, by bisection (more units never fit where fewer do not)
            mid = (lo + hi + 1) // 2
            nodes = self.place(replace(sized(job, mid * unit), job_level=""), used, pods, now)
            if nodes is None:
                hi = mid - 1
            else:
                lo, found = mid, nodes
        return dict(zip(want, found, strict=False))

    def _units(self, job: Job, free: IntArray) -> tuple[list[IntArray], int, int]:
        """Units per domain at every level down to the unit level: pods per node, or whole
        segments per rack; and the unit level and the units the job needs."""
        per_node = free // job.gpus
        if job.segment:
            per_rack = np.add.reduceat(per_node, self.cluster.rack_start) // job.segment
            return self.tree.up(per_rack, RACK), RACK, job.segments
        return self.tree.up(per_node, NODE), NODE, job.pods

    def _pods_in(self, nodes: Sequence[int], free: IntArray, job: Job, count: int) -> list[int]:
        """COUNT pods on NODES in the order given, as many on each as fit."""
        out: list[int] = []
        for n in nodes:
            k = min(count - len(out), int(free[n] // job.gpus))
            out.extend([n] * k)
            if len(out) == count:
                break
        return out


class FirstFit(_Baseline):
    name = "first-fit"
    aware = False

    def place(self, job: Job, used: IntArray, pods: IntArray, now: float) -> list[int] | None:
        free = self.cluster.gpus - used
        out = self._pods_in(range(len(free)), free, job, job.pods)
        return out if len(out) == job.pods else None


class BestFit(_Baseline):
    name = "bestfit"

    def place(self, job: Job, used: IntArray, pods: IntArray, now: float) -> list[int] | None:
        free = self.cluster.gpus - used
        counts, unit_level, need = self._units(job, free)
        region = self._region(job, counts, unit_level, need)
        if region is None:
            return None
        chosen = self._descend(counts, unit_level, region[0], region[1], need)
        if job.segment:  # slices per rack: their pods by the same greedy over the rack's nodes
            out: list[int] = []
            node_counts = self.tree.up(free // job.gpus, NODE)
            for rack, k in chosen:
                for _ in range(k):  # one slice at a time: each stays in its rack
                    for n, c in self._descend(node_counts, NODE, RACK, rack, job.segment):
                        out.extend([n] * c)
            return out
        return [n for n, c in chosen for _ in range(c)]

    def _region(self, job: Job, counts: list[IntArray], unit_level: int, need: int) -> tuple[int, int] | None:
        levels = [LEVELS.index(job.job_level) + 1] if job.job_level else range(unit_level, ROOT, -1)
        for level in levels:
            fits = np.flatnonzero(counts[level] >= need)
            if len(fits):
                return level, int(fits[np.argmin(counts[level][fits])])  # the tightest; ties: first
        if job.job_level or counts[ROOT][0] < need:
            return None
        return ROOT, 0

    def _descend(self, counts: list[IntArray], unit_level: int, level: int, d: int, need: int) -> list[tuple[int, int]]:
        """Kueue's greedy: (unit-level domain, units) through the fewest domains; updates COUNTS."""
        if level == unit_level:
            counts[level][d] -= need
            return [(d, need)]
        kids = self.tree.children(level, d)
        room = counts[level + 1]
        out: list[tuple[int, int]] = []
        while need > 0:
            ks = np.array(kids)
            r = room[ks]
            holds = np.flatnonzero(r >= need)
            if len(holds):
                child = int(ks[holds[np.argmin(r[holds])]])
                out += self._descend(counts, unit_level, level + 1, child, need)
                break
            i = int(np.argmax(r))
            if r[i] <= 0:
                break
            take = int(r[i])
            out += self._descend(counts, unit_level, level + 1, int(ks[i]), take)
            need -= take
        counts[level][d] -= sum(c for _, c in out)  # the parent's loop reads it as its child's room
        return out


class Fullest(_Baseline):
    name = "fullest"

    def place(self, job: Job, used: IntArray, pods: IntArray, now: float) -> list[int] | None:
        free = self.cluster.gpus - used
        counts, _, need = self._units(job, free)
        level, d = ROOT, 0
        if job.job_level:
            level = LEVELS.index(job.job_level) + 1
            fits = np.flatnonzero(counts[level] >= need)
            if not len(fits):
                return None
            room = self._free_per_domain(free)[level][fits]
            d = int(fits[np.lexsort((fits, room))[0]])  # the fullest; ties: first
        elif counts[ROOT][0] < need:
            return None
        nodes = np.array(self.tree.nodes(level, d))
        if not job.segment:  # KAI's binpack node order inside the domain: fullest nodes first
            order = nodes[np.lexsort((nodes, free[nodes]))]
            out = self._pods_in([int(n) for n in order if free[n] >= job.gpus], free, job, job.pods)
            return out if len(out) == job.pods else None
        racks = np.unique(self.cluster.rack_of[nodes])
        rack_free = self._free_per_domain(free)[RACK][racks]
        out = []
        left = job.segments
        for r in racks[np.lexsort((racks, rack_free))]:
            k = min(left, int(counts[RACK][r]))
            if k <= 0:
                continue
            rn = np.array(self.tree.nodes(RACK, int(r)))
            order = [int(n) for n in rn[np.lexsort((rn, free[rn]))] if free[n] >= job.gpus]
            out += self._pods_in(order, free, job, k * job.segment)
            left -= k
            if not left:
                break
        return out if not left else None

    def _free_per_domain(self, free: IntArray) -> list[IntArray]:
        return self.tree.up(np.add.reduceat(free, self.cluster.rack_start), RACK)


def all_policies(cluster: Cluster, reserve: Settings | None = None, moves: Limits | None = None) -> list[Policy]:
    """topogang as shipped, with each new mechanism on, and the baselines; RESERVE: the
    reservation settings of the `topogang+reserve` policy (default Settings()); MOVES: the limits
    of `topogang+defrag` (default Limits(): the server's)."""
    return [
        Topogang(cluster),
        Topogang(cluster, "topogang+reserve", reserve=reserve or Settings()),
        Topogang(cluster, "topogang-loose", compact=False),
        Topogang(cluster, "topogang-whole", minimums_first=False),
        Topogang(cluster, "topogang+defrag", moves=moves or Limits()),
        BestFit(cluster),
        Fullest(cluster),
        FirstFit(cluster),
    ]
