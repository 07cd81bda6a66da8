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
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from bench.tracesim.cluster import Cluster, IntArray
from bench.tracesim.holding import demand, layout_of
from bench.tracesim.policies import Policy
from bench.tracesim.workload import Job, window
from extender.core.reservations import Layout, Running, soonest
from extender.simulate.order import queue_key


@dataclass
class Placed:
    job: Job
    start: float
    nodes: tuple[int, ...]  # one per pod, in pod order


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


def replay(cluster: Cluster, jobs: list[Job], policy: Policy, warmup: float = 0.1) -> Replay:
    out = Replay(policy.name, policy.aware)
    measured = window(jobs, warmup)
    used = np.zeros(len(cluster.nodes), dtype=np.int64)
    pods = np.zeros(len(cluster.nodes), dtype=np.int64)
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    ends: list[tuple[float, int]] = []
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
            _, jid = heapq.heappop(ends)
            done = running.pop(jid)
            np.subtract.at(used, list(done.nodes), done.job.gpus)
            np.subtract.at(pods, list(done.nodes), 1)
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
        started = _walk(cluster, ordered, policy, now, used, pods, out)
        for job in started:
            heapq.heappush(ends, (now + job.duration, job.id))
            running[job.id] = out.placed[job.id]
        if started:
            gone = {j.id for j in started}
            queue = [j for j in queue if j.id not in gone]
        policy.after_walk(now, queue, used, list(running.values()))
        _record(cluster, out, now, used, len(queue), measured)
        if holding is not None:
            out.held_idle.append(int((cluster.gpus - used)[holding.held_nodes()].sum()))
    out.never = queue
    if holding is not None:
        out.backfilled, out.estimates, out.reservations = holding.backfills, holding.estimates, holding.made
        out.reserve_ms = holding.reserve_ms
        out.estimated = holding.estimated
        out.slotted = holding.slotted
    return out


def _drain(cluster: Cluster, layout: Layout, job: Job, now: float, used: IntArray, running: dict[int, Placed]) -> float:
    """Seconds from NOW until room for JOB exists if nothing else starts (real ends)."""
    need = demand(job)
    level = layout.level_for(need)
    if level is None:
        return float("inf")
    nodes = np.array([n for p in running.values() for n in p.nodes], dtype=np.int64)
    counts = np.array([p.job.pods for p in running.values()], dtype=np.int64)
    gpus = np.repeat(np.array([p.job.gpus for p in running.values()], dtype=np.int64), counts)
    ends = np.repeat(np.array([p.start + p.job.duration for p in running.values()], dtype=np.float64), counts)
    pods = Running(nodes, gpus.reshape(-1, 1), ends).by_end()
    free = (cluster.gpus - used)[:, None].astype(np.int64)
    found = soonest(now, need, level, free, pods, layout, np.ones(layout.counts[level], dtype=np.bool_))
    return float("inf") if found is None else found.start - now


def _walk(
    cluster: Cluster, walk: list[Job], policy: Policy, now: float, used: IntArray, pods: IntArray, out: Replay
) -> list[Job]:
    started: list[Job] = []
    failed: set[Hashable] = set()
    fit: dict[int, int] = {}  # GPUs a pod -> pods that fit on all free nodes
    for job in walk:
        key = policy.walk_key(job, now)
        if key in failed:
            continue
        if job.gpus not in fit:
            fit[job.gpus] = int(((cluster.gpus - used) // job.gpus).sum())
        if fit[job.gpus] < job.pods:
            continue
        t0 = time.perf_counter()
        nodes = policy.place(job, used, pods, now)
        out.plan_ms.append((time.perf_counter() - t0) * 1000)
        if nodes is None:
            failed.add(key)
            continue
        if len(nodes) != job.pods:
            raise AssertionError(f"{policy.name}: job {job.id} got {len(nodes)} nodes for {job.pods} pods")
        np.add.at(used, nodes, job.gpus)
        np.add.at(pods, nodes, 1)
        out.overcommitted += int((used > cluster.gpus).sum())
        out.placed[job.id] = Placed(job, now, tuple(nodes))
        started.append(job)
        fit.clear()
    return started


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
