"""Public GPU-cluster job traces replayed as gangs: AcmeTrace (trace_seren.csv, trace_kalos.csv)
and Helios (cluster_log.csv) share the columns this reads: `gpu_num`, `submit_time`, `duration`
(`state` is kept as the trace has it: a failed job held its GPUs for its duration too).

The rule, documented in the README: GPU jobs only (gpu_num > 0), in submission order, the first
JOBS after SKIP; a job of G GPUs is one pod of G GPUs below a node's GPUs, else ceil(G / node
GPUs) pods of a whole node (capped at the cluster's smallest zone); its duration is the trace's
(at least 1 s); its arrivals keep the trace's gaps, scaled in time so that the trace offers LOAD
of the cluster's GPUs (`workload.assemble`); what the trace lacks (segments, required levels,
priorities, runtime bounds, elastic jobs) is drawn as the generator draws it, from SEED. With
SERVICES, the generator's long-running services offer that share of LOAD and the trace the rest.
"""

from __future__ import annotations

import csv
import itertools
import random
from datetime import datetime
from pathlib import Path

from bench.tracesim.cluster import Cluster
from bench.tracesim.workload import Job, Shape, TraceError, assemble, dress, gang_shape, with_services

NEEDED = ("gpu_num", "submit_time", "duration")


def _time(text: str, where: str) -> float:
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise TraceError(f"{where}: submit_time: {text!r} is not a date and time (2023-03-01 00:18:22+08:00)") from None


def read_public(
    path: Path,
    cluster: Cluster,
    jobs: int,
    load: float,
    bounded: float,
    seed: int,
    skip: int = 0,
    elastic: float = 0.0,
    services: float = 0.0,
) -> list[Job]:
    rows: list[tuple[float, int, float]] = []
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in NEEDED if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path}:1: header: missing {missing}; a public trace needs {', '.join(NEEDED)}")
        for line, row in enumerate(reader, start=2):
            where = f"{path}:{line}"
            try:
                gpus, duration = int(float(row["gpu_num"] or 0)), float(row["duration"] or 0)
            except ValueError:
                raise TraceError(
                    f"{where}: gpu_num {row['gpu_num']!r} or duration {row['duration']!r} is not a number"
                ) from None
            if gpus > 0:
                rows.append((_time(row["submit_time"], where), gpus, max(duration, 1.0)))
    rows.sort(key=lambda r: r[0])
    rows = rows[skip : skip + jobs]
    if len(rows) < 2:
        raise TraceError(f"{path}: fewer than 2 GPU jobs after skipping {skip}")
    rng = random.Random(seed)
    zone_gpus = int(cluster.domain_gpus("zone").min())
    shapes: list[Shape] = []
    for _, gpus, duration in rows:
        pods, per_pod = gang_shape(min(gpus, zone_gpus), cluster)
        shapes.append((pods, per_pod, *dress(rng, cluster, pods, per_pod), duration))
    gaps = [0.0] + [b[0] - a[0] for a, b in itertools.pairwise(rows)]
    gaps[0] = sum(gaps) / (len(gaps) - 1)  # the first arrival: one mean gap in
    gaps = [max(g, 1e-3) for g in gaps]
    jobs = assemble(shapes, gaps, load * (1 - services), bounded, seed, cluster, elastic)
    return with_services(jobs, services * load, seed, cluster)  # the generator's services, if asked
