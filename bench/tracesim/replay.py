"""The replay: arrivals, kube-scheduler's queue order, placements through a policy, completions.

Time jumps from event to event. At each moment the jobs that end free their GPUs, the jobs that
arrive join the queue, then the queue is walked in kube-scheduler's order (priority, then age:
extender.simulate.order.queue_key, what the simulator sorts by): each job the policy can place
starts now; the others stay queued and do not hold the ones behind them (kube-scheduler has no
head-of-line blocking). Two shortcuts skip calls whose answer is known, for every policy alike:
a job is tried again only after GPUs were freed (placements only take), and within one walk a job
asking for exactly what an earlier job failed to get fails too (same free GPUs, same answer);
a job that needs more pods than fit on all free nodes is not tried at all.

For each job larger than a rack the replay also records its *drain*: how long after its arrival
room for it would exist (counted as reservations count it) if nothing started after it arrived
and every running job ended at its real end; a wait no holding of room can beat, only preemption
or a different past.

With a maximum wait (the policy's reservation `Settings.max_wait`), each job still queued when it
becomes overdue gets its *overdue drain* the same way, from the first moment the replay sees it
overdue, counted from the moment it became so: the bound a maximum wait promises is that moment
plus this drain.

Elastic jobs (a minimum below their pods) start with what `Policy.start` gives them, at least
their minimum, and run at the speed of the pods they have (a job's duration is its run time at
full size: with half its pods it runs twice as long). After each walk that changed something,
the running elastic jobs short of pods grow, in queue order, through `Policy.grow`. With
`minimums_first` (topogang), a walk places minimums only, so every minimum that can start does
before any optional pod, and a minimum that does not fit takes the room of running jobs'
optional pods of at most its priority, the fewest units (whole segments) on the nodes its
placement needs, lowest priority and latest start first: the product gives reserved optional
pods back and evicts bound ones first (core/minimums.py). Nothing else is ever preempted here.

With a policy that moves pods (`Policy.mover`: topogang+defrag), a job that does not fit asks it
for moves (bench/tracesim/defrag.py) before any optional pod is given back, as the server tries
moves before it preempts; each moved pod leaves its node and runs on its new one at once, its end
unchanged, and the job is placed again.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from bench.tracesim.cluster import Cluster, IntArray
from bench.tracesim.defrag import Candidate, movable_pods
from bench.tracesim.holding import demand, layout_of
from bench.tracesim.policies import Policy
from bench.tracesim.workload import Job, window

MAX_BISECT = 6  # placements spent narrowing the optional units a minimum takes back
from extender.core.reservations import Layout, Running, soonest
from extender.simulate.order import queue_key


@dataclass
class Placed:
    job: Job
    start: float
    nodes: tuple[int, ...]  # one per pod it started with, in pod order
    pods: tuple[int, ...] = ()  # their pod indices (all of them when empty)
    current: dict[int, int] = field(default_factory=dict)  # pod index -> node, as it runs now
    left: float = 0.0  # seconds it still runs at full size, as of `since`
    since: float = 0.0
    version: int = 0  # bumps when its pods change (its end moves): older ends in the heap are stale

    def end(self) -> float:
        return self.since + self.left * self.job.pods / len(self.current)

    def resize(self, now: float, current: dict[int, int]) -> None:
        """Its pods are CURRENT from NOW on: the work done so far at the old speed is counted."""
        self.left -= (now - self.since) * len(self.current) / self.job.pods
        self.since, self.current = now, current
        self.version += 1

    def running(self) -> tuple[int, ...]:
        """The nodes of its pods now (reservations read them: `Started.nodes`)."""
        return tuple(self.current[i] for i in sorted(self.current))


@dataclass
class Replay:
    policy: str
    aware: bool
    placed: dict[int, Placed] = field(default_factory=dict)
    never: list[Job] = field(default_factory=list)  # still queued when nothing was left to end
    times: list[float] = field(default_factory=list)  # the moments the cluster changed
    used: list[int] = field(default_factory=list)  # GPUs in use from that moment on
    stranded: list[int] = field(default_factory=list)  # free GPUs in partly used racks
    queued: list[int] = field(default_factory=list)  # jobs waiting
    plan_ms: list[float] = field(default_factory=list)  # one per call into the policy
    held_idle: list[int] = field(default_factory=list)  # free GPUs held by reservations, from that moment on
    backfilled: list[tuple[float, float]] = field(default_factory=list)  # (start, GPU-seconds) of backfills
    estimates: list[tuple[float, float, float]] = field(default_factory=list)  # (made, estimated, actual start)
    reservations: int = 0  # reservations made
    reserve_ms: list[float] = field(default_factory=list)  # one per call into extender.core.reservations
    # Two moments of the measured window, as (time, jobs waiting, GPUs used per node): the busiest
    # (the most jobs waiting) and the worst (the most GPUs left free while jobs wait).
    busiest: tuple[float, int, IntArray] | None = None
    worst: tuple[float, int, IntArray] | None = None
    overcommitted: int = 0  # placements that would take more than a node has (a policy bug)
    drain: dict[int, float] = field(default_factory=dict)  # job -> its drain (module docstring)
    max_wait: float | None = None  # the policy's maximum wait (None: none)
    overdue_drain: dict[int, float] = field(default_factory=dict)  # job -> its drain once overdue
    estimated: list[tuple[int, float, float]] = field(default_factory=list)  # (job, first estimate, start)
    slotted: dict[int, float] = field(default_factory=dict)  # overdue job -> when it first held room
    grown: int = 0  # optional pods placed after their job started
    given_back: int = 0  # optional pods that gave their room to a minimum
    moves: list[tuple[float, int, int, int]] = field(default_factory=list)  # (when, job, pod, new node) per move
    defrag: list[tuple[int, str]] = field(default_factory=list)  # (job, outcome: defrag.OUTCOMES) per try


def replay(cluster: Cluster, jobs: list[Job], policy: Policy, warmup: float = 0.1) -> Replay:
    out = Replay(policy.name, policy.aware)
    measured = window(jobs, warmup)
    used = np.zeros(len(cluster.nodes), dtype=np.int64)
    pods = np.zeros(len(cluster.nodes), dtype=np.int64)
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    ends: list[tuple[float, int, int]] = []  # (end, job, its version then)
    queue: list[Job] = []
    running: dict[int, Placed] = {}
    holding = policy.holding
    layout = layout_of(cluster)
    rack = int(cluster.domain_gpus("rack").max())
    out.max_wait = holding.settings.max_wait if holding is not None else None
    a = 0
    while a < len(arrivals) or ends:
        now = min(arrivals[a].arrival if a < len(arrivals) else float("inf"), ends[0][0] if ends else float("inf"))
        freed = False
        while ends and ends[0][0] <= now:
            _, jid, version = heapq.heappop(ends)
            done = running.get(jid)
            if done is None or done.version != version:
                continue  # its pods changed since: a later end stands for it
            del running[jid]
            _take(used, pods, done.job, list(done.current.values()), -1)
            policy.done(done.job)
            freed = True
        if out.max_wait is not None:
            for job in queue:
                due = job.arrival + out.max_wait
                if due <= now and job.id not in out.overdue_drain:
                    out.overdue_drain[job.id] = now - due + _drain(cluster, layout, job, now, used, running)
        fresh = []
        while a < len(arrivals) and arrivals[a].arrival <= now:
            policy.prepare(arrivals[a])
            fresh.append(arrivals[a])
            a += 1
        for job in fresh:
            if job.demand > rack:
                out.drain[job.id] = _drain(cluster, layout, job, now, used, running)
        walk = queue + fresh if freed else policy.retry(queue, now) + fresh
        queue.extend(fresh)
        ordered = sorted(walk, key=lambda j: queue_key(j.priority, j.arrival, j.id))
        changed: set[int] = set()
        started = _walk(cluster, ordered, policy, now, used, pods, out, running, changed)
        for job in started:
            running[job.id] = out.placed[job.id]
        if started:
            gone = {j.id for j in started}
            queue = [j for j in queue if j.id not in gone]
        if freed or started or changed:
            _grow(cluster, policy, now, used, pods, out, running, changed)
        for jid in changed | {j.id for j in started}:
            heapq.heappush(ends, (running[jid].end(), jid, running[jid].version))
        policy.after_walk(now, queue, used, [_Now(p) for p in running.values()])
        _record(cluster, out, now, used, len(queue), measured)
        if holding is not None:
            out.held_idle.append(int((cluster.gpus - used)[holding.held_nodes()].sum()))
    out.never = queue
    if policy.mover is not None:
        out.defrag = policy.mover.log
    if holding is not None:
        out.backfilled, out.estimates, out.reservations = holding.backfills, holding.estimates, holding.made
        out.reserve_ms = holding.reserve_ms
        out.estimated = holding.estimated
        out.slotted = holding.slotted
    return out


@dataclass(frozen=True)
class _Now:
    """A running job as reservations read it (`holding.Started`): the nodes of its pods now."""

    placed: Placed

    @property
    def job(self) -> Job:
        return self.placed.job

    @property
    def start(self) -> float:
        return self.placed.start

    @property
    def nodes(self) -> tuple[int, ...]:
        return self.placed.running()


def _take(used: IntArray, pods: IntArray, job: Job, nodes: list[int], sign: int = 1) -> None:
    np.add.at(used, nodes, sign * job.gpus)
    np.add.at(pods, nodes, sign)


def _drain(cluster: Cluster, layout: Layout, job: Job, now: float, used: IntArray, running: dict[int, Placed]) -> float:
    """Seconds from NOW until room for JOB exists if nothing else starts (real ends)."""
    need = demand(job)
    level = layout.level_for(need)
    if level is None:
        return float("inf")
    nodes = np.array([n for p in running.values() for n in p.current.values()], dtype=np.int64)
    counts = np.array([len(p.current) for p in running.values()], dtype=np.int64)
    gpus = np.repeat(np.array([p.job.gpus for p in running.values()], dtype=np.int64), counts)
    ends = np.repeat(np.array([p.end() for p in running.values()], dtype=np.float64), counts)
    pods = Running(nodes, gpus.reshape(-1, 1), ends).by_end()
    free = (cluster.gpus - used)[:, None].astype(np.int64)
    found = soonest(now, need, level, free, pods, layout, np.ones(layout.counts[level], dtype=np.bool_))
    return float("inf") if found is None else found.start - now


def _walk(
    cluster: Cluster,
    walk: list[Job],
    policy: Policy,
    now: float,
    used: IntArray,
    pods: IntArray,
    out: Replay,
    running: dict[int, Placed],
    changed: set[int],
) -> list[Job]:
    """Start what fits of WALK, in its order; CHANGED gets the running jobs that gave pods back."""
    started: list[Job] = []
    failed: set[Hashable] = set()
    fit: dict[int, int] = {}  # GPUs a pod -> pods that fit on all free nodes (optional pods' room counted free)
    spare = _optional_room(cluster, running) if policy.minimums_first else None
    for job in walk:
        key = policy.walk_key(job, now)
        if key in failed:
            continue
        if job.gpus not in fit:
            room = cluster.gpus - used if spare is None else cluster.gpus - used + spare
            fit[job.gpus] = int((room // job.gpus).sum())
        if fit[job.gpus] < job.min_pods:
            continue
        t0 = time.perf_counter()
        placed = policy.start(job, used, pods, now)
        # Moves before the give-back of running optional pods, as the server tries moves before
        # preempting (a moved pod keeps running; an optional pod given back does not).
        if placed is None and policy.mover is not None:
            placed = _defragment(policy, job, now, used, pods, out, running)
        if placed is None and spare is not None and spare.any():
            placed = _give_back(cluster, policy, job, now, used, pods, out, running, changed)
        out.plan_ms.append((time.perf_counter() - t0) * 1000)
        if placed is None:
            failed.add(key)
            continue
        if len(placed) < job.min_pods or len(placed) > job.pods:
            raise AssertionError(f"{policy.name}: job {job.id} got {len(placed)} nodes for {job.min_pods}..{job.pods}")
        order = sorted(placed)
        nodes = [placed[i] for i in order]
        _take(used, pods, job, nodes)
        out.overcommitted += int((used > cluster.gpus).sum())
        out.placed[job.id] = Placed(job, now, tuple(nodes), tuple(order), dict(placed), job.duration, now)
        started.append(job)
        fit.clear()
        if spare is not None:
            spare = _optional_room(cluster, {**running, **{j.id: out.placed[j.id] for j in started}})
    return started


def _optional(job: Job, current: dict[int, int]) -> list[int]:
    """The pod indices of JOB's optional pods it runs now."""
    return [i for i in current if i >= job.min_pods]


