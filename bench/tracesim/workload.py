"""Jobs: a seeded trace generator and a CSV reader, so users can replay their own trace.

A job is a gang of `pods` pods of `gpus` GPUs each. With `segment` > 0 its pods form segments of
that many pods, each required in one domain of `segment_level` (a rack); `job_level` requires the
whole job in one domain (a block or a zone). CSV columns (a header line names them):

    arrival,pods,gpus_per_pod,segment,levels,duration[,priority]
    0,16,8,8,rack/block,3600,0

`levels` is "<segment level>/<job level>", either side empty ("rack/", "/zone", "").

The generator: gang sizes from a power law over powers of two (P(2^k pods) ∝ 2^(-βk), up to a
zone), 8 GPUs a pod (a fifth of the gangs ask 4 GPUs and twice the pods), segments of 4, 8 or 16
pods required in a rack where they fit one, a third of the gangs required whole in the smallest
block or zone that holds them, log-normal durations, three priorities, and Poisson arrivals at
the rate that offers `load` times the cluster's GPU-seconds.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.tracesim.cluster import LEVELS, Cluster

COLUMNS = ("arrival", "pods", "gpus_per_pod", "segment", "levels", "duration")
PRIORITIES = ((0, 0.7), (100, 0.2), (1000, 0.1))  # value, share of gangs


@dataclass(frozen=True)
class Job:
    id: int
    arrival: float
    pods: int
    gpus: int  # per pod
    duration: float
    segment: int = 0  # pods per segment; 0: no segments
    segment_level: str = ""
    job_level: str = ""
    priority: int = 0

    @property
    def demand(self) -> int:
        return self.pods * self.gpus

    @property
    def segments(self) -> int:
        return self.pods // self.segment if self.segment else 0


@dataclass(frozen=True)
class TraceSpec:
    jobs: int = 3000
    load: float = 1.0  # offered GPU-seconds per second, as a share of the cluster's GPUs
    size_exponent: float = 0.8  # β above
    max_pods: int = 0  # 0: the pods of 8 GPUs in a zone
    median_duration: float = 3600.0
    duration_sigma: float = 1.0
    seed: int = 1


def generate(spec: TraceSpec, cluster: Cluster) -> list[Job]:
    rng = random.Random(spec.seed)
    zone_gpus = int(cluster.domain_gpus("zone").min())
    block_gpus = int(cluster.domain_gpus("block").min())
    rack_gpus = int(cluster.domain_gpus("rack").min())
    node_gpus = cluster.shape.gpus
    max_pods = spec.max_pods or zone_gpus // node_gpus
    sizes = [2**k for k in range(int(math.log2(max_pods)) + 1)]
    weights = [s ** (-spec.size_exponent) for s in sizes]
    shapes = []
    for _ in range(spec.jobs):
        pods, gpus = rng.choices(sizes, weights)[0], node_gpus
        if rng.random() < 0.2 and node_gpus % 2 == 0:
            pods, gpus = pods * 2, node_gpus // 2
        segment = 0
        fitting = [s for s in (4, 8, 16) if s <= pods and pods % s == 0 and s * gpus <= rack_gpus]
        if fitting and rng.random() < 0.7:
            segment = rng.choice(fitting)
        job_level = ""
        if rng.random() < 1 / 3:
            job_level = next((lv for lv, cap in (("block", block_gpus), ("zone", zone_gpus)) if pods * gpus <= cap), "")
        duration = min(30 * 86400.0, max(60.0, rng.lognormvariate(math.log(spec.median_duration), spec.duration_sigma)))
        priority = rng.choices([p for p, _ in PRIORITIES], [w for _, w in PRIORITIES])[0]
        shapes.append((pods, gpus, segment, job_level, duration, priority))
    work = sum(p * g * d for p, g, _, _, d, _ in shapes) / len(shapes)
    rate = spec.load * cluster.capacity / work  # gangs per second
    t, jobs = 0.0, []
    for i, (pods, gpus, segment, job_level, duration, priority) in enumerate(shapes):
        t += rng.expovariate(rate)
        level = "rack" if segment else ""
        jobs.append(Job(i, round(t, 3), pods, gpus, round(duration, 3), segment, level, job_level, priority))
    return jobs


def window(jobs: Sequence[Job], warmup: float) -> tuple[float, float]:
    """The measured span: from the arrival of the job at WARMUP (a share) of the trace to the last
    arrival, leaving out the filling and the draining of the cluster."""
    arrivals = sorted(j.arrival for j in jobs)
    return arrivals[int(warmup * (len(arrivals) - 1))], arrivals[-1]


class TraceError(Exception):
    """A trace file that cannot be read: the message names the file, line and column."""


def read_csv(path: Path) -> list[Job]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise TraceError(f"{path}: empty; expected a header line: {','.join(COLUMNS)}[,priority]")
    header = [h.strip() for h in rows[0]]
    unknown = [h for h in header if h not in (*COLUMNS, "priority")]
    missing = [c for c in COLUMNS if c not in header]
    if unknown or missing:
        raise TraceError(f"{path}:1: header: unknown columns {unknown}, missing {missing}; expected {COLUMNS}")
    jobs = []
    for line, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(header):
            raise TraceError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
        jobs.append(_job(len(jobs), dict(zip(header, (v.strip() for v in row), strict=True)), f"{path}:{line}"))
    return sorted(jobs, key=lambda j: (j.arrival, j.id))


def _job(i: int, row: dict[str, str], where: str) -> Job:
    def number(col: str, kind: type[int] | type[float], low: float) -> float:
        try:
            value = kind(row[col])
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise TraceError(f"{where}: {col}: {row[col]!r} is not {expected}") from None
        if value < low:
            raise TraceError(f"{where}: {col}: {row[col]} is below {low:g}")
        return value

    pods, gpus = int(number("pods", int, 1)), int(number("gpus_per_pod", int, 1))
    segment = int(number("segment", int, 0))
    seg_level, _, job_level = row["levels"].partition("/")
    for name, level in (("segment level", seg_level), ("job level", job_level)):
        if level and level not in LEVELS:
            raise TraceError(f"{where}: levels: {name} {level!r} is not one of {', '.join(LEVELS)}")
    if segment and (pods % segment or not seg_level):
        raise TraceError(f"{where}: segment: {segment} must divide pods ({pods}) and levels must name its level")
    priority = int(number("priority", int, -(2**31))) if row.get("priority") else 0
    arrival, duration = number("arrival", float, 0), number("duration", float, 0)
    return Job(i, arrival, pods, gpus, duration, segment, seg_level if segment else "", job_level, priority)


def write_csv(jobs: Sequence[Job], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow((*COLUMNS, "priority"))
        for j in jobs:
            levels = f"{j.segment_level}/{j.job_level}"
            out.writerow((j.arrival, j.pods, j.gpus, j.segment, levels, j.duration, j.priority))
