"""Reservations in the trace: the jobs and the cluster turned into what extender.core.reservations
reads, the held room as each plan sees it, and what reservations cost and gave (for metrics).

A job's key is its id; its demand is its pods of `gpus` GPUs, its segments (whole segments per
rack) and its required level; a running job's pods end at start + bound when it declared one,
else as `expected_end` guesses. Held room is shown to a plan as taken: every GPU of a node inside
a reservation's domain that the reservation does not admit the job to. A job is overdue once it
has waited `Settings.max_wait` (the cluster default; trace jobs declare no maximum of their own).

Each job that waits gets an estimated start (extender.core.estimates, the server's walk) at the
first pass that finds it queued: `first_estimates` keeps (estimate, start) per job for the
accuracy figures. The walk runs only when a queued job has none yet, up to that job's place.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from bench.tracesim.cluster import LEVELS, Cluster, IntArray
from bench.tracesim.workload import Job
from extender.core.estimates import Walk
from extender.core.lifetimes import Lifetimes
from extender.core.reservations import (
    Admission,
    BoolArray,
    Demand,
    Layout,
    Matrix,
    Reservation,
    Running,
    Settings,
    Waiting,
    admits,
    expected_end,
    held,
    overdue,
    overdue_first,
    reserve,
)
from extender.simulate.order import queue_key

RACK = LEVELS.index("rack") + 1
KIND = "Job"  # every trace job's owner kind, for the run times learnt


class Started(Protocol):
    @property
    def job(self) -> Job: ...

    @property
    def start(self) -> float: ...

    @property
    def nodes(self) -> tuple[int, ...]: ...


def demand(job: Job) -> Demand:
    level = LEVELS.index(job.job_level) + 1 if job.job_level else None
    return Demand((job.gpus,), job.min_pods, job.segment, RACK if job.segment else 0, level)


def layout_of(c: Cluster) -> Layout:
    """The cluster as extender.core.reservations counts room: the cluster, its levels, the nodes."""
    levels = [np.zeros(len(c.nodes), dtype=np.int64)]
    levels += [c.domain_of(lv) for lv in LEVELS]
    levels.append(np.arange(len(c.nodes), dtype=np.int64))
    return Layout(levels, c.gpus[:, None].astype(np.int64))


@dataclass
class Holding:
    cluster: Cluster
    settings: Settings
    reservations: tuple[Reservation, ...] = ()
    made: int = 0  # reservations made
    backfills: list[tuple[float, float]] = field(default_factory=list)  # (start, GPU-seconds) of backfilled jobs
    estimates: list[tuple[float, float, float]] = field(default_factory=list)  # (made, first estimate, start)
    reserve_ms: list[float] = field(default_factory=list)  # one per call of reserve()
    _first: dict[str, tuple[float, float]] = field(default_factory=dict)
    _tried: dict[int, tuple[str, ...]] = field(default_factory=dict)  # job -> signature of its last refusal
    _lost = False  # a held node was let go since the last walk: every waiting job may fit now
    estimate_limit: int = Settings().estimates  # gangs the estimate walk reaches, in the pass's order (the server's)
    first_estimates: dict[int, float] = field(default_factory=dict)  # job -> its first estimated start
    estimated: list[tuple[int, float, float]] = field(default_factory=list)  # (job, first estimate, start)
    overdue_since: dict[int, float] = field(default_factory=dict)  # job -> when it became overdue
    slotted: dict[int, float] = field(default_factory=dict)  # overdue job -> when it first held room
    lifetimes: Lifetimes = field(default_factory=Lifetimes)  # run times of the jobs that ended (one kind: Job)

    def __post_init__(self) -> None:
        self.layout = layout_of(self.cluster)

    @staticmethod
    def _ends(job: Job, now: float) -> float | None:
        return now + job.bound if job.bound else None

    def overdue(self, job: Job, now: float) -> bool:
        limit = self.settings.max_wait
        return limit is not None and now - job.arrival >= limit

    def signature(self, job: Job, now: float) -> tuple[str, ...]:
        ends, late = self._ends(job, now), self.overdue(job, now)
        return tuple(admits(r, str(job.id), job.priority, ends, late).value for r in self.reservations)

    def view(self, job: Job, used: IntArray, now: float) -> IntArray:
        """USED as JOB's plan sees it: held room it may not use counts as taken."""
        ends, late = self._ends(job, now), self.overdue(job, now)
        mask = held(self.reservations, len(used), str(job.id), job.priority, ends, late)
        if not mask.any():
            return used
        out = used.copy()
        out[mask] = self.cluster.gpus[mask]
        return out

    def refused(self, job: Job, now: float) -> None:
        self._tried[job.id] = self.signature(job, now)

    def retry(self, queue: Sequence[Job], now: float) -> list[Job]:
        """The waiting jobs whose answer may have changed though no GPU was freed: all when held
        room was let go, else those whose admissions to held room changed since their refusal."""
        if self._lost:
            self._lost = False
            return list(queue)
        return [j for j in queue if self._tried.get(j.id) != self.signature(j, now)]

    def started(self, job: Job, nodes: Sequence[int], now: float) -> None:
        self._tried.pop(job.id, None)
        key, ends = str(job.id), self._ends(job, now)
        taken = np.array(nodes, dtype=np.int64)
        for r in self.reservations:
            if admits(r, key, job.priority, ends) is Admission.BACKFILL and np.isin(taken, r.nodes).any():
                self.backfills.append((now, job.demand * job.duration))
                break
        if key in self._first:
            made, first = self._first.pop(key)
            self.estimates.append((made, first, now))
        if job.id in self.first_estimates:
            self.estimated.append((job.id, self.first_estimates.pop(job.id), now))
        before = self.held_nodes()
        self.reservations = tuple(r for r in self.reservations if r.key != key)  # released when it starts
        self._lost |= bool((before & ~self.held_nodes()).any())

    def ended(self, job: Job) -> None:
        self.lifetimes.observe(KIND, job.duration)

    def held_nodes(self) -> BoolArray:
        out = np.zeros(len(self.cluster.nodes), dtype=np.bool_)
        for r in self.reservations:
            out[r.nodes] = True
        return out

    def refresh(self, now: float, queue: Sequence[Job], used: IntArray, running: Sequence[Started]) -> None:
        before = self.held_nodes()
        if not queue:
            self.reservations = ()
            self._lost |= bool(before.any())
            return
        waiting = [
            Waiting(str(j.id), j.priority, j.arrival, demand(j))
            for j in sorted(queue, key=lambda j: queue_key(j.priority, j.arrival, j.id))
        ]
        for key, at in overdue(now, waiting, self.settings).items():
            self.overdue_since.setdefault(int(key), at)
        counts = np.array([len(p.nodes) for p in running], dtype=np.int64)
        ends = [
            expected_end(now, p.start, p.job.bound or None, self.settings.floor, self.settings.stretch) for p in running
        ]
        nodes = np.array([n for p in running for n in p.nodes], dtype=np.int64)
        gpus = np.repeat(np.array([p.job.gpus for p in running], dtype=np.int64), counts)
        pods = Running(nodes, gpus[:, None], np.repeat(np.array(ends, dtype=np.float64), counts))
        free = (self.cluster.gpus - used)[:, None].astype(np.int64)
        keys = {r.key for r in self.reservations}
        t0 = time.perf_counter()
        self.reservations = reserve(now, waiting, free, pods, self.layout, self.reservations, self.settings)
        self.reserve_ms.append((time.perf_counter() - t0) * 1000)
        self._lost |= bool((before & ~self.held_nodes()).any())
        for r in self.reservations:
            if r.overdue is not None:
                self.slotted.setdefault(int(r.key), now)
            if r.key not in keys:
                self.made += 1
                self._first.setdefault(r.key, (now, r.start))
        self._estimate(now, waiting, free, pods, running, {str(j.id): j.bound for j in queue if j.bound})

    def _estimate(
        self,
        now: float,
        waiting: Sequence[Waiting],
        free: Matrix,
        pods: Running,
        running: Sequence[Started],
        bounds: dict[str, float],
    ) -> None:
        """The first estimated start of each queued job that has none yet: one walk, up to the
        last such job in the pass's order (the walk of the first `estimate_limit` gangs)."""
        due = overdue(now, waiting, self.settings)
        order = [*overdue_first(waiting, due), *(w for w in waiting if w.key not in due)][: self.estimate_limit]
        new = [i for i, w in enumerate(order) if int(w.key) not in self.first_estimates]
        if not new:
            return
        counts = np.array([len(p.nodes) for p in running], dtype=np.int64)
        known = np.repeat(np.array([bool(p.job.bound) for p in running], dtype=np.bool_), counts)
        started = np.repeat(np.array([p.start for p in running], dtype=np.float64), counts)
        learnt = self.lifetimes.ends(now, [KIND] * len(started), started, pods.end)
        pods = Running(pods.node, pods.request, np.where(known, pods.end, learnt))
        typical = self.lifetimes.run(KIND)
        if typical is not None:
            bounds = {w.key: bounds.get(w.key, typical) for w in order}
        walk = Walk(now, order, free, pods, known, self.layout, self.reservations, bounds, self.settings)
        walked = walk.step(new[-1] + 1)
        for e in walked:
            self.first_estimates.setdefault(int(e.key), e.start)