def _optional_room(cluster: Cluster, running: dict[int, Placed]) -> IntArray:
    """GPUs per node that running jobs' optional pods take."""
    room = np.zeros(len(cluster.nodes), dtype=np.int64)
    for p in running.values():
        extra = _optional(p.job, p.current)
        if extra:
            np.add.at(room, [p.current[i] for i in extra], p.job.gpus)
    return room


def _give_back(
    cluster: Cluster,
    policy: Policy,
    job: Job,
    now: float,
    used: IntArray,
    pods: IntArray,
    out: Replay,
    running: dict[int, Placed],
    changed: set[int],
) -> dict[int, int] | None:
    """JOB's minimum in the room of running optional pods of at most its priority (module
    docstring): the shortest prefix of their units, cheapest first, that lets it fit (bisection),
    and of those only the units on nodes its placement needs go; None when even all do not help."""
    units: list[tuple[tuple[int, float, int, int], Placed, list[int]]] = []
    for p in running.values():
        if p.job.priority > job.priority:
            continue
        size = p.job.segment or 1
        by_unit: dict[int, list[int]] = {}
        for i in _optional(p.job, p.current):
            by_unit.setdefault(i // size, []).append(i)
        units += [((p.job.priority, -p.start, -p.job.id, -k), p, idx) for k, idx in by_unit.items()]
    if not units:
        return None
    units.sort(key=lambda u: u[0])

    def attempt(k: int, trial: bool = True) -> dict[int, int] | None:
        free_used, free_pods = used.copy(), pods.copy()
        for _, p, idx in units[:k]:
            _take(free_used, free_pods, p.job, [p.current[i] for i in idx], -1)
        return policy.start(job, free_used, free_pods, now, trial=trial)

    lo, hi = 0, len(units)
    if attempt(hi) is None:
        return None
    for _ in range(MAX_BISECT):
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if attempt(mid) is not None else (mid, hi)
    placed = attempt(hi, trial=False)
    assert placed is not None, "the same placement as the trial's"
    need = np.zeros(len(cluster.nodes), dtype=np.int64)
    np.add.at(need, list(placed.values()), job.gpus)
    for _, p, idx in units[:hi]:
        nodes = [p.current[i] for i in idx]
        if not any(used[n] + need[n] > cluster.gpus[n] for n in nodes):
            continue  # its room is not where the minimum goes, or no longer needed there
        _take(used, pods, p.job, nodes, -1)
        p.resize(now, {i: n for i, n in p.current.items() if i not in idx})
        out.given_back += len(idx)
        changed.add(p.job.id)
    return placed


def _defragment(
    policy: Policy, job: Job, now: float, used: IntArray, pods: IntArray, out: Replay, running: dict[int, Placed]
) -> dict[int, int] | None:
    """JOB's placement after the policy moved movable pods out of its way (module docstring), or None."""
    assert policy.mover is not None
    elastic = policy.mover.limits.elastic
    movable = [
        Candidate(p.job, i, p.current[i], p.start)
        for p in running.values()
        for i in movable_pods(p.job, p.current, elastic)
    ]
    moves = policy.defragment(job, used, pods, now, movable)
    if not moves:
        return None
    by_key = {c.key: c for c in movable}
    for key, node in moves.items():
        c = by_key[key]
        _take(used, pods, c.job, [c.node], -1)
        _take(used, pods, c.job, [node])
        running[c.job.id].current[c.index] = node  # its end stays: it keeps running there
        out.moves.append((now, c.job.id, c.index, node))
    placed = policy.start(job, used, pods, now)
    if placed is None:
        policy.mover.log.append((job.id, "stuck"))
    return placed


def _grow(
    cluster: Cluster,
    policy: Policy,
    now: float,
    used: IntArray,
    pods: IntArray,
    out: Replay,
    running: dict[int, Placed],
    changed: set[int],
) -> None:
    """Running elastic jobs short of pods take the room left, in queue order (module docstring)."""
    short = [p for p in running.values() if p.job.elastic and len(p.current) < p.job.pods]
    for p in sorted(short, key=lambda p: queue_key(p.job.priority, p.job.arrival, p.job.id)):
        job = p.job
        unit = job.segment or 1
        if int(((cluster.gpus - used) // job.gpus).sum()) < unit:
            continue  # not one unit of it fits anywhere
        want = [i for i in range(job.pods) if i not in p.current]
        new = policy.grow(job, used, pods, now, p.current, want)
        if not new:
            continue
        _take(used, pods, job, list(new.values()))
        out.overcommitted += int((used > cluster.gpus).sum())
        p.resize(now, {**p.current, **new})
        out.grown += len(new)
        changed.add(job.id)


def _record(
    cluster: Cluster, out: Replay, now: float, used: IntArray, queued: int, measured: tuple[float, float]
) -> None:
    total = int(used.sum())
    rack_used = np.add.reduceat(used, cluster.rack_start)
    rack_cap = cluster.rack_gpus()
    partly = (rack_used > 0) & (rack_used < rack_cap)
    if out.times and out.times[-1] == now:
        out.times.pop(), out.used.pop(), out.stranded.pop(), out.queued.pop()
        if out.held_idle:
            out.held_idle.pop()
    out.times.append(now)
    out.used.append(total)
    out.stranded.append(int((rack_cap - rack_used)[partly].sum()))
    out.queued.append(queued)
    if not measured[0] <= now <= measured[1]:
        return
    if out.busiest is None or queued > out.busiest[1]:
        out.busiest = (now, queued, used.copy())
    if queued and (out.worst is None or total < int(out.worst[2].sum())):
        out.worst = (now, queued, used.copy())
