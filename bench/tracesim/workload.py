"""Jobs: a seeded trace generator calibrated to public GPU-cluster traces, and a CSV reader.

A job is a gang of `pods` pods of `gpus` GPUs each. With `segment` > 0 its pods form segments of
that many pods, each required in one domain of `segment_level` (a rack); `job_level` requires the
whole job in one domain (a block or a zone). `bound` > 0 is its declared runtime bound in seconds
(a Job's `activeDeadlineSeconds`): reservations let it backfill held room when it ends in time.
`minimum` > 0 below `pods` makes it elastic: it starts with its first `minimum` pods (whole
segments) and grows as room allows; `duration` is its run time at full size (it runs slower
with fewer pods: bench/tracesim/replay.py). `movable` marks a service: a single pod that
defragmentation may move to another node (it keeps running there). CSV columns (a header line
names them):

    arrival,pods,gpus_per_pod,segment,levels,duration[,priority][,bound][,minimum][,movable]
    0,16,8,8,rack/block,3600,0,5400,8,0

`levels` is "<segment level>/<job level>", either side empty ("rack/", "/zone", "").

The generator (PROFILES; docs/trace-results.md, "Cluster-level quality on a trace", cites the sources):
- GPUs per job: the figures each trace's authors publish (median, mean and maximum GPUs of GPU
  jobs): a share `single` of one-GPU jobs (the published median is 1 GPU, so at least half), the
  rest powers of two from 2 to the maximum, P(2^k) ∝ 2^(-βk) with β solved so the mean is the
  published mean; capped at the cluster's smallest zone.
- The mapping onto gangs: a job of G GPUs below a node's GPUs is one pod of G GPUs; otherwise
  G / node GPUs pods of a whole node each.
- Durations: log-normal with the published median and mean (σ = sqrt(2 ln(mean / median))),
  kept within [10 s, 30 days]; independent of size (the summaries publish no joint figure).
- Arrivals: Poisson, at the rate that offers `load` times the cluster's GPU-seconds before the
  last arrival (counting what each job runs until then: `_rate`).
- What traces lack comes from the generator: segments (on the default shapes 70% of multi-pod
  jobs get segments of 4, 8 or 16 pods that fit a rack; on NVL72-like racks NVIDIA's sizes: 16
  pods for jobs of 128 GPUs or more, 4 for 32 to 64 GPUs), a third of multi-pod jobs required
  whole in the smallest block or zone that holds them, three priorities, and runtime bounds: a
  share `bounded` of the jobs declares 1.5 x its real duration (drawn from its own seeded stream,
  so sweeping the share keeps the same jobs), and elastic jobs: a share `elastic` of the
  multi-pod jobs may start with half their pods (rounded up to whole segments), as a PyTorchJob
  with `elasticPolicy.minReplicas` or a PodGroup with `minMember` below its pods does (its own
  stream too). No public trace the profiles come from says which jobs were elastic (their
  columns are GPUs, times and states), so the share, 20% by default, is our choice, not a
  published figure: `--elastic` sweeps it, and 0 gives the traces of the earlier figures.
- Long-running services (`services`, a share of the offered GPU demand, 10% by default): single
  pods of 1, 2, 4 or 8 GPUs (shares 0.5, 0.2, 0.15, 0.15: inference replicas, most of one GPU,
  a large model's of a whole node), no topology constraint, movable, no runtime bound, the trace's
  three priorities, lifetimes log-normal with a median of one day (σ 1, at most 30 days): far
  longer than a trace of a few hours, so they stay where they started while training gangs come
  and go around them, the fragmentation defragmentation exists for. A standing population of
  them (their GPUs: the share of the offered load) arrives during the warm-up (the first tenth
  of the trace, spread among the other jobs), and more arrive through the trace as fast as they
  end on average (Poisson). The training jobs then offer `load` x (1 - share). The profiles'
  traces are of training clusters and hold no services; the share is our choice, not a published
  figure. Alibaba's public traces show such pods: cluster-trace-gpu-v2023 (Weng et al., ATC '23),
  a shared cluster's pods of at most a node's GPUs, and cluster-trace-gpu-v2025 (NSDI '25),
  inference instances that are long-running and of high priority. Services come from streams
  of their own: the other jobs' shapes do not change with the share (only their arrivals are
  scaled to offer the rest of the load), and a seed's trace is one for every policy (the
  comparison is paired). `--services 0` gives the traces of the earlier figures.
`profile="synthetic"` is the earlier generator (a power law over 1 to a zone's nodes of 8 GPUs,
median duration 1 h, σ 1), kept for comparison with older figures.
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
OPTIONAL = ("priority", "bound", "minimum", "movable")
ELASTIC = 0.2  # share of multi-pod jobs that are elastic: our choice (the module docstring)
SERVICES = 0.1  # share of the offered GPU demand that is long-running services: our choice
SERVICE_GPUS = ((1, 0.5), (2, 0.2), (4, 0.15), (8, 0.15))  # GPUs of a service pod, share
SERVICE_MEDIAN_S, SERVICE_SIGMA = 86400.0, 1.0  # a service's lifetime, log-normal
PRIORITIES = ((0, 0.7), (100, 0.2), (1000, 0.1))  # value, share of gangs


@dataclass(frozen=True)
class Profile:
    """What one trace's authors publish about its GPU jobs."""

    source: str
    mean_gpus: float
    max_gpus: int
    median_s: float
    mean_s: float
    single: float = 0.6  # share of one-GPU jobs: the published median is 1, the share is our choice


# Read from data/cluster_summary.csv of github.com/InternLM/AcmeTrace (the AcmeTrace authors'
# summary of their own and earlier traces: avg_gpu_num, max_gpu, med_run_time_gpu,
# avg_run_time_gpu; each has med_gpu_num 1).
PROFILES = {
    "kalos": Profile("AcmeTrace Kalos (Hu et al., NSDI '24)", 26.77, 1024, 124.0, 1259.7),
    "seren": Profile("AcmeTrace Seren (Hu et al., NSDI '24)", 5.68, 1024, 122.0, 1414.3),
    "helios": Profile("Helios (Hu et al., SC '21)", 3.716, 2048, 206.0, 6651.7),
    "philly": Profile("Philly (Jeon et al., ATC '19)", 1.928, 128, 874.0, 18006.1),
}


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
    bound: float = 0.0  # declared runtime bound (s); 0: none
    minimum: int = 0  # pods it may start with (whole segments); 0: all of them
    movable: bool = False  # a service defragmentation may move

    @property
    def demand(self) -> int:
        return self.pods * self.gpus

    @property
    def min_pods(self) -> int:
        return self.minimum or self.pods

    @property
    def elastic(self) -> bool:
        return 0 < self.minimum < self.pods

    @property
    def segments(self) -> int:
        return self.pods // self.segment if self.segment else 0


@dataclass(frozen=True)
class TraceSpec:
    jobs: int = 3000
    load: float = 0.85  # offered GPU-seconds per second, as a share of the cluster's GPUs
    profile: str = "kalos"
    bounded: float = 0.5  # share of jobs that declare a runtime bound
    seed: int = 1
    elastic: float = ELASTIC  # share of multi-pod jobs that may start with half their pods
    services: float = SERVICES  # share of the offered GPU demand that is long-running services
    # the synthetic profile only
    size_exponent: float = 0.8  # β above
    max_pods: int = 0  # 0: the pods of 8 GPUs in a zone


def size_exponent(profile: Profile) -> float:
    """β such that the mean GPUs of the non-single jobs (2..max, powers of two) gives the profile's mean."""
    target = (profile.mean_gpus - profile.single) / (1 - profile.single)
    top = int(math.log2(profile.max_gpus))

    def mean(beta: float) -> float:
        w = [2 ** (-beta * k) for k in range(1, top + 1)]
        return sum(2**k * x for k, x in zip(range(1, top + 1), w, strict=True)) / sum(w)

    lo, hi = -4.0, 8.0  # mean() falls as β grows
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(mid) > target else (lo, mid)
    return (lo + hi) / 2


def _gpus(rng: random.Random, profile: Profile, beta: float, cap: int) -> int:
    if rng.random() < profile.single:
        return 1
    sizes = [2**k for k in range(1, int(math.log2(profile.max_gpus)) + 1)]
    return min(rng.choices(sizes, [s ** (-beta) for s in sizes])[0], cap)


def _segment(rng: random.Random, cluster: Cluster, pods: int, gpus: int) -> int:
    rack_gpus = int(cluster.domain_gpus("rack").min())
    if cluster.shape.nvl:  # NVIDIA's segment sizes for NVL72-like racks
        total = pods * gpus
        return 16 if total >= 128 and pods % 16 == 0 else 4 if 32 <= total <= 64 and pods % 4 == 0 else 0
    fitting = [s for s in (4, 8, 16) if s <= pods and pods % s == 0 and s * gpus <= rack_gpus]
    return rng.choice(fitting) if fitting and rng.random() < 0.7 else 0


def generate(spec: TraceSpec, cluster: Cluster) -> list[Job]:
    rng = random.Random(spec.seed)
    zone_gpus = int(cluster.domain_gpus("zone").min())
    node_gpus = cluster.shape.gpus
    shapes: list[Shape] = []
    if spec.profile == "synthetic":
        max_pods = spec.max_pods or zone_gpus // node_gpus
        sizes = [2**k for k in range(int(math.log2(max_pods)) + 1)]
        weights = [s ** (-spec.size_exponent) for s in sizes]
    else:
        profile = PROFILES[spec.profile]
        beta = size_exponent(profile)
        sigma = math.sqrt(2 * math.log(profile.mean_s / profile.median_s))
    for _ in range(spec.jobs):
        if spec.profile == "synthetic":
            pods, gpus = rng.choices(sizes, weights)[0], node_gpus
            if rng.random() < 0.2 and node_gpus % 2 == 0:
                pods, gpus = pods * 2, node_gpus // 2
            duration = min(30 * 86400.0, max(60.0, rng.lognormvariate(math.log(3600.0), 1.0)))
        else:
            pods, gpus = gang_shape(_gpus(rng, profile, beta, zone_gpus), cluster)
            duration = min(30 * 86400.0, max(10.0, rng.lognormvariate(math.log(profile.median_s), sigma)))
        shapes.append((pods, gpus, *dress(rng, cluster, pods, gpus), duration))
    gaps = [rng.expovariate(1.0) for _ in shapes]  # arrivals at rate 1, scaled below
    if not 0 <= spec.services < 1:
        raise TraceError(f"services: {spec.services:g} is not a share in [0, 1)")
    jobs = assemble(shapes, gaps, spec.load * (1 - spec.services), spec.bounded, spec.seed, cluster, spec.elastic)
    return with_services(jobs, spec.services * spec.load, spec.seed, cluster)


def with_services(jobs: list[Job], share: float, seed: int, cluster: Cluster) -> list[Job]:
    """JOBS and long-running services offering SHARE of the cluster's GPUs (the module docstring),
    numbered after them, in arrival order."""
    if share <= 0 or not jobs:
        return jobs
    rng = random.Random(f"services-{seed}")  # its own stream: the other jobs do not change
    sizes, weights = [g for g, _ in SERVICE_GPUS], [w for _, w in SERVICE_GPUS]
    standing = share * cluster.capacity  # GPUs the services hold on average
    end = max(j.arrival for j in jobs)
    warm = window(jobs, 0.1)[0]
    mean_gpus = sum(g * w for g, w in SERVICE_GPUS)
    mean_life = SERVICE_MEDIAN_S * math.exp(SERVICE_SIGMA**2 / 2)
    rate = standing / (mean_gpus * mean_life)  # arrivals per second that replace those that end
    arrivals = [rng.uniform(0.0, warm) for _ in range(round(standing / mean_gpus))]  # the standing population
    t = warm + rng.expovariate(rate)
    while t < end:
        arrivals.append(t)
        t += rng.expovariate(rate)
    out = list(jobs)
    draws = random.Random(f"service-shapes-{seed}")
    for i, at in enumerate(sorted(arrivals)):
        gpus = min(draws.choices(sizes, weights)[0], cluster.shape.gpus)
        life = min(30 * 86400.0, draws.lognormvariate(math.log(SERVICE_MEDIAN_S), SERVICE_SIGMA))
        priority = draws.choices([p for p, _ in PRIORITIES], [w for _, w in PRIORITIES])[0]
        out.append(Job(len(jobs) + i, round(at, 3), 1, gpus, round(life, 3), priority=priority, movable=True))
    return sorted(out, key=lambda j: (j.arrival, j.id))


Shape = tuple[int, int, int, str, int, float]  # pods, GPUs a pod, segment, job level, priority, duration


def gang_shape(total: int, cluster: Cluster) -> tuple[int, int]:
    """The mapping of a job of TOTAL GPUs onto a gang: one pod below a node's GPUs, else whole nodes."""
    node_gpus = cluster.shape.gpus
    return (1, total) if total < node_gpus else (-(-total // node_gpus), node_gpus)


def dress(rng: random.Random, cluster: Cluster, pods: int, gpus: int) -> tuple[int, str, int]:
    """What traces lack, drawn for one job: its segment size, required level and priority."""
    zone_gpus = int(cluster.domain_gpus("zone").min())
    block_gpus = int(cluster.domain_gpus("block").min())
    segment = _segment(rng, cluster, pods, gpus) if pods > 1 else 0
    job_level = ""
    if pods > 1 and rng.random() < 1 / 3:
        job_level = next((lv for lv, cap in (("block", block_gpus), ("zone", zone_gpus)) if pods * gpus <= cap), "")
    priority = rng.choices([p for p, _ in PRIORITIES], [w for _, w in PRIORITIES])[0]
    return segment, job_level, priority


def assemble(
    shapes: Sequence[Shape],
    gaps: Sequence[float],
    load: float,
    bounded: float,
    seed: int,
    cluster: Cluster,
    elastic: float = 0.0,
) -> list[Job]:
    """Jobs of SHAPES arriving GAPS apart (any unit), scaled in time to offer LOAD; a share BOUNDED
    declares 1.5 x its duration as its runtime bound; a share ELASTIC of the multi-pod jobs may
    start with half their pods."""
    rate = _rate(load * cluster.capacity, [p * g for p, g, *_ in shapes], [s[5] for s in shapes], list(gaps))
    bounds = random.Random(f"bounds-{seed}")  # its own stream: the share changes no other draw
    elastics = random.Random(f"elastic-{seed}")  # and its own for elastic jobs
    t, jobs = 0.0, []
    for i, (pods, gpus, segment, job_level, priority, duration) in enumerate(shapes):
        t += gaps[i] / rate
        level = "rack" if segment else ""
        bound = round(1.5 * duration, 3) if bounds.random() < bounded else 0.0
        minimum = half(pods, segment) if elastics.random() < elastic and pods > 1 else 0
        job = Job(i, round(t, 3), pods, gpus, round(duration, 3), segment, level, job_level, priority, bound, minimum)
        jobs.append(job)
    return jobs


def half(pods: int, segment: int) -> int:
    """An elastic job's minimum: half its pods, rounded up to whole segments; 0 (not elastic) when
    that is all of them (a job of one segment)."""
    unit = segment or 1
    units = pods // unit
    minimum = -(-units // 2) * unit
    return minimum if minimum < pods else 0


def _rate(offered: float, gpus: list[int], durations: list[float], gaps: list[float]) -> float:
    """Arrivals per second such that the GPU-seconds the jobs run before the last arrival are
    OFFERED per second of the trace: heavy-tailed durations run far past a trace of a few
    thousand jobs, so the mean job's work would offer much less than asked inside it."""
    arrivals = _cumsum(gaps)

    def offered_at(rate: float) -> float:
        end = arrivals[-1] / rate
        work = sum(g * min(d, end - a / rate) for g, d, a in zip(gpus, durations, arrivals, strict=True))
        return work / end

    mean = sum(g * d for g, d in zip(gpus, durations, strict=True)) / len(gpus)
    lo, hi = offered / mean / 4, offered / mean * 1e4  # offered_at grows with the rate
    for _ in range(80):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if offered_at(mid) < offered else (lo, mid)
    return hi


def _cumsum(values: list[float]) -> list[float]:
    out, total = [], 0.0
    for v in values:
        total += v
        out.append(total)
    return out


def window(jobs: Sequence[Job], warmup: float) -> tuple[float, float]:
    """The measured span: from the arrival of the job at WARMUP (a share) of the trace to the last
    arrival, leaving out the filling and the draining of the cluster; counted over the jobs other
    than services (their standing population arrives in the warm-up)."""
    arrivals = sorted(j.arrival for j in jobs if not j.movable) or sorted(j.arrival for j in jobs)
    return arrivals[int(warmup * (len(arrivals) - 1))], arrivals[-1]


class TraceError(Exception):
    """A trace file that cannot be read: the message names the file, line and column."""


def read_csv(path: Path) -> list[Job]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise TraceError(
            f"{path}: empty; expected a header line: {','.join(COLUMNS)}[,priority][,bound][,minimum][,movable]"
        )
    header = [h.strip() for h in rows[0]]
    unknown = [h for h in header if h not in (*COLUMNS, *OPTIONAL)]
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
    bound = number("bound", float, 0) if row.get("bound") else 0.0
    minimum = int(number("minimum", int, 0)) if row.get("minimum") else 0
    if minimum > pods or (segment and minimum % segment):
        raise TraceError(f"{where}: minimum: {minimum} must be at most pods ({pods}) and whole segments of {segment}")
    movable = row.get("movable", "0") or "0"
    if movable not in ("0", "1"):
        raise TraceError(f"{where}: movable: {movable!r} is not 0 or 1")
    if movable == "1" and (pods != 1 or segment or job_level):
        raise TraceError(f"{where}: movable: only a single pod without a topology constraint may move")
    level = seg_level if segment else ""
    return Job(i, arrival, pods, gpus, duration, segment, level, job_level, priority, bound, minimum, movable == "1")


def write_csv(jobs: Sequence[Job], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow((*COLUMNS, *OPTIONAL))
        for j in jobs:
            levels = f"{j.segment_level}/{j.job_level}"
            row = (j.arrival, j.pods, j.gpus, j.segment, levels, j.duration, j.priority, j.bound, j.minimum)
            out.writerow((*row, int(j.movable)))
